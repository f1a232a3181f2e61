import Foundation
import GRDB

/// How this node relates to another key.
public enum Relationship: String, Codable, Sendable, DatabaseValueConvertible {
    /// Known (e.g. a declined or removed peer) but nothing pending.
    case none
    /// We sent a friend request and wait for the answer.
    case requested
    /// They sent us a friend request and wait for ours.
    case pending
    case friend
    case blocked
}

public struct Contact: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "contact"
    public var publicKey: Data
    public var displayName: String
    public var relationship: Relationship
    public var requestMessage: String?
    public var requestedAtMs: Int64?
    public var friendSinceMs: Int64?
    public var record: Data?
    public var recordVersion: Int64
    public var lastSeenMs: Int64?
    public var presence: String?
    public var updatedAtMs: Int64

    public enum Columns {
        public static let publicKey = Column(CodingKeys.publicKey)
        public static let relationship = Column(CodingKeys.relationship)
        public static let requestedAtMs = Column(CodingKeys.requestedAtMs)
        public static let displayName = Column(CodingKeys.displayName)
    }

    public init(publicKey: [UInt8], displayName: String = "", relationship: Relationship, nowMs: Int64) {
        self.publicKey = Data(publicKey)
        self.displayName = displayName
        self.relationship = relationship
        self.recordVersion = 0
        self.updatedAtMs = nowMs
    }

    public var key: [UInt8] { Array(publicKey) }

    /// Decoded column by column: GRDB's Codable path costs several times more, and a contact is read
    /// for nearly every frame. A row whose relationship is not one of the known values fails to
    /// decode, as it did through Codable (start-up validation quarantines such rows).
    public init(row: Row) throws {
        publicKey = try row.decode(Data.self, forColumn: "publicKey")
        displayName = try row.decode(String.self, forColumn: "displayName")
        guard let r = Relationship(rawValue: try row.decode(String.self, forColumn: "relationship")) else {
            throw UnreadableColumn(column: "relationship")
        }
        relationship = r
        requestMessage = try row.decode(String?.self, forColumn: "requestMessage")
        requestedAtMs = try row.decode(Int64?.self, forColumn: "requestedAtMs")
        friendSinceMs = try row.decode(Int64?.self, forColumn: "friendSinceMs")
        record = try row.decode(Data?.self, forColumn: "record")
        recordVersion = try row.decode(Int64.self, forColumn: "recordVersion")
        lastSeenMs = try row.decode(Int64?.self, forColumn: "lastSeenMs")
        presence = try row.decode(String?.self, forColumn: "presence")
        updatedAtMs = try row.decode(Int64.self, forColumn: "updatedAtMs")
    }
}

/// A stored row with a value its type cannot hold.
public struct UnreadableColumn: Error, CustomStringConvertible {
    public let column: String
    public var description: String { "unreadable value in column \(column)" }
}

public struct KnownAddress: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "address"
    public var publicKey: Data
    public var host: String
    public var port: Int
    /// lan | manual | record
    public var source: String
    public var lastSeenMs: Int64

    public init(publicKey: [UInt8], host: String, port: Int, source: String, lastSeenMs: Int64) {
        self.publicKey = Data(publicKey)
        self.host = host
        self.port = port
        self.source = source
        self.lastSeenMs = lastSeenMs
    }
}

public struct OutboxItem: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "outbox"
    public var messageId: Data
    public var recipient: Data
    public var type: Int
    /// The signed envelope exactly as it will be sent.
    public var frame: Data
    public var createdAtMs: Int64
    public var attempts: Int
    public var nextAttemptMs: Int64
    public var lastError: String?
    /// When an undelivered frame is given up (frames to non-friends; nil: kept until acknowledged).
    public var expiresAtMs: Int64?

    public enum Columns {
        public static let recipient = Column(CodingKeys.recipient)
        public static let nextAttemptMs = Column(CodingKeys.nextAttemptMs)
        public static let createdAtMs = Column(CodingKeys.createdAtMs)
    }

    public init(messageId: [UInt8], recipient: [UInt8], type: UInt16, frame: [UInt8], nowMs: Int64) {
        self.messageId = Data(messageId)
        self.recipient = Data(recipient)
        self.type = Int(type)
        self.frame = Data(frame)
        self.createdAtMs = nowMs
        self.attempts = 0
        self.nextAttemptMs = nowMs
        self.expiresAtMs = nil
    }

    /// Decoded column by column (as `Contact`): the outbox is read on every delivery.
    public init(row: Row) throws {
        messageId = try row.decode(Data.self, forColumn: "messageId")
        recipient = try row.decode(Data.self, forColumn: "recipient")
        type = try row.decode(Int.self, forColumn: "type")
        frame = try row.decode(Data.self, forColumn: "frame")
        createdAtMs = try row.decode(Int64.self, forColumn: "createdAtMs")
        attempts = try row.decode(Int.self, forColumn: "attempts")
        nextAttemptMs = try row.decode(Int64.self, forColumn: "nextAttemptMs")
        lastError = try row.decode(String?.self, forColumn: "lastError")
        expiresAtMs = try row.decode(Int64?.self, forColumn: "expiresAtMs")
    }
}

/// A waiting frame's place in the outbox, without its bytes (`StoreReading.outboxHeads`).
public struct OutboxHead: Sendable, Equatable {
    public var messageId: [UInt8]
    public var type: Int
    public var nextAttemptMs: Int64
    /// The frame's size in bytes (what it counts towards the window's bytes, messages.md 11.1).
    public var frameBytes: Int

    public init(messageId: [UInt8], type: Int, nextAttemptMs: Int64, frameBytes: Int = 0) {
        self.messageId = messageId
        self.type = type
        self.nextAttemptMs = nextAttemptMs
        self.frameBytes = frameBytes
    }
}

public struct StoredEvent: Codable, Sendable, Equatable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "event"
    public var seq: Int64?
    public var type: String
    public var timeMs: Int64
    /// A JSON object.
    public var fields: String

    public init(seq: Int64?, type: String, timeMs: Int64, fields: String) {
        self.seq = seq
        self.type = type
        self.timeMs = timeMs
        self.fields = fields
    }

    /// Decoded column by column (as `Contact`): subscribers replaying the log read many.
    public init(row: Row) throws {
        seq = try row.decode(Int64?.self, forColumn: "seq")
        type = try row.decode(String.self, forColumn: "type")
        timeMs = try row.decode(Int64.self, forColumn: "timeMs")
        fields = try row.decode(String.self, forColumn: "fields")
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) { seq = inserted.rowID }
}

public struct Sighting: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "sighting"
    public var publicKey: Data
    public var displayName: String?
    public var host: String
    public var port: Int
    public var isFriendBeacon: Bool
    public var lastSeenMs: Int64

    public init(publicKey: [UInt8], displayName: String?, host: String, port: Int, isFriendBeacon: Bool, lastSeenMs: Int64) {
        self.publicKey = Data(publicKey)
        self.displayName = displayName
        self.host = host
        self.port = port
        self.isFriendBeacon = isFriendBeacon
        self.lastSeenMs = lastSeenMs
    }
}

/// Why a friend operation could not be done; the node turns it into one clear line.
public enum FriendStoreError: Error, Equatable, Sendable {
    case alreadyFriends
    case blocked
    case noPendingRequest
    case notAFriend
    case isSelf
}

// MARK: - The rows every friend frame writes, through statements prepared once

// GRDB's `save` and `insert` find the table's primary key, encode the record through Codable into
// a case-insensitive dictionary and build their SQL on every call, and `save` tries an UPDATE before
// its INSERT: several times the cost of the statement itself, on the path of each handled frame
// (`tandem-bench friends`). These write the same rows with one cached statement each.

extension Contact {
    /// Inserts this contact, or replaces every column of the stored one with the same key.
    func store(in db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO contact (publicKey, displayName, relationship, requestMessage, requestedAtMs, friendSinceMs,
                                 record, recordVersion, lastSeenMs, presence, updatedAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (publicKey) DO UPDATE SET
                displayName = excluded.displayName, relationship = excluded.relationship,
                requestMessage = excluded.requestMessage, requestedAtMs = excluded.requestedAtMs,
                friendSinceMs = excluded.friendSinceMs, record = excluded.record, recordVersion = excluded.recordVersion,
                lastSeenMs = excluded.lastSeenMs, presence = excluded.presence, updatedAtMs = excluded.updatedAtMs
            """).execute(arguments: [publicKey, displayName, relationship.rawValue, requestMessage, requestedAtMs, friendSinceMs,
                                     record, recordVersion, lastSeenMs, presence, updatedAtMs])
    }

    /// Deletes the contact with `key` and the addresses known for it.
    static func delete(_ key: Data, in db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM contact WHERE publicKey = ?").execute(arguments: [key])
        try db.cachedStatement(sql: "DELETE FROM address WHERE publicKey = ?").execute(arguments: [key])
    }
}

extension OutboxItem {
    /// How an insert meets a frame already stored under the same message id.
    enum Conflict {
        /// Fails (a message id is random: a clash is a bug).
        case fail
        /// Keeps the stored frame.
        case ignore
        /// Replaces it.
        case replace
    }

    /// Inserts this frame into the outbox.
    func store(in db: Database, onConflict conflict: Conflict = .fail) throws {
        let verb: String
        switch conflict {
        case .fail: verb = "INSERT"
        case .ignore: verb = "INSERT OR IGNORE"
        case .replace: verb = "INSERT OR REPLACE"
        }
        try db.cachedStatement(sql: """
            \(verb) INTO outbox (messageId, recipient, type, frame, createdAtMs, attempts, nextAttemptMs, lastError, expiresAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [messageId, recipient, type, frame, createdAtMs, attempts, nextAttemptMs, lastError, expiresAtMs])
    }
}

extension StoredEvent {
    /// Appends this event to the log and sets its `seq`.
    mutating func store(in db: Database) throws {
        try db.cachedStatement(sql: "INSERT INTO event (type, timeMs, fields) VALUES (?, ?, ?)")
            .execute(arguments: [type, timeMs, fields])
        seq = db.lastInsertedRowID
    }
}
