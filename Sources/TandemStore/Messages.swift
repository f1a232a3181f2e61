import Foundation
import GRDB
import TandemProtocol

// Messages between friends (Protocol/messages.md 8): the records of migration v6-messages and their
// intents. Writes only on `StoreStep`; reads on `StoreReading`.

/// A conversation: the direct one with `peer`, or the thread of challenge `challengeId`.
public struct ConversationRow: Codable, Sendable, Equatable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "conversation"
    public var id: Int64?
    public var peer: Data?
    public var challengeId: Data?
    public var disappearAfterMs: Int64
    public var settingsVersion: Int64
    public var settingsAuthor: Data?
    public var muted: Bool
    public var readReceipts: Bool
    public var ownSeq: Int64
    public var maxLamport: Int64
    public var readSentUpToSeq: Int64
    public var peerReadUpToSeq: Int64
    public var createdAtMs: Int64

    public var isDirect: Bool { peer != nil }

    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// Where a message stands (messages.md 8): outbound queued → sent → delivered → read; inbound held
/// (above a gap) → received → read.
public enum MessageState: String, Codable, Sendable, CaseIterable {
    case queued, sent, delivered, read, held, received
}

public struct StoredMessage: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "message"
    public var id: Data
    public var conversationId: Int64
    public var author: Data
    public var seq: Int64
    public var lamport: Int64
    public var sentLamport: Int64
    public var text: String
    public var replyTo: Data?
    public var sentAtMs: Int64
    public var receivedAtMs: Int64
    public var state: MessageState
    public var retracted: Bool
    public var expiresAtMs: Int64?
    public var storedBytes: Int64

    /// What a message row costs its author's bound: its text plus a fixed overhead for the row.
    public static func cost(textBytes: Int) -> Int64 { Int64(textBytes) + 200 }

    public init(id: [UInt8], conversationId: Int64, author: [UInt8], seq: UInt64, lamport: UInt64, sentLamport: UInt64,
                text: String, replyTo: [UInt8]?, sentAtMs: Int64, receivedAtMs: Int64, state: MessageState,
                expiresAtMs: Int64? = nil) {
        self.id = Data(id)
        self.conversationId = conversationId
        self.author = Data(author)
        // Validated counters are at most 2^53 - 1: exact in Int64.
        self.seq = Int64(clamping: seq)
        self.lamport = Int64(clamping: lamport)
        self.sentLamport = Int64(clamping: sentLamport)
        self.text = text
        self.replyTo = replyTo.map { Data($0) }
        self.sentAtMs = sentAtMs
        self.receivedAtMs = receivedAtMs
        self.state = state
        self.retracted = false
        self.expiresAtMs = expiresAtMs
        self.storedBytes = Self.cost(textBytes: text.utf8.count)
    }

    /// Why this row cannot be used, or nil (the ranges of messages.md 4 and the table's meaning).
    public var invalidReason: String? {
        if id.count != 16 { return "message id is \(id.count) bytes" }
        if author.count != 32 { return "author is \(author.count) bytes" }
        if seq < 1 || UInt64(seq) > ChatLimits.maximumCounter { return "seq \(seq) out of range" }
        if lamport < 1 || sentLamport < 0 { return "lamport out of range" }
        if text.utf8.count > ChatLimits.textBytes { return "text of \(text.utf8.count) bytes" }
        if text.utf8.contains(0) { return "text holds U+0000" }
        if !retracted && text.isEmpty { return "empty text" }
        if let r = replyTo, r.count != 16 { return "reply_to is \(r.count) bytes" }
        return nil
    }
}

public struct StoredReaction: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "reaction"
    public var messageId: Data
    public var author: Data
    public var emoji: String
    public var atMs: Int64
}

public struct StoredCheer: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "cheer"
    public var challengeId: Data
    public var subject: Data
    public var author: Data
    public var emoji: String
    public var text: String
    public var atMs: Int64
    public init(challengeId: [UInt8], subject: [UInt8], author: [UInt8], emoji: String, text: String, atMs: Int64) {
        self.challengeId = Data(challengeId)
        self.subject = Data(subject)
        self.author = Data(author)
        self.emoji = emoji
        self.text = text
        self.atMs = atMs
    }
}

public struct StoredFileTransfer: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "fileTransfer"
    public enum Direction: String, Codable, Sendable { case incoming = "in", outgoing = "out" }
    public enum State: String, Codable, Sendable { case offered, receiving, verifying, complete, failed }
    public var fileId: Data
    public var conversationId: Int64
    public var direction: Direction
    public var peer: Data
    public var name: String
    public var size: Int64
    public var fileHash: Data
    public var chunkRoot: Data
    public var messageId: Data?
    public var state: State
    public var failure: String?
    public var bitmap: Data
    public var path: String?
    public var createdAtMs: Int64
    public var updatedAtMs: Int64
    public var deadlineMs: Int64

    public init(offer: FileOfferMessage, conversationId: Int64, direction: Direction, peer: [UInt8], path: String?,
                nowMs: Int64, deadlineMs: Int64) {
        fileId = Data(offer.fileID.bytes)
        self.conversationId = conversationId
        self.direction = direction
        self.peer = Data(peer)
        name = offer.name
        size = Int64(offer.size)   // at most 2^32
        fileHash = Data(offer.fileHash)
        chunkRoot = Data(offer.chunkRoot)
        messageId = offer.messageID.map { Data($0) }
        state = .offered
        failure = nil
        bitmap = Data(repeating: 0, count: (offer.chunkCount + 7) / 8)
        self.path = path
        createdAtMs = nowMs
        updatedAtMs = nowMs
        self.deadlineMs = deadlineMs
    }

    /// The offer back, or nil when the row breaks its ranges (it is then quarantined).
    public var offer: FileOfferMessage? {
        guard let id = FileID(bytes: Array(fileId)), FileName.isSafe(name), size >= 1, UInt64(size) <= ChatLimits.maximumFileBytes,
              fileHash.count == 32, chunkRoot.count == 32, messageId.map({ $0.count == 16 }) ?? true else { return nil }
        let o = FileOfferMessage(fileID: id, name: name, size: UInt64(size), fileHash: Array(fileHash), chunkRoot: Array(chunkRoot),
                                 messageID: messageId.map { Array($0) })
        return bitmap.count == (o.chunkCount + 7) / 8 ? o : nil
    }
}

/// A search result: the message, its conversation, and a snippet with the matches bracketed.
public struct MessageSearchHit: Sendable, Equatable {
    public let messageId: [UInt8]
    public let conversationId: Int64
    public let author: [UInt8]
    public let sentAtMs: Int64
    public let snippet: String
}

public enum MessageStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The outbound seq is not the conversation's next one.
    case seqOutOfOrder(expected: Int64, got: Int64)
    case noSuchConversation
    public var description: String {
        switch self {
        case .seqOutOfOrder(let e, let g): return "outbound seq \(g) is not the next one (\(e))"
        case .noSuchConversation: return "no such conversation"
        }
    }
}

/// What storing an inbound message did.
public enum InboundMessageResult: Equatable, Sendable {
    case stored
    /// Already stored (same id, or same author and seq): acknowledge, change nothing.
    case duplicate
    /// The author's stored bytes would pass `ChatLimits.storedBytesPerFriend`: not stored, not acknowledged.
    case overBound
}

// MARK: - reads

extension StoreReading {
    public func conversation(peer: [UInt8]) throws -> ConversationRow? {
        try read { db in try ConversationRow.byPeer(db, peer) }
    }

    public func conversation(challengeId: [UInt8]) throws -> ConversationRow? {
        try read { db in try ConversationRow.byChallenge(db, challengeId) }
    }

    public func conversation(id: Int64) throws -> ConversationRow? {
        try read { db in try ConversationRow.byID(db, id) }
    }

    public func message(_ id: [UInt8]) throws -> StoredMessage? {
        try read { db in try StoredMessage.byID(db, id) }
    }

    /// A conversation's messages in display order, newest last: the `limit` newest, or the `limit`
    /// newest before message `before` (exclusive). Uses the index `message_display`.
    public func messages(conversationId: Int64, before: [UInt8]? = nil, limit: Int = 50) throws -> [StoredMessage] {
        try read { db in
            var rows: [StoredMessage]
            if let before {
                guard let anchor = try StoredMessage.byID(db, before), anchor.conversationId == conversationId else { return [] }
                rows = try StoredMessage.fetchAll(try db.cachedStatement(sql: """
                    SELECT * FROM message WHERE conversationId = ? AND (lamport, author, seq) < (?, ?, ?)
                    ORDER BY lamport DESC, author DESC, seq DESC LIMIT ?
                    """), arguments: [conversationId, anchor.lamport, anchor.author, anchor.seq, max(0, limit)])
            } else {
                rows = try StoredMessage.fetchAll(try db.cachedStatement(sql: """
                    SELECT * FROM message WHERE conversationId = ? ORDER BY lamport DESC, author DESC, seq DESC LIMIT ?
                    """), arguments: [conversationId, max(0, limit)])
            }
            rows.reverse()
            return rows
        }
    }

    /// Full-text search over message text (FTS5), newest stored first, optionally within the direct
    /// conversation with `friend`. `text` is taken as words, each matched as a prefix (no FTS
    /// syntax reaches SQLite). The snippet brackets matches with `[` `]` and cuts with `…`.
    ///
    /// The index is walked in rowid order from the newest end and stops at `limit` hits, and only
    /// those get a snippet: the cost follows the hits shown, not every message that matches (a
    /// sort by `sentAtMs` had to fetch, snippet and sort them all). A row's rowid grows with the
    /// order messages were stored in, which for a conversation is the order they arrived.
    public func searchMessages(_ text: String, friend: [UInt8]? = nil, limit: Int = 50) throws -> [MessageSearchHit] {
        guard let pattern = FTS5Pattern(matchingAllPrefixesIn: text) else { return [] }
        return try read { db in
            var args: StatementArguments = [pattern]
            let sql: String
            if let friend {
                // Within one conversation: its rows, newest first, until `limit` of them match.
                guard let cid = try Int64.fetchOne(db, sql: "SELECT id FROM conversation WHERE peer = ?", arguments: [Data(friend)]) else {
                    return []
                }
                sql = """
                    SELECT m.id, m.conversationId, m.author, m.sentAtMs, snippet(messageFts, 0, '[', ']', '…', 12) AS snippet
                    FROM messageFts JOIN message m ON m.rowid = messageFts.rowid
                    WHERE messageFts MATCH ? AND m.conversationId = ?
                    ORDER BY messageFts.rowid DESC LIMIT ?
                    """
                args += [cid]
            } else {
                sql = """
                    SELECT m.id, m.conversationId, m.author, m.sentAtMs, f.snippet FROM (
                        SELECT rowid AS r, snippet(messageFts, 0, '[', ']', '…', 12) AS snippet
                        FROM messageFts WHERE messageFts MATCH ? ORDER BY rowid DESC LIMIT ?
                    ) f JOIN message m ON m.rowid = f.r ORDER BY f.r DESC
                    """
            }
            args += [max(0, limit)]
            return try Row.fetchAll(try db.cachedStatement(sql: sql), arguments: args).map { r in
                MessageSearchHit(messageId: Array(r["id"] as Data), conversationId: r["conversationId"],
                                 author: Array(r["author"] as Data), sentAtMs: r["sentAtMs"], snippet: r["snippet"])
            }
        }
    }

    /// `author`'s messages in the conversation with seqs in `seqs`, in seq order (a gap request's
    /// answer), at most 1 024.
    public func messages(conversationId: Int64, author: [UInt8], seqs: ClosedRange<UInt64>) throws -> [StoredMessage] {
        try read { db in
            try StoredMessage.fetchAll(db, sql: """
                SELECT * FROM message WHERE conversationId = ? AND author = ? AND seq BETWEEN ? AND ? ORDER BY seq LIMIT 1024
                """, arguments: [conversationId, Data(author), Int64(clamping: seqs.lowerBound), Int64(clamping: seqs.upperBound)])
        }
    }

    /// Messages whose id starts with these hex digits, at most `limit`.
    public func messages(idPrefix hex: String, limit: Int = 2) throws -> [StoredMessage] {
        guard !hex.isEmpty, hex.count <= 32, hex.allSatisfy(\.isHexDigit) else { return [] }
        return try read { db in
            try StoredMessage.fetchAll(db, sql: "SELECT * FROM message WHERE lower(hex(id)) LIKE ? LIMIT ?",
                                       arguments: [hex.lowercased() + "%", limit])
        }
    }

    /// Conversations and authors with messages held above a gap (at most `limit`): whose gaps to ask about.
    public func heldAuthors(limit: Int = 256) throws -> [(conversationId: Int64, author: [UInt8])] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT DISTINCT conversationId, author FROM message WHERE state = 'held' LIMIT ?", arguments: [limit])
                .map { ($0["conversationId"], Array($0["author"] as Data)) }
        }
    }

    /// Whether our frame `messageId` to `recipient` still waits in the outbox.
    public func hasOutboxFrame(_ messageId: [UInt8], to recipient: [UInt8]) throws -> Bool {
        try read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM outbox WHERE messageId = ? AND recipient = ?",
                              arguments: [Data(messageId), Data(recipient)]) ?? false
        }
    }

    /// Bytes stored for messages authored by `author` (the per-friend bound of messages.md 4.2).
    public func storedMessageBytes(author: [UInt8]) throws -> Int64 {
        try read { db in try NodeStore.storedBytes(db, author: author) }
    }

    public func reactions(messageId: [UInt8]) throws -> [StoredReaction] {
        try read { db in
            // Prepared once: `message list` asks it for every message it shows.
            try StoredReaction.fetchAll(try db.cachedStatement(sql: "SELECT * FROM reaction WHERE messageId = ? ORDER BY atMs, author"),
                                        arguments: [Data(messageId)])
        }
    }

    /// The reactions to each of `messageIds`, by message id, each in the order `reactions(messageId:)`
    /// gives: one query for a page of `message list`, not one per message shown (~21 k instructions
    /// each, messages.md 11.6).
    public func reactions(messageIds: [[UInt8]]) throws -> [Data: [StoredReaction]] {
        var out: [Data: [StoredReaction]] = [:]
        for start in stride(from: 0, to: messageIds.count, by: Self.idsPerQuery) {
            let ids = messageIds[start..<min(start + Self.idsPerQuery, messageIds.count)]
            let found = try read { db in
                try StoredReaction.fetchAll(db, sql: "SELECT * FROM reaction WHERE messageId IN (\(Self.placeholders(ids.count))) ORDER BY atMs, author",
                                            arguments: StatementArguments(ids.map { Data($0) }))
            }
            for r in found { out[r.messageId, default: []].append(r) }
        }
        return out
    }

    public func cheers(challengeId: [UInt8]) throws -> [StoredCheer] {
        try read { db in
            try StoredCheer.fetchAll(db, sql: "SELECT * FROM cheer WHERE challengeId = ? ORDER BY atMs, author", arguments: [Data(challengeId)])
        }
    }

    public func fileTransfer(_ fileId: [UInt8]) throws -> StoredFileTransfer? {
        try read { db in try StoredFileTransfer.fetchOne(db, key: Data(fileId)) }
    }

    /// Incoming transfers not finished, from `peer` (the pending-files bound).
    public func pendingIncomingFiles(peer: [UInt8]) throws -> Int {
        try read { db in
            try Int.fetchOne(db, sql: """
                SELECT COUNT(*) FROM fileTransfer WHERE peer = ? AND direction = 'in' AND state IN ('offered', 'receiving', 'verifying')
                """, arguments: [Data(peer)]) ?? 0
        }
    }

    /// Per author: what was released and the held messages, to restore a `ConversationOrder`
    /// after a start. Rows become `received` only by release, in seq order, so every seq up to the
    /// highest non-held row was released, whatever rows are gone since (expired, quarantined):
    /// `released` is that seq and `lastLamport` its display lamport; `held` are the held rows above it.
    public func inboundOrderState(conversationId: Int64) throws
        -> [(author: [UInt8], released: UInt64, lastLamport: UInt64, held: [(seq: UInt64, messageID: [UInt8], lamport: UInt64)])] {
        try read { db in
            let rows = try Row.fetchAll(db, sql: """
                SELECT author, seq, id, lamport, sentLamport, state FROM message WHERE conversationId = ? AND state IN ('held', 'received', 'read')
                ORDER BY author, seq
                """, arguments: [conversationId])
            var out: [[UInt8]: (released: UInt64, lastLamport: UInt64, held: [(seq: UInt64, messageID: [UInt8], lamport: UInt64)])] = [:]
            for r in rows {
                let author = Array(r["author"] as Data)
                let seq = UInt64(clamping: r["seq"] as Int64)
                var e = out[author] ?? (0, 0, [])
                if (r["state"] as String) != "held" {
                    if seq > e.released {
                        e.released = seq
                        e.lastLamport = UInt64(clamping: r["lamport"] as Int64)
                    }
                } else {
                    e.held.append((seq, Array(r["id"] as Data), UInt64(clamping: r["sentLamport"] as Int64)))
                }
                out[author] = e
            }
            return out.map { a in (a.key, a.value.released, a.value.lastLamport, a.value.held.filter { $0.seq > a.value.released }) }
                .sorted { $0.author.lexicographicallyPrecedes($1.author) }
        }
    }
}

extension NodeStore {
    static func storedBytes(_ db: Database, author: [UInt8]) throws -> Int64 {
        try Int64.fetchOne(try db.cachedStatement(sql: "SELECT COALESCE(SUM(storedBytes), 0) FROM message WHERE author = ?"),
                           arguments: [Data(author)]) ?? 0
    }
}

// MARK: - writes

extension StoreStep {
    /// The direct conversation with `peer`, created if needed.
    public func directConversation(peer: [UInt8], nowMs: Int64) throws -> ConversationRow {
        // Found (nearly always): a read, without the savepoint a write opens.
        if let c = try read({ db in try ConversationRow.byPeer(db, peer) }) { return c }
        return try write { db in
            if let c = try ConversationRow.byPeer(db, peer) { return c }
            var c = ConversationRow(id: nil, peer: Data(peer), challengeId: nil, disappearAfterMs: 0, settingsVersion: 0, settingsAuthor: nil,
                                    muted: false, readReceipts: false, ownSeq: 0, maxLamport: 0, readSentUpToSeq: 0,
                                    peerReadUpToSeq: 0, createdAtMs: nowMs)
            try c.insert(db)
            return c
        }
    }

    /// The thread of challenge `challengeId`, created if needed.
    public func threadConversation(challengeId: [UInt8], nowMs: Int64) throws -> ConversationRow {
        if let c = try read({ db in try ConversationRow.byChallenge(db, challengeId) }) { return c }
        return try write { db in
            if let c = try ConversationRow.byChallenge(db, challengeId) { return c }
            var c = ConversationRow(id: nil, peer: nil, challengeId: Data(challengeId), disappearAfterMs: 0, settingsVersion: 0,
                                    settingsAuthor: nil, muted: false, readReceipts: false, ownSeq: 0, maxLamport: 0,
                                    readSentUpToSeq: 0, peerReadUpToSeq: 0, createdAtMs: nowMs)
            try c.insert(db)
            return c
        }
    }

    /// An outbound message and the frame that carries it, in this one step (the message is durable
    /// in the outbox before the command returns). `message.seq` must be the conversation's next seq;
    /// the conversation's own seq and lamport advance with it.
    public func sendMessage(_ message: StoredMessage, frame: OutboxItem) throws {
        try write { db in
            // The seq is checked by the update itself (no read of the row first); the row is read
            // only to say what went wrong.
            try db.cachedStatement(sql: "UPDATE conversation SET ownSeq = ?, maxLamport = MAX(maxLamport, ?) WHERE id = ? AND ownSeq = ?")
                .execute(arguments: [message.seq, message.lamport, message.conversationId, message.seq.subtractingSaturated(1)])
            if db.changesCount == 0 {
                guard let c = try ConversationRow.byID(db, message.conversationId) else { throw MessageStoreError.noSuchConversation }
                throw MessageStoreError.seqOutOfOrder(expected: c.ownSeq + 1, got: message.seq)
            }
            try message.store(in: db)
            try frame.store(in: db)
        }
    }

    /// An inbound message, idempotently: a second copy (same id, or same author and seq) changes
    /// nothing. Refused past the author's stored-bytes bound (`Int64.max`: not checked). `handled` marks the frame in the same
    /// transaction (README 12.5).
    public func receiveMessage(_ message: StoredMessage, handled: HandledMark? = nil,
                               maximumBytesPerAuthor: Int64 = ChatLimits.storedBytesPerFriend) throws -> InboundMessageResult {
        // The row is inserted without first looking for a copy (two index seeks per message, and a
        // copy is rare): the table's keys refuse one, the savepoint rolls everything back, and only
        // then is the copy looked for (messages.md 11.6).
        do {
            return try write { db in
                if let handled { _ = try mark(db, handled) }
                try message.store(in: db)
                // No bound (the caller knows the author is well below it): no sum over the author's rows.
                // Summed with the new row in: the same test as the sum before it plus its cost.
                if maximumBytesPerAuthor != .max,
                   try NodeStore.storedBytes(db, author: Array(message.author)) > maximumBytesPerAuthor {
                    throw OverBound()
                }
                if message.state != .held {
                    try db.cachedStatement(sql: "UPDATE conversation SET maxLamport = MAX(maxLamport, ?) WHERE id = ?")
                        .execute(arguments: [message.lamport, message.conversationId])
                }
                return .stored
            }
        } catch is OverBound {
            return .overBound
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            let copy = try read { db in
                try Bool.fetchOne(try db.cachedStatement(sql: "SELECT 1 FROM message WHERE id = ?"), arguments: [message.id]) != nil
                    || Bool.fetchOne(try db.cachedStatement(sql: "SELECT 1 FROM message WHERE conversationId = ? AND author = ? AND seq = ?"),
                                     arguments: [message.conversationId, message.author, message.seq]) != nil
            }
            if copy { return .duplicate }
            throw error
        }
    }

    /// A received row over its author's stored-bytes bound: rolls back the write that stored it.
    private struct OverBound: Error {}

    /// Held messages the ordering machine released (a gap filled): shown from now on, with their
    /// display lamport.
    public func releaseHeld(_ released: [(id: [UInt8], displayLamport: Int64)]) throws {
        try write { db in
            let release = try db.cachedStatement(sql: "UPDATE message SET state = 'received', lamport = ? WHERE id = ? AND state = 'held'")
            let lamport = try db.cachedStatement(sql: """
                UPDATE conversation SET maxLamport = MAX(maxLamport, ?) WHERE id = (SELECT conversationId FROM message WHERE id = ?)
                """)
            for r in released {
                try release.execute(arguments: [r.displayLamport, Data(r.id)])
                try lamport.execute(arguments: [r.displayLamport, Data(r.id)])
            }
        }
    }

    /// The frames were written to a link (queued → sent).
    public func markMessagesSent(_ ids: [[UInt8]]) throws {
        try write(durable: false) { db in
            let sent = try db.cachedStatement(sql: "UPDATE message SET state = 'sent' WHERE id = ? AND state = 'queued'")
            for id in ids { try sent.execute(arguments: [Data(id)]) }
        }
    }

    /// The friend's node acknowledged the MESSAGE frame (after its commit): delivered. False when
    /// no outbound message in state queued or sent has this id.
    ///
    /// Soft state, like the removal of the acknowledged frame from the outbox it goes with (the
    /// same step): lost in a power cut, both are lost together, the frame is sent again, the friend
    /// answers it again (a duplicate is acknowledged) and the message becomes delivered then. So
    /// an ACK batch commits without a sync of its own.
    @discardableResult
    public func markMessageDelivered(_ id: [UInt8]) throws -> Bool {
        try writeOne(durable: false) { db in
            try db.cachedStatement(sql: "UPDATE message SET state = 'delivered' WHERE id = ? AND state IN ('queued', 'sent')")
                .execute(arguments: [Data(id)])
            return db.changesCount > 0
        }
    }

    /// A READ from the friend (shown only under the reciprocal rule): our messages up to `seq` in the
    /// direct conversation are read. Returns the ids that changed.
    public func markReadByPeer(conversationId: Int64, ownAuthor: [UInt8], upToSeq: Int64) throws -> [[UInt8]] {
        try write { db in
            let ids = try Data.fetchAll(db, sql: """
                SELECT id FROM message WHERE conversationId = ? AND author = ? AND seq <= ? AND state IN ('queued', 'sent', 'delivered')
                """, arguments: [conversationId, Data(ownAuthor), upToSeq])
            try db.execute(sql: """
                UPDATE message SET state = 'read' WHERE conversationId = ? AND author = ? AND seq <= ? AND state IN ('queued', 'sent', 'delivered')
                """, arguments: [conversationId, Data(ownAuthor), upToSeq])
            try db.execute(sql: "UPDATE conversation SET peerReadUpToSeq = MAX(peerReadUpToSeq, ?) WHERE id = ?",
                           arguments: [upToSeq, conversationId])
            return ids.map { Array($0) }
        }
    }

    /// The user was shown the friend's messages up to `upToSeq`: they are read here; `frame` (a
    /// READ, when the reciprocal rule allows one) is queued with it.
    public func markReadLocally(conversationId: Int64, peer: [UInt8], upToSeq: Int64, frame: OutboxItem?) throws {
        try write { db in
            // Prepared once: every `message list` of a conversation runs it.
            try db.cachedStatement(sql: "UPDATE message SET state = 'read' WHERE conversationId = ? AND author = ? AND seq <= ? AND state = 'received'")
                .execute(arguments: [conversationId, Data(peer), upToSeq])
            if let frame {
                try frame.insert(db)
                try db.execute(sql: "UPDATE conversation SET readSentUpToSeq = MAX(readSentUpToSeq, ?) WHERE id = ?",
                               arguments: [upToSeq, conversationId])
            }
        }
    }

    /// Retracts message `id` if `author` wrote it: its text is emptied (and leaves the search index),
    /// its reactions go. `frame` (our RETRACT) is queued with it. False when there is no such message
    /// of that author.
    @discardableResult
    public func retractMessage(_ id: [UInt8], author: [UInt8], frame: OutboxItem? = nil) throws -> Bool {
        try write { db in
            try db.execute(sql: "UPDATE message SET text = '', retracted = 1, storedBytes = ? WHERE id = ? AND author = ?",
                           arguments: [StoredMessage.cost(textBytes: 0), Data(id), Data(author)])
            guard db.changesCount > 0 else { return false }
            try db.execute(sql: "DELETE FROM reaction WHERE messageId = ?", arguments: [Data(id)])
            if let frame { try frame.insert(db) }
            return true
        }
    }

    /// Deletes the messages whose disappearing timer ran out by `nowMs` (their reactions go with
    /// them, and they leave the search index). Returns their ids.
    public func expireMessages(nowMs: Int64) throws -> [[UInt8]] {
        try write { db in
            let ids = try Data.fetchAll(db, sql: "SELECT id FROM message WHERE expiresAtMs IS NOT NULL AND expiresAtMs <= ?", arguments: [nowMs])
            try db.execute(sql: "DELETE FROM message WHERE expiresAtMs IS NOT NULL AND expiresAtMs <= ?", arguments: [nowMs])
            return ids.map { Array($0) }
        }
    }

    /// A reaction by `author` on message `messageId` (an empty emoji removes it). False when the
    /// message is not stored here.
    @discardableResult
    public func setReaction(messageId: [UInt8], author: [UInt8], emoji: String, atMs: Int64, frame: OutboxItem? = nil) throws -> Bool {
        try write { db in
            guard try StoredMessage.exists(db, key: Data(messageId)) else { return false }
            if emoji.isEmpty {
                try db.execute(sql: "DELETE FROM reaction WHERE messageId = ? AND author = ?", arguments: [Data(messageId), Data(author)])
            } else {
                try StoredReaction(messageId: Data(messageId), author: Data(author), emoji: emoji, atMs: atMs).upsert(db)
            }
            if let frame { try frame.insert(db) }
            return true
        }
    }

    public func storeCheer(_ cheer: StoredCheer, frame: OutboxItem? = nil) throws {
        try write { db in
            try cheer.upsert(db)
            if let frame { try frame.insert(db) }
        }
    }

    /// The conversation's disappearing timer, last writer wins (ConversationSettingsMessage.wins).
    /// False when an equal or newer setting is already stored.
    @discardableResult
    public func setDisappearingTimer(conversationId: Int64, afterMs: Int64, version: Int64, author: [UInt8],
                                     frame: OutboxItem? = nil) throws -> Bool {
        try write { db in
            guard var c = try ConversationRow.fetchOne(db, key: conversationId) else { throw MessageStoreError.noSuchConversation }
            let current: (version: UInt64, author: [UInt8])? = c.settingsAuthor.map { (UInt64(clamping: c.settingsVersion), Array($0)) }
            guard ConversationSettingsMessage.wins(version: UInt64(clamping: version), author: author, over: current) else { return false }
            c.disappearAfterMs = afterMs
            c.settingsVersion = version
            c.settingsAuthor = Data(author)
            try c.update(db)
            if let frame { try frame.insert(db) }
            return true
        }
    }

    public func setMuted(conversationId: Int64, _ muted: Bool) throws {
        try write { db in try db.execute(sql: "UPDATE conversation SET muted = ? WHERE id = ?", arguments: [muted, conversationId]) }
    }

    /// Read receipts for the direct conversation with `peer` (created if needed).
    public func setReadReceipts(peer: [UInt8], _ on: Bool, nowMs: Int64) throws {
        let c = try directConversation(peer: peer, nowMs: nowMs)
        try write { db in try db.execute(sql: "UPDATE conversation SET readReceipts = ? WHERE id = ?", arguments: [on, c.id]) }
    }

    // MARK: files

    /// A file offer, received or made; `frame` (our FILE_OFFER) is queued with it.
    public func storeFileOffer(_ transfer: StoredFileTransfer, frame: OutboxItem? = nil) throws -> Bool {
        try write { db in
            guard !(try StoredFileTransfer.exists(db, key: transfer.fileId)) else { return false }
            try transfer.insert(db)
            if let frame { try frame.insert(db) }
            return true
        }
    }

    /// The transfer's progress: its state, bitmap (written only after the chunks' bytes are) and path.
    public func updateFileTransfer(_ fileId: [UInt8], state: StoredFileTransfer.State, bitmap: [UInt8], failure: String? = nil,
                                   path: String? = nil, nowMs: Int64) throws {
        try write { db in
            try db.execute(sql: """
                UPDATE fileTransfer SET state = ?, bitmap = ?, failure = ?, path = COALESCE(?, path), updatedAtMs = ? WHERE fileId = ?
                """, arguments: [state.rawValue, Data(bitmap), failure, path, nowMs, Data(fileId)])
        }
    }

    // MARK: validation at start

    /// Moves message and file-transfer rows that break their ranges to `quarantine` (kind `message`,
    /// `fileTransfer`), in this step; returns how many.
    public func quarantineInvalidMessageRows(nowMs: Int64) throws -> Int {
        try write { db in
            var moved = 0
            let cursor = try Row.fetchAll(db, sql: "SELECT rowid AS rid, * FROM message")
            for row in cursor {
                let reason: String?
                do {
                    reason = try StoredMessage(row: row).invalidReason
                } catch {
                    reason = "message row does not decode: \(error)"
                }
                guard let reason else { continue }
                let key: Data = (row["id"] as Data?) ?? Data()
                try db.execute(sql: "INSERT INTO quarantine(kind, rowKey, data, reason, atMs) VALUES ('message', ?, ?, ?, ?)",
                               arguments: [key, Data(String(describing: row).utf8), reason, nowMs])
                try db.execute(sql: "DELETE FROM message WHERE rowid = ?", arguments: [row["rid"] as Int64])
                moved += 1
            }
            for t in try StoredFileTransfer.fetchAll(db) where t.offer == nil {
                try db.execute(sql: "INSERT INTO quarantine(kind, rowKey, data, reason, atMs) VALUES ('fileTransfer', ?, ?, ?, ?)",
                               arguments: [t.fileId, Data(t.name.utf8), "file transfer breaks its ranges", nowMs])
                try t.delete(db)
                moved += 1
            }
            return moved
        }
    }
}
