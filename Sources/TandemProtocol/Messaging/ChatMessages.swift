import Foundation
import SwiftProtobuf

// Validated messaging payloads (Protocol/messages.md 3 and 4). Every payload becomes one of these
// values through one validating initialiser `init(payload:…)` that checks every length, integer and
// text against messages.md 4 and throws `PayloadError` (MALFORMED) otherwise. Integers a peer
// chooses are at most 2^53 - 1 (seqs, lamports, times) or 2^32 (file sizes), so the arithmetic the
// machines do on them is exact in Int64/UInt64. The sending side builds values with the memberwise
// initialisers (which check the same ranges with `precondition`: a local misuse) and encodes them
// with `payload`.

extension MessageType {
    public static let messagingRange: ClosedRange<UInt16> = 0x0501...0x05ff
    public var isMessage: Bool { Self.messagingRange.contains(rawValue) }

    public static let chatMessage = MessageType(rawValue: 0x0501)
    public static let chatForward = MessageType(rawValue: 0x0502)
    public static let chatReaction = MessageType(rawValue: 0x0503)
    public static let cheer = MessageType(rawValue: 0x0504)
    public static let readReceipt = MessageType(rawValue: 0x0505)
    public static let retract = MessageType(rawValue: 0x0506)
    public static let gapRequest = MessageType(rawValue: 0x0507)
    public static let conversationSettings = MessageType(rawValue: 0x0508)
    public static let fileOffer = MessageType(rawValue: 0x0509)
    public static let fileRequest = MessageType(rawValue: 0x050A)
    public static let fileChunk = MessageType(rawValue: 0x050B)
    public static let fileCancel = MessageType(rawValue: 0x050C)

    /// The messaging types; the node handles all of them (`handledMessageTypes`, in `known`). An
    /// older peer answers the file types UNKNOWN_TYPE (README 5.11): a sender must expect that.
    public static let messageTypes: [MessageType] = [
        .chatMessage, .chatForward, .chatReaction, .cheer, .readReceipt, .retract, .gapRequest,
        .conversationSettings, .fileOffer, .fileRequest, .fileChunk, .fileCancel,
        .deliveryReceipt,
    ]

    /// The messaging types the node's message service handles (in `known`).
    public static let handledMessageTypes: Set<MessageType> = [
        .chatMessage, .chatForward, .chatReaction, .cheer, .readReceipt, .retract, .gapRequest, .conversationSettings,
        .fileOffer, .fileRequest, .fileChunk, .fileCancel,
        .deliveryReceipt,
    ]

    public static let messageNames: [UInt16: String] = [
        0x0501: "MESSAGE", 0x0502: "FORWARD", 0x0503: "REACTION", 0x0504: "CHEER", 0x0505: "READ",
        0x0506: "RETRACT", 0x0507: "GAP_REQUEST", 0x0508: "CONVERSATION_SETTINGS", 0x0509: "FILE_OFFER",
        0x050A: "FILE_REQUEST", 0x050B: "FILE_CHUNK", 0x050C: "FILE_CANCEL",
        0x050D: "DELIVERED",
    ]

    /// The messaging types a sender keeps in its outbox until they are acknowledged (messages.md 3).
    /// GAP_REQUEST, FILE_REQUEST and FILE_CHUNK are sent directly on a link and repeated by their
    /// machines instead.
    public var isAcknowledgedMessage: Bool {
        isMessage && self != .gapRequest && self != .fileRequest && self != .fileChunk
    }
}

/// messages.md 4.
public enum ChatLimits {
    /// Largest payload of a messaging type, except FORWARD and FILE_CHUNK.
    public static let maximumPayloadBytes = 20_480
    /// FORWARD: the inner envelope (at most `maximumPayloadBytes` of payload) and its wrapping.
    public static let maximumForwardPayloadBytes = 24_576
    public static let maximumForwardedEnvelopeBytes = maximumPayloadBytes + Envelope.minimumLength
    /// FILE_CHUNK: a chunk, its path and its ids.
    public static let maximumChunkPayloadBytes = chunkBytes + 1_024
    public static let textBytes = 16_384
    public static let emojiBytes = 64
    public static let cheerTextBytes = 280
    /// Seqs, lamports, versions and times: at most 2^53 - 1 (exact in Int64 and in JSON).
    public static let maximumCounter: UInt64 = (1 << 53) - 1
    public static let disappearAfterMs: ClosedRange<UInt64> = 30_000...31_536_000_000
    public static let gapRanges = 16
    public static let seqsPerGapRange: UInt64 = 1_024
    public static let fileNameBytes = 255
    public static let maximumFileBytes: UInt64 = 1 << 32
    public static let chunkBytes = 262_144
    public static let maximumChunks = Int((maximumFileBytes + UInt64(chunkBytes) - 1) / UInt64(chunkBytes))
    /// ceil(log2(maximumChunks)): the longest path in the chunk tree.
    public static let maximumProofHashes = 14
    public static let fileRequestRanges = 64

    // Per-friend bounds a receiver enforces (messages.md 4.2); defaults of the reference node.
    /// MESSAGE, REACTION, CHEER, RETRACT frames per friend: a bucket of this many …
    public static let messageBurst = 600
    /// … refilled at this many per minute.
    public static let messagesPerMinute = 300
    /// Text and metadata stored per conversation partner (bytes), past which new messages are refused.
    public static let storedBytesPerFriend: Int64 = 256 * 1024 * 1024
    /// Offers not yet complete or cancelled, per friend and in all.
    public static let pendingFilesPerFriend = 8
    public static let pendingFilesTotal = 64
    /// Messages held above a gap, per conversation and author.
    public static let heldAboveGap: UInt64 = 1_024
}

// MARK: - decoding helpers

private func decodeChat<M: SwiftProtobuf.Message>(_ m: M.Type, _ type: MessageType, _ payload: [UInt8],
                                                  max: Int = ChatLimits.maximumPayloadBytes) throws -> M {
    guard payload.count <= max else { throw PayloadError(type, "payload of \(payload.count) bytes exceeds \(max)") }
    do {
        return try M(serializedBytes: payload)
    } catch {
        throw PayloadError(type, "payload is not a \(M.protoMessageName)")
    }
}

private func bytes16(_ d: Data, _ type: MessageType, _ what: String) throws -> [UInt8] {
    guard d.count == 16 else { throw PayloadError(type, "\(what) is \(d.count) bytes, not 16") }
    return Array(d)
}

private func optional16(_ d: Data, _ type: MessageType, _ what: String) throws -> [UInt8]? {
    d.isEmpty ? nil : try bytes16(d, type, what)
}

private func bytes32(_ d: Data, _ type: MessageType, _ what: String) throws -> [UInt8] {
    guard d.count == 32 else { throw PayloadError(type, "\(what) is \(d.count) bytes, not 32") }
    return Array(d)
}

private func counter(_ v: UInt64, _ type: MessageType, _ what: String, minimum: UInt64 = 1) throws -> UInt64 {
    guard v >= minimum, v <= ChatLimits.maximumCounter else {
        throw PayloadError(type, "\(what) \(v) out of range \(minimum)…2^53-1")
    }
    return v
}

private func chatText(_ s: String, _ type: MessageType, max: Int = ChatLimits.textBytes, allowEmpty: Bool = false) throws -> String {
    do {
        return try ChatText.normalised(s, maximumBytes: max, allowEmpty: allowEmpty)
    } catch {
        throw PayloadError(type, error.description)
    }
}

private func emoji(_ s: String, _ type: MessageType) throws -> String {
    guard ChatText.isEmoji(s) else { throw PayloadError(type, "emoji is longer than \(ChatLimits.emojiBytes) bytes or holds controls or spaces") }
    return s.precomposedStringWithCanonicalMapping
}

private func serialize(_ m: some SwiftProtobuf.Message) -> [UInt8] {
    // Encoding a message built from validated values cannot fail (no required fields, valid UTF-8).
    (try? m.serializedBytes()) ?? []
}

/// A challenge's id, naming its group thread; nil for the direct conversation.
public typealias ThreadID = [UInt8]

// MARK: - MESSAGE

/// MESSAGE (0x0501).
public struct ChatMessageBody: Equatable, Sendable {
    /// nil: the direct conversation between author and recipient; else the challenge's thread.
    public let challengeID: ThreadID?
    public let seq: UInt64
    public let lamport: UInt64
    /// NFC, 1 … 16 KiB.
    public let text: String
    public let replyTo: [UInt8]?
    public let sentAtMs: UInt64
    /// 0 (kept), or the disappearing timer the author's side applied.
    public let expiresAfterMs: UInt64

    public init(challengeID: ThreadID?, seq: UInt64, lamport: UInt64, text: String, replyTo: [UInt8]?,
                sentAtMs: UInt64, expiresAfterMs: UInt64 = 0) {
        precondition(challengeID.map { $0.count == 16 } ?? true && replyTo.map { $0.count == 16 } ?? true)
        precondition((1...ChatLimits.maximumCounter).contains(seq) && (1...ChatLimits.maximumCounter).contains(lamport))
        precondition(sentAtMs <= ChatLimits.maximumCounter)
        precondition(expiresAfterMs == 0 || ChatLimits.disappearAfterMs.contains(expiresAfterMs))
        self.challengeID = challengeID
        self.seq = seq
        self.lamport = lamport
        self.text = text
        self.replyTo = replyTo
        self.sentAtMs = sentAtMs
        self.expiresAfterMs = expiresAfterMs
    }

    /// `createdAtMs`: the envelope's `created_at` (already within rule 8): a message cannot have
    /// been sent after the envelope that carries it was signed.
    public init(payload: [UInt8], createdAtMs: UInt64) throws {
        let t = MessageType.chatMessage
        let m = try decodeChat(Tandem_V1_ChatMessage.self, t, payload)
        challengeID = try optional16(m.challengeID, t, "challenge id")
        seq = try counter(m.seq, t, "seq")
        lamport = try counter(m.lamport, t, "lamport")
        text = try chatText(m.text, t)
        replyTo = try optional16(m.replyTo, t, "reply_to")
        sentAtMs = try counter(m.sentAtMs, t, "sent_at_ms")
        guard sentAtMs <= createdAtMs else { throw PayloadError(t, "sent_at_ms \(sentAtMs) is after the envelope's created_at \(createdAtMs)") }
        guard m.expiresAfterMs == 0 || ChatLimits.disappearAfterMs.contains(m.expiresAfterMs) else {
            throw PayloadError(t, "expires_after_ms \(m.expiresAfterMs) out of range")
        }
        expiresAfterMs = m.expiresAfterMs
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_ChatMessage()
        m.challengeID = Data(challengeID ?? [])
        m.seq = seq
        m.lamport = lamport
        m.text = text
        m.replyTo = Data(replyTo ?? [])
        m.sentAtMs = sentAtMs
        m.expiresAfterMs = expiresAfterMs
        return serialize(m)
    }
}

// MARK: - REACTION, CHEER, RETRACT

/// REACTION (0x0503): an emoji on a message; empty takes the author's reaction back.
public struct ChatReactionMessage: Equatable, Sendable {
    public let challengeID: ThreadID?
    public let messageID: [UInt8]
    public let emoji: String

    public init(challengeID: ThreadID?, messageID: [UInt8], emoji: String) {
        precondition(messageID.count == 16 && ChatText.isEmoji(emoji))
        self.challengeID = challengeID
        self.messageID = messageID
        self.emoji = emoji
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.chatReaction
        let m = try decodeChat(Tandem_V1_ChatReaction.self, t, payload)
        challengeID = try optional16(m.challengeID, t, "challenge id")
        messageID = try bytes16(m.messageID, t, "message id")
        emoji = try TandemProtocol.emoji(m.emoji, t)
    }

    public var isRemoval: Bool { emoji.isEmpty }

    public var payload: [UInt8] {
        var m = Tandem_V1_ChatReaction()
        m.challengeID = Data(challengeID ?? [])
        m.messageID = Data(messageID)
        m.emoji = emoji
        return serialize(m)
    }
}

/// CHEER (0x0504): on a ledger entry, named by its challenge and whose result it is.
public struct CheerMessage: Equatable, Sendable {
    public let challengeID: [UInt8]
    public let subject: [UInt8]
    public let emoji: String
    public let text: String

    public init(challengeID: [UInt8], subject: [UInt8], emoji: String, text: String) {
        precondition(challengeID.count == 16 && subject.count == 32 && ChatText.isEmoji(emoji))
        precondition(text.utf8.count <= ChatLimits.cheerTextBytes)
        self.challengeID = challengeID
        self.subject = subject
        self.emoji = emoji
        self.text = text
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.cheer
        let m = try decodeChat(Tandem_V1_Cheer.self, t, payload)
        challengeID = try bytes16(m.challengeID, t, "challenge id")
        subject = try bytes32(m.subject, t, "subject")
        emoji = try TandemProtocol.emoji(m.emoji, t)
        text = try chatText(m.text, t, max: ChatLimits.cheerTextBytes, allowEmpty: true)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_Cheer()
        m.challengeID = Data(challengeID)
        m.subject = Data(subject)
        m.emoji = emoji
        m.text = text
        return serialize(m)
    }
}

/// RETRACT (0x0506): the author takes one of its own messages back.
public struct RetractMessage: Equatable, Sendable {
    public let challengeID: ThreadID?
    public let messageID: [UInt8]

    public init(challengeID: ThreadID?, messageID: [UInt8]) {
        precondition(messageID.count == 16 && (challengeID.map { $0.count == 16 } ?? true))
        self.challengeID = challengeID
        self.messageID = messageID
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.retract
        let m = try decodeChat(Tandem_V1_Retract.self, t, payload)
        challengeID = try optional16(m.challengeID, t, "challenge id")
        messageID = try bytes16(m.messageID, t, "message id")
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_Retract()
        m.challengeID = Data(challengeID ?? [])
        m.messageID = Data(messageID)
        return serialize(m)
    }
}

// MARK: - READ, SETTINGS

/// READ (0x0505): the recipient's direct messages up to `readUpToSeq` were shown.
public struct ReadReceiptMessage: Equatable, Sendable {
    public let readUpToSeq: UInt64
    public let readAtMs: UInt64

    public init(readUpToSeq: UInt64, readAtMs: UInt64) {
        precondition((1...ChatLimits.maximumCounter).contains(readUpToSeq) && readAtMs <= ChatLimits.maximumCounter)
        self.readUpToSeq = readUpToSeq
        self.readAtMs = readAtMs
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.readReceipt
        let m = try decodeChat(Tandem_V1_ReadReceipt.self, t, payload)
        readUpToSeq = try counter(m.readUpToSeq, t, "read_up_to_seq")
        readAtMs = try counter(m.readAtMs, t, "read_at_ms")
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_ReadReceipt()
        m.readUpToSeq = readUpToSeq
        m.readAtMs = readAtMs
        return serialize(m)
    }
}

/// CONVERSATION_SETTINGS (0x0508): the direct conversation's disappearing timer (0 = off).
public struct ConversationSettingsMessage: Equatable, Sendable {
    public let disappearAfterMs: UInt64
    public let version: UInt64

    public init(disappearAfterMs: UInt64, version: UInt64) {
        precondition(disappearAfterMs == 0 || ChatLimits.disappearAfterMs.contains(disappearAfterMs))
        precondition((1...ChatLimits.maximumCounter).contains(version))
        self.disappearAfterMs = disappearAfterMs
        self.version = version
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.conversationSettings
        let m = try decodeChat(Tandem_V1_ConversationSettings.self, t, payload)
        guard m.disappearAfterMs == 0 || ChatLimits.disappearAfterMs.contains(m.disappearAfterMs) else {
            throw PayloadError(t, "disappear_after_ms \(m.disappearAfterMs) out of range")
        }
        disappearAfterMs = m.disappearAfterMs
        version = try counter(m.version, t, "version")
    }

    /// Last writer wins: the higher version, ties broken by the larger author key (bytewise), so
    /// both sides settle on the same value whatever order the two changes arrive in.
    public static func wins(version: UInt64, author: [UInt8], over current: (version: UInt64, author: [UInt8])?) -> Bool {
        guard let current else { return true }
        if version != current.version { return version > current.version }
        return current.author.lexicographicallyPrecedes(author)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_ConversationSettings()
        m.disappearAfterMs = disappearAfterMs
        m.version = version
        return serialize(m)
    }
}

// MARK: - GAP_REQUEST

/// A closed range of seqs, first ≤ last, at most `ChatLimits.seqsPerGapRange` long.
public struct SeqRange: Equatable, Hashable, Sendable {
    public let first: UInt64
    public let last: UInt64
    public init(first: UInt64, last: UInt64) {
        precondition(1 <= first && first <= last && last <= ChatLimits.maximumCounter)
        self.first = first
        self.last = last
    }
    public var count: UInt64 { last - first + 1 }
    public func contains(_ seq: UInt64) -> Bool { first <= seq && seq <= last }
}

/// GAP_REQUEST (0x0507): send `author`'s messages in `ranges` again.
public struct GapRequestMessage: Equatable, Sendable {
    public let challengeID: ThreadID?
    public let author: [UInt8]
    public let ranges: [SeqRange]

    public init(challengeID: ThreadID?, author: [UInt8], ranges: [SeqRange]) {
        precondition(author.count == 32 && (1...ChatLimits.gapRanges).contains(ranges.count))
        self.challengeID = challengeID
        self.author = author
        self.ranges = ranges
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.gapRequest
        let m = try decodeChat(Tandem_V1_GapRequest.self, t, payload)
        challengeID = try optional16(m.challengeID, t, "challenge id")
        author = try bytes32(m.author, t, "author")
        guard (1...ChatLimits.gapRanges).contains(m.ranges.count) else {
            throw PayloadError(t, "\(m.ranges.count) ranges (1…\(ChatLimits.gapRanges))")
        }
        var out: [SeqRange] = []
        for r in m.ranges {
            let first = try counter(r.first, t, "range first"), last = try counter(r.last, t, "range last")
            guard first <= last, last - first < ChatLimits.seqsPerGapRange else {
                throw PayloadError(t, "range \(first)…\(last) is reversed or longer than \(ChatLimits.seqsPerGapRange)")
            }
            if let previous = out.last, first <= previous.last.addingSaturated(1) {
                throw PayloadError(t, "ranges are not ascending and apart")
            }
            out.append(SeqRange(first: first, last: last))
        }
        ranges = out
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_GapRequest()
        m.challengeID = Data(challengeID ?? [])
        m.author = Data(author)
        m.ranges = ranges.map { r in
            var p = Tandem_V1_SeqRange()
            p.first = r.first
            p.last = r.last
            return p
        }
        return serialize(m)
    }
}

extension UInt64 {
    @inlinable func addingSaturated(_ other: UInt64) -> UInt64 {
        let (r, o) = addingReportingOverflow(other)
        return o ? .max : r
    }
}

// MARK: - FORWARD

/// FORWARD (0x0502): a frame of a challenge's thread, signed by its author, forwarded by the inviter.
/// Checked here: the inner envelope parses, is a MESSAGE, REACTION, RETRACT or FILE_OFFER of the same thread,
/// its signature verifies, it is addressed to the forwarder (the outer author), and its payload
/// passes its own validating initialiser. Left to the flow (it needs the challenge): the forwarder
/// is the challenge's inviter and the inner author one of its participants.
public struct ChatForwardMessage: Equatable, Sendable {
    public enum Content: Equatable, Sendable {
        case message(ChatMessageBody)
        case reaction(ChatReactionMessage)
        case retract(RetractMessage)
        /// A file offered in the thread (messages.md 7.7): fetched from the forwarder.
        case fileOffer(FileOfferMessage)
    }

    public let challengeID: [UInt8]
    /// The author's envelope, byte for byte (`inner.bytes`).
    public let inner: Envelope
    public let content: Content

    public init(challengeID: [UInt8], inner: Envelope, content: Content) {
        precondition(challengeID.count == 16)
        self.challengeID = challengeID
        self.inner = inner
        self.content = content
    }

    /// `forwarder`: the outer envelope's author.
    public init(payload: [UInt8], forwarder: [UInt8]) throws {
        let t = MessageType.chatForward
        let m = try decodeChat(Tandem_V1_ChatForward.self, t, payload, max: ChatLimits.maximumForwardPayloadBytes)
        challengeID = try bytes16(m.challengeID, t, "challenge id")
        guard m.envelope.count <= ChatLimits.maximumForwardedEnvelopeBytes else {
            throw PayloadError(t, "forwarded envelope of \(m.envelope.count) bytes exceeds \(ChatLimits.maximumForwardedEnvelopeBytes)")
        }
        let e: Envelope
        do {
            e = try Envelope.parse(Array(m.envelope))
        } catch {
            throw PayloadError(t, "forwarded envelope does not parse")
        }
        guard e.recipient == forwarder else { throw PayloadError(t, "forwarded envelope is not addressed to the forwarder") }
        guard e.author != forwarder else { throw PayloadError(t, "the forwarder forwards its own frame") }
        let thread: ThreadID?
        switch e.type {
        case .chatMessage:
            let body = try ChatMessageBody(payload: e.payload, createdAtMs: e.createdAt)
            thread = body.challengeID
            content = .message(body)
        case .chatReaction:
            let r = try ChatReactionMessage(payload: e.payload)
            thread = r.challengeID
            content = .reaction(r)
        case .retract:
            let r = try RetractMessage(payload: e.payload)
            thread = r.challengeID
            content = .retract(r)
        case .fileOffer:
            let o = try FileOfferMessage(payload: e.payload)
            thread = o.challengeID
            content = .fileOffer(o)
        default:
            throw PayloadError(t, "forwarded envelope is of type \(e.type), not MESSAGE, REACTION, RETRACT or FILE_OFFER")
        }
        guard thread == challengeID else { throw PayloadError(t, "forwarded frame belongs to another conversation") }
        // Last: the costly check, once everything cheap has passed.
        guard e.hasValidSignature else { throw PayloadError(t, "forwarded envelope's signature does not verify") }
        inner = e
    }

    /// The inner envelope's type, read without checking anything else (nil: no envelope to read).
    /// Only for routing: the FORWARD is decoded and checked by `init(payload:forwarder:)` after.
    public static func innerType(payload: [UInt8]) -> MessageType? {
        guard payload.count <= ChatLimits.maximumForwardPayloadBytes,
              let m = try? Tandem_V1_ChatForward(serializedBytes: payload),  // malformed: the decoder says why later
              let e = try? Envelope.parse(Array(m.envelope)) else { return nil }  // as above
        return e.type
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_ChatForward()
        m.challengeID = Data(challengeID)
        m.envelope = Data(inner.bytes)
        return serialize(m)
    }
}
