import Foundation
import NIOCore
import TandemNet

/// The control protocol between the CLI and its node: newline-delimited JSON over a Unix socket.
/// Specification: Protocol/control.md.
public enum ControlProtocol {
    /// Longest line either side accepts, newline excluded. Checked before more bytes are buffered.
    public static let maximumLineLength = 64 * 1024
    /// Control connections served at once; more are answered with a `busy` error and closed.
    public static let maximumConnections = 64
    /// Requests in flight on one connection; more are answered with a `busy` error.
    public static let maximumRequestsPerConnection = 16
    /// The socket's file name inside the data directory.
    public static let socketFileName = "control.sock"
    /// The lock a running node holds inside the data directory.
    public static let lockFileName = "node.lock"
}

extension DataDirectory {
    /// `<data-dir>/control.sock`.
    public var controlSocket: URL { url.appendingPathComponent(ControlProtocol.socketFileName) }
    /// `<data-dir>/node.lock`: held (flock) by the node serving the control socket.
    public var nodeLock: URL { url.appendingPathComponent(ControlProtocol.lockFileName) }
}

extension NodeError {
    /// "no node is running for …": what every command that needs the node says without one.
    public static func noNode(_ dir: DataDirectory) -> NodeError {
        .noNode("no node is running for \(dir.path) (start one with `tandem node --data-dir \(dir.path)`)")
    }
}

/// An error a control method reports to its caller: a stable machine-readable code, a one-line
/// message, and the exit code the CLI should end with.
public struct ControlError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: String
    public var message: String
    public var exitCode: Int32

    public init(code: String, message: String, exitCode: Int32 = 1) {
        self.code = code
        self.message = ControlError.oneLine(message)
        self.exitCode = exitCode
    }

    public var description: String { "\(code): \(message)" }

    /// The CLI's exit codes (README.md, "Exit codes") a control error may carry; the same numbers
    /// as the CLI's own (`TandemError`), which the node does not use.
    public static let usageExitCode: Int32 = 2
    public static let notInitializedExitCode: Int32 = 3
    public static let unreachableExitCode: Int32 = 4
    public static let authenticationExitCode: Int32 = 5
    public static let timeoutExitCode: Int32 = 6
    public static let noNodeExitCode: Int32 = 7
    public static let nothingToActOnExitCode: Int32 = 8

    public static func notFound(_ message: String) -> ControlError { .init(code: "not_found", message: message, exitCode: 1) }
    public static func invalid(_ message: String) -> ControlError {
        .init(code: "invalid", message: message, exitCode: usageExitCode)
    }
    public static func conflict(_ message: String) -> ControlError { .init(code: "conflict", message: message, exitCode: 1) }
    public static func unknownMethod(_ method: String) -> ControlError {
        .init(code: "unknown_method", message: "the node does not know the method '\(method)' (is it older than this CLI?)",
              exitCode: 1)
    }
    public static func badRequest(_ message: String) -> ControlError {
        .init(code: "bad_request", message: message, exitCode: usageExitCode)
    }
    public static func lineTooLong() -> ControlError {
        .init(code: "line_too_long",
              message: "request line longer than \(ControlProtocol.maximumLineLength) bytes; closing the connection",
              exitCode: 1)
    }
    public static func busy(_ message: String) -> ControlError { .init(code: "busy", message: message, exitCode: 1) }
    public static func internalError(_ message: String) -> ControlError { .init(code: "internal", message: message, exitCode: 1) }

    /// The error a handler's failure turns into on the wire.
    public static func from(_ error: Error) -> ControlError {
        if let e = error as? ControlError { return e }
        if let e = error as? NodeError { return .init(code: "failed", message: e.message, exitCode: e.exitCode) }
        // Backup/ still throws the CLI's error from a few handlers: mapped the same way until it does not.
        if let e = error as? TandemError { return .init(code: "failed", message: e.message, exitCode: e.exitCode) }
        if error is CancellationError { return .init(code: "cancelled", message: "the request was cancelled (is the node stopping?)") }
        return .internalError("\(error)")
    }

    /// The first line of `text`, at most 500 characters.
    static func oneLine(_ text: String) -> String {
        let first = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        return first.count > 500 ? String(first.prefix(500)) + "…" : first
    }

    var jsonValue: JSONValue {
        ["code": .string(code), "message": .string(message), "exit": .int(Int64(exitCode))]
    }

    init?(json: JSONValue) {
        guard let code = json["code"]?.stringValue, let message = json["message"]?.stringValue else { return nil }
        let exit = json["exit"]?.intValue.flatMap { Int32(exactly: $0) } ?? 1
        self.init(code: code, message: message, exitCode: exit)
    }
}

/// One request line: `{"id": 1, "method": "ping", "params": {…}}`.
public struct ControlRequest: Sendable, Equatable {
    public var id: Int64
    public var method: String
    public var params: JSONValue

    public init(id: Int64, method: String, params: JSONValue = [:]) {
        self.id = id
        self.method = method
        self.params = params
    }

    public var jsonValue: JSONValue { ["id": .int(id), "method": .string(method), "params": params] }

    /// Parses a request line. On failure, the id (when one could be read) and the error to send back.
    public static func parse(_ bytes: ByteBuffer) -> Result<ControlRequest, ControlRequestFailure> {
        let value: JSONValue
        do {
            value = try JSONValue.parse(Data(bytes.readableBytesView))
        } catch {
            return .failure(ControlRequestFailure(id: nil, error: .badRequest("the request line is not valid JSON")))
        }
        guard case .object(let object) = value else {
            return .failure(ControlRequestFailure(id: nil, error: .badRequest("a request must be a JSON object")))
        }
        guard let id = object["id"]?.intValue else {
            return .failure(ControlRequestFailure(id: nil, error: .badRequest("a request needs an integer \"id\"")))
        }
        guard let method = object["method"]?.stringValue, !method.isEmpty else {
            return .failure(ControlRequestFailure(id: id, error: .badRequest("a request needs a \"method\" string")))
        }
        let params = object["params"] ?? [:]
        switch params {
        case .object, .null: break
        case .bool, .int, .double, .string, .array:
            return .failure(ControlRequestFailure(id: id, error: .badRequest("\"params\" must be an object")))
        }
        return .success(ControlRequest(id: id, method: method, params: params.isNull ? [:] : params))
    }
}

/// A request line that cannot be served: the id (when one could be read) and the error to send back.
public struct ControlRequestFailure: Error, Sendable, Equatable {
    public var id: Int64?
    public var error: ControlError
}

/// One line from the node to a client.
public enum ControlResponse: Sendable, Equatable {
    /// `{"id": n, "ok": true, "result": …}`: the answer (for a stream: its normal end).
    case result(id: Int64, JSONValue)
    /// `{"id": n, "ok": false, "error": {"code", "message", "exit"}}`; id is null when the request's id was unreadable.
    case error(id: Int64?, ControlError)
    /// `{"id": n, "event": …}`: one item of a stream.
    case event(id: Int64, JSONValue)

    public var jsonValue: JSONValue {
        switch self {
        case .result(let id, let value): return ["id": .int(id), "ok": true, "result": value]
        case .error(let id, let error): return ["id": id.map(JSONValue.int) ?? .null, "ok": false, "error": error.jsonValue]
        case .event(let id, let value): return ["id": .int(id), "event": value]
        }
    }

    /// The line to send, newline included.
    public func encoded(allocator: ByteBufferAllocator) -> ByteBuffer {
        let data = jsonValue.jsonData
        var buffer = allocator.buffer(capacity: data.count + 1)
        buffer.writeBytes(data)
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }

    /// Parses a line the node sent.
    public static func parse(_ bytes: ByteBuffer) throws -> ControlResponse {
        let value = try JSONValue.parse(Data(bytes.readableBytesView))
        let id = value["id"]?.intValue
        if let event = value["event"], let id {
            return .event(id: id, event)
        }
        switch value["ok"] {
        case .bool(true)?:
            guard let id else { throw ControlError.badRequest("a response without an id") }
            return .result(id: id, value["result"] ?? .null)
        case .bool(false)?:
            guard let errorValue = value["error"], let error = ControlError(json: errorValue) else {
                throw ControlError.badRequest("an error response without a readable error")
            }
            return .error(id: id, error)
        case .none, .some:
            throw ControlError.badRequest("a line that is neither a result, an error nor an event")
        }
    }
}

/// What the line decoder hands on: a complete line (without its newline), or the news that a
/// line grew past the limit (after which the decoder discards everything).
public enum ControlInbound: Sendable, Equatable {
    case line(ByteBuffer)
    case tooLong
}

/// Splits a byte stream into lines at `\n` (a `\r` before it is dropped), refusing to buffer a
/// line longer than `maximumLineLength`: as soon as that many bytes arrive without a newline it
/// emits `.tooLong` once and then drops all further input.
public struct ControlLineDecoder: ByteToMessageDecoder {
    public typealias InboundOut = ControlInbound

    public let maximumLineLength: Int
    /// Bytes of the current line already scanned for a newline (so a long line is scanned once).
    private var scanned = 0
    private var discarding = false

    public init(maximumLineLength: Int = ControlProtocol.maximumLineLength) {
        precondition(maximumLineLength > 0)
        self.maximumLineLength = maximumLineLength
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        if let item = next(&buffer) {
            context.fireChannelRead(wrapInboundOut(item))
            return .continue
        }
        return .needMoreData
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A final line without a newline is dropped: a request is only complete with its newline.
        while let item = next(&buffer) {
            context.fireChannelRead(wrapInboundOut(item))
        }
        buffer.moveReaderIndex(to: buffer.writerIndex)
        return .needMoreData
    }

    /// The sans-IO core: the next item from `buffer`, or nil when more bytes are needed.
    public mutating func next(_ buffer: inout ByteBuffer) -> ControlInbound? {
        if discarding {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return nil
        }
        let view = buffer.readableBytesView
        let start = view.startIndex + scanned
        if let newline = view[start...].firstIndex(of: UInt8(ascii: "\n")) {
            var length = newline - view.startIndex
            scanned = 0
            if length > 0, view[newline - 1] == UInt8(ascii: "\r") { length -= 1 }
            if length > maximumLineLength {
                discarding = true
                buffer.moveReaderIndex(to: buffer.writerIndex)
                return .tooLong
            }
            let line = buffer.getSlice(at: buffer.readerIndex, length: length)!
            buffer.moveReaderIndex(forwardBy: newline - view.startIndex + 1)
            return .line(line)
        }
        scanned = view.count
        // A `\r` may still precede the newline, hence the one spare byte.
        if view.count > maximumLineLength + 1 {
            discarding = true
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return .tooLong
        }
        return nil
    }
}

extension JSONValue {
    /// `params.optionalInt("since")`: nil when absent or null; `invalid` when present but not an integer.
    public func optionalInt(_ key: String) throws -> Int64? {
        guard let value = self[key], !value.isNull else { return nil }
        guard let i = value.intValue else { throw ControlError.invalid("\"\(key)\" must be an integer") }
        return i
    }

    /// `params.optionalString("id")`: nil when absent or null; `invalid` when present but not a string.
    public func optionalString(_ key: String) throws -> String? {
        guard let value = self[key], !value.isNull else { return nil }
        guard let s = value.stringValue else { throw ControlError.invalid("\"\(key)\" must be a string") }
        return s
    }

    /// `params.requiredString("id")`: `invalid` when absent or not a string.
    public func requiredString(_ key: String) throws -> String {
        guard let s = try optionalString(key) else { throw ControlError.invalid("\"\(key)\" is required") }
        return s
    }

    /// `params.optionalStrings("types", maximumCount: 64)`: an array of strings, or nil when absent or null.
    public func optionalStrings(_ key: String, maximumCount: Int) throws -> [String]? {
        guard let value = self[key], !value.isNull else { return nil }
        guard let array = value.arrayValue else { throw ControlError.invalid("\"\(key)\" must be an array of strings") }
        guard array.count <= maximumCount else { throw ControlError.invalid("\"\(key)\" has more than \(maximumCount) entries") }
        return try array.map {
            guard let s = $0.stringValue else { throw ControlError.invalid("\"\(key)\" must be an array of strings") }
            return s
        }
    }
}

extension NodeError {
    /// The CLI's exit code for this error (README.md, "Exit codes"): decided here, at the
    /// boundary, not where the error arises.
    public var exitCode: Int32 {
        switch kind {
        case .invalidArgument: return ControlError.usageExitCode
        case .nothingToActOn: return ControlError.nothingToActOnExitCode
        case .unavailable: return ControlError.unreachableExitCode
        case .refused, .failed: return 1
        case .timedOut: return ControlError.timeoutExitCode
        case .noNode: return ControlError.noNodeExitCode
        }
    }
}
