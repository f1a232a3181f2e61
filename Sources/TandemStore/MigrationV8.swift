import Foundation
import GRDB

/// Migration `v8-vault-break-ins` (Protocol/vault.md "The PIN guard"): the break-in log kept one
/// real digit of each wrong PIN (`masked`, e.g. ••3•). The new table holds one opaque entry per
/// row, which the vault service seals under a key derived from the node's identity key; the
/// migration has no key, so it keeps of each old row only its time, in the clear form below (the
/// service seals every entry at its next write), and drops the digits. Deleted rows are zeroed
/// (`secure_delete`, set by the store). Frozen once shipped: string names only, no app types.
///
/// Entry format: byte 0 = 0 (clear, from this migration): atMs (8 bytes big-endian) ‖ attempt
/// (4 bytes big-endian, 0 = not known); byte 0 = 1 (sealed): nonce (24) ‖ XChaCha20-Poly1305 of
/// the same 12 bytes.
enum MigrationV8 {
    static func vaultBreakIns(_ db: Database) throws {
        try db.execute(sql: "PRAGMA secure_delete = ON")
        try db.execute(sql: """
            CREATE TABLE vaultBreakInEntry (
                seq INTEGER PRIMARY KEY,
                entry BLOB NOT NULL CHECK (typeof(entry) = 'blob' AND length(entry) BETWEEN 1 AND 128)
            );
            """)
        let times = try Int64.fetchAll(db, sql: """
            SELECT atMs FROM vaultBreakIn WHERE typeof(atMs) = 'integer' ORDER BY seq DESC LIMIT 20
            """)
        for atMs in times.reversed() {
            var entry = Data([0])
            withUnsafeBytes(of: UInt64(bitPattern: atMs).bigEndian) { entry.append(contentsOf: $0) }
            entry.append(contentsOf: [0, 0, 0, 0])
            try db.execute(sql: "INSERT INTO vaultBreakInEntry(entry) VALUES (?)", arguments: [entry])
        }
        try db.execute(sql: "DROP TABLE vaultBreakIn")
    }
}
