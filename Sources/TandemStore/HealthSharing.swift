import Foundation
import GRDB

/// Health shared with friends (Protocol/bedtime.md "Health in presence"). Migration
/// `v9-health-share`; frozen once shipped (string names only, no app types):
/// - `sharing`: what this node shares with its friends, one row per kind (`health` for now), off
///   unless a row says on (`tandem share health on|off`);
/// - `friendHealth`: the health a friend last shared in its PRESENCE, and when it arrived; a
///   PRESENCE without health (the friend stopped sharing) or the friend going offline removes it.
enum MigrationHealthShare {
    static func create(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE sharing (
                what TEXT PRIMARY KEY NOT NULL CHECK (what IN ('health')),
                enabled INTEGER NOT NULL CHECK (enabled IN (0, 1))
            );
            CREATE TABLE friendHealth (
                publicKey BLOB PRIMARY KEY NOT NULL CHECK (typeof(publicKey) = 'blob' AND length(publicKey) = 32),
                health INTEGER NOT NULL CHECK (typeof(health) = 'integer' AND health BETWEEN 0 AND 100),
                atMs INTEGER NOT NULL CHECK (typeof(atMs) = 'integer')
            );
            """)
    }
}

/// A friend's shared health as stored.
public struct FriendHealthRow: Sendable, Equatable {
    public var health: Int
    public var atMs: Int64
}

extension StoreReading {
    /// True when this node shares its health with friends (off by default).
    public func sharesHealth() throws -> Bool {
        try read { db in try Bool.fetchOne(db, sql: "SELECT enabled FROM sharing WHERE what = 'health'") ?? false }
    }

    /// What `key` last shared of its health, if anything.
    public func friendHealth(_ key: [UInt8]) throws -> FriendHealthRow? {
        try read { db in
            guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT health, atMs FROM friendHealth WHERE publicKey = ?"),
                                             arguments: [Data(key)]) else { return nil }
            let h: Int64 = row["health"]
            guard (0...100).contains(h) else { return nil }
            return FriendHealthRow(health: Int(h), atMs: row["atMs"])
        }
    }

    /// Every friend's last shared health, by public key.
    public func friendHealth() throws -> [Data: FriendHealthRow] {
        try read { db in
            var out: [Data: FriendHealthRow] = [:]
            for row in try Row.fetchAll(try db.cachedStatement(sql: "SELECT publicKey, health, atMs FROM friendHealth")) {
                let h: Int64 = row["health"]
                guard (0...100).contains(h) else { continue }   // the CHECK holds; a damaged row is not shown
                out[row["publicKey"]] = FriendHealthRow(health: Int(h), atMs: row["atMs"])
            }
            return out
        }
    }
}

extension StoreStep {
    public func setSharesHealth(_ on: Bool) throws {
        try write { db in
            try db.execute(sql: "INSERT INTO sharing (what, enabled) VALUES ('health', ?) ON CONFLICT(what) DO UPDATE SET enabled = excluded.enabled",
                           arguments: [on ? 1 : 0])
        }
    }

    /// Stores (or, with nil, removes) what a friend shares of its health.
    public func setFriendHealth(_ key: [UInt8], health: Int?, atMs: Int64) throws {
        try write { db in
            if let health, (0...100).contains(health) {
                try db.cachedStatement(sql: """
                    INSERT INTO friendHealth (publicKey, health, atMs) VALUES (?, ?, ?)
                    ON CONFLICT(publicKey) DO UPDATE SET health = excluded.health, atMs = excluded.atMs
                    """).execute(arguments: [Data(key), health, atMs])
            } else {
                try db.cachedStatement(sql: "DELETE FROM friendHealth WHERE publicKey = ?").execute(arguments: [Data(key)])
            }
        }
    }
}
