import NIOCore
import Sodium

/// Where a tandem-relay is: its identity and its TCP address, written "ID@host:port"
/// (Protocol/README.md section 14.1). The ID is what the Secret Handshake checks, so a relay
/// address cannot be pointed at an impostor.
public struct RelayAddress: Hashable, Sendable, CustomStringConvertible {
    public let id: NodeID
    public let host: String
    public let port: Int

    public static let defaultPort = 7820

    public init(id: NodeID, host: String, port: Int) {
        self.id = id
        self.host = host
        self.port = port
    }

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Parses "ID@host:port", "ID@host" (default port) or "ID@[v6]:port".
    public init(parsing text: String) throws {
        let trimmed = text.trimmingSpaces
        guard let at = trimmed.lastIndex(of: "@") else {
            throw ParseError(description: "a relay address is ID@host:port")
        }
        let idText = String(trimmed[..<at])
        let hostPart = String(trimmed[trimmed.index(after: at)...])
        let key: [UInt8]
        do {
            key = try NodeID.parse(idText)
        } catch {
            throw ParseError(description: "the relay's ID is not valid: \(error)")
        }
        guard !hostPart.isEmpty else { throw ParseError(description: "a relay address needs a host after '@'") }
        var host = hostPart
        var port = Self.defaultPort
        if hostPart.hasPrefix("[") {
            guard let close = hostPart.firstIndex(of: "]") else { throw ParseError(description: "malformed IPv6 host in '\(hostPart)'") }
            host = String(hostPart[hostPart.index(after: hostPart.startIndex)..<close])
            let rest = hostPart[hostPart.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":"), let p = Int(rest.dropFirst()) else { throw ParseError(description: "malformed port in '\(hostPart)'") }
                port = p
            }
        } else if hostPart.filter({ $0 == ":" }).count > 1 {
            throw ParseError(description: "an IPv6 host goes in brackets: ID@[\(hostPart)]:port")
        } else if let colon = hostPart.lastIndex(of: ":") {
            host = String(hostPart[..<colon])
            guard let p = Int(hostPart[hostPart.index(after: colon)...]) else {
                throw ParseError(description: "the port in '\(hostPart)' is not a number")
            }
            port = p
        }
        guard (1...65535).contains(port) else { throw ParseError(description: "the port must be from 1 to 65535") }
        guard !host.isEmpty, host.utf8.count <= 253, !host.contains(where: { $0 == " " || $0 == "/" || $0 == "@" }) else {
            throw ParseError(description: "'\(host)' is not a host name or address")
        }
        self.init(id: NodeID(publicKey: key), host: host, port: port)
    }

    /// "ID@host:port" with the canonical ID.
    public var description: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return "\(id.canonical)@\(h):\(port)"
    }
}

/// One string a person can paste to befriend someone off the LAN: their ID and, when they have
/// one, their home relay: "tandem:ID" or "tandem:ID?relay=RELAYID@host:port".
public struct ShareCode: Hashable, Sendable, CustomStringConvertible {
    public let id: NodeID
    public let relay: RelayAddress?

    public init(id: NodeID, relay: RelayAddress?) {
        self.id = id
        self.relay = relay
    }

    /// Accepts a share code, or a bare ID (no relay).
    public init(parsing text: String) throws {
        var body = text.trimmingSpaces
        if body.lowercased().hasPrefix("tandem:") { body = String(body.dropFirst("tandem:".count)) }
        var relayText: String?
        if let q = body.range(of: "?relay=") {
            relayText = String(body[q.upperBound...])
            body = String(body[..<q.lowerBound])
        }
        let key: [UInt8]
        do {
            key = try NodeID.parse(body)
        } catch {
            throw RelayAddress.ParseError(description: "\(error)")
        }
        self.id = NodeID(publicKey: key)
        self.relay = try relayText.map { try RelayAddress(parsing: $0) }
    }

    public var description: String {
        relay.map { "tandem:\(id.canonical)?relay=\($0)" } ?? "tandem:\(id.canonical)"
    }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}

/// The preamble of a tunnel connection (section 14.3): a fresh TCP connection to the relay that
/// starts with these 40 bytes instead of a Secret Handshake. After the relay's one-byte answer
/// 0x00 the connection is spliced to the other end's, and the two nodes run their own Secret
/// Handshake through it. The token (random, 32 bytes) was handed out over both nodes'
/// authenticated relay links; it is good for one join per side, for a few seconds.
public enum TunnelJoin {
    /// "TDMJOIN1". A Secret Handshake client hello is 64 bytes of HMAC and ephemeral key: it starts
    /// with these 8 bytes with probability 2^-64.
    public static let magic: [UInt8] = Array("TDMJOIN1".utf8)
    public static let tokenLength = 32
    public static let length = 40

    /// The relay's answer: one byte.
    public enum Answer: UInt8, Sendable {
        /// Joined: from the next byte on, the connection carries the other end's bytes.
        case joined = 0x00
        /// No such token, already used, or expired.
        case unknownToken = 0x01
        /// The other side did not join in time.
        case timeout = 0x02
        /// The relay refuses (full, shutting down).
        case refused = 0x03

        public var explanation: String {
            switch self {
            case .joined: return "joined"
            case .unknownToken: return "the relay does not know the tunnel token (expired or used)"
            case .timeout: return "the other end did not join the tunnel in time"
            case .refused: return "the relay refused the tunnel"
            }
        }
    }

    public static func preamble(token: [UInt8]) -> [UInt8] {
        precondition(token.count == tokenLength)
        return magic + token
    }

    /// What the first bytes of a connection to a relay are.
    public enum Kind: Equatable, Sendable {
        /// Not enough bytes yet to tell.
        case needMoreData
        /// A tunnel join carrying this token (the 40 bytes have been read).
        case join(token: [UInt8])
        /// Anything else: a Secret Handshake (nothing has been read).
        case handshake
    }

    /// Looks at the start of `buffer`: consumes the preamble of a join, nothing otherwise.
    public static func classify(_ buffer: inout ByteBuffer) -> Kind {
        let n = min(buffer.readableBytes, magic.count)
        guard let head = buffer.getBytes(at: buffer.readerIndex, length: n) else { return .needMoreData }
        guard head == Array(magic.prefix(n)) else { return .handshake }
        guard buffer.readableBytes >= length else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: magic.count)
        return .join(token: buffer.readBytes(length: tokenLength)!)
    }
}

/// Mail held by a relay for an offline node (section 14.4): one complete signed envelope sealed
/// (`crypto_box_seal`) to the recipient's X25519 key, so the relay holds bytes it cannot read.
public enum MailboxSeal {
    /// Message types a node may send through a mailbox: the durable flows, nothing else (friends,
    /// challenges, and the acknowledged messages between friends: MESSAGE … RETRACT,
    /// CONVERSATION_SETTINGS, DELIVERED, and a file's FILE_OFFER and FILE_CANCEL — the chunks and
    /// their requests need a link and are never mail; Protocol/messages.md 7.4).
    public static func isMailable(_ type: MessageType) -> Bool {
        (0x0101...0x0105).contains(type.rawValue) || (0x0201...0x0206).contains(type.rawValue)
            || (0x0501...0x0506).contains(type.rawValue) || type.rawValue == 0x0508 || type.rawValue == 0x0509
            || type.rawValue == 0x050C || type.rawValue == 0x050D
    }

    /// Largest sealed item a relay keeps by default.
    public static let defaultMaximumItemBytes = 16 * 1024

    public static func seal(_ envelope: Envelope) throws -> [UInt8] {
        try SealedBox.seal(envelope.bytes, to: Ed25519.publicKeyToCurve25519(envelope.recipient))
    }

    public struct Rejection: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Opens and checks one item: it must unseal with our key, be a signed envelope addressed to
    /// us, of a mailable type, created no more than `maximumAge` ago and not in the future beyond
    /// the usual skew. Duplicates are the caller's business (message ids in the store).
    public static func open(_ sealed: [UInt8], identity: SigningKeyPair, curveSecretKey: SecretBytes,
                            now: UInt64, maximumAge: UInt64) throws -> Envelope {
        guard let curvePublic = try? identity.curve25519().publicKey,
              let plain = SealedBox.open(sealed, publicKey: curvePublic, secretKey: curveSecretKey) else {
            throw Rejection(description: "the item does not open with this node's key")
        }
        let envelope: Envelope
        do {
            envelope = try Envelope.parse(plain)
        } catch {
            throw Rejection(description: "the item is not an envelope: \(error)")
        }
        guard envelope.hasValidSignature else { throw Rejection(description: "the item's signature does not verify") }
        guard envelope.recipient == identity.publicKey else { throw Rejection(description: "the item is addressed to another node") }
        guard isMailable(envelope.type) else { throw Rejection(description: "type \(envelope.type) is not sent through mailboxes") }
        if envelope.createdAt > now, envelope.createdAt - now > TandemConstants.maximumClockSkewMilliseconds {
            throw Rejection(description: "the item was created in the future")
        }
        if now > envelope.createdAt, now - envelope.createdAt > maximumAge {
            throw Rejection(description: "the item is older than the mailbox time-to-live")
        }
        return envelope
    }
}
