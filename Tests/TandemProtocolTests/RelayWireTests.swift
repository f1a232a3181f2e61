import NIOCore
import Sodium
import XCTest
@testable import TandemProtocol

/// What relays put on the wire and in text: relay addresses, share codes, the tunnel-join
/// preamble (fed byte by byte), and sealed mailbox items.
final class RelayWireTests: XCTestCase {
    let relayKey = fixedPair(0x31)
    let nodeKey = fixedPair(0x32)
    var relayID: String { NodeID(publicKey: relayKey.publicKey).canonical }
    var nodeID: String { NodeID(publicKey: nodeKey.publicKey).canonical }

    /// The ID with its last (checksum) character changed.
    var relayIDWithBadChecksum: String {
        var chars = Array(relayID)
        chars[chars.count - 1] = chars[chars.count - 1] == "q" ? "p" : "q"
        return String(chars)
    }

    func assertParseError(_ text: String, containing fragment: String? = nil, file: StaticString = #filePath, line: UInt = #line) {
        do {
            let a = try RelayAddress(parsing: text)
            XCTFail("'\(text)' parsed as \(a) (host '\(a.host)', port \(a.port))", file: file, line: line)
        } catch let e as RelayAddress.ParseError {
            if let fragment {
                XCTAssertTrue(e.description.contains(fragment), "'\(e.description)' should mention '\(fragment)'", file: file, line: line)
            }
        } catch {
            XCTFail("unexpected error type \(error)", file: file, line: line)
        }
    }

    // MARK: RelayAddress

    func testParsesIDHostPort() throws {
        let a = try RelayAddress(parsing: "\(relayID)@relay.example.org:7900")
        XCTAssertEqual(a.id.publicKey, relayKey.publicKey)
        XCTAssertEqual(a.host, "relay.example.org")
        XCTAssertEqual(a.port, 7900)
        XCTAssertEqual(a.description, "\(relayID)@relay.example.org:7900")
        let v4 = try RelayAddress(parsing: "  \(relayID)@192.0.2.7:1 \n")
        XCTAssertEqual(v4.host, "192.0.2.7")
        XCTAssertEqual(v4.port, 1)
        XCTAssertEqual(try RelayAddress(parsing: "\(relayID)@h:65535").port, 65535)
    }

    func testDefaultPortIs7820() throws {
        XCTAssertEqual(RelayAddress.defaultPort, 7820)
        let a = try RelayAddress(parsing: "\(relayID)@relay.example.org")
        XCTAssertEqual(a.host, "relay.example.org")
        XCTAssertEqual(a.port, 7820)
        XCTAssertEqual(a.description, "\(relayID)@relay.example.org:7820")
    }

    func testIPv6InBrackets() throws {
        let a = try RelayAddress(parsing: "\(relayID)@[::1]:7820")
        XCTAssertEqual(a.host, "::1")
        XCTAssertEqual(a.port, 7820)
        XCTAssertEqual(a.description, "\(relayID)@[::1]:7820")
        let b = try RelayAddress(parsing: "\(relayID)@[2001:db8::5]")
        XCTAssertEqual(b.host, "2001:db8::5")
        XCTAssertEqual(b.port, 7820)
        XCTAssertEqual(b.description, "\(relayID)@[2001:db8::5]:7820")
    }

    func testTheIDMayBeWrittenForPeopleAndIsPrintedCanonically() throws {
        let display = NodeID(publicKey: relayKey.publicKey).display
        let a = try RelayAddress(parsing: "\(display.uppercased())@relay.example.org:7900")
        XCTAssertEqual(a.id.publicKey, relayKey.publicKey)
        XCTAssertEqual(a.description, "\(relayID)@relay.example.org:7900")
    }

    func testErrors() {
        assertParseError("\(relayID)", containing: "ID@host:port")
        assertParseError("relay.example.org:7820", containing: "ID@host:port")
        assertParseError("", containing: "ID@host:port")
        assertParseError("\(relayIDWithBadChecksum)@relay.example.org:7820", containing: "checksum")
        assertParseError("tdm1short@relay.example.org:7820", containing: "ID")
        assertParseError("@relay.example.org:7820")
        for port in ["0", "65536", "-1", "99999999999999999999", "abc", "", "80x"] {
            assertParseError("\(relayID)@relay.example.org:\(port)")
        }
        assertParseError("\(relayID)@[::1]:0", containing: "port")
        assertParseError("\(relayID)@[::1]:x")
        assertParseError("\(relayID)@[::1]7820")
        assertParseError("\(relayID)@[::1", containing: "IPv6")
        assertParseError("\(relayID)@", containing: "host")
        assertParseError("\(relayID)@:7820", containing: "host")
        assertParseError("\(relayID)@[]:7820", containing: "host")
        assertParseError("\(relayID)@bad host:7820", containing: "host")
        assertParseError("\(relayID)@a/b:7820", containing: "host")
        assertParseError("\(relayID)@\(String(repeating: "a", count: 254)):7820", containing: "host")
    }

    /// An IPv6 literal without brackets cannot be split from a port: it must be refused (or read
    /// whole as the host), never cut at its last colon into a bogus host and port.
    func testUnbracketedIPv6IsNotSplitAtItsLastColon() {
        for text in ["::1", "fe80::1", "2001:db8::7820"] {
            if let a = try? RelayAddress(parsing: "\(relayID)@\(text)") {
                XCTAssertEqual(a.host, text, "'\(text)' read as host '\(a.host)' port \(a.port)")
            }
        }
    }

    func testRoundTripThroughDescription() throws {
        let key = SigningKeyPair.generate().publicKey
        for (host, port) in [("relay.example.org", 7820), ("127.0.0.1", 1), ("::1", 65535), ("fe80::1", 7821), ("h", 443)] {
            let a = RelayAddress(id: NodeID(publicKey: key), host: host, port: port)
            let b = try RelayAddress(parsing: a.description)
            XCTAssertEqual(a, b, a.description)
            XCTAssertEqual(b.description, a.description)
        }
    }

    // MARK: ShareCode

    func testShareCodeWithoutRelay() throws {
        let c = try ShareCode(parsing: "tandem:\(nodeID)")
        XCTAssertEqual(c.id.publicKey, nodeKey.publicKey)
        XCTAssertNil(c.relay)
        XCTAssertEqual(c.description, "tandem:\(nodeID)")
        XCTAssertEqual(try ShareCode(parsing: "TANDEM:\(nodeID)"), c)
        XCTAssertEqual(try ShareCode(parsing: " tandem:\(nodeID) "), c)
    }

    func testShareCodeWithRelay() throws {
        let text = "tandem:\(nodeID)?relay=\(relayID)@relay.example.org:7900"
        let c = try ShareCode(parsing: text)
        XCTAssertEqual(c.id.publicKey, nodeKey.publicKey)
        XCTAssertEqual(c.relay, RelayAddress(id: NodeID(publicKey: relayKey.publicKey), host: "relay.example.org", port: 7900))
        XCTAssertEqual(c.description, text)
        XCTAssertEqual(try ShareCode(parsing: c.description), c)
        let v6 = try ShareCode(parsing: "tandem:\(nodeID)?relay=\(relayID)@[::1]")
        XCTAssertEqual(v6.relay?.host, "::1")
        XCTAssertEqual(v6.relay?.port, 7820)
        XCTAssertEqual(try ShareCode(parsing: v6.description), v6)
    }

    func testBareIDIsAShareCode() throws {
        let c = try ShareCode(parsing: nodeID)
        XCTAssertEqual(c.id.publicKey, nodeKey.publicKey)
        XCTAssertNil(c.relay)
        XCTAssertEqual(try ShareCode(parsing: NodeID(publicKey: nodeKey.publicKey).display), c)
    }

    func testGarbageShareCodes() {
        for text in ["", "tandem:", "garbage", "tandem:garbage", "http://example.org", "tandem:\(relayIDWithBadChecksum)",
                     "tandem:\(nodeID)?relay=", "tandem:\(nodeID)?relay=garbage", "tandem:\(nodeID)?relay=\(relayID)",
                     "tandem:\(nodeID)?relay=\(relayID)@host:0", "tandem:?relay=\(relayID)@host:7820"] {
            XCTAssertThrowsError(try ShareCode(parsing: text), "'\(text)' parsed")
        }
    }

    // MARK: TunnelJoin.classify

    let token: [UInt8] = (0..<32).map { UInt8($0 &* 7 &+ 3) }

    func testPreambleLayout() {
        XCTAssertEqual(TunnelJoin.magic, Array("TDMJOIN1".utf8))
        XCTAssertEqual(TunnelJoin.length, 40)
        let p = TunnelJoin.preamble(token: token)
        XCTAssertEqual(p.count, 40)
        XCTAssertEqual(Array(p.prefix(8)), TunnelJoin.magic)
        XCTAssertEqual(Array(p.suffix(32)), token)
    }

    func testEveryProperPrefixOfThePreambleNeedsMoreData() {
        let p = TunnelJoin.preamble(token: token)
        for n in 0..<p.count {
            var b = buffer(Array(p.prefix(n)))
            XCTAssertEqual(TunnelJoin.classify(&b), .needMoreData, "prefix of \(n) bytes")
            XCTAssertEqual(b.readableBytes, n, "nothing consumed at \(n) bytes")
        }
    }

    /// One growing buffer, a byte at a time (as a handler accumulates reads).
    func testDripFedPreambleThenPayload() {
        let p = TunnelJoin.preamble(token: token)
        let after: [UInt8] = [0xDE, 0xAD, 0xBE, 0xEF]
        var b = buffer([])
        XCTAssertEqual(TunnelJoin.classify(&b), .needMoreData)
        for (i, byte) in p.enumerated() {
            b.writeInteger(byte)
            let kind = TunnelJoin.classify(&b)
            if i < p.count - 1 {
                XCTAssertEqual(kind, .needMoreData, "after \(i + 1) bytes")
                XCTAssertEqual(b.readableBytes, i + 1)
            } else {
                XCTAssertEqual(kind, .join(token: token))
                XCTAssertEqual(b.readableBytes, 0, "exactly 40 bytes consumed")
            }
        }
        // Bytes following the preamble in the same read stay for the next reader.
        var both = buffer(p + after)
        XCTAssertEqual(TunnelJoin.classify(&both), .join(token: token))
        XCTAssertEqual(both.readableBytes, after.count)
        XCTAssertEqual(both.readBytes(length: both.readableBytes), after)
    }

    func testTheReaderIndexNeedNotBeZero() {
        var b = buffer([9, 9, 9] + TunnelJoin.preamble(token: token) + [7])
        b.moveReaderIndex(forwardBy: 3)
        XCTAssertEqual(TunnelJoin.classify(&b), .join(token: token))
        XCTAssertEqual(b.readBytes(length: b.readableBytes), [7])
    }

    func testAFirstByteOtherThanTIsAHandshakeAtOnce() {
        for first in [UInt8](0...255) where first != UInt8(ascii: "T") {
            var b = buffer([first])
            XCTAssertEqual(TunnelJoin.classify(&b), .handshake, "first byte \(first)")
            XCTAssertEqual(b.readableBytes, 1, "nothing consumed")
            XCTAssertEqual(b.readerIndex, 0)
        }
        var lower = buffer(Array("tdmjoin1".utf8) + token)
        XCTAssertEqual(TunnelJoin.classify(&lower), .handshake)
        XCTAssertEqual(lower.readableBytes, 40)
    }

    func testADifferentEighthByteIsAHandshake() {
        for last in [UInt8](0...255) where last != UInt8(ascii: "1") {
            let bytes = Array("TDMJOIN".utf8) + [last] + token
            var b = buffer(Array(bytes.prefix(8)))
            XCTAssertEqual(TunnelJoin.classify(&b), .handshake, "8th byte \(last)")
            XCTAssertEqual(b.readableBytes, 8, "nothing consumed")
            var full = buffer(bytes)
            XCTAssertEqual(TunnelJoin.classify(&full), .handshake)
            XCTAssertEqual(full.readableBytes, 40)
        }
    }

    /// A divergence at any position of the magic is recognised as soon as that byte arrives.
    func testADivergenceAnywhereInTheMagicIsAHandshakeAsSoonAsItArrives() {
        for position in 0..<TunnelJoin.magic.count {
            var bytes = TunnelJoin.magic
            bytes[position] ^= 0x20
            var b = buffer([])
            for (i, byte) in bytes.enumerated() {
                b.writeInteger(byte)
                let kind = TunnelJoin.classify(&b)
                XCTAssertEqual(kind, i < position ? .needMoreData : .handshake, "divergence at \(position), byte \(i)")
                XCTAssertEqual(b.readableBytes, i + 1)
                if kind == .handshake { break }
            }
        }
    }

    func testASecretHandshakeHelloIsAHandshake() {
        // A real client hello, and random 64-byte ones, drip-fed until classify decides.
        var hellos: [[UInt8]] = []
        var shs = SecretHandshake(clientIdentity: nodeKey, serverPublicKey: relayKey.publicKey)
        hellos.append(shs.start()!)
        var rng = SplitMix64(seed: 0x5E_C2E7)
        for _ in 0..<200 { hellos.append((0..<64).map { _ in UInt8.random(in: 0...255, using: &rng) }) }
        // Ones that start like the magic, the worst case for an accumulator.
        for n in 1..<8 { hellos.append(Array(TunnelJoin.magic.prefix(n)) + [UInt8](repeating: 0, count: 64 - n)) }
        for hello in hellos {
            XCTAssertEqual(hello.count, 64)
            var b = buffer([])
            var decided: TunnelJoin.Kind = .needMoreData
            for byte in hello {
                b.writeInteger(byte)
                decided = TunnelJoin.classify(&b)
                if decided != .needMoreData { break }
            }
            XCTAssertEqual(decided, .handshake, "hello \(hello.prefix(8))")
            XCTAssertEqual(b.readerIndex, 0, "nothing consumed")
            var whole = buffer(hello)
            XCTAssertEqual(TunnelJoin.classify(&whole), .handshake)
            XCTAssertEqual(whole.readableBytes, 64)
        }
    }

    // MARK: MailboxSeal

    let sender = fixedPair(0x41)
    let recipient = fixedPair(0x42)
    let stranger = fixedPair(0x43)
    let now: UInt64 = 1_750_000_000_000
    let maximumAge: UInt64 = 7 * 24 * 3_600_000

    func envelope(_ type: MessageType = .friendRequest, to: [UInt8]? = nil, createdAt: UInt64? = nil,
                  payload: [UInt8] = [0x0A, 0x02, 0x68, 0x69]) -> Envelope {
        Envelope.sign(type: type, author: sender, recipient: to ?? recipient.publicKey, createdAt: createdAt ?? now, payload: payload)
    }

    func open(_ sealed: [UInt8], as identity: SigningKeyPair? = nil, now: UInt64? = nil) throws -> Envelope {
        let id = identity ?? recipient
        return try MailboxSeal.open(sealed, identity: id, curveSecretKey: try id.curve25519SecretKey(),
                                    now: now ?? self.now, maximumAge: maximumAge)
    }

    func assertRejected(_ sealed: [UInt8], as identity: SigningKeyPair? = nil, now: UInt64? = nil, containing fragment: String,
                        file: StaticString = #filePath, line: UInt = #line) {
        do {
            let e = try open(sealed, as: identity, now: now)
            XCTFail("opened \(e.type) from \(e.createdAt)", file: file, line: line)
        } catch let r as MailboxSeal.Rejection {
            XCTAssertTrue(r.description.contains(fragment), "'\(r.description)' should mention '\(fragment)'", file: file, line: line)
        } catch {
            XCTFail("unexpected error \(error)", file: file, line: line)
        }
    }

    func testSealAndOpen() throws {
        let env = envelope()
        let sealed = try MailboxSeal.seal(env)
        XCTAssertEqual(sealed.count, env.bytes.count + SealedBox.overheadBytes)
        XCTAssertNotEqual(Array(sealed.suffix(env.bytes.count)), env.bytes, "the relay holds ciphertext")
        let opened = try open(sealed)
        XCTAssertEqual(opened, env)
        XCTAssertEqual(opened.bytes, env.bytes)
        XCTAssertTrue(opened.hasValidSignature)
        // Sealing is randomised: the same envelope seals differently each time.
        XCTAssertNotEqual(try MailboxSeal.seal(env), sealed)
    }

    func testEveryMailableTypeOpens() throws {
        let mailable: [MessageType] = [.friendRequest, .friendAccept, .friendDecline, .friendRemove, .contactUpdate,
                                       .challengeInvite, .challengeAnswer, .challengeStart, .challengeCancel, .challengeQuit,
                                       .challengeOutcome, .chatMessage, .chatForward, .chatReaction, .cheer, .readReceipt, .retract,
                                       .conversationSettings, .fileOffer, .fileCancel, .deliveryReceipt]
        for t in mailable {
            XCTAssertTrue(MailboxSeal.isMailable(t), "\(t)")
            XCTAssertEqual(try open(try MailboxSeal.seal(envelope(t))).type, t)
        }
    }

    func testOpeningWithAnotherIdentityFails() throws {
        let sealed = try MailboxSeal.seal(envelope())
        assertRejected(sealed, as: stranger, containing: "does not open")
        assertRejected(sealed, as: sender, containing: "does not open")
    }

    func testATamperedByteIsRefused() throws {
        let sealed = try MailboxSeal.seal(envelope())
        // Ephemeral key, MAC, and ciphertext from start to end.
        for i in [0, 16, 31, 32, 40, 47, 48, 60, sealed.count / 2, sealed.count - 1] {
            var t = sealed
            t[i] ^= 0x01
            assertRejected(t, containing: "does not open")
        }
        assertRejected(Array(sealed.dropLast()), containing: "does not open")
        assertRejected(Array(sealed.prefix(SealedBox.overheadBytes - 1)), containing: "does not open")
        assertRejected([], containing: "does not open")
    }

    func testAForgedSignatureInsideAValidSealIsRefused() throws {
        var bytes = envelope().bytes
        bytes[Envelope.headerLength] ^= 0x01  // a payload byte, after signing
        let sealed = try SealedBox.seal(bytes, to: try recipient.curve25519().publicKey)
        assertRejected(sealed, containing: "signature")
        let notAnEnvelope = try SealedBox.seal(Array("hello".utf8), to: try recipient.curve25519().publicKey)
        assertRejected(notAnEnvelope, containing: "not an envelope")
    }

    func testTypesThatAreNotMailableAreRefused() throws {
        for t in [MessageType.ping, .pong, .error, .presence, .ack, .clockProbe, .clockReply, .relayRegister, .mailboxPut,
                  .relayGoodbye, .gapRequest, .fileRequest,
                  MessageType(rawValue: 0x0106), MessageType(rawValue: 0x0207), MessageType(rawValue: 0x0100),
                  MessageType(rawValue: 0x0200), MessageType(rawValue: 0xFFFF)] {
            XCTAssertFalse(MailboxSeal.isMailable(t), "\(t)")
            assertRejected(try MailboxSeal.seal(envelope(t)), containing: "not sent through mailboxes")
        }
    }

    func testTooOldIsRefused() throws {
        // Exactly the maximum age still opens; a millisecond more does not.
        XCTAssertNoThrow(try open(try MailboxSeal.seal(envelope(createdAt: now - maximumAge))))
        assertRejected(try MailboxSeal.seal(envelope(createdAt: now - maximumAge - 1)), containing: "older")
        assertRejected(try MailboxSeal.seal(envelope(createdAt: 0)), containing: "older")
    }

    func testFromTheFutureIsRefused() throws {
        let skew = TandemConstants.maximumClockSkewMilliseconds
        XCTAssertEqual(skew, 10 * 60 * 1000)
        XCTAssertNoThrow(try open(try MailboxSeal.seal(envelope(createdAt: now + skew))))
        assertRejected(try MailboxSeal.seal(envelope(createdAt: now + skew + 1)), containing: "future")
        assertRejected(try MailboxSeal.seal(envelope(createdAt: UInt64.max)), containing: "future")
    }

    func testAddressedToSomeoneElseButSealedToMeIsRefused() throws {
        // The envelope names the stranger, but the sealed box is made for the recipient.
        let env = envelope(to: stranger.publicKey)
        let sealed = try SealedBox.seal(env.bytes, to: try recipient.curve25519().publicKey)
        assertRejected(sealed, containing: "another node")
        // The honest seal goes to the stranger, who can open it.
        XCTAssertEqual(try open(try MailboxSeal.seal(env), as: stranger), env)
    }
}
