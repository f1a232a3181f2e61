import Foundation
import GRDB

// The vault's PIN guard (Protocol/vault.md "The PIN guard"): wrong PINs in a row, the wait they
// earned, and the break-in log. Written before a PIN attempt is answered. Migration v5-vault made
// these tables, v8-vault-break-ins the log's sealed form; the auto-lock time stays a scalar
// setting (`vault.autoLockMs`).

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

/// One entry of the break-in log (from the third wrong PIN in a row): opaque to the store. The
/// vault service seals it (when, and which wrong PIN in a row; never anything of the PIN tried);
/// migration v8 made the table (MigrationV8.swift has the format).
public struct VaultBreakInRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "vaultBreakInEntry"
    public static let maximumEntryBytes = 128
    public var seq: Int64?
    public var entry: Data

    public enum Columns {
        public static let seq = Column(CodingKeys.seq)
        public static let entry = Column(CodingKeys.entry)
    }

    public init(entry: Data) {
        self.entry = entry
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
