import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TandemNet

/// The CLI's side of the control socket: one connection to the node of a data directory, with
/// requests matched to responses by id.
public final class ControlClient: Sendable {
    public let directory: DataDirectory
    private let channel: Channel
    private let handler: NIOLoopBound<ControlClientHandler>
    private let nextID = NIOLockedValueBox<Int64>(1)

    /// Items a stream may hold unread before the client gives up on it.
    public static let streamBuffer = 10_000

    private init(directory: DataDirectory, channel: Channel, handler: NIOLoopBound<ControlClientHandler>) {
        self.directory = directory
        self.channel = channel
        self.handler = handler
    }

    deinit {
        channel.close(promise: nil)
    }

    /// Connects to the node serving `dataDirectory`. Without one: `NodeError.noNode` (exit 7).
    public static func connect(dataDirectory: DataDirectory,
                               group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
                               timeout: TimeAmount = .seconds(5)) async throws -> ControlClient {
        let path = dataDirectory.controlSocket.path
        guard path.utf8.count <= ControlSocketFile.maximumPathBytes else {
            throw NodeError.failed("the data directory path \(dataDirectory.path) is too long for a Unix socket")
        }
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(timeout)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(ControlLineDecoder(maximumLineLength: ControlProtocol.maximumResponseLength)))
                        try channel.pipeline.syncOperations.addHandler(ControlClientHandler())
                    }
                }
                .connect(unixDomainSocketPath: path).get()
        } catch {
            throw connectError(error, directory: dataDirectory)
        }
        let handler = try await channel.eventLoop.submit {
            NIOLoopBound(try channel.pipeline.syncOperations.handler(type: ControlClientHandler.self), eventLoop: channel.eventLoop)
        }.get()
        return ControlClient(directory: dataDirectory, channel: channel, handler: handler)
    }

    static func connectError(_ error: Error, directory: DataDirectory) -> NodeError {
        var errnoCode: Int32?
        if let io = error as? IOError {
            errnoCode = io.errnoCode
        } else if let connect = error as? NIOConnectionError, let first = connect.connectionErrors.first,
                  let io = first.error as? IOError {
            errnoCode = io.errnoCode
        }
        switch errnoCode {
        case ECONNREFUSED?, ENOENT?, ENOTDIR?:
            return .noNode(directory)
        case EACCES?, EPERM?:
            return .failed("cannot connect to the node's control socket \(directory.controlSocket.path): permission denied (is the node run by another user?)")
        case .some, nil:
            if case ChannelError.connectTimeout = error {
                return .timedOut("the node for \(directory.path) did not accept a control connection in time")
            }
            return .failed("cannot connect to the node's control socket \(directory.controlSocket.path): \(describe(error))")
        }
    }

    private func allocateID() -> Int64 {
        nextID.withLockedValue { id in
            defer { id += 1 }
            return id
        }
    }

    private func requestLine(_ id: Int64, _ method: String, _ params: JSONValue) throws -> ByteBuffer {
        let data = ControlRequest(id: id, method: method, params: params).jsonValue.jsonData
        guard data.count <= ControlProtocol.maximumLineLength else {
            throw NodeError.invalidArgument("the request is too large (\(data.count) bytes; the limit is \(ControlProtocol.maximumLineLength))")
        }
        var buffer = channel.allocator.buffer(capacity: data.count + 1)
        buffer.writeBytes(data)
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }

    /// Calls a method and returns its result. An error response is thrown as the `ControlError` the
    /// node sent; no answer within `timeout`: `NodeError.timedOut` (exit code 6).
    public func call(method: String, params: JSONValue = [:], timeout: TimeAmount = .seconds(30)) async throws -> JSONValue {
        let id = allocateID()
        let line = try requestLine(id, method, params)
        let loop = channel.eventLoop
        let promise = loop.makePromise(of: JSONValue.self)
        let handler = handler, channel = channel
        loop.execute {
            handler.value.register(id: id, promise: promise)
            channel.writeAndFlush(line).whenFailure { error in
                handler.value.fail(id: id, NodeError.failed("cannot send to the node: \(describe(error))"))
            }
        }
        let timer = loop.scheduleTask(in: timeout) {
            let seconds = Double(timeout.nanoseconds) / 1e9
            handler.value.fail(id: id, NodeError.timedOut("the node did not answer \(method) within \(String(format: "%g", seconds))s"))
        }
        defer { timer.cancel() }
        return try await promise.futureResult.get()
    }

    /// Starts a streaming method. Yields the items; finishes when the node ends the stream; throws
    /// its error response as a `ControlError`. Ending the iteration early closes this client's connection.
    public func stream(method: String, params: JSONValue = [:]) -> AsyncThrowingStream<JSONValue, Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: JSONValue.self, throwing: Error.self,
                                                                    bufferingPolicy: .bufferingOldest(Self.streamBuffer))
        let id = allocateID()
        let line: ByteBuffer
        do {
            line = try requestLine(id, method, params)
        } catch {
            continuation.finish(throwing: error)
            return stream
        }
        let handler = handler, channel = channel
        continuation.onTermination = { [self] termination in
            // Holding `self` keeps the connection open while the stream lives.
            switch termination {
            case .cancelled: self.close()
            case .finished: break
            @unknown default: break
            }
        }
        channel.eventLoop.execute {
            handler.value.register(id: id, stream: continuation)
            channel.writeAndFlush(line).whenFailure { error in
                handler.value.fail(id: id, NodeError.failed("cannot send to the node: \(describe(error))"))
            }
        }
        return stream
    }

    /// Closes the connection.
    public func close() {
        channel.close(promise: nil)
    }
}

/// Routes response lines to the calls and streams waiting for them. Event-loop confined.
final class ControlClientHandler: ChannelInboundHandler {
    typealias InboundIn = ControlInbound

    private var calls: [Int64: EventLoopPromise<JSONValue>] = [:]
    private var streams: [Int64: AsyncThrowingStream<JSONValue, Error>.Continuation] = [:]
    /// Set once the connection is unusable; later requests fail with it at once.
    private var closedWith: Error?

    func register(id: Int64, promise: EventLoopPromise<JSONValue>) {
        if let closedWith { return promise.fail(closedWith) }
        calls[id] = promise
    }

    func register(id: Int64, stream: AsyncThrowingStream<JSONValue, Error>.Continuation) {
        if let closedWith { return stream.finish(throwing: closedWith) }
        streams[id] = stream
    }

    func fail(id: Int64, _ error: Error) {
        calls.removeValue(forKey: id)?.fail(error)
        streams.removeValue(forKey: id)?.finish(throwing: error)
    }

    private func failAll(_ error: Error) {
        if closedWith == nil { closedWith = error }
        let calls = self.calls, streams = self.streams
        self.calls = [:]
        self.streams = [:]
        for (_, promise) in calls { promise.fail(error) }
        for (_, stream) in streams { stream.finish(throwing: error) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .tooLong:
            failAll(NodeError.failed("the node sent a line longer than \(ControlProtocol.maximumResponseLength) bytes"))
            context.close(promise: nil)
        case .line(let line):
            let response: ControlResponse
            do {
                response = try ControlResponse.parse(line)
            } catch {
                failAll(NodeError.failed("the node sent an unreadable answer (is it a different version?)"))
                context.close(promise: nil)
                return
            }
            switch response {
            case .result(let id, let value):
                if let promise = calls.removeValue(forKey: id) {
                    promise.succeed(value)
                } else {
                    streams.removeValue(forKey: id)?.finish()
                }
            case .error(let id?, let error):
                calls.removeValue(forKey: id)?.fail(error)
                streams.removeValue(forKey: id)?.finish(throwing: error)
            case .error(nil, let error):
                // The node could not tell which request this is about (a busy node refusing the connection).
                failAll(error)
                context.close(promise: nil)
            case .event(let id, let value):
                guard let stream = streams[id] else { return }
                switch stream.yield(value) {
                case .enqueued, .terminated:
                    break
                case .dropped:
                    streams[id] = nil
                    stream.finish(throwing: NodeError.failed("fell more than \(ControlClient.streamBuffer) items behind the node's stream"))
                @unknown default:
                    break
                }
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(NodeError.failed("the node closed the control connection (did it stop?)"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        failAll(NodeError.failed("control connection failed: \(describe(error))"))
        context.close(promise: nil)
    }
}
