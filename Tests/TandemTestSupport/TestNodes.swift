import Logging
import NIOCore
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

/// What the in-process loopback suites share: quiet loggers, a node started on 127.0.0.1 with
/// its service group running, polling, and waiting for an event. One copy, used by
/// TandemNodeTests and TandemRelayTests alike.
public enum TestSupport {
    /// A logger that prints only critical lines.
    public static var quietLogger: Logger {
        var l = Logger(label: "test")
        l.logLevel = .critical
        return l
    }

    /// A node configuration on 127.0.0.1, an ephemeral port, no LAN discovery.
    public static func loopbackConfiguration() -> NodeConfiguration {
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.discovery = nil
        return config
    }

    /// Polls `condition` until it holds or `seconds` pass.
    public static func eventually(_ seconds: Double = 8, _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    /// The first event of `type` (from the start of the node's log) matching `match`, within `seconds`.
    public static func event(_ node: NodeRuntime, _ type: String, seconds: Double = 10,
                             where match: @escaping @Sendable (NodeEvent) -> Bool = { _ in true }) async throws -> NodeEvent {
        let stream = node.eventBus.subscribe(since: 0)
        let found = Task { () -> NodeEvent? in
            for await e in stream where e.type == type && match(e) { return e }
            return nil
        }
        let timer = Task {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            found.cancel()
        }
        defer { timer.cancel() }
        guard let e = await found.value else { throw TandemError("no \(type) event within \(seconds) s") }
        return e
    }
}

/// A node running its whole service group in this process, on loopback.
public struct RunningNode: Sendable {
    public let node: NodeRuntime
    public let port: Int
    public let task: Task<Void, Error>

    /// Builds and starts a node; returns once its listener is bound.
    public static func start(identity: SigningKeyPair = .generate(),
                             configure: (inout NodeConfiguration) -> Void = { _ in },
                             logger: Logger = TestSupport.quietLogger) async throws -> RunningNode {
        var config = TestSupport.loopbackConfiguration()
        configure(&config)
        let node = try NodeRuntime(identity: identity, configuration: config, logger: logger)
        let task = Task { try await node.run(signals: false) }
        let port = try await node.listener.boundAddress.port ?? 0
        return RunningNode(node: node, port: port, task: task)
    }

    /// Cancels the node's service group and waits for it to end.
    public func stop() async {
        task.cancel()
        _ = await task.result
    }
}
