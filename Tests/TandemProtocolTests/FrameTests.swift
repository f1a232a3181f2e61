import Foundation
import NIOCore
import Sodium
import XCTest
@testable import TandemProtocol

final class FrameTests: XCTestCase {
    let alice = fixedPair(1)
    let bob = fixedPair(2)
    let now: UInt64 = 1_790_000_000_000

    private func ping(_ nonce: UInt64 = 1, id: MessageID = .random(), createdAt: UInt64? = nil,
                      to recipient: [UInt8]? = nil, type: MessageType = .ping) -> Envelope {
        var p = Tandem_V1_Ping()
        p.nonce = nonce
        p.sentAtMs = now
        return Envelope.sign(type: type, messageID: id, author: alice, recipient: recipient ?? bob.publicKey,
                             createdAt: createdAt ?? now, payload: try! p.serializedBytes())
    }

    func testLayoutAndRoundTrip() throws {
        let env = ping()
        XCTAssertEqual(env.bytes.count, Envelope.minimumLength + env.payload.count)
        XCTAssertEqual(env.bytes[0], 1)
        XCTAssertEqual(Array(env.bytes[19..<51]), alice.publicKey)
        XCTAssertEqual(Array(env.bytes[51..<83]), bob.publicKey)
        let frame = env.frameBytes
        XCTAssertEqual(Array(frame[0..<4]), [0, 0, UInt8(env.bytes.count >> 8), UInt8(env.bytes.count & 0xff)])
        let parsed = try Envelope.parse(env.bytes)
        XCTAssertEqual(parsed, env)
        XCTAssertTrue(parsed.hasValidSignature)
        XCTAssertEqual(try Tandem_V1_Ping(serializedBytes: parsed.payload).nonce, 1)
        // The signature covers the domain tag and every byte before it.
        XCTAssertTrue(Ed25519.verify(signature: env.signature,
                                     message: Array("tandem-frame-v1".utf8) + [0] + env.bytes.dropLast(64),
                                     publicKey: alice.publicKey))
    }

    func testEveryByteIsCoveredBySignature() throws {
        let env = ping()
        for i in 0..<(env.bytes.count - 64) where i != 0 {
            var bytes = env.bytes
            bytes[i] ^= 0x20
            guard let parsed = try? Envelope.parse(bytes) else { continue } // a changed length is malformed
            XCTAssertFalse(parsed.hasValidSignature, "byte \(i) is not covered")
        }
    }

    /// BACKUP_PIECE, BACKUP_FETCHED and FILE_CHUNK are link-authenticated (README 5.4,
    /// messages.md): zero signature, accepted only on a link from their author; every other type
    /// is signed and verified as before.
    func testLinkAuthenticatedTypesAreAcceptedOnlyFromTheirAuthorsLink() throws {
        XCTAssertEqual((0...0xFFFF).filter { MessageType(rawValue: UInt16($0)).isLinkAuthenticated }, [0x0404, 0x040D, 0x050B])
        let payload = (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let carol = SigningKeyPair.generate()
        for type in [MessageType.backupPiece, .backupFetched, .fileChunk] {
            let env = Envelope.sign(type: type, author: alice, recipient: bob.publicKey, createdAt: now, payload: payload)
            XCTAssertEqual(env.signature, [UInt8](repeating: 0, count: 64))
            let parsed = try Envelope.parse(env.bytes)
            XCTAssertTrue(parsed.isAuthentic(onLinkFrom: alice.publicKey))
            XCTAssertFalse(parsed.hasValidSignature, "no signature to verify")
            for other in [bob.publicKey, carol.publicKey] {
                XCTAssertFalse(parsed.isAuthentic(onLinkFrom: other), "on a link from another key")
            }
            XCTAssertFalse(parsed.isAuthentic(onLinkFrom: nil), "not on a link (relay mail)")
            // The verifier: accepted on the author's link; BAD_SIGNATURE on another, or off a link.
            // (Only for the types a node takes: the verifier answers UNKNOWN_TYPE first otherwise.)
            guard MessageType.known.contains(type) else { continue }
            var verifier = FrameVerifier(localPublicKey: bob.publicKey)
            for (peer, label) in [(Optional(carol.publicKey), "carol's link"), (Optional(bob.publicKey), "bob's own key"), (nil, "no link")] {
                guard case .failure(let r) = verifier.verify(env.bytes, linkPeer: peer, now: now) else {
                    return XCTFail("\(type) accepted on \(label)")
                }
                XCTAssertEqual(r.code, .badSignature, label)
                XCTAssertNil(r.author, "an unproven author is not named")
            }
            guard case .success = verifier.verify(env.bytes, linkPeer: alice.publicKey, now: now) else {
                return XCTFail("\(type) refused on its author's link")
            }
            // Any non-zero signature field is refused, a real signature too.
            var bytes = env.bytes
            bytes[bytes.count - 1] = 1
            XCTAssertFalse(try Envelope.parse(bytes).isAuthentic(onLinkFrom: alice.publicKey))
            bytes = Array(env.bytes.dropLast(64)) + alice.sign(Envelope.signingDomain + env.bytes.dropLast(64))
            XCTAssertFalse(try Envelope.parse(bytes).isAuthentic(onLinkFrom: alice.publicKey), "signed: still refused")
            // Retyped to a signed type, the zero signature fails on any link.
            for other: UInt16 in [0x0405, 0x0002, 0x040C, 0x0101] {
                var retyped = env.bytes
                retyped[1] = UInt8(other >> 8)
                retyped[2] = UInt8(other & 0xFF)
                XCTAssertFalse(try Envelope.parse(retyped).isAuthentic(onLinkFrom: alice.publicKey), "\(type) retyped to \(other)")
            }
        }
        // A signed type retyped to a link-authenticated one keeps its signature: refused.
        var retyped = ping().bytes
        retyped[1] = 0x04
        retyped[2] = 0x04
        XCTAssertFalse(try Envelope.parse(retyped).isAuthentic(onLinkFrom: alice.publicKey))
        // A ping keeps the scheme of version 1: its signature covers its bytes, on a link or off one.
        let p = ping()
        XCTAssertEqual(p.signingInput, Envelope.signingDomain + p.bytes.dropLast(64))
        XCTAssertTrue(p.isAuthentic(onLinkFrom: nil))
        XCTAssertTrue(p.isAuthentic(onLinkFrom: carol.publicKey))
    }

    func testDecoderByteByByteRandomSplitsAndPrefixes() throws {
        let frames = (0..<5).map { ping(UInt64($0)) }
        let wire = Array(frames.map(\.frameBytes).joined())
        var rng = SplitMix64(seed: 3)
        for maxPiece in [1, 4, 5, 97, 1000] {
            let decoder = FrameDecoder()
            var inbound = ByteBufferAllocator().buffer(capacity: 64)
            var got: [[UInt8]] = []
            for piece in pieces(wire, maxPiece: maxPiece, rng: &rng) {
                inbound.writeBytes(piece)
                while let env = try decoder.read(&inbound) { got.append(env) }
            }
            XCTAssertEqual(got, frames.map(\.bytes), "maxPiece \(maxPiece)")
        }
        let one = frames[0].frameBytes
        for n in 0..<one.count {
            var b = buffer(Array(one[0..<n]))
            XCTAssertNil(try FrameDecoder().read(&b))
            XCTAssertEqual(b.readableBytes, n, "a prefix is not consumed")
        }
    }

    func testOversizedLengthIsRefusedFromTheLengthFieldAlone() {
        // Only the 4 length bytes arrive: the decoder must refuse without waiting for the body.
        for (limit, announced) in [(TandemConstants.maximumEnvelopeLength, UInt32(1 << 20) + 1),
                                   (1000, UInt32(1001)), (1 << 20, UInt32.max)] {
            var b = ByteBufferAllocator().buffer(capacity: 4)
            b.writeInteger(announced)
            XCTAssertThrowsError(try FrameDecoder(maximumEnvelopeLength: limit).read(&b)) {
                XCTAssertEqual(($0 as? FrameRejection)?.code, .frameTooLarge)
            }
        }
        var ok = ByteBufferAllocator().buffer(capacity: 4)
        ok.writeInteger(UInt32(1000))
        XCTAssertNil(try FrameDecoder(maximumEnvelopeLength: 1000).read(&ok))
        // A configured limit can only lower the protocol's maximum.
        XCTAssertEqual(FrameDecoder(maximumEnvelopeLength: 1 << 30).maximumEnvelopeLength, 1 << 20)
    }

    func testVerifierAcceptsThenRefusesReplay() {
        var v = FrameVerifier(localPublicKey: bob.publicKey)
        let env = ping()
        XCTAssertNoThrow(try v.verify(env.bytes, now: now).get())
        guard case .failure(let r) = v.verify(env.bytes, now: now + 1) else { return XCTFail() }
        XCTAssertEqual(r.code, .replayed)
        XCTAssertEqual(v.accepted, 1)
        XCTAssertEqual(v.rejected[.replayed], 1)
    }

    func testVerifierRules() {
        var v = FrameVerifier(localPublicKey: bob.publicKey)
        func code(_ bytes: [UInt8], at t: UInt64? = nil) -> Tandem_V1_ErrorCode? {
            if case .failure(let r) = v.verify(bytes, now: t ?? now) { return r.code }
            return nil
        }
        var badSig = ping().bytes
        badSig[badSig.count - 1] ^= 1
        XCTAssertEqual(code(badSig), .badSignature)
        XCTAssertEqual(code(ping(to: alice.publicKey).bytes), .wrongRecipient)
        var v2 = ping().bytes
        v2[0] = 2
        XCTAssertEqual(code(v2), .unsupportedVersion)
        XCTAssertEqual(code([]), .malformed)
        XCTAssertEqual(code([1, 2, 3]), .malformed)
        var short = ping().bytes
        short.removeLast(1)
        XCTAssertEqual(code(short), .malformed)
        let tenMinutes: UInt64 = 10 * 60 * 1000
        XCTAssertEqual(code(ping(createdAt: now + tenMinutes + 1).bytes), .fromTheFuture)
        XCTAssertNil(code(ping(createdAt: now + tenMinutes).bytes), "exactly 10 minutes ahead is allowed")
        XCTAssertEqual(code(ping(createdAt: now - 25 * 3_600_000).bytes), .stale)
        XCTAssertEqual(code(ping(type: MessageType(rawValue: 0x7777)).bytes), .unknownType)
        XCTAssertEqual(v.rejected.values.reduce(0, +), 9)
    }

    func testErrorRepliesAreTypedAndAddressed() throws {
        let rejection = FrameRejection(.unknownType, "unknown message type 0x7777", messageID: MessageID(bytes: [UInt8](repeating: 4, count: 16)),
                                       author: alice.publicKey, type: MessageType(rawValue: 0x7777))
        let reply = try XCTUnwrap(FrameVerifier.errorReply(to: rejection, from: bob, linkPeer: alice.publicKey, now: now))
        XCTAssertEqual(reply.type, .error)
        XCTAssertEqual(reply.recipient, alice.publicKey)
        XCTAssertTrue(reply.hasValidSignature)
        let err = try Tandem_V1_Error(serializedBytes: reply.payload)
        XCTAssertEqual(err.code, .unknownType)
        XCTAssertEqual(err.refType, 0x7777)
        XCTAssertEqual(Array(err.refMessageID), [UInt8](repeating: 4, count: 16))

        let version = FrameRejection(.unsupportedVersion, "v2")
        let vr = try XCTUnwrap(FrameVerifier.errorReply(to: version, from: bob, linkPeer: alice.publicKey, now: now))
        XCTAssertEqual(try Tandem_V1_Error(serializedBytes: vr.payload).supportedVersions, [1])
        // An ERROR frame is never answered with an ERROR frame.
        XCTAssertNil(FrameVerifier.errorReply(to: FrameRejection(.malformed, "x", type: .error), from: bob,
                                              linkPeer: alice.publicKey, now: now))
    }

    func testUnknownProtobufFieldsAreIgnored() throws {
        var p = Tandem_V1_Ping()
        p.nonce = 5
        var bytes: [UInt8] = try p.serializedBytes()
        bytes += [0xA0, 0x06, 0x01] // field 100, varint 1: unknown to this version
        XCTAssertEqual(try Tandem_V1_Ping(serializedBytes: bytes).nonce, 5)
    }
}
