/// Calling the control methods from inside the node (the web dashboard, NodeWeb): the same
/// registered handlers the control socket dispatches to, so the same checks apply to what a page
/// may do as to what the CLI may.
extension ControlRouter {
    /// Runs a request/response method. `unknownMethod` for a name that is not registered, and for
    /// a streaming method (use `stream`).
    package func call(_ method: String, _ params: JSONValue = [:]) async throws -> JSONValue {
        guard case .unary(let handler)? = entry(method) else { throw ControlError.unknownMethod(method) }
        return try await handler(params)
    }

    /// Runs a streaming method, handing each item to `send` (which may throw to end the stream).
    package func stream(_ method: String, _ params: JSONValue = [:],
                        send: @escaping @Sendable (JSONValue) async throws -> Void) async throws {
        guard case .stream(let handler)? = entry(method) else { throw ControlError.unknownMethod(method) }
        let writer = ControlStreamWriter(requestID: 0) { response in
            switch response {
            case .event(_, let value), .result(_, let value): try await send(value)
            case .error(_, let error): throw error
            }
        }
        try await handler(params, writer)
    }
}
