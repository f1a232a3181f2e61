import Foundation
import GRDB

/// Local nicknames for contacts (`tandem friend nick ID NAME`): a name only this node knows, shown
/// and accepted wherever a person names a friend. Migration `v9-friend-nicknames`; frozen once
/// shipped (string names only, no app types).
enum MigrationNicknames {
    static func create(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE contactNickname (
                publicKey BLOB PRIMARY KEY NOT NULL CHECK (typeof(publicKey) = 'blob' AND length(publicKey) = 32),
                nickname TEXT NOT NULL CHECK (typeof(nickname) = 'text' AND length(nickname) BETWEEN 1 AND 64)
            );
            """)
    }
}

extension StoreReading {
    /// Every contact's nickname, by public key.
    public func nicknames() throws -> [Data: String] {
        try read { db in
            var out: [Data: String] = [:]
            for row in try Row.fetchAll(try db.cachedStatement(sql: "SELECT publicKey, nickname FROM contactNickname")) {
                out[row["publicKey"]] = row["nickname"]
            }
            return out
        }
    }

    /// One contact's nickname, if it has one.
    public func nickname(_ key: [UInt8]) throws -> String? {
        try read { db in
            try String.fetchOne(try db.cachedStatement(sql: "SELECT nickname FROM contactNickname WHERE publicKey = ?"),
                                arguments: [Data(key)])
        }
    }
}

extension StoreStep {
    /// Sets (or, with nil, removes) a contact's nickname.
    public func setNickname(_ key: [UInt8], _ nickname: String?) throws {
        try write { db in
            if let nickname {
                try db.cachedStatement(sql: """
                    INSERT INTO contactNickname (publicKey, nickname) VALUES (?, ?)
                    ON CONFLICT(publicKey) DO UPDATE SET nickname = excluded.nickname
                    """).execute(arguments: [Data(key), nickname])
            } else {
                try db.cachedStatement(sql: "DELETE FROM contactNickname WHERE publicKey = ?").execute(arguments: [Data(key)])
            }
        }
    }
}
