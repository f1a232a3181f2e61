import Foundation
import GRDB
import TandemProtocol

// Intent-named writes: each is one transaction; a state change and the frames it must send
// commit together.

// MARK: - Settings

/// Single scalar settings only (`display_name`, `advertised_port`, `record_version`, `discoverable`,
/// `vault.autoLockMs`): state with more than one value gets a table of its own (FocusState.swift,
/// BackupState.swift, VaultState.swift), never JSON under a key prefix.
extension StoreReading {
    public func setting(_ key: String) throws -> String? {
        try read { db in try String.fetchOne(try db.cachedStatement(sql: "SELECT value FROM setting WHERE key = ?"), arguments: [key]) }
    }

}
extension StoreStep {
    public func setSetting(_ key: String, _ value: String) throws {
        try write { db in
            try db.execute(sql: "INSERT INTO setting(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                           arguments: [key, value])
        }
    }

    public func removeSetting(_ key: String) throws {
        try write { db in try db.execute(sql: "DELETE FROM setting WHERE key = ?", arguments: [key]) }
    }
}

// MARK: - Contacts and friends

extension NodeStore {
    /// Read for nearly every frame: one cached statement (the query interface compiles it anew each time).
    /// A contact inside a transaction, by a cached statement.
    static func contact(_ db: Database, _ key: [UInt8]) throws -> Contact? {
        try Contact.fetchOne(try db.cachedStatement(sql: "SELECT * FROM contact WHERE publicKey = ?"), arguments: [Data(key)])
    }

    /// Removes every frame waiting for `key` (its relationship changed).
    static func clearOutbox(_ db: Database, for key: [UInt8]) throws {
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE recipient = ?").execute(arguments: [Data(key)])
    }

    public enum IncomingRequest: Equatable, Sendable {
        /// A new pending request (`dropped` is the oldest pending request removed to stay under the cap).
        case stored(dropped: [UInt8]?)
        /// The same peer asked again; the request was refreshed.
        case refreshed
        /// We had asked them too: both asked, so they are friends now.
        case mutual
        case alreadyFriends
        case blocked
        /// Handled before (a redelivery): nothing changed.
        case duplicate
    }

    /// Deletes everything kept about a key with no relationship left.
    static func forget(_ db: Database, _ key: [UInt8]) throws {
        try Contact.delete(Data(key), in: db)
        try db.cachedStatement(sql: "DELETE FROM contactNickname WHERE publicKey = ?").execute(arguments: [Data(key)])
        try db.cachedStatement(sql: "DELETE FROM peerRelay WHERE publicKey = ?").execute(arguments: [Data(key)])
    }
}
extension StoreReading {
    public func contact(_ key: [UInt8]) throws -> Contact? {
        try read { db in
            try Contact.fetchOne(try db.cachedStatement(sql: "SELECT * FROM contact WHERE publicKey = ?"), arguments: [Data(key)])
        }
    }

    public func contacts(_ relationships: [Relationship]) throws -> [Contact] {
        // A statement prepared once per number of relationships asked for (the query builder
        // writes its SQL on every call, and friends' lists are read on most delivery rounds).
        let marks = repeatElement("?", count: relationships.count).joined(separator: ", ")
        return try read { db in
            try Contact.fetchAll(try db.cachedStatement(sql: "SELECT * FROM contact WHERE relationship IN (\(marks)) ORDER BY displayName, publicKey"),
                                 arguments: StatementArguments(relationships.map(\.rawValue)))
        }
    }

    /// The friends' keys, in the order of `contacts` (their keys only: no rows to decode).
    public func friendKeys() throws -> [[UInt8]] {
        try read { db in
            try Data.fetchAll(try db.cachedStatement(sql: "SELECT publicKey FROM contact WHERE relationship = ? ORDER BY displayName, publicKey"),
                              arguments: [Relationship.friend.rawValue]).map { Array($0) }
        }
    }

    fileprivate func receiveFriendRequest(_ db: Database, from key: [UInt8], displayName: String, message: String, record: [UInt8],
                                      recordVersion: Int64, reply: OutboxItem?, nowMs: Int64) throws -> NodeStore.IncomingRequest {
        do {
            var c = try NodeStore.contact(db, key) ?? Contact(publicKey: key, relationship: .none, nowMs: nowMs)
            let result: NodeStore.IncomingRequest
            switch c.relationship {
            case .blocked:
                return .blocked
            case .friend:
                // They lost our friendship (reinstalled?): answer again so both agree.
                if let reply { try reply.store(in: db, onConflict: .replace) }
                return .alreadyFriends
            case .requested:
                c.relationship = .friend
                c.friendSinceMs = nowMs
                try NodeStore.clearOutbox(db, for: key)
                if let reply { try reply.store(in: db, onConflict: .replace) }
                result = .mutual
            case .pending:
                result = .refreshed
            case .none:
                c.relationship = .pending
                result = .stored(dropped: nil)
            }
            c.displayName = displayName
            c.requestMessage = message
            c.requestedAtMs = nowMs
            c.lastSeenMs = nowMs
            c.updatedAtMs = nowMs
            if recordVersion >= c.recordVersion {
                c.record = Data(record)
                c.recordVersion = recordVersion
            }
            try c.store(in: db)
            if case .stored = result {
                let pending = try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM contact WHERE relationship = ?"),
                                               arguments: [Relationship.pending.rawValue]) ?? 0
                if pending > limits.maximumPendingRequests {
                    if let oldest = try Contact.filter(Contact.Columns.relationship == Relationship.pending.rawValue)
                        .order(Contact.Columns.requestedAtMs.asc).fetchOne(db), oldest.publicKey != Data(key) {
                        try Contact.delete(oldest.publicKey, in: db)
                        return .stored(dropped: oldest.key)
                    }
                }
            }
            return result
        }
    }
}
extension StoreStep {
    /// We ask `key` to be friends: the contact becomes `requested` and the request frame is queued.
    /// If they already asked us, the caller should accept instead.
    public func requestFriend(_ key: [UInt8], message: String?, frame: OutboxItem, nowMs: Int64) throws -> Contact {
        try write { db in
            var c = try NodeStore.contact(db, key) ?? Contact(publicKey: key, relationship: .none, nowMs: nowMs)
            switch c.relationship {
            case .friend: throw FriendStoreError.alreadyFriends
            case .blocked: throw FriendStoreError.blocked
            case .none, .requested, .pending: break
            }
            // Replace an earlier unanswered request to the same peer: one request in flight.
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE recipient = ? AND type = ?").execute(arguments: [Data(key), frame.type])
            c.relationship = .requested
            c.requestMessage = message
            c.requestedAtMs = nowMs
            c.updatedAtMs = nowMs
            try c.store(in: db)
            try frame.store(in: db)
            return c
        }
    }

    /// A friend request arrived. Caps the pending requests; the oldest pending is dropped past it.
    /// `reply` is queued when the request is mutual (our acceptance) or comes from a friend (we resend).
    public func receiveFriendRequest(from key: [UInt8], displayName: String, message: String, record: [UInt8],
                                     recordVersion: Int64, reply: OutboxItem?, nowMs: Int64, handled: HandledMark? = nil,
                                     events: (NodeStore.IncomingRequest) -> [PendingEvent] = { _ in [] }) throws -> NodeStore.IncomingRequest {
        let result = try write { db -> NodeStore.IncomingRequest in
            if let handled, try !mark(db, handled) { return .duplicate }
            let result = try receiveFriendRequest(db, from: key, displayName: displayName, message: message, record: record,
                                                  recordVersion: recordVersion, reply: reply, nowMs: nowMs)
            try insertEvents(events(result), db)
            return result
        }
        return result
    }

    /// We accept their pending request; `frame` (our acceptance) is queued.
    public func acceptFriend(_ key: [UInt8], frame: OutboxItem, nowMs: Int64) throws -> Contact {
        try write { db in
            guard var c = try NodeStore.contact(db, key) else { throw FriendStoreError.noPendingRequest }
            switch c.relationship {
            case .pending: break
            case .friend: throw FriendStoreError.alreadyFriends
            case .blocked: throw FriendStoreError.blocked
            case .none, .requested: throw FriendStoreError.noPendingRequest
            }
            c.relationship = .friend
            c.friendSinceMs = nowMs
            c.updatedAtMs = nowMs
            try c.store(in: db)
            try frame.store(in: db)
            return c
        }
    }

    /// Their acceptance arrived. True when it made us friends (we had asked); `events` are stored then.
    public func receiveFriendAccept(from key: [UInt8], displayName: String, record: [UInt8], recordVersion: Int64,
                                    nowMs: Int64, handled: HandledMark? = nil, events: [PendingEvent] = []) throws -> Bool {
        try write { db in
            if let handled, try !mark(db, handled) { return false }
            guard var c = try NodeStore.contact(db, key) else { return false }
            switch c.relationship {
            case .requested: break
            case .friend, .pending, .none, .blocked: return false
            }
            c.relationship = .friend
            c.friendSinceMs = nowMs
            c.displayName = displayName
            c.lastSeenMs = nowMs
            c.updatedAtMs = nowMs
            if recordVersion >= c.recordVersion {
                c.record = Data(record)
                c.recordVersion = recordVersion
            }
            try c.store(in: db)
            // Our request is answered: stop retrying it.
            try NodeStore.clearOutbox(db, for: key)
            try insertEvents(events, db)
            return true
        }
    }

    /// We decline their pending request; `frame` tells them.
    public func declineFriend(_ key: [UInt8], frame: OutboxItem, nowMs: Int64) throws {
        try write { db in
            guard var c = try NodeStore.contact(db, key), c.relationship == .pending else {
                throw FriendStoreError.noPendingRequest
            }
            c.relationship = .none
            c.requestMessage = nil
            c.updatedAtMs = nowMs
            try c.store(in: db)
            try frame.store(in: db)
        }
    }

    /// We end a friendship (or withdraw our request); `frame` tells them.
    public func removeFriend(_ key: [UInt8], frame: OutboxItem, nowMs: Int64) throws {
        try write { db in
            guard var c = try NodeStore.contact(db, key) else { throw FriendStoreError.notAFriend }
            switch c.relationship {
            case .friend, .requested: break
            case .pending, .none, .blocked: throw FriendStoreError.notAFriend
            }
            try NodeStore.clearOutbox(db, for: key)
            c.relationship = .none
            c.friendSinceMs = nil
            c.updatedAtMs = nowMs
            try c.store(in: db)
            try frame.store(in: db)
        }
    }

    /// They declined our request or removed us. Returns the relationship it ended, if any.
    /// Nothing is left of a contact with no relationship: its row, record, addresses and relay go
    /// (a stranger's request followed by a removal leaves no trace).
    public func receiveFarewell(from key: [UInt8], nowMs: Int64, handled: HandledMark? = nil,
                                events: (Relationship) -> [PendingEvent] = { _ in [] }) throws -> Relationship? {
        try write { db in
            if let handled, try !mark(db, handled) { return nil }
            guard let c = try NodeStore.contact(db, key) else { return nil }
            let before = c.relationship
            switch before {
            case .friend, .requested, .pending: break
            case .none, .blocked: return nil
            }
            try NodeStore.clearOutbox(db, for: key)
            try NodeStore.forget(db, key)
            try insertEvents(events(before), db)
            return before
        }
    }

    public func block(_ key: [UInt8], nowMs: Int64) throws {
        try write { db in
            var c = try NodeStore.contact(db, key) ?? Contact(publicKey: key, relationship: .none, nowMs: nowMs)
            c.relationship = .blocked
            c.friendSinceMs = nil
            c.requestMessage = nil
            c.updatedAtMs = nowMs
            try c.store(in: db)
            try NodeStore.clearOutbox(db, for: key)
        }
    }

    /// Lifts a block; false when the key was not blocked.
    public func unblock(_ key: [UInt8], nowMs: Int64) throws -> Bool {
        try write { db in
            guard var c = try NodeStore.contact(db, key), c.relationship == .blocked else { return false }
            c.relationship = .none
            c.updatedAtMs = nowMs
            try c.store(in: db)
            return true
        }
    }

    /// A friend's newer contact record (display name and version) replaces the stored one.
    public func updateContactRecord(_ key: [UInt8], displayName: String, record: [UInt8], version: Int64, nowMs: Int64,
                                    handled: HandledMark? = nil, events: [PendingEvent] = []) throws -> Bool {
        try write { db in
            if let handled, try !mark(db, handled) { return false }
            guard var c = try NodeStore.contact(db, key), c.relationship == .friend, version > c.recordVersion else {
                return false
            }
            c.displayName = displayName
            c.record = Data(record)
            c.recordVersion = version
            c.updatedAtMs = nowMs
            try c.store(in: db)
            try insertEvents(events, db)
            return true
        }
    }

    public func setPresence(_ key: [UInt8], presence: String?, lastSeenMs: Int64) throws {
        try write(durable: false) { db in
            try db.cachedStatement(sql: "UPDATE contact SET presence = ?, lastSeenMs = ? WHERE publicKey = ?")
                .execute(arguments: [presence, lastSeenMs, Data(key)])
        }
    }
}

// MARK: - Addresses and LAN sightings

extension StoreReading {
    public func addresses(_ key: [UInt8]) throws -> [KnownAddress] {
        try read { db in
            try KnownAddress.fetchAll(try db.cachedStatement(sql: "SELECT * FROM address WHERE publicKey = ? ORDER BY lastSeenMs DESC"),
                                      arguments: [Data(key)])
        }
    }

    public func sightings(since: Int64 = 0) throws -> [Sighting] {
        try read { db in try Sighting.filter(Column("lastSeenMs") >= since).order(Column("lastSeenMs").desc).fetchAll(db) }
    }
}
extension StoreStep {
    /// Remembers where a peer was reached or seen; keeps the most recent few per peer.
    public func rememberAddress(_ key: [UInt8], host: String, port: Int, source: String, nowMs: Int64) throws {
        try write(durable: false) { db in
            // On every frame that carries a contact record, so two statements, both prepared once.
            try db.cachedStatement(sql: """
                INSERT INTO address (publicKey, host, port, source, lastSeenMs) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (publicKey, host, port) DO UPDATE SET source = excluded.source, lastSeenMs = excluded.lastSeenMs
                """).execute(arguments: [Data(key), host, port, source, nowMs])
            // The peer's addresses beyond the newest `maximumAddressesPerPeer` go (counted first:
            // the pruning statement sorts, and is rarely needed).
            let count = try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM address WHERE publicKey = ?"),
                                         arguments: [Data(key)]) ?? 0
            guard count > limits.maximumAddressesPerPeer else { return }
            try db.cachedStatement(sql: """
                DELETE FROM address WHERE publicKey = ?1 AND (host, port) NOT IN
                    (SELECT host, port FROM address WHERE publicKey = ?1 ORDER BY lastSeenMs DESC LIMIT ?2)
                """).execute(arguments: [Data(key), limits.maximumAddressesPerPeer])
        }
    }

    public func recordSighting(_ s: Sighting) throws {
        try write(durable: false) { db in
            try s.save(db)
            let count = try Sighting.fetchCount(db)
            if count > limits.maximumSightings {
                try db.execute(sql: "DELETE FROM sighting WHERE publicKey IN (SELECT publicKey FROM sighting ORDER BY lastSeenMs ASC LIMIT ?)",
                               arguments: [count - limits.maximumSightings])
            }
        }
    }
}

// MARK: - Outbox

extension StoreReading {
    /// Recipients with frames due now.
    ///
    /// One seek per recipient with frames waiting (through `outbox_recipient_due`, migration
    /// v9-message-burst), not a walk over every due frame: in a burst thousands of frames wait for
    /// room in a friend's window, and the delivery loop asks this several times a second.
    public func dueRecipients(nowMs: Int64, limit: Int = 100) throws -> [[UInt8]] {
        try read { db in
            try Data.fetchAll(try db.cachedStatement(sql: """
                WITH RECURSIVE waiting(key) AS (
                    SELECT (SELECT MIN(recipient) FROM outbox)
                    UNION ALL
                    SELECT (SELECT MIN(recipient) FROM outbox WHERE recipient > waiting.key) FROM waiting WHERE waiting.key IS NOT NULL
                )
                SELECT key FROM waiting
                WHERE key IS NOT NULL AND EXISTS (SELECT 1 FROM outbox WHERE recipient = waiting.key AND nextAttemptMs <= ?)
                LIMIT ?
                """), arguments: [nowMs, max(0, limit)]).map { Array($0) }
        }
    }

    /// Every waiting frame for a recipient, oldest first.
    public func outbox(for key: [UInt8]) throws -> [OutboxItem] {
        try read { db in
            try OutboxItem.fetchAll(try db.cachedStatement(sql: "SELECT * FROM outbox WHERE recipient = ? ORDER BY createdAtMs"),
                                    arguments: [Data(key)])
        }
    }

    /// The `limit` oldest waiting frames for a recipient (the outbox writes within a window: it
    /// needs the frames in it and the next few, not a burst's thousands at every write).
    public func outbox(for key: [UInt8], limit: Int) throws -> [OutboxItem] {
        try read { db in
            try OutboxItem.fetchAll(try db.cachedStatement(sql: "SELECT * FROM outbox WHERE recipient = ? ORDER BY createdAtMs LIMIT ?"),
                                    arguments: [Data(key), max(0, limit)])
        }
    }

    /// The `limit` oldest waiting frames for a recipient without their bytes: what the outbox needs
    /// to choose the frames to write (it reads the bytes of those only, `outboxFrame`). A burst's
    /// write reads the window and the frames behind it, of which a quarter or less is written.
    public func outboxHeads(for key: [UInt8], limit: Int) throws -> [OutboxHead] {
        try read { db in
            try Row.fetchAll(try db.cachedStatement(sql: """
                SELECT messageId, type, nextAttemptMs, length(frame) FROM outbox WHERE recipient = ? ORDER BY createdAtMs LIMIT ?
                """), arguments: [Data(key), max(0, limit)]).map { row in
                OutboxHead(messageId: Array(try row.decode(Data.self, atIndex: 0)), type: try row.decode(Int.self, atIndex: 1),
                           nextAttemptMs: try row.decode(Int64.self, atIndex: 2), frameBytes: try row.decode(Int.self, atIndex: 3))
            }
        }
    }

    /// The signed frame `messageId` waiting for `key`, if it still waits.
    public func outboxFrame(_ messageId: [UInt8], to key: [UInt8]) throws -> [UInt8]? {
        try read { db in
            try Data.fetchOne(try db.cachedStatement(sql: "SELECT frame FROM outbox WHERE messageId = ? AND recipient = ?"),
                              arguments: [Data(messageId), Data(key)]).map { Array($0) }
        }
    }

    /// Whether any frame waits for `key` (one indexed read).
    public func hasOutbox(for key: [UInt8]) throws -> Bool {
        try read { db in
            try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS(SELECT 1 FROM outbox WHERE recipient = ?)"),
                              arguments: [Data(key)]) ?? false
        }
    }

    public func outboxCount() throws -> Int {
        try read { db in try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM outbox")) ?? 0 }
    }
}
extension StoreStep {
    public func enqueue(_ item: OutboxItem) throws {
        try write { db in try item.store(in: db, onConflict: .ignore) }
    }

    /// Backs off a recipient's frames after a failed attempt: 1 s, 2 s, 4 s … capped at `maximumDelayMs`.
    /// `only`: just these frames (by message id), those an attempt actually sent; a frame queued
    /// meanwhile stays due.
    public func deferOutbox(for key: [UInt8], error: String, nowMs: Int64, maximumDelayMs: Int64 = 60_000,
                            only messageIds: Set<[UInt8]>? = nil) throws {
        // When to try again is soft state: lost in a power cut, frames are simply due sooner.
        try write(durable: false) { db in
            // One statement per frame, computed in place (no read and decode of each row first): the
            // outbox defers a window's frames at every write of a burst. The delay is the one the
            // attempt being counted earns: 1 s << (attempts before it), at most `maximumDelayMs`.
            // `attempts` is this node's own count (at most one per write): it cannot near overflow.
            let backoff = "nextAttemptMs = ?1 + MIN(?2, 1000 << MIN(MAX(attempts, 0), 20)), attempts = attempts + 1, lastError = ?3"
            let delayCap = max(0, maximumDelayMs)
            if let messageIds {
                // Only some frames (those just written): one by one, not the recipient's whole queue.
                let one = try db.cachedStatement(sql: "UPDATE outbox SET \(backoff) WHERE messageId = ?4 AND recipient = ?5")
                for id in messageIds { try one.execute(arguments: [nowMs, delayCap, error, Data(id), Data(key)]) }
            } else {
                try db.cachedStatement(sql: "UPDATE outbox SET \(backoff) WHERE recipient = ?4")
                    .execute(arguments: [nowMs, delayCap, error, Data(key)])
            }
        }
    }

    /// Frames just queued for `key` that are about to be written on a link that is up: scheduled
    /// as a first write would leave them (one attempt, the next round in `delayMs` unless an ACK
    /// removes them first), inside the transaction that queues them, so writing them after the
    /// commit costs no commit of its own.
    /// Returns the frames it scheduled (those to write now), oldest first: the caller need not
    /// read back everything that waits for `key` (a long queue would make each send cost its length).
    @discardableResult
    public func scheduleFirstWrite(for key: [UInt8], nowMs: Int64, delayMs: Int64 = 1000) throws -> [OutboxItem] {
        try write(durable: false) { db in
            let due = try OutboxItem.fetchAll(try db.cachedStatement(sql: """
                SELECT * FROM outbox INDEXED BY outbox_unsent WHERE recipient = ? AND attempts = 0 AND nextAttemptMs <= ?
                ORDER BY createdAtMs
                """), arguments: [Data(key), nowMs])
            guard !due.isEmpty else { return [] }
            // Through the partial index of frames never written (v9-message-send-speed): the frames
            // just queued, not every frame that waits for an ACK (a burst's thousands).
            try db.cachedStatement(sql: """
                UPDATE outbox INDEXED BY outbox_unsent SET attempts = 1, nextAttemptMs = ?, lastError = 'awaiting acknowledgement'
                WHERE recipient = ? AND attempts = 0 AND nextAttemptMs <= ?
                """).execute(arguments: [nowMs.addingSaturated(delayMs), Data(key), nowMs])
            return due.map { item in
                var scheduled = item
                scheduled.attempts = 1
                scheduled.nextAttemptMs = nowMs.addingSaturated(delayMs)
                scheduled.lastError = "awaiting acknowledgement"
                return scheduled
            }
        }
    }

    /// Makes a recipient's frames due now (the peer just appeared).
    public func expediteOutbox(for key: [UInt8], nowMs: Int64) throws {
        try write(durable: false) { db in
            try db.cachedStatement(sql: "UPDATE outbox SET nextAttemptMs = ? WHERE recipient = ? AND nextAttemptMs > ?")
                .execute(arguments: [nowMs, Data(key), nowMs])
        }
    }

    /// Drops every outbox row of frame `messageId`, whoever it waits for (an unreadable frame). True
    /// when one was still waiting. An acknowledgement removes only its sender's row: `acknowledge(_:from:)`.
    @discardableResult
    public func acknowledge(_ messageId: [UInt8]) throws -> Bool {
        try write { db in
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE messageId = ?").execute(arguments: [Data(messageId)])
            return db.changesCount > 0
        }
    }

    /// `from` acknowledged a frame: only a frame addressed to it leaves the outbox.
    @discardableResult
    public func acknowledge(_ messageId: [UInt8], from recipient: [UInt8]) throws -> Bool {
        try write(durable: false) { db in
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE messageId = ? AND recipient = ?")
                .execute(arguments: [Data(messageId), Data(recipient)])
            return db.changesCount > 0
        }
    }

    /// `from` acknowledged a frame: like `acknowledge(_:from:)`, and returns the acknowledged
    /// frame's type (nil when no frame of ours to `from` had this id), so the flow that sent it can
    /// record the delivery in the same step.
    public func acknowledgeReturningType(_ messageId: [UInt8], from recipient: [UInt8]) throws -> Int? {
        // One statement (no savepoint), finding and removing the row in one seek.
        try writeOne(durable: false) { db in
            try Int.fetchOne(try db.cachedStatement(sql: "DELETE FROM outbox WHERE messageId = ? AND recipient = ? RETURNING type"),
                             arguments: [Data(messageId), Data(recipient)])
        }
    }

    /// Gives up frames past their expiry. Returns (recipient, message id, type) of each one dropped.
    public func expireOutbox(nowMs: Int64) throws -> [(recipient: [UInt8], messageId: [UInt8], type: Int)] {
        try write { db in
            // Through the partial index `outbox_expiry` (v9-message-cpu): frames to friends never expire and
            // are not in it, so a burst's thousands of waiting frames are not scanned once a second.
            let gone = try OutboxItem.fetchAll(try db.cachedStatement(sql: """
                SELECT * FROM outbox INDEXED BY outbox_expiry WHERE expiresAtMs IS NOT NULL AND expiresAtMs <= ?
                """), arguments: [nowMs])
            for item in gone { try item.delete(db) }
            return gone.map { (Array($0.recipient), Array($0.messageId), $0.type) }
        }
    }
}

// MARK: - Exactly-once handling of incoming frames

extension StoreReading {
    /// Whether a frame with this id was handled (within the window).
    public func wasHandled(_ messageId: [UInt8]) throws -> Bool {
        try read { db in
            try Bool.fetchOne(try db.cachedStatement(sql: "SELECT 1 FROM seenMessage WHERE messageId = ?"), arguments: [Data(messageId)]) ?? false
        }
    }

    /// Handled-id marks kept (all, and those from non-friends).
    public func handledCounts() throws -> (all: Int, strangers: Int) {
        try read { db in
            (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM seenMessage") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM seenMessage WHERE fromFriend = 0") ?? 0)
        }
    }
}
extension StoreStep {
    /// Records that a frame was handled. False when it had been handled before.
    /// Marks are pruned by age, and capped: those from non-friends at `maximumStrangerSeenMessages`
    /// (the oldest of theirs go), all at `maximumSeenMessages` (the oldest go).
    public func markHandled(_ messageId: [UInt8], createdAtMs: Int64, windowMs: Int64, nowMs: Int64,
                            fromFriend: Bool = true) throws -> Bool {
        try write { db in
            try mark(db, HandledMark(messageId: messageId, createdAtMs: createdAtMs, windowMs: windowMs, nowMs: nowMs,
                                     fromFriend: fromFriend))
        }
    }

    /// Records a handled message id inside the caller's transaction; false when it was handled
    /// before (the caller then changes nothing).
    func mark(_ db: Database, _ m: HandledMark) throws -> Bool {
        // One seek: a mark already there is left as it is (and nothing else changes).
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO seenMessage(messageId, createdAtMs, fromFriend) VALUES (?, ?, ?)")
            .execute(arguments: [Data(m.messageId), m.createdAtMs, m.fromFriend])
        guard db.changesCount > 0 else { return false }
        try db.cachedStatement(sql: "DELETE FROM seenMessage WHERE createdAtMs < ?").execute(arguments: [m.nowMs.subtractingSaturated(m.windowMs)])
        if !m.fromFriend {
            let strangers = try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM seenMessage WHERE fromFriend = 0")) ?? 0
            if strangers > limits.maximumStrangerSeenMessages {
                try db.execute(sql: """
                    DELETE FROM seenMessage WHERE messageId IN
                    (SELECT messageId FROM seenMessage WHERE fromFriend = 0 ORDER BY createdAtMs ASC LIMIT ?)
                    """, arguments: [strangers - limits.maximumStrangerSeenMessages])
            }
        }
        // The total is checked every 64 inserts (a count is a scan): it overshoots by at most 63.
        let total = db.lastInsertedRowID % 64 == 0 ? (try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM seenMessage")) ?? 0) : 0
        if total > limits.maximumSeenMessages {
            try db.execute(sql: "DELETE FROM seenMessage WHERE messageId IN (SELECT messageId FROM seenMessage ORDER BY createdAtMs ASC LIMIT ?)",
                           arguments: [total - limits.maximumSeenMessages])
        }
        return true
    }
}

// MARK: - Events

/// An event stored in the same transaction as the change it reports (so a crash can lose neither
/// without the other); the event bus hands it to subscribers once the transaction has committed.
public struct PendingEvent: Sendable, Equatable {
    public let type: String
    public let timeMs: Int64
    /// The event's fields as a JSON object.
    public let fields: String
    /// The same fields as the caller holds them decoded (kept in memory with the event once it is
    /// stored, so it is not parsed again to be handed out); not stored, not compared.
    public let decoded: (any Sendable)?
    public init(type: String, timeMs: Int64, fields: String, decoded: (any Sendable)? = nil) {
        self.type = type
        self.timeMs = timeMs
        self.fields = fields
        self.decoded = decoded
    }

    public static func == (a: PendingEvent, b: PendingEvent) -> Bool {
        a.type == b.type && a.timeMs == b.timeMs && a.fields == b.fields
    }
}

extension NodeStore {
    public func events(since seq: Int64, limit: Int) throws -> [StoredEvent] {
        try recentEvents(since: seq, limit: limit).map(\.stored)
    }

    /// `events(since:limit:)`, each with its fields decoded when the newest events held in memory
    /// still have them (the event bus hands out what a step just stored without parsing it).
    public func recentEvents(since seq: Int64, limit: Int) throws -> [RecentEvent] {
        // What the tail holds is committed (it is fed after each commit).
        if let recent = tail.events(after: seq, limit: limit) { return recent }
        return try read { db in
            try StoredEvent.fetchAll(try db.cachedStatement(sql: "SELECT * FROM event WHERE seq > ? ORDER BY seq LIMIT ?"),
                                     arguments: [seq, limit]).map { RecentEvent(stored: $0, decoded: nil) }
        }
    }

    public func lastEventSeq() throws -> Int64 {
        try read { db in try Int64.fetchOne(db, sql: "SELECT MAX(seq) FROM event") ?? 0 }
    }
}
extension StoreStep {
    /// Inserts events inside a transaction already open (an intent's).
    func insertEvents(_ events: [PendingEvent], _ db: Database) throws {
        for p in events {
            var e = StoredEvent(seq: nil, type: p.type, timeMs: p.timeMs, fields: p.fields)
            try e.store(in: db)
            inserted(e, decoded: p.decoded)
        }
    }

    public func appendEvent(type: String, timeMs: Int64, fields: String, decoded: (any Sendable)? = nil) throws -> StoredEvent {
        // An event reports a change, and is as durable as the batch that made it. One row, one
        // statement: no savepoint around it (`writeOne`).
        try writeOne(durable: false) { db in
            var e = StoredEvent(seq: nil, type: type, timeMs: timeMs, fields: fields)
            try e.store(in: db)
            inserted(e, decoded: decoded)
            if let seq = e.seq, seq % 1000 == 0 {
                // Housekeeping after the row is in: a prune that fails (it undoes itself) leaves the
                // old rows for the next thousandth event, and the event stands.
                try? db.cachedStatement(sql: "DELETE FROM event WHERE seq <= ?").execute(arguments: [seq - Int64(limits.maximumEvents)])
            }
            return e
        }
    }
}

/// A frame's message id to record as handled in the same transaction as the change it makes
/// (exactly once, Protocol/README.md 12.5): a crash can neither keep the mark without the change
/// nor the change without the mark. Ids are forgotten once `createdAtMs` is older than `windowMs`.
public struct HandledMark: Sendable, Equatable {
    public let messageId: [UInt8]
    public let createdAtMs: Int64
    public let windowMs: Int64
    public let nowMs: Int64
    /// Marks from non-friends are capped on their own, so they cannot evict friends' marks.
    public let fromFriend: Bool

    public init(messageId: [UInt8], createdAtMs: Int64, windowMs: Int64, nowMs: Int64, fromFriend: Bool) {
        self.messageId = messageId
        self.createdAtMs = createdAtMs
        self.windowMs = windowMs
        self.nowMs = nowMs
        self.fromFriend = fromFriend
    }
}
