import TandemNet
import TandemProtocol
import TandemNodeCore
import NodeFriends
import NodeChallenges
import NodeBackup
import NodeVault
import NodeFocus
import NodeMessages
import NodeWeb

/// Where a node listens and how its links behave.
public struct NodeConfiguration: Sendable {
    public var host: String = "0.0.0.0"
    public var port: Int = TandemConstants.defaultPort
    public var link = PeerPipeline.Options()
    public var replayCapacity = 100_000
    /// What links may cost (Protocol 5.12).
    public var linkLimits = LinkLimits.node
    public var friends = FriendService.Configuration()
    /// The vault's PIN cost and default auto-lock.
    public var vault = VaultService.Configuration()
    /// LAN discovery; nil turns it off (throwaway nodes, tests that must not broadcast).
    public var discovery: DiscoveryConfiguration? = nil
    /// Local focus: where the site block goes, the hooks, the app guard.
    public var focus = FocusService.Configuration()
    /// The message service's per-friend bounds (messages.md 3.2; the bench raises them).
    package var messageLimits = MessageService.Limits()
    /// File transfers' bounds (messages.md 7.5; tests shorten the offer lifetime).
    package var fileLimits = MessageFiles.Limits()
    /// The local web dashboard; nil: none (`--web off`, throwaway nodes, tests).
    public var web: WebConfiguration? = nil
    public init() {}

    /// Parses "host:port", ":port", "port" or "[v6]:port" (`HostPort.parse`).
    public static func parseHostPort(_ text: String, defaultHost: String = "0.0.0.0") throws -> (String, Int) {
        try HostPort.parse(text, defaultHost: defaultHost)
    }
}
