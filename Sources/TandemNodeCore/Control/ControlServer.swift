import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import TandemNet

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Hands stream items (`{"id": n, "event": …}` lines) to the client of a streaming method.
public struct ControlStreamWriter: Sendable {
    public let requestID: Int64
    let write: @Sendable (ControlResponse) async throws -> Void

    /// Sends one item. Suspends while the client is not reading; throws once the connection is gone.
    public func send(_ event: JSONValue) async throws {
        try await write(.event(id: requestID, event))
    }
}

/// Maps method names to handlers. Thread-safe; methods may be registered while the server runs.
public final class ControlRouter: Sendable {
    public typealias Handler = @Sendable (JSONValue) async throws -> JSONValue
    public typealias StreamHandler = @Sendable (JSONValue, ControlStreamWriter) async throws -> Void

    package enum Entry: Sendable {
        case unary(Handler)
        case stream(StreamHandler)
    }

    private let entries = NIOLockedValueBox<[String: Entry]>([:])

    /// A router that knows `ping` (→ `{"pong": true}`).
    public init() {
        register("ping") { _ in ["pong": true] }
    }

    /// Registers (or replaces) a request/response method.
    public func register(_ method: String, _ handler: @escaping Handler) {
        entries.withLockedValue { $0[method] = .unary(handler) }
    }

    /// Registers (or replaces) a streaming method: the handler sends items until it returns
    /// (then the client gets a final result) or the client goes away (then the handler is cancelled).
    public func registerStream(_ method: String, _ handler: @escaping StreamHandler) {
        entries.withLockedValue { $0[method] = .stream(handler) }
    }

    /// The registered method names, sorted.
    public var methods: [String] { entries.withLockedValue { $0.keys.sorted() } }

    package func entry(_ method: String) -> Entry? { entries.withLockedValue { $0[method] } }
}

/// The node's control socket, `<data-dir>/control.sock` (mode 0600): the CLI's way in.
/// A `Service` of the node's service group. Protocol: Protocol/control.md.
///
/// Start-up: take `node.lock` (flock) so one node serves a data directory; a socket file left by a
/// crashed node is probed (connect) and removed when nobody answers. The socket is bound inside a
/// private 0700 directory, set to 0600, then renamed into place, so it never exists with a wider
/// mode. Shutdown (graceful or cancellation) stops accepting, ends every connection, removes the
/// socket file and releases the lock.
public final class ControlServer: Service, Sendable {
    public struct Configuration: Sendable {
        public var maximumLineLength = ControlProtocol.maximumLineLength
        public var maximumConnections = ControlProtocol.maximumConnections
        public var maximumRequestsPerConnection = ControlProtocol.maximumRequestsPerConnection
        public init() {}
    }

    public let directory: DataDirectory
    public let router: ControlRouter
    public let configuration: Configuration
    private let group: EventLoopGroup
    private let logger: Logger
    private let readyPromise: EventLoopPromise<String>
    private let connections = NIOLockedValueBox(0)
    /// The lock taken by `claimDataDirectory()`, until `run()` takes it over.
    private let claim = NIOLockedValueBox<NodeLock?>(nil)

    /// Awaited before the socket is bound (the node passes "the listener is bound", so a script
    /// that sees the control socket can rely on the node listening, and a node that cannot listen
    /// never opens its socket).
    private let startAfter: (@Sendable () async throws -> Void)?

    public init(directory: DataDirectory, router: ControlRouter, configuration: Configuration = .init(),
                group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
                startAfter: (@Sendable () async throws -> Void)? = nil) {
        self.startAfter = startAfter
        self.directory = directory
        self.router = router
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.readyPromise = group.next().makePromise()
    }

    deinit {
        readyPromise.fail(NodeError.failed("the control server was never started"))
        claim.withLockedValue { $0?.release() }
    }

    public var socketPath: String { directory.controlSocket.path }

    /// Returns the socket path once the server accepts connections; throws if it could not start.
    public func waitUntilReady() async throws -> String {
        try await readyPromise.futureResult.get()
    }

    /// Connections being served now.
    public var connectionCount: Int { connections.withLockedValue { $0 } }

    /// Takes the data directory for this node (the lock, then a stale socket is cleared), so that a
    /// second node fails with one clear line before any of its services start. `run()` does this
    /// itself when it has not been done.
    public func claimDataDirectory() throws {
        try claim.withLockedValue { claimed in
            guard claimed == nil else { return }
            try directory.create()
            let lock = try NodeLock.acquire(directory)
            do {
                try ControlSocketFile.removeStale(at: socketPath, directory: directory)
            } catch {
                lock.release()
                throw error
            }
            claimed = lock
        }
    }

    public func run() async throws {
        let lock: NodeLock
        let server: NIOAsyncChannel<NIOAsyncChannel<ControlInbound, ByteBuffer>, Never>
        let socketInode: ino_t
        do {
            try claimDataDirectory()
            lock = claim.withLockedValue { claimed in
                defer { claimed = nil }
                return claimed!
            }
        } catch {
            readyPromise.fail(error)
            throw error
        }
        do {
            try await startAfter?()
            (server, socketInode) = try await bindPrivately()
        } catch {
            lock.release()
            readyPromise.fail(error)
            throw error
        }
        readyPromise.succeed(socketPath)
        logger.info("control socket ready", metadata: ["path": "\(socketPath)"])

        let serverChannel = server.channel
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await acceptLoop(server)
            } onCancel: {
                serverChannel.close(promise: nil)
            }
        } onGracefulShutdown: {
            serverChannel.close(promise: nil)
        }

        ControlSocketFile.remove(at: socketPath, ifInode: socketInode)
        lock.release()
        logger.info("control socket closed")
    }

    /// Binds at a temporary path inside a fresh 0700 directory, sets 0600, renames into place.
    private func bindPrivately() async throws -> (NIOAsyncChannel<NIOAsyncChannel<ControlInbound, ByteBuffer>, Never>, ino_t) {
        let finalPath = socketPath
        // Short names: socket paths are limited to 103 bytes, and the temporary one must fit as well as the final one.
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let privateDir = directory.url.appendingPathComponent(".c\(suffix)").path
        let tempPath = privateDir + "/s"
        for path in [finalPath, tempPath] where path.utf8.count > ControlSocketFile.maximumPathBytes {
            throw NodeError.failed("the data directory path \(directory.path) is too long for a Unix socket (\(path.utf8.count) bytes; the limit is \(ControlSocketFile.maximumPathBytes))")
        }
        guard mkdir(privateDir, 0o700) == 0 else {
            throw NodeError.failed("cannot create \(privateDir): \(String(cString: strerror(errno)))")
        }
        defer { rmdir(privateDir) }
        let maxLine = configuration.maximumLineLength
        let server: NIOAsyncChannel<NIOAsyncChannel<ControlInbound, ByteBuffer>, Never>
        do {
            server = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 64)
                .childChannelOption(.allowRemoteHalfClosure, value: true)
                .bind(unixDomainSocketPath: tempPath) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(ControlLineDecoder(maximumLineLength: maxLine)))
                        return try NIOAsyncChannel<ControlInbound, ByteBuffer>(
                            wrappingChannelSynchronously: channel,
                            configuration: .init(isOutboundHalfClosureEnabled: true))
                    }
                }
        } catch {
            unlink(tempPath)
            throw NodeError.failed("cannot open the control socket \(finalPath): \(describe(error))")
        }
        var st = stat()
        guard chmod(tempPath, 0o600) == 0, rename(tempPath, finalPath) == 0, stat(finalPath, &st) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(tempPath)
            try? await server.channel.close()  // the setup error is what is reported
            throw NodeError.failed("cannot set up the control socket \(finalPath): \(reason)")
        }
        return (server, st.st_ino)
    }

    private func acceptLoop(_ server: NIOAsyncChannel<NIOAsyncChannel<ControlInbound, ByteBuffer>, Never>) async {
        await withDiscardingTaskGroup { group in
            do {
                try await server.executeThenClose { inbound in
                    for try await connection in inbound {
                        let admitted = connections.withLockedValue { count -> Bool in
                            guard count < configuration.maximumConnections else { return false }
                            count += 1
                            return true
                        }
                        if admitted {
                            group.addTask {
                                await self.serve(connection)
                                self.connections.withLockedValue { $0 -= 1 }
                            }
                        } else {
                            group.addTask { await self.refuse(connection) }
                        }
                    }
                }
            } catch {
                logger.debug("control socket accept loop ended", metadata: ["error": "\(error)"])
            }
            // No more connections: end the ones still open (streams would otherwise run forever).
            group.cancelAll()
        }
    }

    private func refuse(_ connection: NIOAsyncChannel<ControlInbound, ByteBuffer>) async {
        logger.warning("control connection refused: too many connections", metadata: ["limit": "\(configuration.maximumConnections)"])
        let allocator = connection.channel.allocator
        try? await connection.executeThenClose { _, outbound in  // a refused client that went away needs no answer
            let error = ControlError.busy("the node already serves \(configuration.maximumConnections) control connections; try again later")
            try await outbound.write(ControlResponse.error(id: nil, error).encoded(allocator: allocator))
        }
    }

    /// One connection: read request lines, run each as a child task, write responses as they finish.
    private func serve(_ connection: NIOAsyncChannel<ControlInbound, ByteBuffer>) async {
        let allocator = connection.channel.allocator
        let maxRequests = configuration.maximumRequestsPerConnection
        do {
            try await connection.executeThenClose { inbound, outbound in
                let write: @Sendable (ControlResponse) async throws -> Void = { response in
                    var line = response.encoded(allocator: allocator)
                    if line.readableBytes > ControlProtocol.maximumResponseLength {
                        let id: Int64? = switch response {
                        case .result(let id, _), .event(let id, _): id
                        case .error(let id, _): id
                        }
                        line = ControlResponse.error(id: id, .internalError("the answer is too large to send (\(line.readableBytes) bytes)"))
                            .encoded(allocator: allocator)
                    }
                    try await outbound.write(line)
                }
                let inFlight = NIOLockedValueBox(0)
                let inputClosed = InputClosedSignal()
                try await withThrowingDiscardingTaskGroup { group in
                    defer { inputClosed.fire() }
                    reading: for try await item in inbound {
                        switch item {
                        case .tooLong:
                            try await write(.error(id: nil, .lineTooLong()))
                            group.cancelAll()
                            break reading
                        case .line(let line):
                            if line.readableBytesView.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) {
                                continue reading  // blank lines are allowed (and ignored)
                            }
                            switch ControlRequest.parse(line) {
                            case .failure(let failure):
                                try await write(.error(id: failure.id, failure.error))
                            case .success(let request):
                                let admitted = inFlight.withLockedValue { count -> Bool in
                                    guard count < maxRequests else { return false }
                                    count += 1
                                    return true
                                }
                                guard admitted else {
                                    try await write(.error(id: request.id, .busy("more than \(maxRequests) requests in flight on one connection")))
                                    continue reading
                                }
                                group.addTask {
                                    await self.dispatch(request, write: write, inputClosed: inputClosed)
                                    inFlight.withLockedValue { $0 -= 1 }
                                }
                            }
                        }
                    }
                }
            }
        } catch {
            logger.debug("control connection ended", metadata: ["error": "\(error)"])
        }
    }

    private func dispatch(_ request: ControlRequest, write: @escaping @Sendable (ControlResponse) async throws -> Void,
                          inputClosed: InputClosedSignal) async {
        switch router.entry(request.method) {
        case nil:
            try? await write(.error(id: request.id, .unknownMethod(request.method)))  // the client went away: nobody to tell
        case .unary(let handler)?:
            let response: ControlResponse
            do {
                response = .result(id: request.id, try await handler(request.params))
            } catch {
                response = .error(id: request.id, ControlError.from(error))
                logFailure(request, error)
            }
            try? await write(response)  // the client went away: nobody to tell
        case .stream(let handler)?:
            let writer = ControlStreamWriter(requestID: request.id, write: write)
            do {
                let completed = try await inputClosed.cancelling { try await handler(request.params, writer) }
                if completed { try? await write(.result(id: request.id, ["ended": true])) }  // the client went away
            } catch {
                logFailure(request, error)
                try? await write(.error(id: request.id, ControlError.from(error)))  // the client went away
            }
        }
    }

    private func logFailure(_ request: ControlRequest, _ error: Error) {
        switch error {
        case is ControlError, is TandemError, is NodeError, is CancellationError:
            logger.debug("control request failed", metadata: ["method": "\(request.method)", "error": "\(error)"])
        default:
            logger.error("control request failed", metadata: ["method": "\(request.method)", "error": "\(error)"])
        }
    }
}

extension ControlProtocol {
    /// Longest line the node sends (and the client accepts): large `events.list` pages fit.
    public static let maximumResponseLength = 16 * 1024 * 1024
}

/// Fires once, when a connection's input ends: streaming handlers on it are then cancelled.
final class InputClosedSignal: Sendable {
    private struct State {
        var fired = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())

    func fire() {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.fired = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns when fired or when the calling task is cancelled.
    func wait() async {
        let id = state.withLockedValue { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLockedValue { state -> Bool in
                    if state.fired || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }

    /// Runs `body`, cancelling it if the input closes first. True when `body` finished by itself.
    func cancelling(_ body: @escaping @Sendable () async throws -> Void) async throws -> Bool {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await body()
                return true
            }
            group.addTask {
                await self.wait()
                return false
            }
            defer { group.cancelAll() }
            // The first to finish decides; a handler that throws (e.g. on cancellation after the input closed) ends quietly.
            do {
                let first = try await group.next() ?? false
                return first
            } catch where Task.isCancelled || state.withLockedValue({ $0.fired }) {
                return false
            }
        }
    }
}

/// `node.lock`: an exclusive flock held while a node serves the data directory.
package struct NodeLock: Sendable {
    let fd: Int32

    package static func acquire(_ directory: DataDirectory) throws -> NodeLock {
        let path = directory.nodeLock.path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw NodeError.failed("cannot open \(path): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let err = errno
            close(fd)
            if err == EWOULDBLOCK {
                throw NodeError.failed("another node is already running with data dir \(directory.path)")
            }
            throw NodeError.failed("cannot lock \(path): \(String(cString: strerror(err)))")
        }
        return NodeLock(fd: fd)
    }

    package func release() {
        flock(fd, LOCK_UN)
        close(fd)
    }
}

/// The socket file itself: probing, removing.
enum ControlSocketFile {
    /// The longest socket path, in bytes: what fits `sockaddr_un` on every platform NIO supports.
    static let maximumPathBytes = 103

    /// If a socket file exists: when something answers on it, another node runs (refuse);
    /// otherwise it is left over from a node that died, and is removed.
    static func removeStale(at path: String, directory: DataDirectory) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        guard (st.st_mode & S_IFMT) == S_IFSOCK else {
            throw NodeError.failed("\(path) exists and is not a socket; remove it and start the node again")
        }
        switch probe(path) {
        case .answered:
            throw NodeError.failed("another node is already running with data dir \(directory.path)")
        case .noListener:
            guard unlink(path) == 0 || errno == ENOENT else {
                throw NodeError.failed("cannot remove the stale control socket \(path): \(String(cString: strerror(errno)))")
            }
        case .failed(let reason):
            throw NodeError.failed("cannot check the control socket \(path): \(reason)")
        }
    }

    enum Probe: Equatable {
        case answered
        case noListener
        case failed(String)
    }

    /// A non-blocking connect: accepted or pending means a listener exists.
    static func probe(_ path: String) -> Probe {
        #if canImport(Glibc)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_UNIX, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return .failed(String(cString: strerror(errno))) }
        defer { close(fd) }
        #if !canImport(Glibc)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        #endif
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count <= maximumPathBytes else { return .failed("path too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if result == 0 { return .answered }
        switch errno {
        case EAGAIN, EINPROGRESS: return .answered
        case ECONNREFUSED, ENOENT: return .noListener
        case let e: return .failed(String(cString: strerror(e)))
        }
    }

    /// Removes the socket file if it is still the one this server created.
    static func remove(at path: String, ifInode inode: ino_t) {
        var st = stat()
        if lstat(path, &st) == 0, st.st_ino == inode { unlink(path) }
    }
}
