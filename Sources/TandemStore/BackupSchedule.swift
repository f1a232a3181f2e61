import Foundation
import GRDB

// Backups that keep themselves current and say how fresh they are (Protocol/backup.md 5.1, 4.1):
// the owner's generation counters, the automatic push schedule, and each holder's schedule state.
// Migration `v9-backup-schedule` makes these tables.

/// Migration `v9-backup-schedule`. Frozen once shipped: string names only, no app types.
enum MigrationBackupSchedule {
    static func backupSchedule(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE backupGeneration (
                kind TEXT PRIMARY KEY CHECK (kind IN ('snapshot', 'kit')),
                generation INTEGER NOT NULL CHECK (generation BETWEEN 0 AND 9007199254740991),
                digest BLOB NOT NULL CHECK (length(digest) <= 32),
                atMs INTEGER NOT NULL
            );
            CREATE TABLE backupScheduleConfig (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                delayMs INTEGER NOT NULL CHECK (delayMs BETWEEN 0 AND 604800000),
                daily INTEGER NOT NULL CHECK (daily IN (0, 1))
            );
            CREATE TABLE backupHolderSchedule (
                holder BLOB PRIMARY KEY CHECK (length(holder) = 32),
                dirtySinceMs INTEGER,
                failures INTEGER NOT NULL DEFAULT 0 CHECK (failures BETWEEN 0 AND 64),
                nextAttemptAtMs INTEGER,
                lastAttemptAtMs INTEGER,
                lastError TEXT,
                pushedGeneration INTEGER
            );
            """)
    }
}

/// The newest generation of a kind of backup content ("snapshot" or "kit") and the digest of the
/// content it stands for: a push whose content has this digest reuses it, any other gets the next.
public struct BackupGenerationRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backupGeneration"
    public var kind: String
    public var generation: Int64
    public var digest: Data
    public var atMs: Int64

    public enum Columns {
        public static let kind = Column(CodingKeys.kind)
    }
}

/// How automatic pushes run (`tandem backup schedule`); one row, absent = the defaults.
public struct BackupScheduleConfigRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backupScheduleConfig"
    public var id: Int64 = 1
    public var delayMs: Int64
    public var daily: Bool

    public init(delayMs: Int64, daily: Bool) {
        self.delayMs = delayMs
        self.daily = daily
    }
}

/// One holder's automatic-push state: since when its copy is behind, failures in a row (backoff),
/// when to try next, and the generation it was last given.
public struct BackupHolderScheduleRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backupHolderSchedule"
    public var holder: Data
    public var dirtySinceMs: Int64?
    public var failures: Int64
    public var nextAttemptAtMs: Int64?
    public var lastAttemptAtMs: Int64?
    public var lastError: String?
    public var pushedGeneration: Int64?

    public enum Columns {
        public static let holder = Column(CodingKeys.holder)
    }

    public init(holder: [UInt8], dirtySinceMs: Int64? = nil, failures: Int64 = 0, nextAttemptAtMs: Int64? = nil,
                lastAttemptAtMs: Int64? = nil, lastError: String? = nil, pushedGeneration: Int64? = nil) {
        self.holder = Data(holder)
        self.dirtySinceMs = dirtySinceMs
        self.failures = failures
        self.nextAttemptAtMs = nextAttemptAtMs
        self.lastAttemptAtMs = lastAttemptAtMs
        self.lastError = lastError
        self.pushedGeneration = pushedGeneration
    }
}

extension StoreReading {
    public func backupGeneration(_ kind: String) throws -> BackupGenerationRecord? {
        try read { db in try BackupGenerationRecord.fetchOne(db, key: kind) }
    }

    public func backupScheduleConfig() throws -> BackupScheduleConfigRecord? {
        try read { db in try BackupScheduleConfigRecord.fetchOne(db, key: 1) }
    }

    /// The ledger's newest entry's hash (a sign the kit changed), nil for an empty ledger.
    public func lastLedgerHash() throws -> [UInt8]? {
        try read { db in try Data.fetchOne(db, sql: "SELECT hash FROM ledger ORDER BY seq DESC LIMIT 1").map { Array($0) } }
    }

    public func backupHolderSchedules() throws -> [BackupHolderScheduleRecord] {
        try read { db in try BackupHolderScheduleRecord.order(BackupHolderScheduleRecord.Columns.holder).fetchAll(db) }
    }
}

extension StoreStep {
    /// The generation for content with `digest`: the newest one when its digest is equal, else
    /// the next (recorded with `nowMs`). Returns the generation and when it was made.
    public func backupGeneration(_ kind: String, digest: [UInt8], nowMs: Int64) throws -> (generation: Int64, atMs: Int64) {
        try write { db in
            let current = try BackupGenerationRecord.fetchOne(db, key: kind)
            if let current, current.digest == Data(digest), current.generation > 0 { return (current.generation, current.atMs) }
            let next = BackupGenerationRecord(kind: kind, generation: min((current?.generation ?? 0) + 1, 9_007_199_254_740_991),
                                              digest: Data(digest), atMs: nowMs)
            try next.save(db)
            return (next.generation, next.atMs)
        }
    }

    /// After a restore: the counters continue above what was restored (the next push is newer).
    public func raiseBackupGeneration(_ kind: String, atLeast generation: Int64, nowMs: Int64) throws {
        try write { db in
            let current = try BackupGenerationRecord.fetchOne(db, key: kind)
            guard (current?.generation ?? 0) < generation else { return }
            try BackupGenerationRecord(kind: kind, generation: min(generation, 9_007_199_254_740_991), digest: Data(), atMs: nowMs).save(db)
        }
    }

    public func setBackupScheduleConfig(_ config: BackupScheduleConfigRecord) throws {
        try write { db in try config.save(db) }
    }

    public func saveBackupHolderSchedule(_ r: BackupHolderScheduleRecord) throws {
        try write { db in try r.save(db) }
    }

    public func forgetBackupHolderSchedule(_ holder: [UInt8]) throws {
        try write { db in _ = try BackupHolderScheduleRecord.deleteOne(db, key: Data(holder)) }
    }
}
