import Foundation
import GRDB

/// The least the two stores of a burst must write per message (Protocol/messages.md 11.6), through
/// GRDB on a scratch database of its own (WAL, `synchronous = FULL`, as the node's): the rows the
/// protocol needs and nothing else, in batches of `batch` messages with one commit each. For
/// `tandem-bench messages`, beside what the nodes really spend.
///
/// - Sender, per message: the message row (queued) with its search entry and the outbox row
///   holding the signed frame, committed with a sync (durable before the send returns); then, when
///   acknowledged, the outbox row deleted and the message marked delivered (soft state: a commit
///   without a sync, as the node's ACK steps).
/// - Receiver, per message: the message row with its search entry and the handled-id mark, committed
///   with a sync (durable before acknowledged).
///
/// Left out, as the node's own choices rather than the protocol's: the conversation row's counters,
/// event rows, the display and due-frame indexes, savepoints per send.
public enum MessageStoreFloor {
    public struct Figures: Sendable {
        /// CPU of the calling thread per message (ns), each side.
        public var senderCPUNs = 0.0
        public var receiverCPUNs = 0.0
        /// Wall time per message (ns), each side, the syncs included.
        public var senderWallNs = 0.0
        public var receiverWallNs = 0.0
        public var messages = 0
        public var batch = 0
        public init(messages: Int = 0, batch: Int = 0) { (self.messages, self.batch) = (messages, batch) }
    }

    /// - Parameters:
    ///   - directory: where the scratch database goes (removed afterwards).
    ///   - cpuNanos: the calling thread's CPU clock.
    public static func measure(in directory: URL, messages: Int = 4096, batch: Int = 256, frameBytes: Int = 215,
                               cpuNanos: () -> UInt64) throws -> Figures {
        let n = max(batch, messages - messages % max(1, batch))
        var figures = Figures(messages: n, batch: batch)
        for side in ["sender", "receiver"] {
            let url = directory.appendingPathComponent("store-floor-\(side)-\(getpid()).sqlite")
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: url.path + suffix) }
            }
            var config = Configuration()
            config.prepareDatabase { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                try db.execute(sql: "PRAGMA temp_store = MEMORY")
            }
            let queue = try DatabaseQueue(path: url.path, configuration: config)
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: """
                    CREATE TABLE message(id BLOB NOT NULL UNIQUE, conversationId INTEGER NOT NULL, author BLOB NOT NULL,
                                         seq INTEGER NOT NULL, lamport INTEGER NOT NULL, text TEXT NOT NULL,
                                         sentAtMs INTEGER NOT NULL, state TEXT NOT NULL, UNIQUE(conversationId, author, seq));
                    CREATE VIRTUAL TABLE messageFts USING fts5(text, content='message', content_rowid='rowid', tokenize='unicode61');
                    CREATE TABLE outbox(messageId BLOB NOT NULL, recipient BLOB NOT NULL, frame BLOB NOT NULL,
                                        createdAtMs INTEGER NOT NULL, PRIMARY KEY(messageId, recipient)) WITHOUT ROWID;
                    CREATE TABLE seenMessage(messageId BLOB PRIMARY KEY, createdAtMs INTEGER NOT NULL) WITHOUT ROWID;
                    """)
            }
            let author = Data((0..<32).map { UInt8($0) }), recipient = Data((0..<32).map { UInt8(255 - $0) })
            let frame = Data(repeating: 0xa5, count: max(0, frameBytes))
            func id(_ i: Int) -> Data {
                var b = [UInt8](repeating: side == "sender" ? 1 : 2, count: 16)
                withUnsafeBytes(of: UInt64(i).bigEndian) { for (k, byte) in $0.enumerated() { b[8 + k] = byte } }
                return Data(b)
            }
            let wall0 = DispatchTime.now().uptimeNanoseconds, cpu0 = cpuNanos()
            for start in stride(from: 0, to: n, by: batch) {
                try queue.inTransaction { db in
                    let message = try db.cachedStatement(sql: """
                        INSERT INTO message(id, conversationId, author, seq, lamport, text, sentAtMs, state) VALUES (?, 1, ?, ?, ?, ?, ?, ?)
                        """)
                    let search = try db.cachedStatement(sql: "INSERT INTO messageFts(rowid, text) VALUES (?, ?)")
                    let queued = try db.cachedStatement(sql: "INSERT INTO outbox(messageId, recipient, frame, createdAtMs) VALUES (?, ?, ?, ?)")
                    let mark = try db.cachedStatement(sql: "INSERT INTO seenMessage(messageId, createdAtMs) VALUES (?, ?)")
                    for i in start..<(start + batch) {
                        let text = "burst \(i)"
                        try message.execute(arguments: [id(i), author, i + 1, i + 1, text, 1_800_000_000_000 + i,
                                                        side == "sender" ? "queued" : "received"])
                        try search.execute(arguments: [db.lastInsertedRowID, text])
                        if side == "sender" {
                            try queued.execute(arguments: [id(i), recipient, frame, 1_800_000_000_000 + i])
                        } else {
                            try mark.execute(arguments: [id(i), 1_800_000_000_000 + i])
                        }
                    }
                    return .commit
                }
                guard side == "sender" else { continue }
                // The ACKs of the batch: soft state, committed without a sync.
                try queue.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA synchronous = OFF")
                    defer { try? db.execute(sql: "PRAGMA synchronous = FULL") }  // the next batch syncs again (a failure shows there)
                    try db.inTransaction {
                        let drop = try db.cachedStatement(sql: "DELETE FROM outbox WHERE messageId = ? AND recipient = ?")
                        let delivered = try db.cachedStatement(sql: "UPDATE message SET state = 'delivered' WHERE id = ?")
                        for i in start..<(start + batch) {
                            try drop.execute(arguments: [id(i), recipient])
                            try delivered.execute(arguments: [id(i)])
                        }
                        return .commit
                    }
                }
            }
            let cpu = Double(cpuNanos() - cpu0) / Double(n)
            let wall = Double(DispatchTime.now().uptimeNanoseconds - wall0) / Double(n)
            if side == "sender" {
                (figures.senderCPUNs, figures.senderWallNs) = (cpu, wall)
            } else {
                (figures.receiverCPUNs, figures.receiverWallNs) = (cpu, wall)
            }
        }
        return figures
    }
}
