import Foundation
import GRDB

// The vault's PIN guard (Protocol/vault.md "The PIN guard"): wrong PINs in a row, the wait they
// earned, and the break-in log. Written before a PIN attempt is answered. Migration v5-vault made
// these tables; the auto-lock time stays a scalar setting (`vault.autoLockMs`).

/// The guard's one row (`id` 1); no row: no wrong PIN since the vault was made.
public struct VaultPinGuardRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "vaultPinGuard"
    public var id: Int64 = 1
    public var failures: Int64
    public var lockedUntilMs: Int64

    public enum Columns {
        public static let id = Column(CodingKeys.id)
        public static let failures = Column(CodingKeys.failures)
        public static let lockedUntilMs = Column(CodingKeys.lockedUntilMs)
    }

    public init(failures: Int64, lockedUntilMs: Int64) {
        self.failures = failures
        self.lockedUntilMs = lockedUntilMs
    }
}

/// One logged wrong PIN (from the third in a row): when, and the attempt masked but for one digit.
public struct VaultBreakInRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "vaultBreakIn"
    public var seq: Int64?
    public var atMs: Int64
    public var masked: String

    public enum Columns {
        public static let seq = Column(CodingKeys.seq)
        public static let atMs = Column(CodingKeys.atMs)
        public static let masked = Column(CodingKeys.masked)
    }

    public init(atMs: Int64, masked: String) {
        self.atMs = atMs
        self.masked = masked
    }
}

/// The guard with its log, oldest entry first.
public struct StoredPinGuard: Sendable, Equatable {
    public var guardRow: VaultPinGuardRecord
    public var breakIns: [VaultBreakInRecord]

    public init(failures: Int64, lockedUntilMs: Int64, breakIns: [VaultBreakInRecord]) {
        guardRow = VaultPinGuardRecord(failures: failures, lockedUntilMs: lockedUntilMs)
        self.breakIns = breakIns
    }
}

extension StoreReading {
    /// The stored guard; nil when there is none. Throws when a row cannot be read (the caller then
    /// counts wrong PINs rather than none: a damaged row is never a way around a wait).
    public func vaultPinGuard() throws -> StoredPinGuard? {
        try read { db in
            guard let g = try VaultPinGuardRecord.fetchOne(db, key: 1) else { return nil }
            let log = try VaultBreakInRecord.order(VaultBreakInRecord.Columns.seq).fetchAll(db)
            return StoredPinGuard(failures: g.failures, lockedUntilMs: g.lockedUntilMs, breakIns: log)
        }
    }
}
extension StoreStep {
    /// Replaces the guard and its log (durably: a PIN attempt's answer waits for it).
    public func saveVaultPinGuard(_ g: StoredPinGuard) throws {
        try write { db in
            var row = g.guardRow
            row.id = 1
            try row.save(db)
            _ = try VaultBreakInRecord.deleteAll(db)
            for var b in g.breakIns {
                b.seq = nil
                try b.insert(db)
            }
        }
    }
}
