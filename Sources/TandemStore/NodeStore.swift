import Foundation
import GRDB
import Synchronization
import TandemNet

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The write-ahead log could not be synced after a batch that held a durable write (the batch
/// committed, but is not known to be on disk: it counts as failed, and nothing waiting on it runs).
public struct WriteAheadLogSyncError: Error, CustomStringConvertible {
    public let path: String
    public let errno: Int32
    public var description: String { "cannot sync \(path) to disk: \(String(cString: strerror(errno)))" }
}

/// The node's embedded store: one SQLite file in WAL mode, owned by the node process.
///
/// Every write is one intent-named transaction, so a change and the frames it must send are
/// durable together before anything is acknowledged (DESIGN.md, "A node").
public struct NodeStore: Sendable {
    private let writer: any DatabaseWriter
    /// The newest committed events, so they are handed out without being read back.
    let tail = EventTail()
    private let committed = CommitCounter()
    private let unsynced = CommitCounter()
    private let fullSync = SyncSetting()
    private let walSyncs = CommitCounter()
    private let indexPasses = CommitCounter()
    /// The log's length after each commit, and its checkpoints (nil in memory).
    private let walFrames: WriteAheadLogFrames?
    private let indexFailures = CommitCounter()
    /// The write-ahead log's path (nil in memory): a batch that was not to sync, but made a change
    /// that must be durable, syncs it itself.
    private let walPath: String?

    /// Transactions this store committed that changed something, since it was opened.
    public var commits: Int { committed.value }
    /// Of those, commits that were not synced to disk (batches of soft state only, `batch(syncing:)`).
    public var unsyncedCommits: Int { unsynced.value }
    /// Transactions that indexed noted messages for search after a synced step (or at open); not
    /// counted in `commits`.
    public var deferredIndexPasses: Int { indexPasses.value }
    /// Of those, passes that failed (their notes stay for the next pass).
    public var deferredIndexFailures: Int { indexFailures.value }
    /// Frames in the write-ahead log after the latest commit (0 in memory).
    public var writeAheadLogFrames: Int { walFrames?.frames.load(ordering: .relaxed) ?? 0 }
    /// Checkpoints of the write-ahead log made after steps (`WriteAheadLogFrames`).
    public var checkpoints: Int { walFrames?.checkpoints.load(ordering: .relaxed) ?? 0 }

    /// Limits that keep a stranger from growing the store without bound.
    public struct Limits: Sendable {
        /// Pending incoming friend requests kept; past it the oldest is dropped.
        public var maximumPendingRequests = 100
        /// Events kept; older ones are pruned.
        public var maximumEvents = 100_000
        /// Remembered message ids (for exactly-once handling), pruned by age too.
        public var maximumSeenMessages = 200_000
        /// Of those, marks for frames from non-friends (their own share; friends' marks are never evicted for them).
        public var maximumStrangerSeenMessages = 10_000
        /// Quarantined rows kept (the oldest go first).
        public var maximumQuarantined = 1_000
        /// Known addresses per peer.
        public var maximumAddressesPerPeer = 8
        /// LAN sightings of strangers kept.
        public var maximumSightings = 1_000
        public init() {}
    }

    public let limits: Limits

    /// Opens (creating if needed) the store at `path` as a WAL database pool. The file and its
    /// -wal and -shm are 0600 whatever the umask.
    public init(path: String, limits: Limits = Limits()) throws {
        var config = Configuration()
        config.busyMode = .timeout(5)
        try PrivateDatabaseFile.prepare(path)
        let pool = try DatabasePool(path: path, configuration: config)
        // Every commit synced before it counts (durable before acknowledged). Set on the pool's one
        // writer connection once the pool exists: GRDB turns WAL on after `prepareDatabase` and sets
        // `synchronous = NORMAL` with it (no sync per commit), which would silently win otherwise.
        // Deleted rows are overwritten with zeros (the break-in log's old rows, messages that
        // disappear): what was deleted is not left in free pages of the file.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "PRAGMA secure_delete = ON")
            // The copies of pages a savepoint keeps (each store write is one) stay in memory instead
            // of spilling to a temporary file (`tandem-bench messages`: a burst's steps hold many).
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
        }
        // Checkpoints after steps, not inside their commits (WriteAheadLogSize.swift).
        let walFrames = WriteAheadLogFrames()
        pool.writeWithoutTransaction { db in walFrames.install(on: db) }
        let upgradesBreakIns = try pool.read { db in
            try db.tableExists("vaultBreakIn") && !(try Self.migrator.appliedIdentifiers(db).contains("v8-vault-break-ins"))
        }
        try self.init(writer: pool, limits: limits, walPath: path + "-wal", walFrames: walFrames)
        if upgradesBreakIns {
            // The old break-in log's digits leave the write-ahead log too (its frames are otherwise
            // kept until they are overwritten). Best effort: another connection in a write only
            // delays it to SQLite's next full checkpoint.
            do {
                try pool.writeWithoutTransaction { db in _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
            } catch {
                // expected only when another connection writes: the store is open and sound either way
            }
        }
        // Commits overwrite the log rather than grow it (WriteAheadLogSize.swift).
        do {
            try Self.sizeWriteAheadLog(of: pool, walPath: path + "-wal")
        } catch {
            // another connection held the write lock past the busy timeout: the log grows with its
            // commits, as it did before; the store is open and sound either way
        }
        try PrivateDatabaseFile.restrict(path)
    }

    /// Syncs of the write-ahead log made by batches that were not to sync but held a durable write.
    var writeAheadLogSyncs: Int { walSyncs.value }

    /// The writer connection's `PRAGMA synchronous` (2 = FULL: every commit synced to disk).
    func synchronousLevel() throws -> Int {
        try writer.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// An in-memory store for tests.
    public static func inMemory(limits: Limits = Limits()) throws -> NodeStore {
        try NodeStore(writer: DatabaseQueue(), limits: limits)
    }

    init(writer: any DatabaseWriter, limits: Limits, walPath: String? = nil, walFrames: WriteAheadLogFrames? = nil) throws {
        self.writer = writer
        self.limits = limits
        self.walPath = walPath
        self.walFrames = walFrames
        try Self.migrator.migrate(writer)
        // Messages a crash left between their synced step and the search index's pass after it.
        if try writer.read({ db in try StoreStep.hasNotedMessages(db) }) { indexNotedMessages() }
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.create(table: "setting") { t in
                t.primaryKey("key", .text)
                t.column("value", .text).notNull()
            }
            // Everyone the node knows about by key: friends, requesters, blocked IDs.
            try db.create(table: "contact") { t in
                t.primaryKey("publicKey", .blob)
                t.column("displayName", .text).notNull().defaults(to: "")
                // none | requested (we asked) | pending (they asked) | friend | blocked
                t.column("relationship", .text).notNull()
                t.column("requestMessage", .text)
                t.column("requestedAtMs", .integer)
                t.column("friendSinceMs", .integer)
                t.column("record", .blob)            // the signed frame that carried their latest contact record
                t.column("recordVersion", .integer).notNull().defaults(to: 0)
                t.column("lastSeenMs", .integer)
                t.column("presence", .text)
                t.column("updatedAtMs", .integer).notNull()
            }
            try db.create(index: "contact_relationship", on: "contact", columns: ["relationship", "requestedAtMs"])
            try db.create(table: "address") { t in
                t.column("publicKey", .blob).notNull()
                t.column("host", .text).notNull()
                t.column("port", .integer).notNull()
                t.column("source", .text).notNull()   // lan | manual | record | kit (a recovery kit)
                t.column("lastSeenMs", .integer).notNull()
                t.primaryKey(["publicKey", "host", "port"])
            }
            // Frames waiting to be delivered; a row goes away when the recipient acknowledges it.
            try db.create(table: "outbox") { t in
                t.primaryKey("messageId", .blob)
                t.column("recipient", .blob).notNull()
                t.column("type", .integer).notNull()
                t.column("frame", .blob).notNull()
                t.column("createdAtMs", .integer).notNull()
                t.column("attempts", .integer).notNull().defaults(to: 0)
                t.column("nextAttemptMs", .integer).notNull()
                t.column("lastError", .text)
            }
            try db.create(index: "outbox_due", on: "outbox", columns: ["nextAttemptMs"])
            try db.create(table: "event") { t in
                t.autoIncrementedPrimaryKey("seq")
                t.column("type", .text).notNull()
                t.column("timeMs", .integer).notNull()
                t.column("fields", .text).notNull()
            }
            try db.create(table: "seenMessage") { t in
                t.primaryKey("messageId", .blob)
                t.column("createdAtMs", .integer).notNull()
            }
            try db.create(index: "seenMessage_age", on: "seenMessage", columns: ["createdAtMs"])
            // Nodes seen on the LAN (strangers and friends), for `tandem peers`.
            try db.create(table: "sighting") { t in
                t.primaryKey("publicKey", .blob)
                t.column("displayName", .text)
                t.column("host", .text).notNull()
                t.column("port", .integer).notNull()
                t.column("isFriendBeacon", .boolean).notNull()
                t.column("lastSeenMs", .integer).notNull()
            }
        }
        m.registerMigration("v2-challenges") { db in
            // One row per challenge: the whole state machine value (TandemProtocol.Challenge),
            // rewritten in the same transaction as the frames each step sends. JSON text then; now
            // the stored form of Protocol/store.proto, a BLOB (SQLite keeps a BLOB as it is in a
            // TEXT column), and JSON rows are still read (Challenges.swift, `loadChallenge`).
            try db.create(table: "challenge") { t in
                t.primaryKey("id", .blob)
                t.column("phase", .text).notNull()
                t.column("solo", .boolean).notNull()
                t.column("createdAtMs", .integer).notNull()
                t.column("updatedAtMs", .integer).notNull()
                t.column("state", .text).notNull()
            }
            try db.create(index: "challenge_phase", on: "challenge", columns: ["phase"])
            // The accountability ledger: append-only, each entry holding the hash of the one before.
            try db.create(table: "ledger") { t in
                t.primaryKey("seq", .integer)
                t.column("challengeId", .blob).notNull().unique()
                t.column("record", .blob).notNull()
                t.column("signatures", .blob).notNull()
                t.column("previousHash", .blob).notNull()
                t.column("hash", .blob).notNull()
                t.column("committedAtMs", .integer).notNull()
            }
        }
        m.registerMigration("v3-relays") { db in
            // This node's home relays (`tandem relay add`), in the order they were added.
            try db.create(table: "relay") { t in
                t.primaryKey("publicKey", .blob)
                t.column("host", .text).notNull()
                t.column("port", .integer).notNull()
                t.column("addedAtMs", .integer).notNull()
            }
            // Where other nodes can be reached through a relay: from their contact record, or
            // from the share code a user pasted.
            try db.create(table: "peerRelay") { t in
                t.primaryKey("publicKey", .blob)
                t.column("relayKey", .blob).notNull()
                t.column("host", .text).notNull()
                t.column("port", .integer).notNull()
                t.column("source", .text).notNull()   // manual | record
                t.column("updatedAtMs", .integer).notNull()
            }
        }
        m.registerMigration("v4-hardening") { db in
            // Handled-id marks from non-friends are capped apart, so strangers cannot evict friends' marks.
            try db.alter(table: "seenMessage") { t in t.add(column: "fromFriend", .boolean).notNull().defaults(to: true) }
            try db.create(index: "seenMessage_stranger", on: "seenMessage", columns: ["fromFriend", "createdAtMs"])
            // Frames to non-friends are given up after a while (a DECLINE to a stranger is not retried forever).
            try db.alter(table: "outbox") { t in t.add(column: "expiresAtMs", .integer) }
            // Rows that failed validation when loaded: kept aside (never fatal), shown by `tandem status`.
            try db.create(table: "quarantine") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("kind", .text).notNull()        // challenge | outbox | relay | peerRelay
                t.column("rowKey", .blob).notNull()
                t.column("data", .blob).notNull()
                t.column("reason", .text).notNull()
                t.column("atMs", .integer).notNull()
            }
        }
        // Focus, backup and vault state out of JSON settings into tables of their own (MigrationV5.swift).
        m.registerMigration("v5-focus") { db in try MigrationV5.focus(db) }
        m.registerMigration("v5-backup") { db in try MigrationV5.backup(db) }
        m.registerMigration("v5-vault") { db in try MigrationV5.vault(db) }
        // Messages between friends (MigrationV6.swift, Protocol/messages.md 8).
        m.registerMigration("v6-messages") { db in try MigrationV6.messages(db) }
        m.registerMigration("v7-outbox-per-recipient") { db in try MigrationV7.outboxPerRecipient(db) }
        // The break-in log without any digit of a wrong PIN, each entry sealed by the vault service
        // (MigrationV8.swift, Protocol/vault.md "The PIN guard").
        m.registerMigration("v8-vault-break-ins") { db in try MigrationV8.vaultBreakIns(db) }
        // Local nicknames for friends (Nicknames.swift).
        m.registerMigration("v9-friend-nicknames") { db in try MigrationNicknames.create(db) }
        // Files between friends: bytes moved, the sender's leaf hashes, per-friend auto-accept (MigrationV9.swift).
        m.registerMigration("v9-message-files") { db in try MigrationV9.messageFiles(db) }
        // A thread inviter's copy of each participant's signed MESSAGE, to forward again on a
        // GAP_REQUEST (MigrationThreadFrames.swift, Protocol/messages.md 5.2).
        m.registerMigration("v9-message-thread-frames") { db in try MigrationThreadFrames.threadFrames(db) }
        // Backup generations and the automatic push schedule (BackupSchedule.swift, Protocol/backup.md 4.1, 5.1).
        m.registerMigration("v9-backup-schedule") { db in try MigrationBackupSchedule.backupSchedule(db) }
        // Bedtime and the health pool (MigrationV9Bedtime.swift, Protocol/bedtime.md).
        m.registerMigration("v9-bedtime") { db in try MigrationV9Bedtime.bedtime(db) }
        m.registerMigration("v9-health") { db in try MigrationV9Bedtime.health(db) }
        // A received file bound for the vault (`message accept --to-vault`; MessageFileVault.swift, Protocol/messages.md 7.3).
        m.registerMigration("v9-message-file-vault") { db in try MigrationFileVault.fileVault(db) }
        // Health shared with friends: the switch, and what friends share (HealthSharing.swift).
        m.registerMigration("v9-health-share") { db in try MigrationHealthShare.create(db) }
        // Search, list and outbox reads at a million messages (MigrationMessageSpeed.swift, Protocol/messages.md 8).
        m.registerMigration("v9-message-speed") { db in try MigrationMessageSpeed.messageSpeed(db) }
        // A send's frames scheduled without reading the friend's whole queue (MigrationMessageSend.swift, Protocol/messages.md 11.5).
        m.registerMigration("v9-message-send-speed") { db in try MigrationMessageSend.sendSpeed(db) }
        // New messages indexed for search once per step (MigrationMessageBurst.swift, Protocol/messages.md 11.5).
        m.registerMigration("v9-message-burst") { db in try MigrationMessageBurst.messageBurst(db) }
        // Fewer index entries per message: outbox_due dropped, strangers' marks indexed alone (MigrationMessageCPU.swift, Protocol/messages.md 11.6).
        m.registerMigration("v9-message-cpu") { db in try MigrationMessageCPU.messageCPU(db) }
        return m
    }

    // MARK: reading

    /// Reads in a read transaction of its own (committed state). Inside a step, read through the
    /// step instead: it sees what the step wrote so far.
    public func read<T>(_ body: (Database) throws -> T) throws -> T {
        try writer.read(body)
    }

    // MARK: steps (one transaction; one commit for many changes)

    /// Runs `body` as one step: every intent it calls on the `StoreStep` it is given shares one
    /// transaction and one commit (group commit), and what it hands to `step.afterCommit` runs once
    /// that commit is durable, in order (acknowledgements, frames, event delivery). When the
    /// transaction cannot commit, nothing of it is kept and the after-commit actions are dropped
    /// (peers then resend what they were not acknowledged). There is no nesting: code inside a step
    /// is given the step, and the store's writes are reachable only through one.
    ///
    /// `syncing`: whether the commit is synced to disk (`PRAGMA synchronous = FULL`, the store's
    /// setting). A step that holds only soft state (acknowledgements, presence, LAN sightings:
    /// `write(durable: false)`) passes false and commits without a sync; should a durable write
    /// join it after all, the write-ahead log is synced once the step commits, before anything
    /// that waits on it runs.
    ///
    /// SPI `StoreOwner`: only the store's owner opens steps (the node core, through
    /// `NodeStore.step` in TandemNodeCore, which is `@NodeCore`), and tests of the store itself.
    @_spi(StoreOwner)
    public func batch<T>(syncing: Bool = true, _ body: (StoreStep) throws -> T) throws -> T {
        let counter = committed, fullSync = self.fullSync, limits = self.limits
        let (step, result) = try writer.writeWithoutTransaction { db -> (StoreStep, T) in
            // Set for this transaction only, outside it (SQLite does not apply a change made inside
            // an open transaction to its commit), and set back before anything else writes.
            if fullSync.lost.load(ordering: .relaxed) {
                try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
                fullSync.lost.store(false, ordering: .relaxed)
            }
            if !syncing { try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() }
            defer {
                if !syncing {
                    // Cannot fail short of a broken connection (no I/O); if it does, the next batch
                    // sets it before it writes.
                    do { try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute() } catch {
                        fullSync.lost.store(true, ordering: .relaxed)
                    }
                }
            }
            let step = StoreStep(db: db, limits: limits)
            var result: T?
            // What follows the commit (the commit counter, the event tail) is done once
            // `inTransaction` has returned, which it does only once the transaction committed —
            // not through `db.afterNextTransaction`: that adds and removes a transaction observer,
            // and GRDB empties its statement caches of every statement that can delete rows at
            // both (the ACK's `DELETE … RETURNING`, the handled marks' prune, the search notes'
            // clear: compiled again in every step; Protocol/messages.md 11.6, session 12).
            try db.inTransaction {
                let changesBefore = db.totalChangesCount
                defer {
                    if db.totalChangesCount != changesBefore { step.changed = true }
                }
                defer { step.isOpen = false }
                result = try body(step)
                // Messages the step inserted join the search index together (one FTS5 segment): a step
                // that commits unsynced indexes them in its own transaction; one that syncs leaves its
                // notes for a soft transaction right after (`indexNotedMessages`), so the index's pages
                // and CPU are not on the way of its synced commit (Protocol/messages.md 8, 11.5).
                if syncing || step.needsSync {
                    step.indexDeferred = try StoreStep.hasNotedMessages(db)
                } else {
                    try StoreStep.indexNotedMessages(db)
                }
                return .commit
            }
            // Committed (`inTransaction` throws otherwise). Still on the writer's queue, before any
            // later transaction: the tail grows in commit order, and nothing reaches it from a
            // transaction rolled back.
            if step.changed { counter.add() }
            if !step.events.isEmpty { tail.committed(step.events) }
            if !syncing, step.changed {
                if step.needsSync {
                    try syncWriteAheadLog()
                    walSyncs.add()
                } else {
                    unsynced.add()
                }
            }
            return (step, result!)
        }
        for action in step.afterCommitActions { action() }
        // After what waited on the commit (answers, ACKs, frames, events): the search index.
        if step.indexDeferred { indexNotedMessages() }
        if let walFrames, walFrames.due { checkpoint(walFrames) }
        return result
    }

    /// Copies the write-ahead log into the database (PASSIVE: as far as readers allow, without
    /// waiting for them); the next commit then starts the log over. Best effort: a log not
    /// checkpointed now is at the next step's end.
    private func checkpoint(_ walFrames: WriteAheadLogFrames) {
        walFrames.frames.store(0, ordering: .relaxed)
        do {
            try writer.writeWithoutTransaction { db in _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)") }
            walFrames.checkpoints.add(1, ordering: .relaxed)
        } catch {
            // another connection's checkpoint or write held it: the next commit notes the log's
            // length again, and the step after it checkpoints
        }
    }

    /// Indexes every message noted for search and not indexed yet, in a transaction of its own that
    /// commits without a sync (the notes it clears were synced with their messages: lost in a power
    /// cut, this commit is made again from them at the next open). Run after each synced step that
    /// stored messages, and when the store opens (what a crash left between the two). A failure is
    /// counted (`deferredIndexFailures`) and leaves the notes for the next pass; searches miss those
    /// messages until then.
    func indexNotedMessages() {
        let fullSync = self.fullSync
        do {
            try writer.writeWithoutTransaction { db in
                if fullSync.lost.load(ordering: .relaxed) {
                    try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
                    fullSync.lost.store(false, ordering: .relaxed)
                }
                try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute()
                defer {
                    do { try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute() } catch {
                        fullSync.lost.store(true, ordering: .relaxed)
                    }
                }
                try db.inTransaction {
                    try StoreStep.indexNotedMessages(db)
                    return .commit
                }
            }
            indexPasses.add()
        } catch {
            indexFailures.add()
        }
    }

    /// Syncs the write-ahead log file (every transaction committed to it so far is then on disk, as
    /// `synchronous = FULL` does at each commit).
    private func syncWriteAheadLog() throws {
        guard let walPath else { return }
        let fd = open(walPath, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw WriteAheadLogSyncError(path: walPath, errno: errno) }
        defer { close(fd) }
        guard fdatasync(fd) == 0 else { throw WriteAheadLogSyncError(path: walPath, errno: errno) }
    }
}

/// What can read the store: the store itself (each read its own read transaction) and a step (the
/// step's own transaction, what it wrote so far included). Read intents are written once, here.
public protocol StoreReading {
    var limits: NodeStore.Limits { get }
    func read<T>(_ body: (Database) throws -> T) throws -> T
}

extension NodeStore: StoreReading {}

/// One open transaction of the node's store, given to the body of `NodeStore.batch` and passed
/// explicitly to everything that writes in it: the store's write intents exist only here, so
/// "inside a step" is a type. Not Sendable, and never kept after its body returns.
public final class StoreStep: StoreReading {
    let db: Database
    public let limits: NodeStore.Limits
    var afterCommitActions: [() -> Void] = []
    /// A durable write joined the step (`write(durable:)`).
    var needsSync = false
    /// The transaction changed something.
    var changed = false
    /// False once the step's body has returned: a step kept past it is a bug.
    var isOpen = true
    /// Event rows inserted so far, minus those of savepoints rolled back.
    var events: [RecentEvent] = []
    /// The step committed messages noted for search: the store indexes them once it has run the
    /// step's after-commit actions (`NodeStore.indexNotedMessages`).
    var indexDeferred = false

    init(db: Database, limits: NodeStore.Limits) {
        self.db = db
        self.limits = limits
    }

    /// Reads in the step's transaction.
    public func read<T>(_ body: (Database) throws -> T) throws -> T {
        precondition(isOpen, "a store step was used after it ended")
        return try body(db)
    }

    /// Runs `body` in a savepoint of the step's transaction (a failing body rolls back its own
    /// writes only; the step goes on).
    ///
    /// `durable`: false for soft state, whose loss in a power cut costs nothing that is not
    /// repeated anyway (an acknowledgement's removal of a frame the peer would answer again, a
    /// presence, a LAN sighting, an event row): such a write alone does not make a step opened
    /// with `syncing: false` sync.
    public func write<T>(durable: Bool = true, _ body: (Database) throws -> T) throws -> T {
        precondition(isOpen, "a store step was used after it ended")
        if durable { needsSync = true }
        let eventsBefore = events.count
        // A savepoint through statements prepared once: GRDB's `inSavepoint` prepares its SAVEPOINT
        // and RELEASE anew each time, and a step makes several writes.
        var result: T?
        do {
            try db.cachedStatement(sql: "SAVEPOINT write").execute()
            do {
                result = try body(db)
            } catch {
                // The body's own writes go; the step's transaction goes on (unless SQLite ended it).
                if db.isInsideTransaction {
                    try db.cachedStatement(sql: "ROLLBACK TO SAVEPOINT write").execute()
                    try db.cachedStatement(sql: "RELEASE SAVEPOINT write").execute()
                }
                throw error
            }
            try db.cachedStatement(sql: "RELEASE SAVEPOINT write").execute()
        } catch {
            // Rolled back: the events this body stored were never written.
            events.removeSubrange(min(eventsBefore, events.count)...)
            throw error
        }
        return result!
    }

    /// Runs `action` once the step has committed (and is durable, when it had to be).
    public func afterCommit(_ action: @escaping () -> Void) {
        afterCommitActions.append(action)
    }

    /// Notes an event row this transaction inserted (for the tail, once it commits), with its
    /// fields as the caller holds them decoded, if it does.
    func inserted(_ event: StoredEvent, decoded: (any Sendable)?) {
        events.append(RecentEvent(stored: event, decoded: decoded))
    }
}

/// Counts a store's commits that changed something.
private final class CommitCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Whether setting `synchronous = FULL` back after a batch that did not sync failed.
private final class SyncSetting: Sendable {
    let lost = Atomic<Bool>(false)
}

/// The newest committed events, in seq order, so the event bus can hand out what a step just
/// stored without reading it back (every step of a flow ends with that hand-out). Fed only by this
/// store's own commits; the node is its store's only writer (one node per data directory). Seqs
/// are contiguous (AUTOINCREMENT; a rolled-back insert takes none), so a gap means an insert the
/// tail did not see: it starts again from there, and older reads go to the database.
final class EventTail: Sendable {
    static let capacity = 256
    private let events = Mutex<[RecentEvent]>([])

    func committed(_ new: [RecentEvent]) {
        events.withLock { tail in
            for e in new {
                guard let seq = e.stored.seq else { continue }
                if let last = tail.last?.stored.seq, seq != last &+ 1 { tail.removeAll(keepingCapacity: true) }
                tail.append(e)
            }
            if tail.count > Self.capacity { tail.removeFirst(tail.count - Self.capacity) }
        }
    }

    /// The events after `seq` (at most `limit`), when the tail holds every one of them; else nil.
    func events(after seq: Int64, limit: Int) -> [RecentEvent]? {
        events.withLock { tail -> [RecentEvent]? in
            guard let first = tail.first?.stored.seq, let last = tail.last?.stored.seq, seq >= first &- 1, seq <= last else { return nil }
            let start = Int(seq &- first &+ 1)
            return Array(tail[start..<min(tail.count, start &+ max(0, limit))])
        }
    }
}

/// A committed event and, when whoever stored it held them, its fields decoded (so they need not
/// be parsed again to be handed out).
public struct RecentEvent: Sendable {
    public let stored: StoredEvent
    public let decoded: (any Sendable)?
}
