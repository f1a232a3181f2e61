import Foundation
import GRDB

// Backups, the owner's side (Protocol/backup.md 9.1): the friends that offered to hold this node's
// backups, the last complete push to each, and the pushes not ended yet. What this node holds for
// others lives in files (backup-held/), not here. Migration v5-backup made these tables.

/// A friend's offer to hold our backups (BACKUP_OFFER): the newest version is kept.
public struct BackupHolderRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backupHolder"
    public var publicKey: Data
    public var quotaBytes: Int64
    public var version: Int64
    public var receivedAtMs: Int64

    public enum Columns {
        public static let publicKey = Column(CodingKeys.publicKey)
        public static let quotaBytes = Column(CodingKeys.quotaBytes)
        public static let version = Column(CodingKeys.version)
        public static let receivedAtMs = Column(CodingKeys.receivedAtMs)
    }

    public init(publicKey: [UInt8], quotaBytes: Int64, version: Int64, receivedAtMs: Int64) {
        self.publicKey = Data(publicKey)
        self.quotaBytes = quotaBytes
        self.version = version
        self.receivedAtMs = receivedAtMs
    }
}

/// What the last complete push to a holder recorded (its blobs are `BackupPushBlobRecord` rows).
public struct BackupPushRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backupPush"
    public var holder: Data
    public var snapshotId: Data
    public var atMs: Int64
    public var bytesSent: Int64
    public var totalBytes: Int64
    /// The recovery kit's digest the holder acknowledged last (nil: none yet).
    public var kitDigest: Data?

    public enum Columns {
        public static let holder = Column(CodingKeys.holder)
        public static let snapshotId = Column(CodingKeys.snapshotId)
        public static let atMs = Column(CodingKeys.atMs)
        public static let bytesSent = Column(CodingKeys.bytesSent)
        public static let totalBytes = Column(CodingKeys.totalBytes)
        public static let kitDigest = Column(CodingKeys.kitDigest)
    }

    public init(holder: [UInt8], snapshotId: [UInt8], atMs: Int64, bytesSent: Int64, totalBytes: Int64, kitDigest: [UInt8]?) {
        self.holder = Data(holder)
        self.snapshotId = Data(snapshotId)
        self.atMs = atMs
        self.bytesSent = bytesSent
        self.totalBytes = totalBytes
        self.kitDigest = kitDigest.map { Data($0) }
    }
}

/// A blob (by its 32-byte name) that the last push to `holder` named.
public struct BackupPushBlobRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backupPushBlob"
    public var holder: Data
    public var name: Data

    public enum Columns {
        public static let holder = Column(CodingKeys.holder)
        public static let name = Column(CodingKeys.name)
    }

    public init(holder: [UInt8], name: [UInt8]) {
        self.holder = Data(holder)
        self.name = Data(name)
    }
}

/// A push asked for and not ended (resumed at start and every minute).
public struct BackupPendingRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "backupPending"
    public var holder: Data
    public var lanOnly: Bool

    public enum Columns {
        public static let holder = Column(CodingKeys.holder)
        public static let lanOnly = Column(CodingKeys.lanOnly)
    }

    public init(holder: [UInt8], lanOnly: Bool) {
        self.holder = Data(holder)
        self.lanOnly = lanOnly
    }
}

/// A push record with the names of its blobs, in name order.
public struct StoredBackupPush: Sendable, Equatable {
    public var record: BackupPushRecord
    public var blobs: [[UInt8]]

    public init(record: BackupPushRecord, blobs: [[UInt8]]) {
        self.record = record
        self.blobs = blobs
    }
}

extension NodeStore {
    fileprivate static func lastBackupPush(_ db: Database, _ holder: Data) throws -> StoredBackupPush? {
        guard let r = try BackupPushRecord.fetchOne(db, key: holder) else { return nil }
        return StoredBackupPush(record: r, blobs: try blobs(db, holder))
    }

    fileprivate static func blobs(_ db: Database, _ holder: Data) throws -> [[UInt8]] {
        try Data.fetchAll(db.cachedStatement(sql: "SELECT name FROM backupPushBlob WHERE holder = ? ORDER BY name"), arguments: [holder])
            .map { Array($0) }
    }
}
extension StoreReading {
    // MARK: offers received

    /// Every holder's offer, by key.
    public func backupHolders() throws -> [BackupHolderRecord] {
        try read { db in try BackupHolderRecord.order(BackupHolderRecord.Columns.publicKey).fetchAll(db) }
    }

    public func backupHolder(_ key: [UInt8]) throws -> BackupHolderRecord? {
        try read { db in try BackupHolderRecord.fetchOne(db, key: Data(key)) }
    }

    // MARK: pushes

    /// The last complete push to `holder`, with its blobs.
    public func lastBackupPush(to holder: [UInt8]) throws -> StoredBackupPush? {
        try read { db in try NodeStore.lastBackupPush(db, Data(holder)) }
    }

    /// The last complete push to every holder pushed to, by holder.
    public func lastBackupPushes() throws -> [StoredBackupPush] {
        try read { db in
            try BackupPushRecord.order(BackupPushRecord.Columns.holder).fetchAll(db).map { r in
                StoredBackupPush(record: r, blobs: try NodeStore.blobs(db, r.holder))
            }
        }
    }

    public func pendingBackupPushes() throws -> [BackupPendingRecord] {
        try read { db in try BackupPendingRecord.order(BackupPendingRecord.Columns.holder).fetchAll(db) }
    }
}
extension StoreStep {
    /// A holder's newer offer replaces the one kept.
    public func keepBackupOffer(_ offer: BackupHolderRecord) throws {
        try write { db in try offer.save(db) }
    }

    /// The holder withdrew its offer.
    public func forgetBackupOffer(from key: [UInt8]) throws {
        try write { db in _ = try BackupHolderRecord.deleteOne(db, key: Data(key)) }
    }

    /// A push completed: its record (and blobs) replaces the holder's last one.
    public func recordBackupPush(_ push: StoredBackupPush) throws {
        try write { db in
            try push.record.save(db)
            _ = try BackupPushBlobRecord.filter(BackupPushBlobRecord.Columns.holder == push.record.holder).deleteAll(db)
            for name in Set(push.blobs) { try BackupPushBlobRecord(holder: Array(push.record.holder), name: name).insert(db) }
        }
    }

    // MARK: pending pushes

    /// A push to `holder` starts: remembered until it ends, so a node stopped mid-push resumes it.
    public func markBackupPending(_ holder: [UInt8], lanOnly: Bool) throws {
        try write { db in try BackupPendingRecord(holder: holder, lanOnly: lanOnly).save(db) }
    }

    /// The push to `holder` ended (either way).
    public func clearBackupPending(_ holder: [UInt8]) throws {
        try write { db in _ = try BackupPendingRecord.deleteOne(db, key: Data(holder)) }
    }
}
