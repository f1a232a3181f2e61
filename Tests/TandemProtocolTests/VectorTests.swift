import Foundation
import NIOCore
import Sodium
@testable import TandemProtocol
import XCTest

/// Checks the Swift implementation against Protocol/vectors/*.json, which an independent Python
/// generator (Protocol/vectors/generate.py, PyNaCl + hashlib) writes from Protocol/README.md.
final class VectorTests: XCTestCase {

    // MARK: loading

    static let vectorDirectory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent() // TandemProtocolTests
        .deletingLastPathComponent() // Tests
        .deletingLastPathComponent() // repository root
        .appendingPathComponent("Protocol/vectors")

    func load<T: Decodable>(_ name: String, as: T.Type) throws -> T {
        let url = Self.vectorDirectory.appendingPathComponent(name)
        let data = try Data(contentsOf: url)
        return try JSONDecoder().decode(T.self, from: data)
    }

    func bytes(_ hexText: String, file: StaticString = #filePath, line: UInt = #line) -> [UInt8] {
        guard let b = parseHex(hexText) else {
            XCTFail("vector holds malformed hex: \(hexText.prefix(40))", file: file, line: line)
            return []
        }
        return b
    }

    func byteBuffer(_ b: [UInt8]) -> ByteBuffer {
        var buf = ByteBufferAllocator().buffer(capacity: b.count)
        buf.writeBytes(b)
        return buf
    }

    static let errorCodes: [String: Tandem_V1_ErrorCode] = [
        "UNSUPPORTED_VERSION": .unsupportedVersion, "UNKNOWN_TYPE": .unknownType,
        "BAD_SIGNATURE": .badSignature, "WRONG_RECIPIENT": .wrongRecipient, "REPLAYED": .replayed,
        "FROM_THE_FUTURE": .fromTheFuture, "MALFORMED": .malformed, "FRAME_TOO_LARGE": .frameTooLarge,
        "STALE": .stale,
    ]

    // MARK: keys.json

    struct KeysFile: Decodable {
        struct NetworkKey: Decodable { let input: String; let key: String }
        struct Key: Decodable {
            let name: String
            let seed: String
            let ed25519_public_key: String
            let ed25519_secret_key: String
            let x25519_public_key: String
            let x25519_secret_key: String
            let id: String
            let id_display: String
        }
        let network_key: NetworkKey
        let keys: [Key]
    }

    func testNetworkKey() throws {
        let v = try load("keys.json", as: KeysFile.self)
        XCTAssertEqual(hexString(TandemConstants.networkKey), v.network_key.key)
        XCTAssertEqual(hexString(Hash.blake2b(Array(v.network_key.input.utf8), outputLength: 32)), v.network_key.key)
    }

    func testKeys() throws {
        let v = try load("keys.json", as: KeysFile.self)
        XCTAssertFalse(v.keys.isEmpty)
        for k in v.keys {
            let pair = try SigningKeyPair(seed: bytes(k.seed))
            XCTAssertEqual(hexString(pair.publicKey), k.ed25519_public_key, k.name)
            XCTAssertEqual(hexString(pair.secretKey.exposedCopy), k.ed25519_secret_key, k.name)
            XCTAssertEqual(hexString(pair.seed()), k.seed, k.name)
            let curve = try pair.curve25519()
            XCTAssertEqual(hexString(curve.publicKey), k.x25519_public_key, k.name)
            XCTAssertEqual(hexString(curve.secretKey.exposedCopy), k.x25519_secret_key, k.name)
            XCTAssertEqual(hexString(try Ed25519.publicKeyToCurve25519(pair.publicKey)), k.x25519_public_key, k.name)
            let id = NodeID(publicKey: pair.publicKey)
            XCTAssertEqual(id.canonical, k.id, k.name)
            XCTAssertEqual(id.display, k.id_display, k.name)
            XCTAssertEqual(try NodeID.parse(k.id), pair.publicKey, k.name)
        }
    }

    // MARK: ids.json

    struct IDsFile: Decodable {
        struct Valid: Decodable {
            let name: String
            let public_key: String
            let id: String
            let id_display: String
            let equivalent_inputs: [String]
        }
        struct Invalid: Decodable { let name: String; let input: String; let reason: String }
        let hrp: String
        let separators: [String]
        let valid: [Valid]
        let invalid: [Invalid]
    }

    func testIDs() throws {
        let v = try load("ids.json", as: IDsFile.self)
        XCTAssertEqual(v.hrp, NodeID.humanReadablePart)
        XCTAssertEqual(Set(v.separators.map { Character($0) }), NodeID.separatorCharacters)
        for c in v.valid {
            let key = bytes(c.public_key)
            let id = NodeID(publicKey: key)
            XCTAssertEqual(id.canonical, c.id, c.name)
            XCTAssertEqual(id.canonical.count, NodeID.canonicalLength, c.name)
            XCTAssertEqual(id.display, c.id_display, c.name)
            for input in [c.id, c.id_display] + c.equivalent_inputs {
                XCTAssertEqual(try NodeID.parse(input), key, "\(c.name): \(input)")
                XCTAssertEqual(NodeID(input), id, "\(c.name): \(input)")
            }
        }
        XCTAssertFalse(v.invalid.isEmpty)
        for c in v.invalid {
            XCTAssertThrowsError(try NodeID.parse(c.input), "\(c.name) (\(c.reason)) must be refused: \(c.input)")
            XCTAssertNil(NodeID(c.input), c.name)
        }
    }

    // MARK: handshake.json

    struct HandshakeFile: Decodable {
        struct Party: Decodable {
            let seed: String
            let public_key: String
            let ephemeral_secret_key: String
            let ephemeral_public_key: String
        }
        struct Message: Decodable { let step: Int; let hex: String }
        struct Session: Decodable {
            let encrypt_key: String
            let encrypt_nonce: String
            let decrypt_key: String
            let decrypt_nonce: String
        }
        struct Failure: Decodable { let name: String; let side: String; let feed: [String]; let fails_at: Int }
        let network_key: String
        let client: Party
        let server: Party
        let messages: [Message]
        let client_session: Session
        let server_session: Session
        let failures: [Failure]
    }

    func makeClient(_ v: HandshakeFile) throws -> SecretHandshake {
        SecretHandshake(clientIdentity: try SigningKeyPair(seed: bytes(v.client.seed)),
                        serverPublicKey: bytes(v.server.public_key), networkKey: bytes(v.network_key),
                        ephemeralSecret: bytes(v.client.ephemeral_secret_key))
    }

    func makeServer(_ v: HandshakeFile) throws -> SecretHandshake {
        SecretHandshake(serverIdentity: try SigningKeyPair(seed: bytes(v.server.seed)),
                        networkKey: bytes(v.network_key),
                        ephemeralSecret: bytes(v.server.ephemeral_secret_key))
    }

    func assertSession(_ keys: SessionKeys, _ expected: HandshakeFile.Session, remote: String, _ side: String) {
        XCTAssertEqual(hexString(keys.encryptKey), expected.encrypt_key, "\(side) encrypt key")
        XCTAssertEqual(hexString(keys.encryptNonce), expected.encrypt_nonce, "\(side) encrypt nonce")
        XCTAssertEqual(hexString(keys.decryptKey), expected.decrypt_key, "\(side) decrypt key")
        XCTAssertEqual(hexString(keys.decryptNonce), expected.decrypt_nonce, "\(side) decrypt nonce")
        XCTAssertEqual(hexString(keys.remotePublicKey), remote, "\(side) remote key")
    }

    /// Feeds `message` one byte at a time: every proper prefix must read as "need more".
    func dripFeed(_ machine: inout SecretHandshake, _ message: [UInt8]) throws -> SecretHandshake.Action {
        var buf = ByteBufferAllocator().buffer(capacity: message.count)
        for (i, b) in message.enumerated() {
            buf.writeInteger(b)
            let action = try machine.receive(&buf)
            if i < message.count - 1 {
                guard case .needMoreData = action else {
                    XCTFail("a \(i + 1)-byte prefix of a \(message.count)-byte message was acted on")
                    return action
                }
                XCTAssertEqual(buf.readableBytes, i + 1, "a prefix must not be consumed")
            } else {
                XCTAssertEqual(buf.readableBytes, 0, "the whole message must be consumed")
                return action
            }
        }
        XCTFail("empty message")
        return .needMoreData
    }

    func testHandshakeTranscript() throws {
        let v = try load("handshake.json", as: HandshakeFile.self)
        XCTAssertEqual(v.network_key, hexString(TandemConstants.networkKey))
        let msgs = v.messages.sorted { $0.step < $1.step }.map { bytes($0.hex) }
        XCTAssertEqual(msgs.map(\.count), [64, 64, 112, 80])
        XCTAssertEqual(hexString(X25519.publicKey(secretKey: bytes(v.client.ephemeral_secret_key))),
                       v.client.ephemeral_public_key)
        XCTAssertEqual(hexString(X25519.publicKey(secretKey: bytes(v.server.ephemeral_secret_key))),
                       v.server.ephemeral_public_key)

        for drip in [false, true] {
            var client = try makeClient(v)
            var server = try makeServer(v)
            func feed(_ m: inout SecretHandshake, _ bytes: [UInt8]) throws -> SecretHandshake.Action {
                if drip { return try dripFeed(&m, bytes) }
                var buf = byteBuffer(bytes)
                let action = try m.receive(&buf)
                XCTAssertEqual(buf.readableBytes, 0)
                return action
            }
            let m1 = client.start()
            XCTAssertEqual(m1.map(hexString), hexString(msgs[0]), "message 1")
            XCTAssertNil(client.start(), "start() twice")

            guard case .send(let m2) = try feed(&server, msgs[0]) else { return XCTFail("server did not answer message 1") }
            XCTAssertEqual(hexString(m2), hexString(msgs[1]), "message 2")

            guard case .send(let m3) = try feed(&client, msgs[1]) else { return XCTFail("client did not answer message 2") }
            XCTAssertEqual(hexString(m3), hexString(msgs[2]), "message 3")

            guard case .complete(let m4, let serverKeys) = try feed(&server, msgs[2]) else {
                return XCTFail("server did not complete on message 3")
            }
            XCTAssertEqual(m4.map(hexString), hexString(msgs[3]), "message 4")
            assertSession(serverKeys, v.server_session, remote: v.client.public_key, "server")
            XCTAssertTrue(server.isFinished)

            guard case .complete(let none, let clientKeys) = try feed(&client, msgs[3]) else {
                return XCTFail("client did not complete on message 4")
            }
            XCTAssertNil(none, "the client sends nothing after message 4")
            assertSession(clientKeys, v.client_session, remote: v.server.public_key, "client")
            XCTAssertTrue(client.isFinished)
        }
    }

    func testHandshakeTrailingBytesStayForBoxStream() throws {
        let v = try load("handshake.json", as: HandshakeFile.self)
        var server = try makeServer(v)
        var buf = byteBuffer(bytes(v.messages[0].hex) + bytes(v.messages[2].hex) + [1, 2, 3])
        guard case .send = try server.receive(&buf) else { return XCTFail("message 1") }
        guard case .complete = try server.receive(&buf) else { return XCTFail("message 3") }
        XCTAssertEqual(buf.readableBytes, 3, "bytes after message 3 belong to the box-stream")
    }

    func testHandshakeFailures() throws {
        let v = try load("handshake.json", as: HandshakeFile.self)
        XCTAssertFalse(v.failures.isEmpty)
        for f in v.failures {
            var machine: SecretHandshake
            switch f.side {
            case "client":
                machine = try makeClient(v)
                _ = machine.start()
            case "server":
                machine = try makeServer(v)
            default:
                XCTFail("unknown side \(f.side)")
                continue
            }
            for (i, hexText) in f.feed.enumerated() {
                var buf = byteBuffer(bytes(hexText))
                if i + 1 == f.fails_at {
                    XCTAssertThrowsError(try machine.receive(&buf), f.name)
                    // A failed machine stays failed.
                    var more = byteBuffer([UInt8](repeating: 0, count: 112))
                    XCTAssertThrowsError(try machine.receive(&more), "\(f.name): after failure")
                    break
                }
                let action = try machine.receive(&buf)
                guard case .send = action else {
                    XCTFail("\(f.name): message \(i + 1) should have been answered")
                    break
                }
            }
        }
    }

    // MARK: boxstream.json

    struct BoxStreamFile: Decodable {
        struct Box: Decodable { let header_nonce: String; let body_length: Int; let header: String }
        struct Write: Decodable {
            let plaintext_length: Int
            let plaintext: String
            let ciphertext: String
            let boxes: [Box]
        }
        struct Goodbye: Decodable { let nonce: String; let bytes: String }
        struct Stream: Decodable {
            let key: String
            let nonce: String
            let writes: [Write]
            let goodbye: Goodbye
        }
        struct Invalid: Decodable { let name: String; let stream: String; let error: String }
        let key: String
        let nonce: String
        let writes: [Write]
        let goodbye: Goodbye
        let carry: Stream
        let invalid: [Invalid]
    }

    func checkStream(key: [UInt8], nonce: [UInt8], writes: [BoxStreamFile.Write], goodbye: BoxStreamFile.Goodbye,
                     name: String) throws {
        // Encoder: exact bytes per write.
        var encoder = BoxStreamEncoder(key: key, nonce: nonce)
        var wire: [UInt8] = []
        var expectedBodies: [[UInt8]] = []
        for w in writes {
            let plain = bytes(w.plaintext)
            XCTAssertEqual(plain.count, w.plaintext_length)
            var out = ByteBufferAllocator().buffer(capacity: 0)
            encoder.seal(plain, into: &out)
            let sealed = out.readBytes(length: out.readableBytes)!
            XCTAssertEqual(sealed.count, bytes(w.ciphertext).count, "\(name): length of a \(plain.count)-byte write")
            XCTAssertEqual(hexString(sealed), w.ciphertext, "\(name): \(plain.count)-byte write")
            // The boxes are where the vector says they are.
            var offset = 0
            var p = 0
            for box in w.boxes {
                guard offset + 34 + box.body_length <= sealed.count, p + box.body_length <= plain.count else {
                    XCTFail("\(name): write shorter than its boxes")
                    break
                }
                XCTAssertEqual(hexString(sealed[offset..<offset + 34]), box.header, "\(name): header")
                expectedBodies.append(Array(plain[p..<p + box.body_length]))
                offset += 34 + box.body_length
                p += box.body_length
            }
            XCTAssertEqual(offset, sealed.count, "\(name): boxes cover the write")
            XCTAssertEqual(p, plain.count)
            wire += sealed
        }
        var out = ByteBufferAllocator().buffer(capacity: 34)
        encoder.goodbye(into: &out)
        let bye = out.readBytes(length: out.readableBytes)!
        XCTAssertEqual(hexString(bye), goodbye.bytes, "\(name): goodbye")
        wire += bye

        // Decoder: whole, in 7-byte pieces, and byte by byte for short streams.
        var splits = [wire.count, 7]
        if wire.count < 400 { splits.append(1) }
        for piece in splits {
            var decoder = BoxStreamDecoder(key: key, nonce: nonce)
            var buf = ByteBufferAllocator().buffer(capacity: wire.count)
            var bodies: [[UInt8]] = []
            var sawGoodbye = false
            var offset = 0
            while offset < wire.count {
                let end = min(offset + piece, wire.count)
                buf.writeBytes(wire[offset..<end])
                offset = end
                while let message = try decoder.read(&buf) {
                    switch message {
                    case .data(var b): bodies.append(b.readBytes(length: b.readableBytes)!)
                    case .goodbye: sawGoodbye = true
                    }
                    if sawGoodbye { break }
                }
            }
            XCTAssertEqual(bodies, expectedBodies, "\(name): decoded boxes (pieces of \(piece))")
            XCTAssertTrue(sawGoodbye, "\(name): goodbye (pieces of \(piece))")
            XCTAssertTrue(decoder.receivedGoodbye)
        }
    }

    func testBoxStream() throws {
        let v = try load("boxstream.json", as: BoxStreamFile.self)
        let hs = try load("handshake.json", as: HandshakeFile.self)
        XCTAssertEqual(v.key, hs.client_session.encrypt_key)
        XCTAssertEqual(v.nonce, hs.client_session.encrypt_nonce)
        XCTAssertEqual(v.writes.map(\.plaintext_length), [0, 1, 4096, 4097])
        try checkStream(key: bytes(v.key), nonce: bytes(v.nonce), writes: v.writes, goodbye: v.goodbye, name: "main")
        try checkStream(key: bytes(v.carry.key), nonce: bytes(v.carry.nonce), writes: v.carry.writes,
                        goodbye: v.carry.goodbye, name: "carry")
    }

    func testBoxStreamInvalid() throws {
        let v = try load("boxstream.json", as: BoxStreamFile.self)
        let expected: [String: BoxStreamError] = [
            "header_authentication": BoxStreamError(reason: .headerAuthenticationFailed),
            "body_authentication": BoxStreamError(reason: .bodyAuthenticationFailed),
            "body_too_long": BoxStreamError(reason: .bodyTooLong(4097)),
            "data_after_goodbye": BoxStreamError(reason: .dataAfterGoodbye),
        ]
        XCTAssertFalse(v.invalid.isEmpty)
        for c in v.invalid {
            guard let want = expected[c.error] else {
                XCTFail("unknown error \(c.error)")
                continue
            }
            var decoder = BoxStreamDecoder(key: bytes(v.key), nonce: bytes(v.nonce))
            var buf = byteBuffer(bytes(c.stream))
            var thrown: Error?
            do {
                while try decoder.read(&buf) != nil {}
            } catch {
                thrown = error
            }
            XCTAssertEqual(thrown as? BoxStreamError, want, c.name)
        }
    }

    // MARK: frames.json

    struct FramesFile: Decodable {
        struct Valid: Decodable {
            let name: String
            let author_seed: String
            let author: String
            let recipient: String
            let version: Int
            let type: Int
            let message_id: String
            let created_at: UInt64
            let payload: String
            let payload_fields: [String: StringOrInts]
            let signing_input: String
            let signature: String
            let envelope: String
            let frame: String
        }
        struct Reply: Decodable {
            let code: String
            let recipient: String
            let ref_message_id: String
            let supported_versions: [UInt32]
            let ref_type: UInt32
        }
        struct Step: Decodable {
            let frame: String
            let now: UInt64
            let stage: String
            let expect: String
            let reply: Reply?
        }
        struct Case: Decodable {
            let name: String
            let receiver: String
            let link_peer: String
            let replay_capacity: Int
            let maximum_envelope_length: Int
            let steps: [Step]
        }
        let signing_domain: String
        let maximum_clock_skew_ms: UInt64
        let replay_window_ms: UInt64
        let valid: [Valid]
        let receiver_checks: [Case]
    }

    enum StringOrInts: Decodable, Equatable {
        case string(String)
        case int(Int)
        case ints([Int])

        init(from decoder: Decoder) throws {
            let c = try decoder.singleValueContainer()
            if let s = try? c.decode(String.self) { self = .string(s) }
            else if let i = try? c.decode(Int.self) { self = .int(i) }
            else { self = .ints(try c.decode([Int].self)) }
        }

        var string: String? { if case .string(let s) = self { return s }; return nil }
        var uint64: UInt64? { string.flatMap { UInt64($0) } }
        var int: Int? { if case .int(let i) = self { return i }; return nil }
        var ints: [Int]? { if case .ints(let a) = self { return a }; return nil }
    }

    func testFrameConstants() throws {
        let v = try load("frames.json", as: FramesFile.self)
        XCTAssertEqual(hexString(Envelope.signingDomain), v.signing_domain)
        XCTAssertEqual(TandemConstants.maximumClockSkewMilliseconds, v.maximum_clock_skew_ms)
        XCTAssertEqual(TandemConstants.replayWindowMilliseconds, v.replay_window_ms)
    }

    func testValidFrames() throws {
        let v = try load("frames.json", as: FramesFile.self)
        XCTAssertFalse(v.valid.isEmpty)
        for c in v.valid {
            let author = try SigningKeyPair(seed: bytes(c.author_seed))
            XCTAssertEqual(hexString(author.publicKey), c.author, c.name)
            let env = Envelope.sign(type: MessageType(rawValue: UInt16(c.type)),
                                    messageID: MessageID(bytes: bytes(c.message_id)), author: author,
                                    recipient: bytes(c.recipient), createdAt: c.created_at, payload: bytes(c.payload))
            XCTAssertEqual(hexString(env.bytes), c.envelope, c.name)
            XCTAssertEqual(hexString(env.frameBytes), c.frame, c.name)
            XCTAssertEqual(hexString(env.signingInput), c.signing_input, c.name)
            XCTAssertEqual(hexString(env.signature), c.signature, c.name)
            var written = ByteBufferAllocator().buffer(capacity: 0)
            env.writeFrame(to: &written)
            XCTAssertEqual(hexString(written.readableBytesView), c.frame, c.name)

            // Parse back from the frame, through the decoder.
            var buf = byteBuffer(bytes(c.frame))
            let envelopeBytes = try XCTUnwrap(try FrameDecoder().read(&buf), c.name)
            XCTAssertEqual(buf.readableBytes, 0)
            let parsed = try Envelope.parse(envelopeBytes)
            XCTAssertEqual(parsed, env, c.name)
            XCTAssertEqual(Int(parsed.version), c.version)
            XCTAssertEqual(Int(parsed.type.rawValue), c.type)
            XCTAssertEqual(hexString(parsed.messageID.bytes), c.message_id)
            XCTAssertEqual(hexString(parsed.author), c.author)
            XCTAssertEqual(hexString(parsed.recipient), c.recipient)
            XCTAssertEqual(parsed.createdAt, c.created_at)
            XCTAssertEqual(hexString(parsed.payload), c.payload)
            XCTAssertTrue(parsed.hasValidSignature, c.name)

            try checkPayload(c)
        }
    }

    func checkPayload(_ c: FramesFile.Valid) throws {
        let f = c.payload_fields
        let payload = bytes(c.payload)
        func u64(_ key: String) -> UInt64? { f[key]?.uint64 }
        switch f["message"]?.string {
        case "tandem.v1.Ping":
            let m = try Tandem_V1_Ping(serializedBytes: payload)
            XCTAssertEqual(m.nonce, u64("nonce"), c.name)
            XCTAssertEqual(m.sentAtMs, u64("sent_at_ms"), c.name)
            XCTAssertEqual(try m.serializedBytes() as [UInt8], payload, "\(c.name): re-encoding")
            if m.unknownFields.data.isEmpty {
                var fresh = Tandem_V1_Ping()
                fresh.nonce = m.nonce
                fresh.sentAtMs = m.sentAtMs
                XCTAssertEqual(try fresh.serializedBytes() as [UInt8], payload, "\(c.name): encoding")
            }
        case "tandem.v1.Pong":
            let m = try Tandem_V1_Pong(serializedBytes: payload)
            XCTAssertEqual(m.nonce, u64("nonce"), c.name)
            XCTAssertEqual(m.pingSentAtMs, u64("ping_sent_at_ms"), c.name)
            XCTAssertEqual(m.receivedAtMs, u64("received_at_ms"), c.name)
            XCTAssertEqual(try m.serializedBytes() as [UInt8], payload, "\(c.name): re-encoding")
        case "tandem.v1.Error":
            let m = try Tandem_V1_Error(serializedBytes: payload)
            XCTAssertEqual(m.code, f["code"]?.string.flatMap { Self.errorCodes[$0] }, c.name)
            XCTAssertEqual(m.detail, f["detail"]?.string, c.name)
            XCTAssertEqual(hexString(m.refMessageID), f["ref_message_id"]?.string, c.name)
            XCTAssertEqual(m.supportedVersions.map(Int.init), f["supported_versions"]?.ints, c.name)
            XCTAssertEqual(Int(m.refType), f["ref_type"]?.int, c.name)
            var fresh = Tandem_V1_Error()
            fresh.code = m.code
            fresh.detail = m.detail
            fresh.refMessageID = m.refMessageID
            fresh.supportedVersions = m.supportedVersions
            fresh.refType = m.refType
            XCTAssertEqual(try fresh.serializedBytes() as [UInt8], payload, "\(c.name): encoding")
        case "tandem.v1.Presence":
            // Health is present only while shared; 0 is dead, present and 0 (issue 35).
            let m = try Tandem_V1_Presence(serializedBytes: payload)
            XCTAssertEqual(m.status, .idle, c.name)
            XCTAssertEqual(Int(m.heartbeatSeconds), f["heartbeat_seconds"]?.int, c.name)
            XCTAssertEqual(m.hasHealth ? Int(m.health) : nil, f["health"]?.int, c.name)
            let p = try PresenceMessage(payload: payload)
            XCTAssertEqual(p.health, f["health"]?.int, c.name)
            XCTAssertEqual(try m.serializedBytes() as [UInt8], payload, "\(c.name): re-encoding")
            var fresh = Tandem_V1_Presence()
            fresh.status = .idle
            fresh.heartbeatSeconds = 10
            if let h = f["health"]?.int { fresh.health = UInt32(h) }
            // ACKS announced (README 12.5): 1, else absent.
            XCTAssertEqual(p.takesAcks, f["takes_acks"]?.int == 1, c.name)
            fresh.takesAcks = f["takes_acks"]?.int == 1
            XCTAssertEqual(try fresh.serializedBytes() as [UInt8], payload, "\(c.name): encoding")
        case "tandem.v1.Acks":
            let m = try AcksMessage(payload: payload)
            XCTAssertEqual(m.messageIDs.map(hexString).joined(separator: ","), f["message_ids"]?.string, c.name)
            XCTAssertEqual(m.payload, payload, "\(c.name): encoding")
        case let name? where name.hasPrefix("tandem.v1.") && MessageType(rawValue: UInt16(c.type)).isMessage:
            try checkMessagingPayload(c, name)
        default:
            XCTFail("\(c.name): unknown payload message")
        }
    }

    /// A messaging payload (Protocol/messages.md): its validating decoder accepts it, gives the
    /// listed fields, and the value encodes back to the same bytes.
    func checkMessagingPayload(_ c: FramesFile.Valid, _ name: String) throws {
        let f = c.payload_fields
        let payload = bytes(c.payload)
        func s(_ key: String) -> String? { f[key]?.string }
        func hex(_ b: [UInt8]?) -> String { hexString(b ?? []) }
        func u64(_ key: String) -> UInt64? { f[key]?.uint64 }
        let encoded: [UInt8]
        switch name {
        case "tandem.v1.ChatMessage":
            let m = try ChatMessageBody(payload: payload, createdAtMs: c.created_at)
            XCTAssertEqual(hex(m.challengeID), s("challenge_id"), c.name)
            XCTAssertEqual(m.seq, u64("seq"), c.name)
            XCTAssertEqual(m.lamport, u64("lamport"), c.name)
            XCTAssertEqual(m.text, s("text"), c.name)
            XCTAssertEqual(hex(m.replyTo), s("reply_to"), c.name)
            XCTAssertEqual(m.sentAtMs, u64("sent_at_ms"), c.name)
            XCTAssertEqual(m.expiresAfterMs, u64("expires_after_ms"), c.name)
            encoded = m.payload
        case "tandem.v1.ChatForward":
            let m = try ChatForwardMessage(payload: payload, forwarder: bytes(c.author))
            XCTAssertEqual(hexString(m.challengeID), s("challenge_id"), c.name)
            XCTAssertEqual(hexString(m.inner.bytes), s("envelope"), c.name)
            XCTAssertEqual(hexString(m.inner.author), s("inner_author"), c.name)
            switch m.content {
            case .message(let inner): XCTAssertEqual(inner.text, s("inner_text"), c.name)
            case .fileOffer(let inner):
                // A thread's file (messages.md 7.7): the author's FILE_OFFER, addressed to the inviter.
                XCTAssertEqual(hexString(inner.fileID.bytes), s("inner_file_id"), c.name)
                XCTAssertEqual(inner.name, s("inner_name"), c.name)
                XCTAssertEqual(inner.challengeID, m.challengeID, c.name)
                XCTAssertEqual(ChatForwardMessage.innerType(payload: payload), .fileOffer, c.name)
            case .reaction, .retract: return XCTFail("\(c.name): not a MESSAGE or FILE_OFFER inside")
            }
            encoded = m.payload
        case "tandem.v1.ChatReaction":
            let m = try ChatReactionMessage(payload: payload)
            XCTAssertEqual(hex(m.challengeID), s("challenge_id"), c.name)
            XCTAssertEqual(hexString(m.messageID), s("message_id"), c.name)
            XCTAssertEqual(m.emoji, s("emoji"), c.name)
            encoded = m.payload
        case "tandem.v1.Cheer":
            let m = try CheerMessage(payload: payload)
            XCTAssertEqual(hexString(m.challengeID), s("challenge_id"), c.name)
            XCTAssertEqual(hexString(m.subject), s("subject"), c.name)
            XCTAssertEqual(m.emoji, s("emoji"), c.name)
            XCTAssertEqual(m.text, s("text"), c.name)
            encoded = m.payload
        case "tandem.v1.ReadReceipt":
            let m = try ReadReceiptMessage(payload: payload)
            XCTAssertEqual(m.readUpToSeq, u64("read_up_to_seq"), c.name)
            XCTAssertEqual(m.readAtMs, u64("read_at_ms"), c.name)
            encoded = m.payload
        case "tandem.v1.Retract":
            let m = try RetractMessage(payload: payload)
            XCTAssertEqual(hex(m.challengeID), s("challenge_id"), c.name)
            XCTAssertEqual(hexString(m.messageID), s("message_id"), c.name)
            encoded = m.payload
        case "tandem.v1.GapRequest":
            let m = try GapRequestMessage(payload: payload)
            XCTAssertEqual(hex(m.challengeID), s("challenge_id"), c.name)
            XCTAssertEqual(hexString(m.author), s("author"), c.name)
            XCTAssertEqual(m.ranges.map { "\($0.first)-\($0.last)" }.joined(separator: ","), s("ranges"), c.name)
            encoded = m.payload
        case "tandem.v1.ConversationSettings":
            let m = try ConversationSettingsMessage(payload: payload)
            XCTAssertEqual(m.disappearAfterMs, u64("disappear_after_ms"), c.name)
            XCTAssertEqual(m.version, u64("version"), c.name)
            encoded = m.payload
        case "tandem.v1.FileOffer":
            let m = try FileOfferMessage(payload: payload)
            XCTAssertEqual(hexString(m.fileID.bytes), s("file_id"), c.name)
            XCTAssertEqual(m.name, s("name"), c.name)
            XCTAssertEqual(m.size, u64("size"), c.name)
            XCTAssertEqual(hexString(m.fileHash), s("file_hash"), c.name)
            XCTAssertEqual(UInt64(m.chunkBytes), u64("chunk_size"), c.name)
            XCTAssertEqual(hexString(m.chunkRoot), s("chunk_root"), c.name)
            XCTAssertEqual(hex(m.messageID), s("message_id"), c.name)
            XCTAssertEqual(hex(m.challengeID), s("challenge_id"), c.name)
            encoded = m.payload
        case "tandem.v1.FileRequest":
            let m = try FileRequestMessage(payload: payload)
            XCTAssertEqual(hexString(m.fileID.bytes), s("file_id"), c.name)
            XCTAssertEqual(m.ranges.map { "\($0.first)+\($0.count)" }.joined(separator: ","), s("ranges"), c.name)
            encoded = m.payload
        case "tandem.v1.FileCancel":
            let m = try FileCancelMessage(payload: payload)
            XCTAssertEqual(hexString(m.fileID.bytes), s("file_id"), c.name)
            XCTAssertEqual(String(m.reason.rawValue), s("reason"), c.name)
            encoded = m.payload
        case "tandem.v1.DeliveryReceipt":
            let m = try DeliveryReceiptMessage(payload: payload)
            XCTAssertEqual(m.messageIDs.map(hexString).joined(separator: ","), s("message_ids"), c.name)
            encoded = m.payload
        default:
            return XCTFail("\(c.name): unknown messaging payload \(name)")
        }
        XCTAssertEqual(encoded, payload, "\(c.name): encoding")
    }

    /// Every signed messaging type has a vector in frames.json (FILE_CHUNK is link-authenticated).
    func testEveryMessagingTypeHasAFrameVector() throws {
        let v = try load("frames.json", as: FramesFile.self)
        let covered = Set(v.valid.map { UInt16($0.type) })
        for t in MessageType.messageTypes where !t.isLinkAuthenticated {
            XCTAssertTrue(covered.contains(t.rawValue), "no frame vector for \(MessageType.messageNames[t.rawValue] ?? "?")")
        }
    }

    /// What a receiver decides about one frame: the code (nil = accepted), the stage that decided.
    struct Decision {
        var rejection: FrameRejection?
        var stage: String
    }

    func decide(_ frame: [UInt8], verifier: inout FrameVerifier, decoder: FrameDecoder, now: UInt64) throws -> Decision {
        var buf = byteBuffer(frame)
        let envelopeBytes: [UInt8]
        do {
            guard let b = try decoder.read(&buf) else {
                XCTFail("frame incomplete")
                return Decision(rejection: nil, stage: "incomplete")
            }
            envelopeBytes = b
        } catch let r as FrameRejection {
            // Decided on the prefix alone: nothing of the body was consumed.
            XCTAssertEqual(buf.readableBytes, frame.count)
            return Decision(rejection: r, stage: "length")
        }
        switch verifier.verify(envelopeBytes, now: now) {
        case .failure(let r):
            return Decision(rejection: r, stage: "verify")
        case .success(let env):
            // The payload must be the message its type names (as the node's link handler checks).
            let ok: Bool
            switch env.type {
            case .ping: ok = (try? Tandem_V1_Ping(serializedBytes: env.payload)) != nil
            case .pong: ok = (try? Tandem_V1_Pong(serializedBytes: env.payload)) != nil
            case .error: ok = (try? Tandem_V1_Error(serializedBytes: env.payload)) != nil
            default: ok = true
            }
            if ok { return Decision(rejection: nil, stage: "verify") }
            return Decision(rejection: FrameRejection(.malformed, "payload", messageID: env.messageID,
                                                      author: env.author, type: env.type),
                            stage: "payload")
        }
    }

    func testReceiverChecks() throws {
        let v = try load("frames.json", as: FramesFile.self)
        let keys = try load("keys.json", as: KeysFile.self)
        XCTAssertFalse(v.receiver_checks.isEmpty)
        for c in v.receiver_checks {
            guard let seed = keys.keys.first(where: { $0.ed25519_public_key == c.receiver })?.seed else {
                XCTFail("\(c.name): receiver not in keys.json")
                continue
            }
            let identity = try SigningKeyPair(seed: bytes(seed))
            var verifier = FrameVerifier(localPublicKey: identity.publicKey,
                                         replayCache: ReplayCache(capacity: c.replay_capacity))
            let decoder = FrameDecoder(maximumEnvelopeLength: c.maximum_envelope_length)
            for (i, s) in c.steps.enumerated() {
                let label = "\(c.name), step \(i + 1)"
                let d = try decide(bytes(s.frame), verifier: &verifier, decoder: decoder, now: s.now)
                if s.expect == "ACCEPT" {
                    XCTAssertNil(d.rejection, "\(label): \(d.rejection.map { "\($0)" } ?? "")")
                    continue
                }
                guard let rejection = d.rejection else {
                    XCTFail("\(label): accepted, expected \(s.expect)")
                    continue
                }
                XCTAssertEqual(rejection.code, Self.errorCodes[s.expect], "\(label): \(rejection)")
                XCTAssertEqual(d.stage, s.stage, label)

                let reply = FrameVerifier.errorReply(to: rejection, from: identity, linkPeer: bytes(c.link_peer),
                                                     now: s.now)
                guard let want = s.reply else {
                    XCTAssertNil(reply, "\(label): no reply expected")
                    continue
                }
                guard let reply else {
                    XCTFail("\(label): expected a reply")
                    continue
                }
                XCTAssertEqual(reply.type, .error, label)
                XCTAssertEqual(hexString(reply.recipient), want.recipient, "\(label): reply recipient")
                XCTAssertEqual(reply.author, identity.publicKey, label)
                XCTAssertTrue(reply.hasValidSignature, label)
                let error = try Tandem_V1_Error(serializedBytes: reply.payload)
                XCTAssertEqual(error.code, Self.errorCodes[want.code], label)
                XCTAssertEqual(hexString(error.refMessageID), want.ref_message_id, "\(label): ref_message_id")
                XCTAssertEqual(error.supportedVersions, want.supported_versions, "\(label): supported_versions")
                XCTAssertEqual(error.refType, want.ref_type, "\(label): ref_type")
                XCTAssertLessThanOrEqual(error.detail.utf8.count, 256, label)
            }
        }
    }

    /// Every proper prefix of a valid frame reads as "need more" and consumes nothing.
    func testFrameDecoderPrefixes() throws {
        let v = try load("frames.json", as: FramesFile.self)
        let frame = bytes(v.valid[0].frame)
        for n in 0..<frame.count {
            var buf = byteBuffer(Array(frame[0..<n]))
            XCTAssertNil(try FrameDecoder().read(&buf), "prefix of \(n) bytes")
            XCTAssertEqual(buf.readableBytes, n)
        }
    }

    // MARK: identity.json

    struct IdentityVectors: Decodable {
        struct Plain: Decodable { let format: String; let public_key: String; let seed: String }
        struct Sealed: Decodable {
            struct Box: Decodable {
                let aead: String
                let ciphertext: String
                let kdf: String
                let memlimit: Int
                let nonce: String
                let opslimit: UInt64
                let salt: String
            }
            let encrypted_seed: Box
            let format: String
            let public_key: String
        }
        let passphrase: String
        let derived_key: String
        let plain: Plain
        let sealed: Sealed
    }

    func testIdentityFile() throws {
        let v = try load("identity.json", as: IdentityVectors.self)
        XCTAssertEqual(v.plain.format, "tandem-identity-v1")
        XCTAssertEqual(hexString(try SigningKeyPair(seed: bytes(v.plain.seed)).publicKey), v.plain.public_key)

        let box = v.sealed.encrypted_seed
        XCTAssertEqual(v.sealed.format, "tandem-identity-v1")
        XCTAssertEqual(box.kdf, "argon2id13")
        XCTAssertEqual(box.aead, "xchacha20poly1305-ietf")
        XCTAssertEqual(box.opslimit, PasswordHash.opsLimitInteractive)
        XCTAssertEqual(box.memlimit, PasswordHash.memLimitInteractive)
        let key = try PasswordHash.deriveKey(length: 32, passphrase: Array(v.passphrase.utf8), salt: bytes(box.salt),
                                             opsLimit: box.opslimit, memLimit: box.memlimit)
        XCTAssertEqual(hexString(key.exposedCopy), v.derived_key)
        let publicKey = bytes(v.sealed.public_key)
        let seed = try XCTUnwrap(XChaCha20Poly1305.open(bytes(box.ciphertext), additionalData: publicKey,
                                                        nonce: bytes(box.nonce), key: key))
        XCTAssertEqual(hexString(try SigningKeyPair(seed: seed).publicKey), v.sealed.public_key)
        // The public key is bound as additional data.
        var otherKey = publicKey
        otherKey[0] ^= 1
        XCTAssertNil(XChaCha20Poly1305.open(bytes(box.ciphertext), additionalData: otherKey,
                                            nonce: bytes(box.nonce), key: key))
    }
}
