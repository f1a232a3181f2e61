// TEMPORARY: the API TandemBlocking will have (replaced by the real module at merge).
public struct HostsFile: Sendable {
    public init(path: String) {}
    public func apply(mode: String, domains: [String]) throws {}
    public func remove(mode: String) throws {}
    public func removeAll() throws {}
    public func read() throws -> String { "" }
}
public enum HostsBlock { public static func modes(in text: String) -> [String] { [] } }
public struct StoppedProcess: Sendable { public var pid: Int32; public var name: String; public var path: String; public var signal: Int32 }
public final class AppGuard: @unchecked Sendable {
    public init(onStop: @escaping @Sendable (StoppedProcess) -> Void, onError: @escaping @Sendable (String) -> Void) {}
    public func set(blocked: [String], allowed: [String]) {}
    public func start() {}
    public func stop() {}
}
public struct HookResult: Sendable {
    public var path: String; public var exitCode: Int32?; public var signal: Int32?; public var timedOut: Bool
    public var stdout: String; public var stderr: String; public var durationMs: Int64; public var failed: Bool
}
public struct HookRunner: Sendable {
    public init(directory: String, timeoutMs: Int = 10_000) {}
    public func run(mode: String, transition: String, environment: [String: String]) -> [HookResult] { [] }
}
public enum BlockingCapabilities { public static func probe(hostsPath: String?) -> [String] { [] } }
