import Foundation
import GRDB

/// Migration `v9-message-file-vault` (Protocol/messages.md 7.3, `--to-vault`): a received file the
/// user asked to go into the vault. `itemId` is null while the file is still coming (or waits for
/// the vault to be opened), and the vault item's id once imported (the clear copy is then gone).
/// Frozen once shipped: string names only, no app types.
enum MigrationFileVault {
    static func fileVault(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE fileVaultImport (
                fileId BLOB NOT NULL PRIMARY KEY REFERENCES fileTransfer(fileId) ON DELETE CASCADE
                    CHECK (typeof(fileId) = 'blob' AND length(fileId) = 16),
                itemId TEXT CHECK (itemId IS NULL OR length(itemId) BETWEEN 1 AND 64),
                requestedAtMs INTEGER NOT NULL,
                importedAtMs INTEGER
            );
            """)
    }
}

/// A received file bound for the vault.
public struct FileVaultImport: Sendable, Equatable {
    public var fileId: [UInt8]
    /// The vault item, once imported.
    public var itemId: String?
    public var requestedAtMs: Int64
    public var importedAtMs: Int64?
}

extension StoreReading {
    /// The vault import asked for file `fileId`, if any.
    public func fileVaultImport(_ fileId: [UInt8]) throws -> FileVaultImport? {
        try read { db in
            try Row.fetchOne(db, sql: "SELECT itemId, requestedAtMs, importedAtMs FROM fileVaultImport WHERE fileId = ?",
                             arguments: [Data(fileId)]).map { row in
                FileVaultImport(fileId: fileId, itemId: row["itemId"], requestedAtMs: row["requestedAtMs"], importedAtMs: row["importedAtMs"])
            }
        }
    }
}

extension StoreStep {
    /// Remembers that file `fileId` goes into the vault (again: no change).
    public func requestFileVaultImport(_ fileId: [UInt8], nowMs: Int64) throws {
        try write { db in
            try db.execute(sql: "INSERT OR IGNORE INTO fileVaultImport(fileId, requestedAtMs) VALUES (?, ?)",
                           arguments: [Data(fileId), nowMs])
        }
    }

    /// File `fileId` is in the vault as item `itemId`.
    public func recordFileVaultImport(_ fileId: [UInt8], itemId: String, nowMs: Int64) throws {
        try write { db in
            try db.execute(sql: """
                INSERT INTO fileVaultImport(fileId, itemId, requestedAtMs, importedAtMs) VALUES (?, ?, ?, ?)
                ON CONFLICT(fileId) DO UPDATE SET itemId = excluded.itemId, importedAtMs = excluded.importedAtMs
                """, arguments: [Data(fileId), itemId, nowMs, nowMs])
        }
    }
}
