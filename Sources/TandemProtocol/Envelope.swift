import NIOCore
import Sodium

/// Message types carried in the envelope's type field (Protocol/README.md, "Message types").
public struct MessageType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The families of types, by high byte (Protocol/README.md 5.8).
    public static let linkRange: ClosedRange<UInt16> = 0x0001...0x00ff
    public static let friendsRange: ClosedRange<UInt16> = 0x0101...0x01ff
    public static let challengeRange: ClosedRange<UInt16> = 0x0201...0x02ff
    public static let relayRange: ClosedRange<UInt16> = 0x0301...0x03ff

    public var isChallenge: Bool { Self.challengeRange.contains(rawValue) }

    /// Types whose payloads carry up to 256 KiB of blob data, and which only ever travel on a link
    /// to their recipient: they are authenticated by the link, not signed (Protocol/README.md 5.4).
    /// Their signature field is 64 zero bytes, and a receiver accepts one only from the link whose
    /// Secret Handshake proved the author's key. Signing and verifying cost a BLAKE2b pass each
    /// over 256 KiB (the digest-signed scheme this replaced): a quarter of a backup push's CPU, for
    /// a proof no one asks for (pieces are never forwarded). Every other type, known or not, is signed.
    public var isLinkAuthenticated: Bool {
        rawValue == 0x0404 || rawValue == 0x040D   // BACKUP_PIECE, BACKUP_FETCHED
            || rawValue == 0x050B                  // FILE_CHUNK (Protocol/messages.md 7.3: its hash-tree path proves its content)
    }

    /// Types that may go either way: signed as every other type, or — on a link whose Secret
    /// Handshake proved the author, to a peer that announced in its PRESENCE that it takes them
    /// (`takes_link_authenticated`) — with the zero signature of a link-authenticated type
    /// (Protocol/README.md 5.4). MESSAGE (`0x0501`): a direct message to a friend is signed only
    /// where it must be shown to a third party, which is when it leaves by relay mail (the sender
    /// signs it then) or reaches an older node; a thread's MESSAGE is forwarded by the inviter and is
    /// always signed. ACK and ACKS (`0x0107`, `0x0108`): they only ever travel on a link to the
    /// author of what they acknowledge. Signing and verifying a MESSAGE were a third of a message's
    /// CPU on both nodes together, an ACK's a tenth of one message's way (Protocol/messages.md 11.6,
    /// session 13).
    public var mayBeLinkAuthenticated: Bool { rawValue == 0x0501 || rawValue == 0x0107 || rawValue == 0x0108 }

    public static let error = MessageType(rawValue: 0x0001)
    public static let ping = MessageType(rawValue: 0x0002)
    public static let pong = MessageType(rawValue: 0x0003)
    public static let clockProbe = MessageType(rawValue: 0x0004)
    public static let clockReply = MessageType(rawValue: 0x0005)
    // Friends and presence (0x01xx).
    public static let friendRequest = MessageType(rawValue: 0x0101)
    public static let friendAccept = MessageType(rawValue: 0x0102)
    public static let friendDecline = MessageType(rawValue: 0x0103)
    public static let friendRemove = MessageType(rawValue: 0x0104)
    public static let contactUpdate = MessageType(rawValue: 0x0105)
    public static let presence = MessageType(rawValue: 0x0106)
    public static let ack = MessageType(rawValue: 0x0107)
    /// Several frames acknowledged in one (README 12.5), to a peer that announced it takes them.
    public static let acks = MessageType(rawValue: 0x0108)
    // Challenges (0x02xx).
    public static let challengeInvite = MessageType(rawValue: 0x0201)
    public static let challengeAnswer = MessageType(rawValue: 0x0202)
    public static let challengeStart = MessageType(rawValue: 0x0203)
    public static let challengeCancel = MessageType(rawValue: 0x0204)
    public static let challengeQuit = MessageType(rawValue: 0x0205)
    public static let challengeOutcome = MessageType(rawValue: 0x0206)
    // Relay links (0x03xx): between a node and a tandem-relay.
    public static let relayRegister = MessageType(rawValue: 0x0301)
    public static let relayRegistered = MessageType(rawValue: 0x0302)
    public static let tunnelOpen = MessageType(rawValue: 0x0303)
    public static let relayReply = MessageType(rawValue: 0x0304)
    public static let tunnelIncoming = MessageType(rawValue: 0x0305)
    public static let mailboxPut = MessageType(rawValue: 0x0306)
    public static let mailboxItem = MessageType(rawValue: 0x0307)
    public static let mailboxAck = MessageType(rawValue: 0x0308)
    public static let relayGoodbye = MessageType(rawValue: 0x0309)

    /// Types this implementation understands.
    public static let known: Set<MessageType> = Set<MessageType>([.error, .ping, .pong, .friendRequest, .friendAccept, .friendDecline,
                                                 .friendRemove, .contactUpdate, .presence, .ack, .acks, .clockProbe, .clockReply,
                                                 .challengeInvite, .challengeAnswer, .challengeStart, .challengeCancel,
                                                 .challengeQuit, .challengeOutcome, .relayRegister, .relayRegistered,
                                                 .tunnelOpen, .relayReply, .tunnelIncoming, .mailboxPut, .mailboxItem,
                                                 .mailboxAck, .relayGoodbye]).union(backupTypes).union(handledMessageTypes)

    public var description: String {
        switch self {
        case .error: return "ERROR"
        case .ping: return "PING"
        case .pong: return "PONG"
        case .friendRequest: return "FRIEND_REQUEST"
        case .friendAccept: return "FRIEND_ACCEPT"
        case .friendDecline: return "FRIEND_DECLINE"
        case .friendRemove: return "FRIEND_REMOVE"
        case .contactUpdate: return "CONTACT_UPDATE"
        case .presence: return "PRESENCE"
        case .ack: return "ACK"
        case .acks: return "ACKS"
        case .clockProbe: return "CLOCK_PROBE"
        case .clockReply: return "CLOCK_REPLY"
        case .challengeInvite: return "CHALLENGE_INVITE"
        case .challengeAnswer: return "CHALLENGE_ANSWER"
        case .challengeStart: return "CHALLENGE_START"
        case .challengeCancel: return "CHALLENGE_CANCEL"
        case .challengeQuit: return "CHALLENGE_QUIT"
        case .challengeOutcome: return "CHALLENGE_OUTCOME"
        case .relayRegister: return "RELAY_REGISTER"
        case .relayRegistered: return "RELAY_REGISTERED"
        case .tunnelOpen: return "TUNNEL_OPEN"
        case .relayReply: return "RELAY_REPLY"
        case .tunnelIncoming: return "TUNNEL_INCOMING"
        case .mailboxPut: return "MAILBOX_PUT"
        case .mailboxItem: return "MAILBOX_ITEM"
        case .mailboxAck: return "MAILBOX_ACK"
        case .relayGoodbye: return "RELAY_GOODBYE"
        default: return "0x" + hexString([UInt8(rawValue >> 8), UInt8(rawValue & 0xff)])
        }
    }
}

/// A 16-byte random message id.
public struct MessageID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) {
        precondition(bytes.count == 16)
        self.bytes = bytes
    }

    public static func random() -> MessageID {
        MessageID(bytes: Sodium.randomBytes(16))
    }

    public var description: String { hexString(bytes) }
}

/// Why an envelope could not be read or was refused. `code` is what the sender is told.
public struct FrameRejection: Error, CustomStringConvertible, Equatable, Sendable {
    public let code: Tandem_V1_ErrorCode
    public let detail: String
    /// What could be read of the offending frame, for the error reply.
    public var messageID: MessageID?
    /// The frame's author, set only once its signature has verified: the error reply is addressed
    /// to it. Without it the reply goes to the link peer (Protocol/README.md, "Error replies").
    public var author: [UInt8]?
    public var type: MessageType?

    public init(_ code: Tandem_V1_ErrorCode, _ detail: String,
                messageID: MessageID? = nil, author: [UInt8]? = nil, type: MessageType? = nil) {
        self.code = code
        self.detail = detail
        self.messageID = messageID
        self.author = author
        self.type = type
    }

    public var description: String { "\(code): \(detail)" }
}

/// A signed envelope: the body of a Tandem frame.
///
/// ```
/// 0   u8    version (1)
/// 1   u16   type
/// 3   16    message id
/// 19  32    author Ed25519 public key
/// 51  32    recipient Ed25519 public key
/// 83  u64   created_at, ms since the Unix epoch
/// 91  u32   payload length P
/// 95  P     payload (protobuf)
/// 95+P 64   Ed25519 signature over "tandem-frame-v1\0" ‖ bytes [0, 95+P)
/// ```
/// A link-authenticated type (`MessageType.isLinkAuthenticated`) carries 64 zero bytes instead,
/// and is accepted only from the link whose handshake proved its author (Protocol/README.md 5.4).
/// The envelope keeps the exact bytes it was read from, so it verifies after storing or forwarding.
public struct Envelope: Sendable, Equatable {
    public static let headerLength = 95
    public static let signatureLength = 64
    public static let minimumLength = headerLength + signatureLength
    public static let signingDomain: [UInt8] = Array("tandem-frame-v1".utf8) + [0]
    /// The signature field of a link-authenticated envelope.
    public static let linkAuthenticatedSignature = [UInt8](repeating: 0, count: signatureLength)

    public let version: UInt8
    public let type: MessageType
    public let messageID: MessageID
    public let author: [UInt8]
    public let recipient: [UInt8]
    public let createdAt: UInt64
    public let payload: [UInt8]
    public let signature: [UInt8]
    /// The envelope exactly as carried (without the 4-byte length prefix).
    public let bytes: [UInt8]

    /// Builds and signs a new envelope; one of a link-authenticated type gets the zero signature
    /// (it must go only on a link to `recipient` that `author` opened or accepted).
    public static func sign(type: MessageType, messageID: MessageID = .random(), author: SigningKeyPair,
                            recipient: [UInt8], createdAt: UInt64, payload: [UInt8]) -> Envelope {
        precondition(recipient.count == 32)
        var bytes = head(type: type, messageID: messageID, author: author.publicKey, recipient: recipient,
                         createdAt: createdAt, payload: payload)
        let signature = type.isLinkAuthenticated
            ? linkAuthenticatedSignature : author.sign(signingDomain + bytes)
        bytes.append(contentsOf: signature)
        return Envelope(version: TandemConstants.protocolVersion, type: type, messageID: messageID,
                        author: author.publicKey, recipient: recipient, createdAt: createdAt,
                        payload: payload, signature: signature, bytes: bytes)
    }

    /// The envelope's bytes before its signature (the part a signature covers, after its domain tag),
    /// with room for the signature.
    private static func head(type: MessageType, messageID: MessageID, author: [UInt8], recipient: [UInt8],
                             createdAt: UInt64, payload: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(minimumLength + payload.count)
        bytes.append(TandemConstants.protocolVersion)
        appendBigEndian(&bytes, type.rawValue)
        bytes.append(contentsOf: messageID.bytes)
        bytes.append(contentsOf: author)
        bytes.append(contentsOf: recipient)
        appendBigEndian(&bytes, createdAt)
        appendBigEndian(&bytes, UInt32(payload.count))
        bytes.append(contentsOf: payload)
        return bytes
    }

    private init(version: UInt8, type: MessageType, messageID: MessageID, author: [UInt8], recipient: [UInt8],
                 createdAt: UInt64, payload: [UInt8], signature: [UInt8], bytes: [UInt8]) {
        self.version = version
        self.type = type
        self.messageID = messageID
        self.author = author
        self.recipient = recipient
        self.createdAt = createdAt
        self.payload = payload
        self.signature = signature
        self.bytes = bytes
    }

    /// Builds an envelope of a type that may go link-authenticated (`MessageType.mayBeLinkAuthenticated`)
    /// with the zero signature, unsigned: before it leaves on a link whose peer does not take such
    /// frames, or by relay mail, `signed(by:)` signs it (the outbox does, at the egress).
    public static func unsigned(type: MessageType, messageID: MessageID = .random(), author: [UInt8],
                                recipient: [UInt8], createdAt: UInt64, payload: [UInt8]) -> Envelope {
        precondition(recipient.count == 32 && author.count == 32 && type.mayBeLinkAuthenticated)
        var bytes = head(type: type, messageID: messageID, author: author, recipient: recipient,
                         createdAt: createdAt, payload: payload)
        bytes.append(contentsOf: linkAuthenticatedSignature)
        return Envelope(version: TandemConstants.protocolVersion, type: type, messageID: messageID,
                        author: author, recipient: recipient, createdAt: createdAt,
                        payload: payload, signature: linkAuthenticatedSignature, bytes: bytes)
    }

    /// Whether the signature field is the zero signature (a link-authenticated frame, or one of a
    /// type that may be, not signed yet).
    public var hasZeroSignature: Bool {
        var any: UInt8 = 0
        for b in signature { any |= b }
        return signature.count == Self.signatureLength && any == 0
    }

    /// Whether the frame must be signed before it goes where its author's link does not vouch
    /// for it: one of a type that may go link-authenticated, still with the zero signature.
    public var needsSignatureOffLink: Bool { type.mayBeLinkAuthenticated && hasZeroSignature }

    /// A new envelope, signed, or unsigned when `onLink` says the link it goes on vouches for it (a
    /// type that may go either way, on a link whose peer announced `takes_link_authenticated`).
    public static func make(type: MessageType, messageID: MessageID = .random(), author: SigningKeyPair,
                            recipient: [UInt8], createdAt: UInt64, payload: [UInt8], unsignedOnLink: Bool) -> Envelope {
        unsignedOnLink && type.mayBeLinkAuthenticated
            ? unsigned(type: type, messageID: messageID, author: author.publicKey, recipient: recipient,
                       createdAt: createdAt, payload: payload)
            : sign(type: type, messageID: messageID, author: author, recipient: recipient, createdAt: createdAt, payload: payload)
    }

    /// This envelope signed by its author (`author` must hold the envelope's author key): the same
    /// bytes before the signature, so the same frame (id, created_at, payload) for the receiver's
    /// replay cache and handled marks. A frame already signed, or of a type that is never signed,
    /// is returned as it is.
    public func signed(by author: SigningKeyPair) -> Envelope {
        guard needsSignatureOffLink, author.publicKey == self.author else { return self }
        let head = Array(bytes[0..<(bytes.count - Self.signatureLength)])
        let signature = author.sign(Self.signingDomain + head)
        return Envelope(version: version, type: type, messageID: messageID, author: self.author, recipient: recipient,
                        createdAt: createdAt, payload: payload, signature: signature, bytes: head + signature)
    }

    /// Reads the layout of an envelope (no signature check). Throws `UNSUPPORTED_VERSION` when the
    /// version byte is not 1 (nothing else is interpreted then) and `MALFORMED` when the layout
    /// does not add up.
    public static func parse(_ bytes: [UInt8]) throws -> Envelope {
        guard let version = bytes.first else {
            throw FrameRejection(.malformed, "empty envelope")
        }
        guard version == TandemConstants.protocolVersion else {
            throw FrameRejection(.unsupportedVersion, "envelope version \(version) is not supported (this node speaks 1)")
        }
        guard bytes.count >= minimumLength else {
            throw FrameRejection(.malformed, "envelope of \(bytes.count) bytes is shorter than the minimum \(minimumLength)")
        }
        let type = MessageType(rawValue: readBigEndian(bytes, at: 1, as: UInt16.self))
        let messageID = MessageID(bytes: Array(bytes[3..<19]))
        let payloadLength = Int(readBigEndian(bytes, at: 91, as: UInt32.self))
        guard payloadLength == bytes.count - minimumLength else {
            // No author: nothing has vouched for it yet, so the reply goes to the link peer.
            throw FrameRejection(.malformed,
                                 "payload length \(payloadLength) does not match the envelope length \(bytes.count)",
                                 messageID: messageID, type: type)
        }
        return Envelope(
            version: version, type: type, messageID: messageID, author: Array(bytes[19..<51]),
            recipient: Array(bytes[51..<83]),
            createdAt: readBigEndian(bytes, at: 83, as: UInt64.self),
            payload: Array(bytes[headerLength..<(headerLength + payloadLength)]),
            signature: Array(bytes[(headerLength + payloadLength)...]),
            bytes: bytes)
    }

    /// True when the author's signature covers the envelope exactly as carried. Always false for
    /// a link-authenticated type, which has no signature: see `isAuthentic(onLinkFrom:)`.
    public var hasValidSignature: Bool {
        guard !type.isLinkAuthenticated, !needsSignatureOffLink else { return false }
        return Ed25519.verify(signature: signature, message: signingInput, publicKey: author)
    }

    /// Rule 6 (Protocol/README.md 5.5): whether the envelope comes from its author. A signed type:
    /// the signature verifies. A link-authenticated type: it arrived on a link (`linkPeer`, the key
    /// that link's Secret Handshake proved; nil for a frame that came any other way, such as relay
    /// mail) from its author, with the zero signature.
    /// A type that may go either way (`MessageType.mayBeLinkAuthenticated`): with the zero signature
    /// as a link-authenticated type, else as a signed one.
    public func isAuthentic(onLinkFrom linkPeer: [UInt8]?) -> Bool {
        if type.mayBeLinkAuthenticated, hasZeroSignature {
            guard let linkPeer else { return false }
            return author == linkPeer
        }
        guard type.isLinkAuthenticated else { return hasValidSignature }
        guard let linkPeer else { return false }
        return author == linkPeer && signature == Self.linkAuthenticatedSignature
    }

    /// The bytes a signed type's signature covers: the domain tag and the envelope before the
    /// signature.
    public var signingInput: [UInt8] {
        Self.signingDomain + bytes[0..<(bytes.count - Self.signatureLength)]
    }

    /// The frame on the wire: `u32` BE length, then the envelope.
    public var frameBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(4 + bytes.count)
        appendBigEndian(&out, UInt32(bytes.count))
        out.append(contentsOf: bytes)
        return out
    }

    /// Appends the frame (length prefix and envelope) to a buffer.
    public func writeFrame(to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt32(bytes.count))
        buffer.writeBytes(bytes)
    }
}

@inline(__always)
func appendBigEndian<T: FixedWidthInteger>(_ bytes: inout [UInt8], _ value: T) {
    var v = value.bigEndian
    withUnsafeBytes(of: &v) { bytes.append(contentsOf: $0) }
}

@inline(__always)
func readBigEndian<T: FixedWidthInteger>(_ bytes: [UInt8], at offset: Int, as: T.Type) -> T {
    var v: T = 0
    for i in 0..<MemoryLayout<T>.size {
        v = (v << 8) | T(bytes[offset + i])
    }
    return v
}

/// Splits a byte stream into envelopes. The `u32` length is checked against the limit as soon
/// as its four bytes are here, before any of the body is buffered.
public struct FrameDecoder {
    public let maximumEnvelopeLength: Int

    public init(maximumEnvelopeLength: Int = TandemConstants.maximumEnvelopeLength) {
        precondition(maximumEnvelopeLength >= Envelope.minimumLength || maximumEnvelopeLength >= 1)
        self.maximumEnvelopeLength = min(maximumEnvelopeLength, TandemConstants.maximumEnvelopeLength)
    }

    /// The next envelope's bytes, or nil when more bytes are needed (nothing consumed then).
    /// Throws `FRAME_TOO_LARGE` for a length above the limit; the connection must close.
    public func read(_ buffer: inout ByteBuffer) throws -> [UInt8]? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return nil }
        guard length <= UInt32(maximumEnvelopeLength) else {
            throw FrameRejection(.frameTooLarge, "frame of \(length) bytes exceeds the limit of \(maximumEnvelopeLength)")
        }
        guard buffer.readableBytes >= 4 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 4)
        return buffer.readBytes(length: Int(length))!
    }
}
