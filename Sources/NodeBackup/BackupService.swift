import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemVault
import TandemNodeCore

/// Backups held by friends (Protocol/backup.md): this node as a **holder** (`BackupHolder`: the
/// space it offered, the blobs it keeps) and as an **owner** (its offers from friends, pushes of
/// its vault, proofs of storage, snapshots and retention at each holder).
///
/// Threads: frames arrive on the node core (`handle`); requests go to the holder's jobs, answers
/// to the exchange waiting for them. Pushes and verifies run as tasks of this service (so they
/// end with the node) and do their store work on the core. A push that was running when the node
/// stopped (or was killed) is resumed when it starts again: its state is the holder's, asked anew.
public final class BackupService: Service, Sendable {
    let identity: SigningKeyPair
    let store: NodeStore
    let peers: PeerManager
    let dialer: Dialer
    let outbox: Outbox
    let events: EventBus
    let health: StoreHealth
    let signals: NodeSignals
    let vaultDirectory: URL?
    let dataDirectory: DataDirectory?
    let logger: Logger
    let holder: BackupHolder
    let answers = BackupAnswers()
    /// Pushes running now, by holder key: their progress, for `backup status` and waiting CLIs.
    let running = NIOLockedValueBox<[[UInt8]: PushTask]>([:])
    /// Pushes asked for (by commands, or resumed at start), run by `runPushes` in the service's task group.
    let pushRequests: AsyncStream<PushTask>
    let pushRequestSink: AsyncStream<PushTask>.Continuation

    /// The node's sealed recovery kit now; nil until the node has a kit key (RecoveryKit).
    package typealias KitProvider = @NodeCore @Sendable (SigningKeyPair, NodeStore, DataDirectory) throws -> OutgoingKit?
    let kitProvider: KitProvider?
    /// The kit digest each holder acknowledged in this run (stored with the push record).
    let sentKitDigest = NIOLockedValueBox<[[UInt8]: String]>([:])
    /// Automatic pushes (BackupSchedule.swift): the policy, and the wake-ups of its loop.
    let schedule = NIOLockedValueBox(ScheduleState())
    let scheduleWakes: AsyncStream<ScheduleWake>
    let scheduleWakeSink: AsyncStream<ScheduleWake>.Continuation

    package init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, dialer: Dialer, outbox: Outbox,
         events: EventBus, health: StoreHealth, signals: NodeSignals, dataDirectory: DataDirectory?, logger: Logger,
         kitProvider: KitProvider? = nil) {
        self.kitProvider = kitProvider
        self.identity = identity
        self.store = store
        self.peers = peers
        self.dialer = dialer
        self.outbox = outbox
        self.events = events
        self.health = health
        self.signals = signals
        self.dataDirectory = dataDirectory
        self.vaultDirectory = dataDirectory.map { $0.url.appendingPathComponent("vault") }
        self.logger = logger
        self.holder = BackupHolder(identity: identity, root: dataDirectory.map { $0.url.appendingPathComponent("backup-held") },
                                   events: events, logger: logger, health: health)
        (pushRequests, pushRequestSink) = AsyncStream<PushTask>.makeStream(bufferingPolicy: .unbounded)
        (scheduleWakes, scheduleWakeSink) = AsyncStream<ScheduleWake>.makeStream(bufferingPolicy: .bufferingNewest(8))
    }

    // MARK: - The service

    public func run() async throws {
        do {
            try await holder.loadOnLane()
        } catch {
            health.failed("load the backups held for friends", error)
            throw error
        }
        let friendsChanged = signals.subscribe(keepingNewest: 1) { $0 == .friendsChanged }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                // Pushes the node was doing when it stopped, and pushes to holders that were not
                // reachable: tried again every minute.
                group.addTask {
                    while !Task.isCancelled {
                        await self.resumePendingPushes()
                        try? await Task.sleep(for: .seconds(60))  // cancelled: the loop ends
                    }
                }
                group.addTask {
                    await friendsChanged.coalesced(over: NodeSignals.settle) {
                        let friends = await NodeCore.run { self.health.read("read the friends", or: nil) { try self.store.friendKeys() } }
                        if let friends { self.holder.withdraw(ownersNotIn: Set(friends)) }
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        self.holder.expireIdlePartials()
                        try? await Task.sleep(for: .seconds(3600))  // cancelled: the loop ends
                    }
                }
                group.addTask {
                    // The holder's jobs (friends' requests), in order, on its own threads.
                    await self.holder.run()
                }
                group.addTask {
                    // Pushes started by commands run here, so the node's stop ends them.
                    await self.runPushes()
                }
                group.addTask {
                    // Automatic pushes (backup.md 4.1).
                    await self.runSchedule()
                }
                // Each ends when the service is cancelled (graceful shutdown cancels this scope).
            }
        }
        pushRequestSink.finish()
        scheduleWakeSink.finish()
        for t in running.withLockedValue({ Array($0.values) }) { t.finish(.failure(NodeError.failed("the node is stopping"))) }
    }

    // MARK: - Frames (on the core)

    /// A backup frame from a link or a relay mailbox (only the offer comes by mail).
    @NodeCore package func handle(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) {
        if envelope.type == .backupOffer { return receiveOffer(envelope, from: link, step) }
        if BackupAnswer.types.contains(envelope.type) { return answers.deliver(envelope) }
        guard let link else { return }
        let isFriend = outbox.isFriend(envelope.author, in: step)
        holder.receive(envelope, from: link, isFriend: isFriend)
    }

    /// BACKUP_OFFER (outbox, acknowledged): the newest version per holder is kept; from a key that
    /// is not a friend it is acknowledged and dropped (backup.md 3).
    @NodeCore private func receiveOffer(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) {
        let m: BackupOfferMessage
        do {
            m = try BackupOfferMessage(payload: envelope.payload)
        } catch let e as PayloadError {
            return outbox.refuseMalformed(envelope, e, on: link, step)
        } catch {
            return
        }
        guard outbox.isFriend(envelope.author, in: step) else { return outbox.dropUnrelated(envelope, on: link, step) }
        let current = health.read("read a backup offer", or: nil) { try step.backupHolder(envelope.author) }.flatMap(ReceivedOffer.init(record:))
        if current.map({ m.version > $0.version }) ?? true {
            let offer = ReceivedOffer(quotaBytes: m.quotaBytes, version: m.version, receivedAtMs: Int64(clamping: wallClockMilliseconds()))
            health.attempt("store a backup offer") {
                if m.isWithdrawal { try step.forgetBackupOffer(from: envelope.author) } else {
                    try step.keepBackupOffer(offer.record(holder: envelope.author))
                }
            }
            events.emit(m.isWithdrawal ? "backup.offer.withdrawn" : "backup.offer.received",
                        ["from": .string(NodeID(publicKey: envelope.author).canonical), "quota_bytes": .int(m.quotaBytes)], in: step)
        }
        outbox.acknowledge(envelope, on: link, step)
    }

    struct ReceivedOffer {
        var quotaBytes: Int64
        var version: UInt64
        var receivedAtMs: Int64

        /// Validating: nil for a row that breaks a rule (it is then not an offer).
        init?(record r: BackupHolderRecord) {
            guard (1...BackupLimits.maximumQuotaBytes).contains(r.quotaBytes), r.version >= 0,
                  UInt64(r.version) <= BackupLimits.maximumVersion else { return nil }
            self.init(quotaBytes: r.quotaBytes, version: UInt64(r.version), receivedAtMs: r.receivedAtMs)
        }

        init(quotaBytes: Int64, version: UInt64, receivedAtMs: Int64) {
            self.quotaBytes = quotaBytes
            self.version = version
            self.receivedAtMs = receivedAtMs
        }

        func record(holder: [UInt8]) -> BackupHolderRecord {
            BackupHolderRecord(publicKey: holder, quotaBytes: quotaBytes, version: Int64(clamping: version), receivedAtMs: receivedAtMs)
        }
    }

    /// The holders that offered us space, by key (on the core).
    @NodeCore func receivedOffers() throws -> [([UInt8], ReceivedOffer)] {
        try store.backupHolders().compactMap { r in
            guard r.publicKey.count == 32, let o = ReceivedOffer(record: r) else { return nil }
            return (Array(r.publicKey), o)
        }
    }

    // MARK: - Offering space (the holder's intent)

    /// `backup offer FRIEND --quota Q`: recorded durably here, then sent through the outbox.
    func offer(to friend: [UInt8], quotaBytes: Int64) async throws -> UInt64 {
        guard (0...BackupLimits.maximumQuotaBytes).contains(quotaBytes) else {
            throw NodeError.invalidArgument("a quota is 0 (withdraw) to 1 PiB")
        }
        guard friend != identity.publicKey else { throw NodeError.invalidArgument("that is your own ID") }
        let isFriend = await NodeCore.run { self.outbox.isFriend(friend, in: self.store) }
        guard isFriend else { throw NodeError.refused("\(NodeID(publicKey: friend).display) is not your friend") }
        let version = min(wallClockMilliseconds(), BackupLimits.maximumVersion)
        let held = try await holder.offersGiven().first { $0.owner == friend }
        if quotaBytes == 0, held == nil { throw NodeError.nothingToActOn("you hold no backups for that friend") }
        _ = try await holder.setOfferOnLane(owner: friend, quotaBytes: quotaBytes, version: version)
        let payload = BackupOfferMessage(quotaBytes: quotaBytes, version: version).payload
        try await NodeCore.perform {
            try self.store.step { step in
                let item = self.outbox.frame(.backupOffer, to: friend, payload: payload, in: step)
                try step.enqueue(item)
                self.outbox.send(to: [friend], in: step)
                self.events.emit(quotaBytes == 0 ? "backup.offer.withdrawn" : "backup.offer.given",
                                 ["to": .string(NodeID(publicKey: friend).canonical), "quota_bytes": .int(quotaBytes)], in: step)
            }
            self.events.published()
        }
        return version
    }

    // MARK: - Links to holders

    /// A link to `holder`: the one up now, else a dial (LAN addresses only with `lanOnly`).
    func link(to holder: [UInt8], lanOnly: Bool) async throws -> PeerLink {
        if let l = peers.link(to: holder), !lanOnly || (l.relay == nil && l.directRemoteHost.map(Dialer.isLocal) == true) {
            return l
        }
        switch await dialer.dial(holder, lanOnly: lanOnly) {
        case .link(let l):
            guard let link = l as? PeerLink else { throw HolderUnreachable(description: "no link to \(NodeID(publicKey: holder).display)") }
            return link
        case .offline, .unreachable:
            throw HolderUnreachable(description: "\(NodeID(publicKey: holder).display) is not reachable\(lanOnly ? " on the LAN" : "") now")
        }
    }
}

/// A sealed recovery kit ready to put at holders (backup.md 7), with the digest of its contents
/// (without their time) that tells whether it changed since a holder's last copy.
package struct OutgoingKit: Sendable {
    let locator: KitLocator
    let sealed: [UInt8]
    let digest: [UInt8]
}

/// The holder cannot be reached now (a push to it stays pending and is tried again).
struct HolderUnreachable: Error, CustomStringConvertible {
    let description: String
}
