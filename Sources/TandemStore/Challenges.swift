import Foundation
import GRDB
import TandemProtocol

/// Challenges and the ledger: each step of a challenge is one transaction holding its new state
/// and the frames it sends (DESIGN.md, "durable before acknowledged").
extension NodeStore {
    /// A stored challenge's `state`, decoded and validated: the stored form (Protocol/store.proto)
    /// in a BLOB, or JSON text in a row written before it. Throws what is wrong with it.
    static func loadChallenge(_ state: DatabaseValue) throws -> Challenge {
        let c: Challenge
        switch state.storage {
        case .blob(let data):
            c = try Challenge(storedBytes: Array(data))
        case .string(let json):
            c = try JSONDecoder().decode(Challenge.self, from: Data(json.utf8))
        case .null, .int64, .double:
            throw Challenge.StoredFormatError(description: "stored challenge: neither the stored form nor JSON")
        }
        try c.validate()
        return c
    }

    /// `loadChallenge`, nil for a row that fails (it is quarantined at the next start,
    /// `quarantineInvalidRows`).
    static func decodeChallenge(_ state: DatabaseValue) -> Challenge? { try? loadChallenge(state) }

    static func entry(_ row: Row) -> LedgerEntry {
        let sigs = LedgerEntry.unpackSignatures(Array(row["signatures"] as Data)) ?? []
        return LedgerEntry(seq: row["seq"], record: Array(row["record"] as Data), signatures: sigs,
                           previousHash: Array(row["previousHash"] as Data), hash: Array(row["hash"] as Data))
    }

    static func lastLedgerEntry(_ db: Database) throws -> LedgerEntry? {
        try Row.fetchOne(db, sql: "SELECT * FROM ledger ORDER BY seq DESC LIMIT 1").map(entry)
    }
}
extension StoreReading {
    public func challenge(_ id: [UInt8]) throws -> Challenge? {
        try read { db in
            try DatabaseValue.fetchOne(db, sql: "SELECT state FROM challenge WHERE id = ?", arguments: [Data(id)]).flatMap(NodeStore.decodeChallenge)
        }
    }

    /// The peers a node keeps links to: its friends, and the partners of challenges that are on
    /// (accepted, scheduled, running) who are not friends.
    public func peersToKeepConnected() throws -> [[UInt8]] {
        var keys = try friendKeys()
        var seen = Set(keys)
        for c in try challenges(phases: [.accepted, .scheduled, .running]) {
            for k in (c.roster.isEmpty ? c.others : c.rosterOthers) where seen.insert(k).inserted { keys.append(k) }
        }
        return keys
    }

    /// Challenges, newest first; `phases` nil for all.
    public func challenges(phases: [Challenge.Phase]? = nil, limit: Int = 1000) throws -> [Challenge] {
        try read { db in
            let rows: [DatabaseValue]
            if let phases {
                let marks = phases.map { _ in "?" }.joined(separator: ",")
                // Prepared once per number of phases (asked for on every delivery round).
                rows = try DatabaseValue.fetchAll(try db.cachedStatement(sql: "SELECT state FROM challenge WHERE phase IN (\(marks)) ORDER BY createdAtMs DESC LIMIT ?"),
                                                  arguments: StatementArguments(phases.map(\.rawValue) + [String(limit)]))
            } else {
                rows = try DatabaseValue.fetchAll(try db.cachedStatement(sql: "SELECT state FROM challenge ORDER BY createdAtMs DESC LIMIT ?"),
                                                  arguments: [limit])
            }
            return rows.compactMap(NodeStore.decodeChallenge)
        }
    }

    /// Challenges whose id starts with the given bytes (a typed prefix).
    public func challenges(idPrefix hex: String) throws -> [Challenge] {
        try read { db in
            try DatabaseValue.fetchAll(db, sql: "SELECT state FROM challenge WHERE lower(hex(id)) LIKE ? ORDER BY createdAtMs DESC LIMIT 10",
                                       arguments: [hex.lowercased() + "%"])
                .compactMap(NodeStore.decodeChallenge)
        }
    }

    /// Challenges not yet in their final state (to resume after a restart).
    public func activeChallenges() throws -> [Challenge] {
        try challenges(phases: [.invited, .accepted, .scheduled, .running, .ended]).filter(\.isActive)
    }

    /// The ledger in order, with when each entry was committed (ms, our clock).
    public func ledger() throws -> [(entry: LedgerEntry, committedAtMs: Int64)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM ledger ORDER BY seq").map { (NodeStore.entry($0), $0["committedAtMs"]) }
        }
    }
}
extension StoreStep {
    /// Stores the challenge's state and queues `frames`, together (with `handled`, the frame that
    /// caused the step is marked handled in the same transaction; false, and nothing stored, when it
    /// was handled before).
    @discardableResult
    public func saveChallenge(_ c: Challenge, frames: [OutboxItem] = [], events: [PendingEvent] = [], nowMs: Int64,
                              handled: HandledMark? = nil) throws -> Bool {
        let state = Data(try c.storedBytes())
        return try write { db in
            if let handled, try !mark(db, handled) { return false }
            try db.execute(sql: """
                INSERT INTO challenge(id, phase, solo, createdAtMs, updatedAtMs, state) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT(id) DO UPDATE SET phase = excluded.phase, updatedAtMs = excluded.updatedAtMs, state = excluded.state
                """, arguments: [Data(c.id), c.phase.rawValue, c.solo, nowMs, nowMs, state])
            for f in frames { try f.store(in: db, onConflict: .ignore) }
            try insertEvents(events, db)
            return true
        }
    }

    /// Appends the challenge's co-signed record to the ledger and marks the challenge committed,
    /// in one transaction. Returns the new entry (nil when the challenge was already in it).
    public func commitToLedger(_ c: Challenge, nowMs: Int64, events: (LedgerEntry) -> [PendingEvent] = { _ in [] }) throws -> LedgerEntry? {
        guard let record = c.record else { return nil }
        var done = c
        done.markCommitted()
        let state = Data(try done.storedBytes())
        return try write { db in
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM ledger WHERE challengeId = ?", arguments: [Data(c.id)]) != nil {
                return nil
            }
            let last = try NodeStore.lastLedgerEntry(db)
            let entry = Ledger.append(after: last, record: record, signatures: c.signatureList)
            try db.execute(sql: "INSERT INTO ledger(seq, challengeId, record, signatures, previousHash, hash, committedAtMs) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           arguments: [entry.seq, Data(c.id), Data(entry.record), Data(entry.packedSignatures),
                                       Data(entry.previousHash), Data(entry.hash), nowMs])
            try db.execute(sql: "UPDATE challenge SET state = ?, updatedAtMs = ? WHERE id = ?", arguments: [state, nowMs, Data(c.id)])
            try insertEvents(events(entry), db)
            return entry
        }
    }
}

// MARK: - Quarantine

/// A stored row that failed validation when the node started: kept aside, never fatal.
public struct QuarantinedRow: Sendable, Equatable {
    public let kind: String
    public let rowKey: [UInt8]
    public let reason: String
    public let atMs: Int64
}

extension StoreReading {
    /// Why each stored challenge that fails validation fails (read-only; empty when all hold).
    public func challengeRowsFailingValidation() throws -> [String] {
        try read { db in
            try DatabaseValue.fetchAll(db, sql: "SELECT state FROM challenge").compactMap { state -> String? in
                do {
                    _ = try NodeStore.loadChallenge(state)
                    return nil
                } catch {
                    return "\(error)"
                }
            }
        }
    }

    public func contactCount() throws -> Int {
        try read { db in try Contact.fetchCount(db) }
    }

    /// Quarantined rows, newest first.
    public func quarantined(limit: Int = 100) throws -> [QuarantinedRow] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT kind, rowKey, reason, atMs FROM quarantine ORDER BY id DESC LIMIT ?", arguments: [limit]).map {
                QuarantinedRow(kind: $0["kind"], rowKey: Array($0["rowKey"] as Data), reason: $0["reason"], atMs: $0["atMs"])
            }
        }
    }

    public func quarantinedCount() throws -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM quarantine") ?? 0 }
    }
}
extension StoreStep {
    /// Moves every stored row that fails the validation its kind gets when loaded (challenges,
    /// outbox frames, relays) into the quarantine table, in one transaction, and returns them. Run
    /// at start, before any service reads the store: a row written by an older or careless node,
    /// or edited by hand, is set aside instead of crashing the node at every start.
    public func quarantineInvalidRows(nowMs: Int64) throws -> [QuarantinedRow] {
        try write { db in
            var moved: [QuarantinedRow] = []
            func quarantine(_ kind: String, _ key: Data, _ data: Data, _ reason: String, delete: () throws -> Void) throws {
                try db.execute(sql: "INSERT INTO quarantine(kind, rowKey, data, reason, atMs) VALUES (?, ?, ?, ?, ?)",
                               arguments: [kind, key, data, reason, nowMs])
                try delete()
                moved.append(QuarantinedRow(kind: kind, rowKey: Array(key), reason: reason, atMs: nowMs))
            }
            for row in try Row.fetchAll(db, sql: "SELECT id, state FROM challenge") {
                let id: Data = row["id"]
                let state: DatabaseValue = row["state"]
                var reason: String?
                do {
                    let c = try NodeStore.loadChallenge(state)
                    if Data(c.id) != id { reason = "stored challenge: its id differs from its row's" }
                } catch let r as Challenge.Refusal {
                    reason = r.description
                } catch let f as Challenge.StoredFormatError {
                    reason = f.description
                } catch {
                    reason = "stored challenge: not decodable (\(error))"
                }
                if let reason {
                    let data: Data
                    switch state.storage {
                    case .blob(let bytes): data = bytes
                    case .string(let text): data = Data(text.utf8)
                    default: data = Data()
                    }
                    try quarantine("challenge", id, data, reason) {
                        try db.execute(sql: "DELETE FROM challenge WHERE id = ?", arguments: [id])
                    }
                }
            }
            for item in try OutboxItem.fetchAll(db) {
                var reason: String?
                if item.recipient.count != 32 {
                    reason = "outbox: recipient is not a key"
                } else if let env = try? Envelope.parse(Array(item.frame)) {
                    // A direct MESSAGE is held unsigned (signed at the egress where it must be, README 5.4).
                    if env.recipient != Array(item.recipient) || env.messageID.bytes != Array(item.messageId)
                        || !(env.hasValidSignature || env.needsSignatureOffLink) {
                        reason = "outbox: frame does not match its row or its signature"
                    }
                } else {
                    reason = "outbox: frame is not an envelope"
                }
                if let reason { try quarantine("outbox", item.messageId, item.frame, reason) { _ = try item.delete(db) } }
            }
            for table in ["relay", "peerRelay"] {
                for row in try Row.fetchAll(db, sql: "SELECT * FROM \(table)") {
                    let key: Data = row["publicKey"]
                    let host: String = row["host"] ?? ""
                    let port: Int64 = row["port"] ?? 0
                    let relayKey: Data? = table == "peerRelay" ? row["relayKey"] : key
                    guard key.count != 32 || relayKey?.count != 32 || host.isEmpty || host.utf8.count > 253 || !(1...65_535).contains(port) else { continue }
                    let data = Data("\(host):\(port)".utf8)
                    try quarantine(table, key, data, "\(table): bad key or address \(host):\(port)") {
                        try db.execute(sql: "DELETE FROM \(table) WHERE publicKey = ?", arguments: [key])
                    }
                }
            }
            let count = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM quarantine") ?? 0
            if count > limits.maximumQuarantined {
                try db.execute(sql: "DELETE FROM quarantine WHERE id IN (SELECT id FROM quarantine ORDER BY id ASC LIMIT ?)",
                               arguments: [count - limits.maximumQuarantined])
            }
            return moved
        }
    }

    /// Deletes every row of every table (the schema stays): for a harness that reuses one store
    /// across many short runs (the node fuzz target). Never called by the node.
    public func eraseAll() throws {
        try write { db in
            for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'grdb_migrations'") {
                try db.execute(sql: "DELETE FROM \"\(table)\"")
            }
        }
    }
}
