import Foundation
import SwiftProtobuf

/// Validated messages: every payload a peer sends becomes one of these values through one
/// validating initialiser before any handler looks at it (Protocol/README.md, "Payload ranges").
/// Each initialiser checks every integer, length, time and enum against the ranges documented
/// there and throws `PayloadError` (answered as MALFORMED) otherwise. Handlers never read raw
/// protobuf fields, and every integer a value carries fits the arithmetic done on it.

/// A payload that breaks its message's rules. `detail` says which rule, for the ERROR reply and logs.
public struct PayloadError: Error, Equatable, Sendable, CustomStringConvertible {
    public let type: MessageType
    public let detail: String
    public init(_ type: MessageType, _ detail: String) {
        self.type = type
        self.detail = detail
    }
    public var description: String { "\(type): \(detail)" }
    public var code: Tandem_V1_ErrorCode { .malformed }
}

/// The documented ranges (Protocol/README.md, "Payload ranges"). Times are on the receiver's wall clock.
public enum PayloadLimits {
    /// Largest payload of a friends/challenge message handed to a decoder (the frame cap is 1 MiB;
    /// no message of these flows needs more than this).
    public static let maximumPayloadBytes = 16 * 1024
    public static let displayNameBytes = 64
    public static let addressCount = 8
    public static let addressBytes = 256
    public static let homeRelayBytes = 256
    /// Contact record versions are milliseconds since the epoch in practice; anything at or above
    /// 2^53 is refused (it also keeps them exact in JSON and within Int64).
    public static let maximumRecordVersion: UInt64 = (1 << 53) - 1
    /// A contact record as stored: re-encoded without unknown fields; never more than this.
    public static let maximumRecordBytes = 4 * 1024
    public static let messageBytes = 280
    public static let reasonBytes = 280
    public static let farewellReasonBytes = 280
    public static let heartbeatSecondsRange: ClosedRange<UInt32> = 0...3_600
    /// Clock sync timestamps: within a day of the receiver's clock.
    public static let clockToleranceMicros: UInt64 = 86_400_000_000
    /// A challenge start or expiry: within 8 days of the receiver's clock either way (7 days of
    /// planning ahead, plus a day of clock error; a mailed invite may be up to 8 days old).
    public static let challengeTimeToleranceMicros: UInt64 = 8 * 86_400_000_000
    public static let challengeDurationMs: ClosedRange<UInt64> = 1_000...86_400_000
    public static let challengeGraceMs: ClosedRange<UInt64> = 0...3_600_000
    public static let participantCount: ClosedRange<Int> = 2...16
    public static let relayRetryAfterMs: ClosedRange<UInt64> = 0...3_600_000
    public static let relayTextBytes = 256
    public static let outcomeRecordBytes = 8_192
}

@inline(__always)
func within(_ value: UInt64, of center: UInt64, _ tolerance: UInt64) -> Bool {
    value >= center ? value - center <= tolerance : center - value <= tolerance
}

private func decode<M: SwiftProtobuf.Message>(_ m: M.Type, _ type: MessageType, _ payload: [UInt8]) throws -> M {
    guard payload.count <= PayloadLimits.maximumPayloadBytes else {
        throw PayloadError(type, "payload of \(payload.count) bytes exceeds \(PayloadLimits.maximumPayloadBytes)")
    }
    do {
        return try M(serializedBytes: payload)
    } catch {
        throw PayloadError(type, "payload is not a \(M.protoMessageName)")
    }
}

private func id16(_ data: Data, _ type: MessageType, _ what: String) throws -> [UInt8] {
    guard data.count == 16 else { throw PayloadError(type, "\(what) is \(data.count) bytes, not 16") }
    return Array(data)
}

private func key32(_ data: Data, _ type: MessageType, _ what: String) throws -> [UInt8] {
    guard data.count == 32 else { throw PayloadError(type, "\(what) is \(data.count) bytes, not 32") }
    return Array(data)
}

private func text(_ s: String, max: Int, _ type: MessageType, _ what: String) throws -> String {
    guard s.utf8.count <= max else { throw PayloadError(type, "\(what) of \(s.utf8.count) bytes exceeds \(max)") }
    return s
}

// MARK: - Friends and presence

/// A contact record (Protocol 12.2), validated: the author's own key, bounded name and addresses,
/// a parseable home relay, a bounded version. `canonicalBytes` is the record re-encoded without
/// unknown fields: what is stored.
public struct ContactRecord: Equatable, Sendable {
    public let publicKey: [UInt8]
    public let displayName: String
    public let addresses: [String]
    public let homeRelay: RelayAddress?
    public let version: UInt64

    public init(validating r: Tandem_V1_ContactRecord, author: [UInt8], type: MessageType) throws {
        guard Array(r.publicKey) == author else { throw PayloadError(type, "contact record names another key") }
        displayName = try text(r.displayName, max: PayloadLimits.displayNameBytes, type, "display name")
        guard r.addresses.count <= PayloadLimits.addressCount else {
            throw PayloadError(type, "contact record has \(r.addresses.count) addresses (at most \(PayloadLimits.addressCount))")
        }
        for a in r.addresses { _ = try text(a, max: PayloadLimits.addressBytes, type, "address") }
        addresses = r.addresses
        _ = try text(r.homeRelay, max: PayloadLimits.homeRelayBytes, type, "home relay")
        if r.homeRelay.isEmpty {
            homeRelay = nil
        } else {
            guard let relay = try? RelayAddress(parsing: r.homeRelay) else { throw PayloadError(type, "home relay is not ID@host:port") }
            homeRelay = relay
        }
        guard r.version <= PayloadLimits.maximumRecordVersion else {
            throw PayloadError(type, "contact record version \(r.version) exceeds 2^53-1")
        }
        version = r.version
        publicKey = author
    }

    /// The record as protobuf, without unknown fields.
    public var proto: Tandem_V1_ContactRecord {
        var r = Tandem_V1_ContactRecord()
        r.publicKey = Data(publicKey)
        r.displayName = displayName
        r.addresses = addresses
        r.homeRelay = homeRelay?.description ?? ""
        r.version = version
        return r
    }

    /// What is stored: at most `PayloadLimits.maximumRecordBytes` by construction.
    public var canonicalBytes: [UInt8] { (try? proto.serializedBytes()) ?? [] }

    /// The version as stored (fits: at most 2^53-1).
    public var storedVersion: Int64 { Int64(version) }
}

public struct FriendRequestMessage: Equatable, Sendable {
    public let message: String
    public let contact: ContactRecord
    public init(payload: [UInt8], author: [UInt8]) throws {
        let m = try decode(Tandem_V1_FriendRequest.self, .friendRequest, payload)
        message = try text(m.message, max: PayloadLimits.messageBytes, .friendRequest, "message")
        guard m.hasContact else { throw PayloadError(.friendRequest, "no contact record") }
        contact = try ContactRecord(validating: m.contact, author: author, type: .friendRequest)
    }
}

public struct FriendAcceptMessage: Equatable, Sendable {
    public let contact: ContactRecord
    public init(payload: [UInt8], author: [UInt8]) throws {
        let m = try decode(Tandem_V1_FriendAccept.self, .friendAccept, payload)
        guard m.hasContact else { throw PayloadError(.friendAccept, "no contact record") }
        contact = try ContactRecord(validating: m.contact, author: author, type: .friendAccept)
    }
}

public struct ContactUpdateMessage: Equatable, Sendable {
    public let contact: ContactRecord
    public init(payload: [UInt8], author: [UInt8]) throws {
        let m = try decode(Tandem_V1_ContactUpdate.self, .contactUpdate, payload)
        guard m.hasContact else { throw PayloadError(.contactUpdate, "no contact record") }
        contact = try ContactRecord(validating: m.contact, author: author, type: .contactUpdate)
    }
}

/// FRIEND_DECLINE and FRIEND_REMOVE.
public struct FarewellMessage: Equatable, Sendable {
    public let reason: String
    public init(payload: [UInt8], type: MessageType) throws {
        let m = try decode(Tandem_V1_FriendFarewell.self, type, payload)
        reason = try text(m.reason, max: PayloadLimits.farewellReasonBytes, type, "reason")
    }
}

public struct PresenceMessage: Equatable, Sendable {
    public enum Status: String, Sendable { case idle, focusing, inChallenge = "in_challenge" }
    public let status: Status
    public let heartbeatSeconds: UInt32
    /// The sender's health today (0 … 100) when it shares it; nil when it does not (or is an older
    /// node). 0 is dead.
    public let health: Int?
    /// The sender takes ACKS on this link (README 12.5); false from an older node.
    public let takesAcks: Bool
    /// The sender takes MESSAGEs with the zero signature on this link (README 5.4); false from an
    /// older node.
    public let takesLinkAuthenticated: Bool
    /// The health state the shared health falls in.
    public var healthState: HealthPool.State? { health.map { HealthPool.State(health: $0) } }

    public init(payload: [UInt8]) throws {
        let m = try decode(Tandem_V1_Presence.self, .presence, payload)
        takesAcks = m.takesAcks
        takesLinkAuthenticated = m.takesLinkAuthenticated
        if m.hasHealth {
            guard m.health <= 100 else { throw PayloadError(.presence, "health of \(m.health) is out of range (0 … 100)") }
            health = Int(m.health)
        } else {
            health = nil
        }
        switch m.status {
        case .focusing: status = .focusing
        case .inChallenge: status = .inChallenge
        // Unknown statuses of a newer node read as idle (forward compatible).
        case .idle, .unspecified, .UNRECOGNIZED: status = .idle
        }
        guard PayloadLimits.heartbeatSecondsRange.contains(m.heartbeatSeconds) else {
            throw PayloadError(.presence, "heartbeat of \(m.heartbeatSeconds) s is out of range")
        }
        heartbeatSeconds = m.heartbeatSeconds
    }
}

public struct AckMessage: Equatable, Sendable {
    public let messageID: [UInt8]
    public init(payload: [UInt8]) throws {
        let m = try decode(Tandem_V1_Ack.self, .ack, payload)
        messageID = try id16(m.messageID, .ack, "message id")
    }
}

/// ACKS (0x0108, README 12.5): the frames of one handling transaction acknowledged in one signed
/// frame. 1 … 256 ids of 16 bytes, none twice; anything else is MALFORMED and counts for none of them.
public struct AcksMessage: Equatable, Sendable {
    /// Ids in one ACKS at most (more make more frames).
    public static let maximumIDs = 256
    /// In the order the sender listed them.
    public let messageIDs: [[UInt8]]

    public init(payload: [UInt8]) throws {
        let m = try decode(Tandem_V1_Acks.self, .acks, payload)
        guard !m.messageIds.isEmpty else { throw PayloadError(.acks, "no message ids") }
        guard m.messageIds.count <= Self.maximumIDs else {
            throw PayloadError(.acks, "\(m.messageIds.count) message ids, more than \(Self.maximumIDs)")
        }
        var ids: [[UInt8]] = []
        ids.reserveCapacity(m.messageIds.count)
        var seen = Set<[UInt8]>(minimumCapacity: m.messageIds.count)
        for data in m.messageIds {
            let id = try id16(data, .acks, "message id")
            guard seen.insert(id).inserted else { throw PayloadError(.acks, "message id \(hexString(id)) named twice") }
            ids.append(id)
        }
        messageIDs = ids
    }

    /// An ACKS naming `ids` (at most `maximumIDs` distinct ids of 16 bytes: checked, so what is
    /// built always decodes).
    public init(messageIDs ids: [[UInt8]]) throws {
        var m = Tandem_V1_Acks()
        m.messageIds = ids.map { Data($0) }
        try self.init(payload: (try? m.serializedBytes()) ?? [])  // a message of set fields always serializes
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_Acks()
        m.messageIds = messageIDs.map { Data($0) }
        return (try? m.serializedBytes()) ?? []  // a message of set fields always serializes
    }
}

// MARK: - Clock sync

public struct ClockProbeMessage: Equatable, Sendable {
    public let t1Us: Int64
    /// `nowUs`: the receiver's wall clock (µs).
    public init(payload: [UInt8], nowUs: Int64) throws {
        let m = try decode(Tandem_V1_ClockProbe.self, .clockProbe, payload)
        guard within(m.t1Us, of: UInt64(max(0, nowUs)), PayloadLimits.clockToleranceMicros) else {
            throw PayloadError(.clockProbe, "t1 is more than a day from our clock")
        }
        t1Us = Int64(m.t1Us)
    }
}

/// Four timestamps that fit the offset arithmetic: each within a day of our clock, t3 ≥ t2.
public struct ClockReplyMessage: Equatable, Sendable {
    public let t1Us: Int64
    public let t2Us: Int64
    public let t3Us: Int64
    public init(payload: [UInt8], nowUs: Int64) throws {
        let m = try decode(Tandem_V1_ClockReply.self, .clockReply, payload)
        let now = UInt64(max(0, nowUs))
        for (name, t) in [("t1", m.t1Us), ("t2", m.t2Us), ("t3", m.t3Us)] where !within(t, of: now, PayloadLimits.clockToleranceMicros) {
            throw PayloadError(.clockReply, "\(name) is more than a day from our clock")
        }
        guard m.t3Us >= m.t2Us else { throw PayloadError(.clockReply, "t3 is before t2") }
        t1Us = Int64(m.t1Us)
        t2Us = Int64(m.t2Us)
        t3Us = Int64(m.t3Us)
    }
}

// MARK: - Challenges

public struct ChallengeInviteMessage: Equatable, Sendable {
    public let challengeID: [UInt8]
    public let participants: [[UInt8]]
    public let durationMs: Int64
    /// 0: when the invitee accepts.
    public let startAtUs: Int64
    public let expiresAtUs: Int64
    public let message: String
    public let graceMs: Int64
    public let addressHints: [String]

    /// `nowUs`: the receiver's wall clock.
    public init(payload: [UInt8], nowUs: Int64) throws {
        let t = MessageType.challengeInvite
        let m = try decode(Tandem_V1_ChallengeInvite.self, t, payload)
        challengeID = try id16(m.challengeID, t, "challenge id")
        guard PayloadLimits.participantCount.contains(m.participants.count) else {
            throw PayloadError(t, "\(m.participants.count) participants (2 to 16)")
        }
        participants = try m.participants.map { try key32($0, t, "participant key") }
        guard Set(participants).count == participants.count else { throw PayloadError(t, "a participant is named twice") }
        guard PayloadLimits.challengeDurationMs.contains(m.durationMs) else { throw PayloadError(t, "duration \(m.durationMs) ms out of range") }
        durationMs = Int64(m.durationMs)
        let now = UInt64(max(0, nowUs))
        guard m.startAtUs == 0 || within(m.startAtUs, of: now, PayloadLimits.challengeTimeToleranceMicros) else {
            throw PayloadError(t, "start is more than 8 days from now")
        }
        startAtUs = Int64(m.startAtUs)
        guard within(m.expiresAtUs, of: now, PayloadLimits.challengeTimeToleranceMicros) else {
            throw PayloadError(t, "expiry is more than 8 days from now")
        }
        expiresAtUs = Int64(m.expiresAtUs)
        message = try text(m.message, max: PayloadLimits.messageBytes, t, "message")
        guard PayloadLimits.challengeGraceMs.contains(m.graceMs) else { throw PayloadError(t, "grace period \(m.graceMs) ms out of range") }
        graceMs = Int64(m.graceMs)
        guard m.addressHints.count <= m.participants.count else { throw PayloadError(t, "more address hints than participants") }
        for h in m.addressHints { _ = try text(h, max: PayloadLimits.addressBytes, t, "address hint") }
        addressHints = m.addressHints
    }
}

public struct ChallengeAnswerMessage: Equatable, Sendable {
    public let challengeID: [UInt8]
    public let accept: Bool
    public init(payload: [UInt8]) throws {
        let m = try decode(Tandem_V1_ChallengeAnswer.self, .challengeAnswer, payload)
        challengeID = try id16(m.challengeID, .challengeAnswer, "challenge id")
        accept = m.accept
    }
}

public struct ChallengeStartMessage: Equatable, Sendable {
    public let challengeID: [UInt8]
    public let startAtUs: Int64
    public let roster: [[UInt8]]
    public init(payload: [UInt8], nowUs: Int64) throws {
        let t = MessageType.challengeStart
        let m = try decode(Tandem_V1_ChallengeStart.self, t, payload)
        challengeID = try id16(m.challengeID, t, "challenge id")
        guard within(m.startAtUs, of: UInt64(max(0, nowUs)), PayloadLimits.challengeTimeToleranceMicros) else {
            throw PayloadError(t, "start is more than 8 days from now")
        }
        startAtUs = Int64(m.startAtUs)
        // A START with fewer than two people tells the invitees it expired; it may name just the inviter.
        guard (0...PayloadLimits.participantCount.upperBound).contains(m.roster.count) else { throw PayloadError(t, "roster of \(m.roster.count)") }
        roster = try m.roster.map { try key32($0, t, "roster key") }
        guard Set(roster).count == roster.count else { throw PayloadError(t, "a roster key is named twice") }
    }
}

public struct ChallengeCancelMessage: Equatable, Sendable {
    public let challengeID: [UInt8]
    public let reason: String
    public init(payload: [UInt8]) throws {
        let m = try decode(Tandem_V1_ChallengeCancel.self, .challengeCancel, payload)
        challengeID = try id16(m.challengeID, .challengeCancel, "challenge id")
        reason = try text(m.reason, max: PayloadLimits.reasonBytes, .challengeCancel, "reason")
    }
}

public struct ChallengeQuitMessage: Equatable, Sendable {
    public let challengeID: [UInt8]
    /// At most the longest duration (24 h); the machine caps it at the challenge's own.
    public let elapsedMs: Int64
    public let reason: String
    public init(payload: [UInt8]) throws {
        let m = try decode(Tandem_V1_ChallengeQuit.self, .challengeQuit, payload)
        challengeID = try id16(m.challengeID, .challengeQuit, "challenge id")
        guard m.elapsedMs <= PayloadLimits.challengeDurationMs.upperBound else {
            throw PayloadError(.challengeQuit, "elapsed \(m.elapsedMs) ms exceeds 24 h")
        }
        elapsedMs = Int64(m.elapsedMs)
        reason = try text(m.reason, max: PayloadLimits.reasonBytes, .challengeQuit, "reason")
    }
}

/// A signed outcome record (13.6): the record is canonical and within range (`Outcome.decode`).
public struct ChallengeOutcomeMessage: Equatable, Sendable {
    public let record: [UInt8]
    public let decoded: Tandem_V1_OutcomeRecord
    public let signature: [UInt8]
    public var challengeID: [UInt8] { Array(decoded.challengeID) }
    public init(payload: [UInt8]) throws {
        let t = MessageType.challengeOutcome
        let m = try decode(Tandem_V1_ChallengeOutcome.self, t, payload)
        guard m.record.count <= PayloadLimits.outcomeRecordBytes else { throw PayloadError(t, "outcome record too large") }
        record = Array(m.record)
        guard let r = Outcome.decode(record) else { throw PayloadError(t, "outcome record is malformed, out of range or not canonical") }
        decoded = r
        guard m.signature.count == 64 else { throw PayloadError(t, "signature is \(m.signature.count) bytes, not 64") }
        signature = Array(m.signature)
    }

    /// The message as the machine takes it.
    public var proto: Tandem_V1_ChallengeOutcome {
        var m = Tandem_V1_ChallengeOutcome()
        m.record = Data(record)
        m.signature = Data(signature)
        return m
    }
}

// MARK: - Relay (what a node receives from its relay)

public struct RelayGoodbyeMessage: Equatable, Sendable {
    public let reason: String
    public let retryAfterMs: Int64
    public init(payload: [UInt8]) throws {
        let t = MessageType.relayGoodbye
        let m = try decode(Tandem_V1_RelayGoodbye.self, t, payload)
        // A long reason is cut, not refused: the goodbye still says when to come back.
        reason = String(decoding: Array(m.reason.utf8.prefix(PayloadLimits.relayTextBytes)), as: UTF8.self)
        guard PayloadLimits.relayRetryAfterMs.contains(m.retryAfterMs) else {
            throw PayloadError(t, "retry after \(m.retryAfterMs) ms exceeds 1 h")
        }
        retryAfterMs = Int64(m.retryAfterMs)
    }
}
