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

    /// BACKUP_PIECE and BACKUP_FETCHED sign a digest of their payload (README 5.4): every byte is
    /// still covered, the type decides the scheme and cannot be changed, and a signature made with
    /// one scheme never verifies under the other.
    func testDigestSignedTypesCoverEveryByteAndCannotSwitchScheme() throws {
        XCTAssertEqual((0...0xFFFF).filter { MessageType(rawValue: UInt16($0)).signsPayloadDigest }, [0x0404, 0x040D])
        let payload = (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        for type in [MessageType.backupPiece, .backupFetched] {
            let env = Envelope.sign(type: type, author: alice, recipient: bob.publicKey, createdAt: now, payload: payload)
            XCTAssertTrue(try Envelope.parse(env.bytes).hasValidSignature)
            XCTAssertEqual(env.signingInput.count, 16 + Envelope.headerLength + 32, "the payload is not signed itself")
            XCTAssertFalse(Ed25519.verify(signature: env.signature,
                                          message: Envelope.signingDomain + env.bytes.dropLast(64), publicKey: alice.publicKey))
            for i in stride(from: 1, to: env.bytes.count - 64, by: 7) {
                var bytes = env.bytes
                bytes[i] ^= 0x20
                guard let parsed = try? Envelope.parse(bytes) else { continue }
                XCTAssertFalse(parsed.hasValidSignature, "\(type): byte \(i) is not covered")
            }
            // Retyped to a type that signs its bytes (or the other way round), the signature fails.
            for other: UInt16 in [0x0405, 0x0002, 0x040C, type == .backupPiece ? 0x040D : 0x0404] {
                var bytes = env.bytes
                bytes[1] = UInt8(other >> 8)
                bytes[2] = UInt8(other & 0xFF)
                XCTAssertFalse(try Envelope.parse(bytes).hasValidSignature, "\(type) retyped to \(other)")
            }
        }
        // A ping keeps the scheme of version 1: its signature covers its bytes.
        let p = ping()
        XCTAssertEqual(p.signingInput, Envelope.signingDomain + p.bytes.dropLast(64))
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
