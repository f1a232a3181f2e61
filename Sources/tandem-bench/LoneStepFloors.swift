import Foundation
import GRDB

/// What one lone message's three store steps cost on this machine when nothing but their rows is
/// written (messages.md 11.6, session 15): plain statements through a connection of its own, on
/// the nodes' own databases after the run (their schema, indexes, triggers and sizes), none of
/// the node's work around them. A send (synced): the conversation's seq, the message (its
/// indexes and the search note its trigger adds), its outbox row, the `message.sent` event. A
/// receipt (synced): the handled mark, the message, the conversation's lamport, the
/// `message.received` event. An ACK (not synced): the outbox row deleted, the message delivered,
/// the `message.delivered` event. Each step's messages and marks are deleted again afterwards
/// (unsynced); the floors' events stay, and the conversations' seq and lamport stay advanced (the
/// run is over: nothing sends on them again before the directory is removed).
///
/// Their sum with the run's signed ping/pong (the wire both ways and a frame's crypto each way) is
/// a floor of the send → delivered path for this store on this disk: what a node with no work of
/// its own around its rows would take, beside the goal (3 × ping + 2 × a 4 KiB synced write).
struct LoneStepFloors {
    var send: [Double] = [], receive: [Double] = [], ack: [Double] = []

    static func measure(sender: String, receiver: String, rounds: Int) throws -> LoneStepFloors {
        var floors = LoneStepFloors()
        // The nodes may still write (a delayed `sent` mark, a checkpoint): wait for their lock.
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let alice = try DatabaseQueue(path: sender, configuration: configuration)
        let bob = try DatabaseQueue(path: receiver, configuration: configuration)
        for queue in [alice, bob] {
            try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        }
        // The conversation of the run on each side, and a message of it to copy the columns of.
        let (aliceConversation, author) = try alice.read { db -> (Int64, Data) in
            let row = try Row.fetchOne(db, sql: "SELECT conversationId, author FROM message ORDER BY rowid DESC LIMIT 1")
            return (row?["conversationId"] ?? 0, row?["author"] ?? Data(count: 32))
        }
        let bobConversation = try bob.read { db -> Int64 in
            try Int64.fetchOne(db, sql: "SELECT conversationId FROM message ORDER BY rowid DESC LIMIT 1") ?? 0
        }
        let recipient = Data((0..<32).map { UInt8(200 &+ $0) }), frame = Data(repeating: 0xa5, count: 215)
        func ms(_ body: () throws -> Void) rethrows -> Double {
            let start = DispatchTime.now().uptimeNanoseconds
            try body()
            return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
        }
        for round in 0..<(rounds + 3) {
            let id = Data((0..<16).map { _ in UInt8.random(in: 0...255) })
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let send = try ms {
                try alice.inTransaction(.immediate) { db in
                    try db.cachedStatement(sql: "UPDATE conversation SET ownSeq = ownSeq + 1, maxLamport = maxLamport + 1 WHERE id = ?")
                        .execute(arguments: [aliceConversation])
                    try insertMessage(db, id: id, author: author, text: "floor \(round)", at: now, state: "queued",
                                      seq: "ownSeq", conversation: aliceConversation)
                    try db.cachedStatement(sql: """
                        INSERT INTO outbox (messageId, recipient, type, frame, createdAtMs, attempts, nextAttemptMs, lastError, expiresAtMs)
                        VALUES (?, ?, 1281, ?, ?, 0, ?, NULL, NULL)
                        """).execute(arguments: [id, recipient, frame, now, now])
                    try db.cachedStatement(sql: "INSERT INTO event (type, timeMs, fields) VALUES ('message.sent', ?, ?)")
                        .execute(arguments: [now, "{\"id\":\"\(id.map { String(format: "%02x", $0) }.joined())\",\"seq\":\(round)}"])
                    return .commit
                }
            }
            let receive = try ms {
                try bob.inTransaction(.immediate) { db in
                    try db.cachedStatement(sql: "INSERT OR IGNORE INTO seenMessage(messageId, createdAtMs, fromFriend) VALUES (?, ?, 1)")
                        .execute(arguments: [id, now])
                    try db.cachedStatement(sql: "UPDATE conversation SET maxLamport = maxLamport + 1 WHERE id = ?")
                        .execute(arguments: [bobConversation])
                    try insertMessage(db, id: id, author: author, text: "floor \(round)", at: now, state: "received",
                                      seq: "maxLamport", conversation: bobConversation)
                    try db.cachedStatement(sql: "INSERT INTO event (type, timeMs, fields) VALUES ('message.received', ?, ?)")
                        .execute(arguments: [now, "{\"seq\":\(round),\"text\":\"floor \(round)\"}"])
                    return .commit
                }
            }
            let ack = try ms {
                try alice.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA synchronous = NORMAL")
                    defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }
                    try db.inTransaction(.immediate) {
                        try db.cachedStatement(sql: "DELETE FROM outbox WHERE messageId = ? AND recipient = ?").execute(arguments: [id, recipient])
                        try db.cachedStatement(sql: "UPDATE message SET state = 'delivered' WHERE id = ?").execute(arguments: [id])
                        try db.cachedStatement(sql: "INSERT INTO event (type, timeMs, fields) VALUES ('message.delivered', ?, ?)")
                            .execute(arguments: [now, "{\"seq\":\(round)}"])
                        return .commit
                    }
                }
            }
            if round >= 3 {
                floors.send.append(send)
                floors.receive.append(receive)
                floors.ack.append(ack)
            }
            // The rows go again, unsynced (the floors' rows are not the run's messages).
            for queue in [alice, bob] {
                try queue.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA synchronous = NORMAL")
                    defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }
                    try db.inTransaction {
                        try db.execute(sql: "DELETE FROM message WHERE id = ?", arguments: [id])
                        try db.execute(sql: "DELETE FROM seenMessage WHERE messageId = ?", arguments: [id])
                        return .commit
                    }
                }
            }
        }
        return floors
    }

    /// A message row of `conversation` (its seq from the conversation's `seq` column, its lamport its
    /// `maxLamport`), as the node's `StoredMessage.store` inserts one.
    private static func insertMessage(_ db: Database, id: Data, author: Data, text: String, at now: Int64, state: String,
                                      seq: String, conversation: Int64) throws {
        try db.cachedStatement(sql: """
            INSERT INTO message (id, conversationId, author, seq, lamport, sentLamport, text, replyTo, sentAtMs,
                                 receivedAtMs, state, retracted, expiresAtMs, storedBytes)
            SELECT ?, id, ?, \(seq), maxLamport, maxLamport, ?, NULL, ?, ?, ?, 0, NULL, 80
            FROM conversation WHERE id = ?
            """).execute(arguments: [id, author, text, now, now, state, conversation])
    }

    func json(pingP50: Double, goal: Double, measuredP50: Double) -> [String: Any] {
        let s = Percentiles(send), r = Percentiles(receive), a = Percentiles(ack)
        let path = s.p50 + r.p50 + a.p50 + pingP50
        return [
            "send_synced_ms": s.json, "receive_synced_ms": r.json, "ack_unsynced_ms": a.json,
            "path_floor_p50_ms": path,
            "path_floor_over_goal": path / max(goal, 1e-9),
            "measured_over_path_floor": measuredP50 / max(path, 1e-9),
            "note": "each step's rows alone, plain statements on the nodes' own databases after the run; path floor = the three steps' p50 + the run's signed ping/pong p50 (no thread hops, no node work)",
        ]
    }
}
