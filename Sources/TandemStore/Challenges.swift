import Foundation
import GRDB
import TandemProtocol

/// Challenges and the ledger: each step of a challenge is one transaction holding its new state
/// and the frames it sends (DESIGN.md, "durable before acknowledged").
extension NodeStore {
    static let challengeEncoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        return e
    }()

    /// Stores the challenge's state and queues `frames`, together.
    public func saveChallenge(_ c: Challenge, frames: [OutboxItem] = [], nowMs: Int64) throws {
        let json = String(decoding: try Self.challengeEncoder.encode(c), as: UTF8.self)
        try write { db in
            try db.execute(sql: """
                INSERT INTO challenge(id, phase, solo, createdAtMs, updatedAtMs, state) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT(id) DO UPDATE SET phase = excluded.phase, updatedAtMs = excluded.updatedAtMs, state = excluded.state
                """, arguments: [Data(c.id), c.phase.rawValue, c.solo, nowMs, nowMs, json])
            for f in frames { try f.insert(db, onConflict: .ignore) }
        }
    }

    public func challenge(_ id: [UInt8]) throws -> Challenge? {
        try read { db in
            try String.fetchOne(db, sql: "SELECT state FROM challenge WHERE id = ?", arguments: [Data(id)])
                .map { try JSONDecoder().decode(Challenge.self, from: Data($0.utf8)) }
        }
    }

    /// Challenges, newest first; `phases` nil for all.
    public func challenges(phases: [Challenge.Phase]? = nil, limit: Int = 1000) throws -> [Challenge] {
        try read { db in
            let rows: [String]
            if let phases {
                let marks = phases.map { _ in "?" }.joined(separator: ",")
                rows = try String.fetchAll(db, sql: "SELECT state FROM challenge WHERE phase IN (\(marks)) ORDER BY createdAtMs DESC LIMIT ?",
                                           arguments: StatementArguments(phases.map(\.rawValue) + [String(limit)]))
            } else {
                rows = try String.fetchAll(db, sql: "SELECT state FROM challenge ORDER BY createdAtMs DESC LIMIT ?", arguments: [limit])
            }
            return try rows.map { try JSONDecoder().decode(Challenge.self, from: Data($0.utf8)) }
        }
    }

    /// Challenges whose id starts with the given bytes (a typed prefix).
    public func challenges(idPrefix hex: String) throws -> [Challenge] {
        try read { db in
            try String.fetchAll(db, sql: "SELECT state FROM challenge WHERE lower(hex(id)) LIKE ? ORDER BY createdAtMs DESC LIMIT 10",
                                arguments: [hex.lowercased() + "%"])
                .map { try JSONDecoder().decode(Challenge.self, from: Data($0.utf8)) }
        }
    }

    /// Challenges not yet in their final state (to resume after a restart).
    public func activeChallenges() throws -> [Challenge] {
        try challenges(phases: [.invited, .accepted, .scheduled, .running, .ended]).filter(\.isActive)
    }

    /// Appends the challenge's co-signed record to the ledger and marks the challenge committed,
    /// in one transaction. Returns the new entry (nil when the challenge was already in it).
    public func commitToLedger(_ c: Challenge, nowMs: Int64) throws -> LedgerEntry? {
        guard let record = c.record else { return nil }
        var done = c
        done.committed = true
        let json = String(decoding: try Self.challengeEncoder.encode(done), as: UTF8.self)
        return try write { db in
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM ledger WHERE challengeId = ?", arguments: [Data(c.id)]) != nil {
                return nil
            }
            let last = try Self.lastLedgerEntry(db)
            let entry = Ledger.append(after: last, record: record, signatures: c.signatureList)
            try db.execute(sql: "INSERT INTO ledger(seq, challengeId, record, signatures, previousHash, hash, committedAtMs) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           arguments: [entry.seq, Data(c.id), Data(entry.record), Data(entry.packedSignatures),
                                       Data(entry.previousHash), Data(entry.hash), nowMs])
            try db.execute(sql: "UPDATE challenge SET state = ?, updatedAtMs = ? WHERE id = ?", arguments: [json, nowMs, Data(c.id)])
            return entry
        }
    }

    static func entry(_ row: Row) -> LedgerEntry {
        let sigs = LedgerEntry.unpackSignatures(Array(row["signatures"] as Data)) ?? []
        return LedgerEntry(seq: row["seq"], record: Array(row["record"] as Data), signatures: sigs,
                           previousHash: Array(row["previousHash"] as Data), hash: Array(row["hash"] as Data))
    }

    static func lastLedgerEntry(_ db: Database) throws -> LedgerEntry? {
        try Row.fetchOne(db, sql: "SELECT * FROM ledger ORDER BY seq DESC LIMIT 1").map(entry)
    }

    /// The ledger in order, with when each entry was committed (ms, our clock).
    public func ledger() throws -> [(entry: LedgerEntry, committedAtMs: Int64)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM ledger ORDER BY seq").map { (Self.entry($0), $0["committedAtMs"]) }
        }
    }
}
