import Foundation
import SwiftProtobuf

/// The stored form of a challenge (Protocol/store.proto): protobuf binary, what the node writes
/// after every step. It replaced JSON (the `Codable` conformance, still read for rows written
/// before) because a step's store round trip sits on the path of every challenge notice: decoding
/// and encoding the JSON cost ~0.3 ms each on this machine, the binary form a few microseconds.
///
/// Decoding checks the shape only (every enum known, nothing missing); the ranges are
/// `validate()`'s, as for a JSON row.
extension Challenge {
    /// Why stored bytes are not a challenge.
    public struct StoredFormatError: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// Map entries in key order: one value, one encoding (the fixture pins the bytes).
    static let storedEncoding: BinaryEncodingOptions = {
        var o = BinaryEncodingOptions()
        o.useDeterministicOrdering = true
        return o
    }()

    public func storedBytes() throws -> [UInt8] {
        var s = Tandem_Store_V1_StoredChallenge()
        s.id = Data(id)
        s.me = Data(me)
        s.inviter = Data(inviter)
        s.participants = participants.map(\.stored)
        s.durationMs = durationMs
        s.requestedStartUs = requestedStartUs
        if let startAtUs { s.startAtUs = startAtUs }
        s.expiresAtUs = expiresAtUs
        s.graceMs = graceMs
        s.message = message
        s.phase = phase.stored
        s.roster = roster.map { Data($0) }
        s.solo = solo
        if let localStartUs { s.localStartUs = localStartUs }
        if let startedLocalUs { s.startedLocalUs = startedLocalUs }
        if let endedLocalUs { s.endedLocalUs = endedLocalUs }
        if let record { s.record = Data(record) }
        s.signatures = signatures.mapValues { Data($0) }
        s.signers = signers
        s.committed = committed
        s.early = early.mapValues { Data($0) }
        return try s.serializedBytes(options: Self.storedEncoding)
    }

    /// Decodes the stored form; throws `StoredFormatError` for bytes that are not one (validate the
    /// result before use, as for any row read from disk).
    public init(storedBytes bytes: [UInt8]) throws {
        let s: Tandem_Store_V1_StoredChallenge
        do {
            s = try Tandem_Store_V1_StoredChallenge(serializedBytes: bytes)
        } catch {
            throw StoredFormatError(description: "stored challenge: not decodable (\(error))")
        }
        guard let phase = Phase(stored: s.phase) else {
            throw StoredFormatError(description: "stored challenge: unknown phase \(s.phase.rawValue)")
        }
        self.init(id: Array(s.id), me: Array(s.me), inviter: Array(s.inviter),
                  participants: try s.participants.map(Participant.init(stored:)),
                  durationMs: s.durationMs, requestedStartUs: s.requestedStartUs,
                  startAtUs: s.hasStartAtUs ? s.startAtUs : nil, expiresAtUs: s.expiresAtUs, graceMs: s.graceMs,
                  message: s.message, phase: phase, roster: s.roster.map { Array($0) }, solo: s.solo,
                  localStartUs: s.hasLocalStartUs ? s.localStartUs : nil,
                  startedLocalUs: s.hasStartedLocalUs ? s.startedLocalUs : nil,
                  endedLocalUs: s.hasEndedLocalUs ? s.endedLocalUs : nil,
                  record: s.hasRecord ? Array(s.record) : nil,
                  signatures: s.signatures.mapValues { Array($0) }, signers: s.signers, committed: s.committed,
                  early: s.early.mapValues { Array($0) })
    }
}

extension Challenge.Participant {
    var stored: Tandem_Store_V1_StoredParticipant {
        var p = Tandem_Store_V1_StoredParticipant()
        p.key = Data(key)
        p.answer = answer.stored
        p.result = result?.stored ?? .none
        if let quitElapsedMs { p.quitElapsedMs = quitElapsedMs }
        if let reason { p.reason = reason }
        p.outOfContact = outOfContact
        p.addressHint = addressHint
        return p
    }

    init(stored p: Tandem_Store_V1_StoredParticipant) throws {
        guard let answer = Challenge.Answer(stored: p.answer) else {
            throw Challenge.StoredFormatError(description: "stored challenge: unknown answer \(p.answer.rawValue)")
        }
        let result: Challenge.Result?
        switch p.result {
        case .none: result = nil
        case .running: result = .running
        case .completed: result = .completed
        case .quit: result = .quit
        case .outOfContact: result = .outOfContact
        case .UNRECOGNIZED(let n):
            throw Challenge.StoredFormatError(description: "stored challenge: unknown result \(n)")
        }
        self.init(key: Array(p.key), answer: answer, result: result, quitElapsedMs: p.hasQuitElapsedMs ? p.quitElapsedMs : nil,
                  reason: p.hasReason ? p.reason : nil, outOfContact: p.outOfContact, addressHint: p.addressHint)
    }
}

extension Challenge.Phase {
    var stored: Tandem_Store_V1_StoredPhase {
        switch self {
        case .invited: .invited
        case .accepted: .accepted
        case .declined: .declined
        case .expired: .expired
        case .cancelled: .cancelled
        case .scheduled: .scheduled
        case .running: .running
        case .ended: .ended
        }
    }

    init?(stored: Tandem_Store_V1_StoredPhase) {
        switch stored {
        case .invited: self = .invited
        case .accepted: self = .accepted
        case .declined: self = .declined
        case .expired: self = .expired
        case .cancelled: self = .cancelled
        case .scheduled: self = .scheduled
        case .running: self = .running
        case .ended: self = .ended
        case .unspecified, .UNRECOGNIZED: return nil
        }
    }
}

extension Challenge.Answer {
    var stored: Tandem_Store_V1_StoredAnswer {
        switch self {
        case .pending: .pending
        case .accepted: .accepted
        case .declined: .declined
        case .expired: .expired
        }
    }

    init?(stored: Tandem_Store_V1_StoredAnswer) {
        switch stored {
        case .pending: self = .pending
        case .accepted: self = .accepted
        case .declined: self = .declined
        case .expired: self = .expired
        case .unspecified, .UNRECOGNIZED: return nil
        }
    }
}

extension Challenge.Result {
    var stored: Tandem_Store_V1_StoredResult {
        switch self {
        case .running: .running
        case .completed: .completed
        case .quit: .quit
        case .outOfContact: .outOfContact
        }
    }
}
