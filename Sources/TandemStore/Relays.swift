import Foundation
import GRDB

/// A relay as the store keeps it: its key and where it listens.
public struct StoredRelay: Sendable, Equatable {
    public let publicKey: [UInt8]
    public let host: String
    public let port: Int
    /// When it was added (home relays) or last updated (a peer's relay).
    public let atMs: Int64
    /// For a peer's relay: "manual" (a pasted share code) or "record" (their contact record).
    public let source: String?

    public init(publicKey: [UInt8], host: String, port: Int, atMs: Int64, source: String? = nil) {
        self.publicKey = publicKey
        self.host = host
        self.port = port
        self.atMs = atMs
        self.source = source
    }
}

extension NodeStore {
    /// Home relays a node may have at most.
    public static let maximumHomeRelays = 4
}

extension StoreStep {
    /// Adds (or moves) a home relay. Returns false when it was there already at that address.
    @discardableResult
    public func addRelay(_ key: [UInt8], host: String, port: Int, nowMs: Int64) throws -> Bool {
        try write { db in
            let existing = try Row.fetchOne(db, sql: "SELECT host, port FROM relay WHERE publicKey = ?", arguments: [Data(key)])
            if let existing, existing["host"] as String == host, existing["port"] as Int == port { return false }
            if existing == nil {
                let n = try Int.fetchOne(db, sql: "SELECT count(*) FROM relay") ?? 0
                guard n < NodeStore.maximumHomeRelays else { throw RelayStoreError.tooManyRelays(NodeStore.maximumHomeRelays) }
            }
            try db.execute(sql: """
                INSERT INTO relay (publicKey, host, port, addedAtMs) VALUES (?, ?, ?, ?)
                ON CONFLICT(publicKey) DO UPDATE SET host = excluded.host, port = excluded.port
                """, arguments: [Data(key), host, port, nowMs])
            return true
        }
    }
}
extension StoreReading {
    public func relays() throws -> [StoredRelay] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM relay ORDER BY addedAtMs, publicKey").map {
                StoredRelay(publicKey: Array($0["publicKey"] as Data), host: $0["host"], port: $0["port"], atMs: $0["addedAtMs"])
            }
        }
    }

    public func peerRelay(_ key: [UInt8]) throws -> StoredRelay? {
        try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM peerRelay WHERE publicKey = ?", arguments: [Data(key)]).map {
                StoredRelay(publicKey: Array($0["relayKey"] as Data), host: $0["host"], port: $0["port"], atMs: $0["updatedAtMs"],
                            source: $0["source"])
            }
        }
    }
}
extension StoreStep {
    /// Removes a home relay; false when it was not one.
    public func removeRelay(_ key: [UInt8]) throws -> Bool {
        try write { db in
            try db.execute(sql: "DELETE FROM relay WHERE publicKey = ?", arguments: [Data(key)])
            return db.changesCount > 0
        }
    }

    /// Remembers the relay a peer can be reached through; the latest word wins, whether it came
    /// from a pasted share code or from the peer's contact record.
    public func setPeerRelay(_ key: [UInt8], relay: [UInt8], host: String, port: Int, source: String, nowMs: Int64) throws {
        try write { db in
            try db.execute(sql: """
                INSERT INTO peerRelay (publicKey, relayKey, host, port, source, updatedAtMs) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT(publicKey) DO UPDATE SET relayKey = excluded.relayKey, host = excluded.host, port = excluded.port,
                  source = excluded.source, updatedAtMs = excluded.updatedAtMs
                """, arguments: [Data(key), Data(relay), host, port, source, nowMs])
        }
    }
}

public enum RelayStoreError: Error, Equatable, CustomStringConvertible {
    case tooManyRelays(Int)

    public var description: String {
        switch self {
        case .tooManyRelays(let n): return "a node has at most \(n) home relays (remove one first)"
        }
    }
}
