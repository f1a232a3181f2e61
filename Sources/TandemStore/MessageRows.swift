import Foundation
import GRDB

// The rows every message writes and reads, column by column and through statements prepared once
// (Protocol/messages.md 11.5). GRDB's Codable path encodes and decodes a record through a keyed
// container, and its query interface and `fetchOne(db, sql:)` compile their SQL on every call
// (SQLite's parser and GRDB's authorizer were a fifth of the node core's CPU in a burst): as for
// the friend rows (`Contact.store(in:)`), the hot reads and writes here use cached statements.

extension ConversationRow {
    /// Decoded column by column (a conversation is read for every message sent or received).
    public init(row: Row) throws {
        id = try row.decode(Int64?.self, forColumn: "id")
        peer = try row.decode(Data?.self, forColumn: "peer")
        challengeId = try row.decode(Data?.self, forColumn: "challengeId")
        disappearAfterMs = try row.decode(Int64.self, forColumn: "disappearAfterMs")
        settingsVersion = try row.decode(Int64.self, forColumn: "settingsVersion")
        settingsAuthor = try row.decode(Data?.self, forColumn: "settingsAuthor")
        muted = try row.decode(Bool.self, forColumn: "muted")
        readReceipts = try row.decode(Bool.self, forColumn: "readReceipts")
        ownSeq = try row.decode(Int64.self, forColumn: "ownSeq")
        maxLamport = try row.decode(Int64.self, forColumn: "maxLamport")
        readSentUpToSeq = try row.decode(Int64.self, forColumn: "readSentUpToSeq")
        peerReadUpToSeq = try row.decode(Int64.self, forColumn: "peerReadUpToSeq")
        createdAtMs = try row.decode(Int64.self, forColumn: "createdAtMs")
    }

    static func byPeer(_ db: Database, _ peer: [UInt8]) throws -> ConversationRow? {
        try ConversationRow.fetchOne(try db.cachedStatement(sql: "SELECT * FROM conversation WHERE peer = ?"), arguments: [Data(peer)])
    }

    static func byChallenge(_ db: Database, _ challengeId: [UInt8]) throws -> ConversationRow? {
        try ConversationRow.fetchOne(try db.cachedStatement(sql: "SELECT * FROM conversation WHERE challengeId = ?"),
                                     arguments: [Data(challengeId)])
    }

    static func byID(_ db: Database, _ id: Int64) throws -> ConversationRow? {
        try ConversationRow.fetchOne(try db.cachedStatement(sql: "SELECT * FROM conversation WHERE id = ?"), arguments: [id])
    }
}

extension StoredMessage {
    /// Decoded column by column (messages are read for every list, receipt and gap answer). A
    /// state that is not one of the known values fails, as it did through Codable (start-up
    /// validation quarantines such rows).
    public init(row: Row) throws {
        id = try row.decode(Data.self, forColumn: "id")
        conversationId = try row.decode(Int64.self, forColumn: "conversationId")
        author = try row.decode(Data.self, forColumn: "author")
        seq = try row.decode(Int64.self, forColumn: "seq")
        lamport = try row.decode(Int64.self, forColumn: "lamport")
        sentLamport = try row.decode(Int64.self, forColumn: "sentLamport")
        text = try row.decode(String.self, forColumn: "text")
        replyTo = try row.decode(Data?.self, forColumn: "replyTo")
        sentAtMs = try row.decode(Int64.self, forColumn: "sentAtMs")
        receivedAtMs = try row.decode(Int64.self, forColumn: "receivedAtMs")
        guard let s = MessageState(rawValue: try row.decode(String.self, forColumn: "state")) else {
            throw UnreadableColumn(column: "state")
        }
        state = s
        retracted = try row.decode(Bool.self, forColumn: "retracted")
        expiresAtMs = try row.decode(Int64?.self, forColumn: "expiresAtMs")
        storedBytes = try row.decode(Int64.self, forColumn: "storedBytes")
    }

    /// Inserts this message (fails on a clash of id, or of conversation, author and seq).
    func store(in db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO message (id, conversationId, author, seq, lamport, sentLamport, text, replyTo, sentAtMs, receivedAtMs,
                                 state, retracted, expiresAtMs, storedBytes)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [id, conversationId, author, seq, lamport, sentLamport, text, replyTo, sentAtMs, receivedAtMs,
                                     state.rawValue, retracted, expiresAtMs, storedBytes])
    }

    static func byID(_ db: Database, _ id: [UInt8]) throws -> StoredMessage? {
        try StoredMessage.fetchOne(try db.cachedStatement(sql: "SELECT * FROM message WHERE id = ?"), arguments: [Data(id)])
    }
}
