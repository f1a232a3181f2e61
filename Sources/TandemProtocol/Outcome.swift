import Foundation
import Sodium

/// Outcome records and the hash-chained ledger (Protocol/README.md, sections 13.6 and 13.7). Pure.
public enum Outcome {
    static let domain: [UInt8] = Array("tandem/outcome/v1".utf8) + [0]

    /// What a participant signs: the domain tag, then the record's exact bytes.
    public static func signingInput(_ record: [UInt8]) -> [UInt8] { domain + record }

    public static func sign(_ record: [UInt8], with key: SigningKeyPair) -> [UInt8] {
        key.sign(signingInput(record))
    }

    public static func verify(_ record: [UInt8], signature: [UInt8], by publicKey: [UInt8]) -> Bool {
        Ed25519.verify(signature: signature, message: signingInput(record), publicKey: publicKey)
    }

    /// The canonical bytes of a record: outcomes sorted by public key.
    public static func encode(_ record: Tandem_V1_OutcomeRecord) -> [UInt8] {
        var r = record
        r.outcomes.sort { $0.publicKey.lexicographicallyPrecedes($1.publicKey) }
        r.unknownFields = SwiftProtobuf.UnknownStorage()
        return (try? r.serializedBytes()) ?? []
    }

    /// Parses a record and checks it is canonical (re-encoding gives the same bytes) and sane:
    /// 16-byte id, 1 to 16 distinct 32-byte participants, the inviter among them, a duration of
    /// 1 s to 24 h, a start within the stored range, each result one of the three, a quit's
    /// elapsed time within the duration, and no elapsed time or reason on other results
    /// (Protocol/README.md, "Payload ranges").
    public static func decode(_ bytes: [UInt8]) -> Tandem_V1_OutcomeRecord? {
        guard bytes.count <= 8192, let r = try? Tandem_V1_OutcomeRecord(serializedBytes: bytes), r.unknownFields.data.isEmpty,
              encode(r) == bytes, r.challengeID.count == 16, (1...16).contains(r.outcomes.count),
              r.inviter.count == 32,
              (1_000...86_400_000).contains(r.durationMs), r.startAtUs <= UInt64(Challenge.storedTimeRange.upperBound),
              r.outcomes.allSatisfy({ $0.publicKey.count == 32 && $0.reason.utf8.count <= 280 && $0.unknownFields.data.isEmpty }),
              r.outcomes.allSatisfy({ o in
                  switch o.result {
                  case .quit: return o.elapsedMs <= r.durationMs
                  case .completed, .outOfContact: return o.elapsedMs == 0 && o.reason.isEmpty
                  case .unspecified, .UNRECOGNIZED: return false
                  }
              }),
              Set(r.outcomes.map(\.publicKey)).count == r.outcomes.count,
              r.outcomes.contains(where: { $0.publicKey == r.inviter }) else { return nil }
        return r
    }

    static func rank(_ r: Tandem_V1_ParticipantResult) -> Int {
        switch r {
        case .quit: return 3
        case .completed: return 2
        case .outOfContact: return 1
        default: return 0
        }
    }

    /// Whether two records describe the same challenge (and may be merged).
    public static func sameChallenge(_ a: Tandem_V1_OutcomeRecord, _ b: Tandem_V1_OutcomeRecord) -> Bool {
        a.challengeID == b.challengeID && a.startAtUs == b.startAtUs && a.durationMs == b.durationMs && a.inviter == b.inviter
            && Set(a.outcomes.map(\.publicKey)) == Set(b.outcomes.map(\.publicKey))
    }

    /// Joins two views of one challenge: a quit (a signed notice) wins, then completed, then out
    /// of contact; a participant who signed any record for the challenge (`signers`) was in
    /// contact, so is at least completed. Commutative, associative and idempotent, so every
    /// participant reaches the same record whatever order the views arrive in.
    public static func merge(_ a: Tandem_V1_OutcomeRecord, _ b: Tandem_V1_OutcomeRecord,
                             signers: Set<Data>) -> Tandem_V1_OutcomeRecord {
        var out = a
        let theirs = Dictionary(b.outcomes.map { ($0.publicKey, $0) }, uniquingKeysWith: { x, _ in x })
        out.outcomes = a.outcomes.map { mine in
            var best = mine
            if let other = theirs[mine.publicKey] {
                if rank(other.result) > rank(best.result) {
                    best = other
                } else if other.result == .quit, best.result == .quit, other.elapsedMs < best.elapsedMs {
                    best = other
                }
            }
            if signers.contains(best.publicKey), rank(best.result) < rank(.completed) {
                best.result = .completed
                best.elapsedMs = 0
                best.reason = ""
            }
            return best
        }
        out.outcomes.sort { $0.publicKey.lexicographicallyPrecedes($1.publicKey) }
        return out
    }
}

/// One ledger entry as stored: a record, its signatures, and its link to the entry before.
public struct LedgerEntry: Equatable, Sendable {
    public var seq: Int64
    public var record: [UInt8]
    /// (public key, signature), sorted by key.
    public var signatures: [(key: [UInt8], signature: [UInt8])]
    public var previousHash: [UInt8]
    public var hash: [UInt8]

    public init(seq: Int64, record: [UInt8], signatures: [(key: [UInt8], signature: [UInt8])], previousHash: [UInt8], hash: [UInt8]) {
        self.seq = seq
        self.record = record
        self.signatures = signatures.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        self.previousHash = previousHash
        self.hash = hash
    }

    public static func == (a: LedgerEntry, b: LedgerEntry) -> Bool {
        a.seq == b.seq && a.record == b.record && a.previousHash == b.previousHash && a.hash == b.hash
            && a.signatures.map(\.key) == b.signatures.map(\.key) && a.signatures.map(\.signature) == b.signatures.map(\.signature)
    }

    /// The signatures as stored: 96 bytes each (key, then signature), in key order.
    public var packedSignatures: [UInt8] { signatures.flatMap { $0.key + $0.signature } }

    public static func unpackSignatures(_ bytes: [UInt8]) -> [(key: [UInt8], signature: [UInt8])]? {
        guard bytes.count % 96 == 0 else { return nil }
        return stride(from: 0, to: bytes.count, by: 96).map { (Array(bytes[$0..<$0 + 32]), Array(bytes[$0 + 32..<$0 + 96])) }
    }
}

public enum Ledger {
    static let domain: [UInt8] = Array("tandem/ledger/v1".utf8) + [0]
    public static let genesis = [UInt8](repeating: 0, count: 32)

    /// BLAKE2b-256 over the domain tag, the previous hash, the record's length (u32 big-endian)
    /// and bytes, then each (key, signature) in key order.
    public static func hash(previous: [UInt8], record: [UInt8], signatures: [(key: [UInt8], signature: [UInt8])]) -> [UInt8] {
        var input = domain + previous
        let n = UInt32(record.count)
        input += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
        input += record
        for s in signatures.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) { input += s.key + s.signature }
        return Hash.blake2b(input)
    }

    /// The entry that follows `previous` (nil: the first).
    public static func append(after previous: LedgerEntry?, record: [UInt8],
                              signatures: [(key: [UInt8], signature: [UInt8])]) -> LedgerEntry {
        let prev = previous?.hash ?? genesis
        let sorted = signatures.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        return LedgerEntry(seq: (previous?.seq ?? 0) + 1, record: record, signatures: sorted, previousHash: prev,
                           hash: hash(previous: prev, record: record, signatures: sorted))
    }

    public struct Break: Equatable, Sendable, CustomStringConvertible {
        public let seq: Int64
        public let reason: String
        public var description: String { "entry \(seq): \(reason)" }
    }

    /// Checks entries in order: numbering, the chain of hashes, each record canonical, every
    /// signature valid and by a participant, and every participant recorded as completed signed
    /// (a quit or an absence is attested by the others' signatures).
    /// Returns the first break, or nil when the whole ledger holds.
    public static func verify(_ entries: [LedgerEntry]) -> Break? {
        var previous = genesis
        var expectedSeq: Int64 = 1
        for e in entries {
            guard e.seq == expectedSeq else { return Break(seq: e.seq, reason: "expected entry \(expectedSeq) here (an entry is missing or out of order)") }
            guard e.previousHash == previous else { return Break(seq: e.seq, reason: "does not link to the entry before it (previous hash differs)") }
            guard let record = Outcome.decode(e.record) else { return Break(seq: e.seq, reason: "the outcome record is malformed or not canonical") }
            let keys = Set(record.outcomes.map { Array($0.publicKey) })
            var signed = Set<[UInt8]>()
            for s in e.signatures {
                guard keys.contains(s.key) else { return Break(seq: e.seq, reason: "signed by \(NodeID(publicKey: s.key).short), who is not a participant") }
                guard Outcome.verify(e.record, signature: s.signature, by: s.key) else {
                    return Break(seq: e.seq, reason: "the signature of \(NodeID(publicKey: s.key).short) does not verify")
                }
                signed.insert(s.key)
            }
            for o in record.outcomes where o.result == .completed && !signed.contains(Array(o.publicKey)) {
                return Break(seq: e.seq, reason: "\(NodeID(publicKey: Array(o.publicKey)).short) did not sign")
            }
            guard hash(previous: e.previousHash, record: e.record, signatures: e.signatures) == e.hash else {
                return Break(seq: e.seq, reason: "its hash does not match its content")
            }
            previous = e.hash
            expectedSeq += 1
        }
        return nil
    }
}

import SwiftProtobuf
