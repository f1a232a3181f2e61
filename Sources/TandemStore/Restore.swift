import Foundation
import GRDB
import TandemProtocol

/// Where a friend was last reached, as a recovery kit keeps it (already validated).
public struct RestoredAddress: Sendable, Equatable {
    public let host: String
    public let port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
}

/// A friend as a recovery kit gives it back (Protocol/backup.md section 8): its stored contact
/// record (canonical bytes, already validated), from that record the relay it can be reached by,
/// and where the node last reached it (most recent first).
public struct RestoredFriend: Sendable, Equatable {
    public let publicKey: [UInt8]
    public let displayName: String
    public let record: [UInt8]
    public let recordVersion: Int64
    public let homeRelay: StoredRelay?
    public var addresses: [RestoredAddress]

    public init(publicKey: [UInt8], displayName: String, record: [UInt8], recordVersion: Int64, homeRelay: StoredRelay?,
                addresses: [RestoredAddress] = []) {
        self.publicKey = publicKey
        self.displayName = displayName
        self.record = record
        self.recordVersion = recordVersion
        self.homeRelay = homeRelay
        self.addresses = addresses
    }
}

/// A ledger row from a recovery kit, already verified as part of its chain.
public struct RestoredLedgerEntry: Sendable, Equatable {
    public let entry: LedgerEntry
    public let challengeId: [UInt8]
    public let committedAtMs: Int64

    public init(entry: LedgerEntry, challengeId: [UInt8], committedAtMs: Int64) {
        self.entry = entry
        self.challengeId = challengeId
        self.committedAtMs = committedAtMs
    }
}

/// What a restore writes into the store, in one transaction.
public struct RestoredState: Sendable {
    public var friends: [RestoredFriend]
    public var homeRelays: [StoredRelay]
    public var ledger: [RestoredLedgerEntry]
    /// Where friends were reached during the restore (the holder's address): kept as "manual".
    public var addresses: [(publicKey: [UInt8], host: String, port: Int)]
    /// The node's display name, or empty.
    public var displayName: String

    public init(friends: [RestoredFriend], homeRelays: [StoredRelay], ledger: [RestoredLedgerEntry],
                addresses: [(publicKey: [UInt8], host: String, port: Int)], displayName: String = "") {
        self.friends = friends
        self.homeRelays = homeRelays
        self.ledger = ledger
        self.addresses = addresses
        self.displayName = displayName
    }
}

extension StoreReading {
    /// Whether the store holds anything a restore could overwrite: contacts, home relays, the
    /// ledger, challenges or queued frames.
    public func holdsNodeState() throws -> Bool {
        try read { db in
            for table in ["contact", "relay", "ledger", "challenge", "outbox"] {
                if try Bool.fetchOne(db, sql: "SELECT EXISTS(SELECT 1 FROM \(table))") == true { return true }
            }
            return false
        }
    }
}
extension StoreStep {
    /// Writes what a recovery kit holds, in one transaction. Idempotent, so a restore run again
    /// on a partly restored data dir writes the same rows: friends become (or stay) friends with
    /// their record when it is not older than the stored one; home relays beyond the cap are
    /// left out; ledger rows are inserted where their `seq` is free and must agree with what is
    /// there (a different row at a `seq` throws: that store is not this kit's).
    ///
    /// Settings: the display name, and `advertised_port` = "0" when the store has none, so that
    /// the node's first start counts as a change of port (not a first run) and sends every friend
    /// a newer contact record: they learn where the restored node listens now.
    public func applyRestore(_ state: RestoredState, nowMs: Int64) throws {
        try write { db in
            if !state.displayName.isEmpty {
                try db.execute(sql: "INSERT INTO setting(key, value) VALUES ('display_name', ?) ON CONFLICT(key) DO NOTHING",
                               arguments: [state.displayName])
            }
            try db.execute(sql: "INSERT INTO setting(key, value) VALUES ('advertised_port', '0') ON CONFLICT(key) DO NOTHING")
            for f in state.friends {
                var c = try NodeStore.contact(db, f.publicKey) ?? Contact(publicKey: f.publicKey, relationship: .friend, nowMs: nowMs)
                c.relationship = .friend
                if c.friendSinceMs == nil { c.friendSinceMs = nowMs }
                if f.recordVersion >= c.recordVersion {
                    c.displayName = f.displayName
                    c.record = Data(f.record)
                    c.recordVersion = f.recordVersion
                }
                c.updatedAtMs = nowMs
                try c.store(in: db)
                if let relay = f.homeRelay {
                    try db.execute(sql: """
                        INSERT INTO peerRelay (publicKey, relayKey, host, port, source, updatedAtMs) VALUES (?, ?, ?, ?, 'record', ?)
                        ON CONFLICT(publicKey) DO UPDATE SET relayKey = excluded.relayKey, host = excluded.host, port = excluded.port,
                          source = excluded.source, updatedAtMs = excluded.updatedAtMs
                        """, arguments: [Data(f.publicKey), Data(relay.publicKey), relay.host, relay.port, nowMs])
                }
            }
            for a in state.addresses {
                try KnownAddress(publicKey: a.publicKey, host: a.host, port: a.port, source: "manual", lastSeenMs: nowMs).save(db)
            }
            // Where the old node last reached each friend: known, older than the holder's address.
            for f in state.friends {
                for (i, a) in f.addresses.enumerated() {
                    try db.execute(sql: """
                        INSERT INTO address (publicKey, host, port, source, lastSeenMs) VALUES (?, ?, ?, 'kit', ?)
                        ON CONFLICT (publicKey, host, port) DO NOTHING
                        """, arguments: [Data(f.publicKey), a.host, a.port, nowMs - 1 - Int64(i)])
                }
            }
            for (i, r) in state.homeRelays.enumerated() {
                let n = try Int.fetchOne(db, sql: "SELECT count(*) FROM relay") ?? 0
                let present = try Bool.fetchOne(db, sql: "SELECT EXISTS(SELECT 1 FROM relay WHERE publicKey = ?)", arguments: [Data(r.publicKey)]) ?? false
                guard present || n < NodeStore.maximumHomeRelays else { break }
                try db.execute(sql: """
                    INSERT INTO relay (publicKey, host, port, addedAtMs) VALUES (?, ?, ?, ?)
                    ON CONFLICT(publicKey) DO UPDATE SET host = excluded.host, port = excluded.port
                    """, arguments: [Data(r.publicKey), r.host, r.port, nowMs + Int64(i)])
            }
            for l in state.ledger {
                if let existing = try Row.fetchOne(db, sql: "SELECT hash FROM ledger WHERE seq = ?", arguments: [l.entry.seq]) {
                    guard (existing["hash"] as Data) == Data(l.entry.hash) else {
                        throw RestoreStoreError.ledgerDiffers(seq: l.entry.seq)
                    }
                    continue
                }
                try db.execute(sql: "INSERT INTO ledger(seq, challengeId, record, signatures, previousHash, hash, committedAtMs) VALUES (?, ?, ?, ?, ?, ?, ?)",
                               arguments: [l.entry.seq, Data(l.challengeId), Data(l.entry.record), Data(l.entry.packedSignatures),
                                           Data(l.entry.previousHash), Data(l.entry.hash), l.committedAtMs])
            }
        }
    }
}

public enum RestoreStoreError: Error, Equatable, CustomStringConvertible {
    case ledgerDiffers(seq: Int64)

    public var description: String {
        switch self {
        case .ledgerDiffers(let seq): return "the store's ledger entry \(seq) differs from the kit's: this store belongs to another node"
        }
    }
}
