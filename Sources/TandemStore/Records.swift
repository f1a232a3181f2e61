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
}

public struct StoredEvent: Codable, Sendable, Equatable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "event"
    public var seq: Int64?
    public var type: String
    public var timeMs: Int64
    /// A JSON object.
    public var fields: String

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
