import Foundation
import GRDB

// Writes on every message's way that need no savepoint (Protocol/messages.md 11.6, session 9).

extension StoreStep {
    /// `write(durable:_:)` without its savepoint, for a body whose only change is one statement:
    /// SQLite applies a statement whole or not at all (one that fails undoes its own changes and
    /// leaves the transaction open), so a savepoint around it adds nothing but its two statements
    /// (SAVEPOINT and RELEASE through GRDB were 4–8 % of a core thread in a burst). Reads before
    /// the statement are fine; a second change is not (use `write`).
    func writeOne<T>(durable: Bool = true, _ body: (Database) throws -> T) throws -> T {
        precondition(isOpen, "a store step was used after it ended")
        if durable { needsSync = true }
        return try body(db)
    }
}

extension StoreReading {
    /// What this node calls `key`: its nickname, else the contact's display name, else "" — one
    /// cached statement (read for every message received and announced: a whole contact row
    /// decoded after a read of the nickname took a tenth of the receiver's core thread).
    public func shownName(_ key: [UInt8]) throws -> String {
        try read { db in
            try String.fetchOne(try db.cachedStatement(sql: """
                SELECT COALESCE((SELECT nickname FROM contactNickname WHERE publicKey = ?1),
                                (SELECT displayName FROM contact WHERE publicKey = ?1), '')
                """), arguments: [Data(key)]) ?? ""
        }
    }
}

extension StoreReading {
    /// `key`'s relationship alone (nil: no contact, or a value no relationship has) — asked for
    /// nearly every frame (is the author a friend, blocked): one column, not the whole contact row
    /// with its signed record.
    public func relationship(_ key: [UInt8]) throws -> Relationship? {
        try read { db in
            try String.fetchOne(try db.cachedStatement(sql: "SELECT relationship FROM contact WHERE publicKey = ?"),
                                arguments: [Data(key)]).flatMap(Relationship.init(rawValue:))
        }
    }
}
