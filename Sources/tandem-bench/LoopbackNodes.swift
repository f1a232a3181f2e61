import Foundation
import Logging
import Sodium
import TandemNet
import TandemNode

/// Nodes a bench runs inside its own process and drives over loopback (`backup`, `message-files`,
/// `friends`): each with a fresh identity and a data directory of its own under the bench's work
/// directory.
enum LoopbackNodes {
    /// 127.0.0.1, a port the system picks, no LAN discovery: a node only its bench talks to. A bench
    /// changes what it measures (limits, key parameters) on the value it gets.
    static func configuration() -> NodeConfiguration {
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.discovery = nil
        return config
    }

    /// A new identity and a node for it, its data directory `root/name`. The node is not running
    /// yet: the bench runs it (`run(signals: false)`) in a task group of its own.
    static func node(_ name: String, in root: URL, configuration: NodeConfiguration,
                     logger: Logger) throws -> (key: SigningKeyPair, node: NodeRuntime, directory: DataDirectory) {
        let key = SigningKeyPair.generate()
        let directory = DataDirectory(url: root.appendingPathComponent(name))
        let node = try NodeRuntime(identity: key, configuration: configuration, dataDirectory: directory, logger: logger)
        return (key, node, directory)
    }
}
