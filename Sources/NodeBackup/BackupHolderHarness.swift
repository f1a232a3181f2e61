import Foundation
import Logging
import Sodium
import Synchronization
import TandemProtocol
import TandemNodeCore

/// A backup holder with no node around it: the holder's real request handling and its files
/// under `root` (the layout of `HeldBlobs`), answers handed to a closure instead of a link. What
/// the structure-aware fuzz target (`tandem-fuzz -target=holder`) drives from outside the module;
/// in-module tests use `BackupHolder` directly. Driven from one thread.
public final class BackupHolderHarness: Sendable {
    public let identity: SigningKeyPair
    public let root: URL
    private let now: @Sendable () -> UInt64
    /// Replaced by `reload`.
    private let current: Mutex<BackupHolder>
    private var holder: BackupHolder { current.withLock { $0 } }

    /// A holder over `root` (created if missing), with what is already there loaded.
    public init(identity: SigningKeyPair, root: URL, now: @escaping @Sendable () -> UInt64) {
        self.identity = identity
        self.root = root
        self.now = now
        let holder = Self.makeHolder(identity: identity, root: root, now: now)
        Self.load(holder)
        current = Mutex(holder)
    }

    /// Loads the files; a listing that fails is a broken harness directory, not a finding.
    private static func load(_ holder: BackupHolder) {
        do {
            try holder.load()
        } catch {
            fatalError("the holder harness cannot read its files: \(error)")
        }
    }

    private static func makeHolder(identity: SigningKeyPair, root: URL, now: @escaping @Sendable () -> UInt64) -> BackupHolder {
        var logger = Logger(label: "tandem.holder-harness")
        logger.logLevel = .critical
        return BackupHolder(identity: identity, root: root, events: EventBus(log: InMemoryEventLog(capacity: 64), logger: logger),
                            logger: logger, now: now)
    }

    /// A restart: a new holder over the same files, loaded from them (what it held in memory is gone).
    public func reload() {
        holder.drain()
        let fresh = Self.makeHolder(identity: identity, root: root, now: now)
        Self.load(fresh)
        current.withLock { $0 = fresh }
    }

    /// `BackupHolder.setOffer`: our offer to `owner` (quota 0 withdraws).
    @discardableResult
    public func setOffer(owner: [UInt8], quotaBytes: Int64, version: UInt64) throws -> Bool {
        try holder.setOffer(owner: owner, quotaBytes: quotaBytes, version: version)
    }

    /// A request as it comes off a link whose source address is `origin`; answers go to `reply`.
    public func receive(_ envelope: Envelope, origin: String, isFriend: Bool, reply: @escaping @Sendable (Envelope) -> Void) {
        holder.receive(envelope, origin: origin, isFriend: isFriend, reply: reply)
    }

    /// The friendship with every owner not in `friends` ended.
    public func withdraw(ownersNotIn friends: Set<[UInt8]>) { holder.withdraw(ownersNotIn: friends) }

    /// Partial blobs idle for 7 days are discarded.
    public func expireIdlePartials() { holder.expireIdlePartials() }

    /// Waits until every request handed in so far has been handled.
    public func drain() { holder.drain() }

    /// The holder's accounting now (after `drain`, what every handled request left).
    public var book: BackupHolderBook { holder.bookNow }

    /// Where the holder keeps an owner's files.
    public func ownerDirectory(_ owner: [UInt8]) -> URL { root.appendingPathComponent(hexString(owner)) }
}
