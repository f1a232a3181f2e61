import Foundation
import Sodium
import XCTest
@testable import TandemProtocol

/// A direct MESSAGE may go unsigned on its author's link (Protocol/README.md 5.4, messages.md 11.6):
/// accepted so only on a link whose handshake proved the author, signed for anywhere else.
final class LinkMessageTests: XCTestCase {
    let alice = fixedPair(1)
    let bob = fixedPair(2)
    let carol = fixedPair(3)
    let now: UInt64 = 1_790_000_000_000

    private func message(_ text: String = "ready?", thread: [UInt8]? = nil, signed: Bool = false) -> Envelope {
        let body = ChatMessageBody(challengeID: thread, seq: 1, lamport: 1, text: text, replyTo: nil, sentAtMs: now)
        return signed
            ? Envelope.sign(type: .chatMessage, author: alice, recipient: bob.publicKey, createdAt: now, payload: body.payload)
            : Envelope.unsigned(type: .chatMessage, author: alice.publicKey, recipient: bob.publicKey, createdAt: now, payload: body.payload)
    }

    func testOnlyMessageAckAndAcksMayGoUnsigned() throws {
        XCTAssertEqual((0...0xFFFF).filter { MessageType(rawValue: UInt16($0)).mayBeLinkAuthenticated }, [0x0107, 0x0108, 0x0501])
        XCTAssertFalse(MessageType.chatMessage.isLinkAuthenticated, "a MESSAGE is signed wherever it is not on its author's link")
        // An ACK made for a link that vouches for it: accepted there only.
        var ack = Tandem_V1_Ack()
        ack.messageID = Data(repeating: 5, count: 16)
        let env = Envelope.make(type: .ack, author: alice, recipient: bob.publicKey, createdAt: now,
                                payload: try ack.serializedBytes(), unsignedOnLink: true)
        XCTAssertTrue(env.hasZeroSignature)
        var verifier = FrameVerifier(localPublicKey: bob.publicKey)
        guard case .failure(let r) = verifier.verify(env.bytes, linkPeer: carol.publicKey, now: now) else {
            return XCTFail("an unsigned ACK accepted from another key's link")
        }
        XCTAssertEqual(r.code, .badSignature)
        guard case .success = verifier.verify(env.bytes, linkPeer: alice.publicKey, now: now) else {
            return XCTFail("an unsigned ACK refused on its author's link")
        }
        // Not for a link that does not: signed.
        XCTAssertTrue(Envelope.make(type: .ack, author: alice, recipient: bob.publicKey, createdAt: now,
                                    payload: try ack.serializedBytes(), unsignedOnLink: false).hasValidSignature)
        // A type that never goes unsigned is signed whatever the link.
        XCTAssertTrue(Envelope.make(type: .friendRequest, author: alice, recipient: bob.publicKey, createdAt: now,
                                    payload: [], unsignedOnLink: true).hasValidSignature)
    }

    func testAnUnsignedMessageIsAuthenticOnlyOnItsAuthorsLink() throws {
        let env = message()
        XCTAssertEqual(env.signature, [UInt8](repeating: 0, count: 64))
        XCTAssertEqual(env.bytes.count, Envelope.minimumLength + env.payload.count)
        let parsed = try Envelope.parse(env.bytes)
        XCTAssertEqual(parsed, env)
        XCTAssertTrue(parsed.needsSignatureOffLink)
        XCTAssertFalse(parsed.hasValidSignature, "no signature to verify")
        XCTAssertTrue(parsed.isAuthentic(onLinkFrom: alice.publicKey))
        XCTAssertFalse(parsed.isAuthentic(onLinkFrom: carol.publicKey), "on a link from another key")
        XCTAssertFalse(parsed.isAuthentic(onLinkFrom: bob.publicKey), "on a link from the recipient's own key")
        XCTAssertFalse(parsed.isAuthentic(onLinkFrom: nil), "relay mail, a stored or forwarded frame")

        var verifier = FrameVerifier(localPublicKey: bob.publicKey)
        for (peer, label) in [(Optional(carol.publicKey), "carol's link"), (nil, "no link")] {
            guard case .failure(let r) = verifier.verify(env.bytes, linkPeer: peer, now: now) else {
                return XCTFail("an unsigned MESSAGE accepted on \(label)")
            }
            XCTAssertEqual(r.code, .badSignature, label)
            XCTAssertNil(r.author, "an unproven author is not named")
        }
        guard case .success(let accepted) = verifier.verify(env.bytes, linkPeer: alice.publicKey, now: now) else {
            return XCTFail("an unsigned MESSAGE refused on its author's link")
        }
        XCTAssertEqual(accepted.author, alice.publicKey)
    }

    func testSigningKeepsTheFrameAndVerifiesAnywhere() throws {
        let env = message()
        let signed = env.signed(by: alice)
        XCTAssertEqual(Array(signed.bytes.prefix(env.bytes.count - 64)), Array(env.bytes.prefix(env.bytes.count - 64)),
                       "the same id, created_at and payload: the same frame for the receiver's replay cache")
        XCTAssertEqual(signed.messageID, env.messageID)
        XCTAssertFalse(signed.needsSignatureOffLink)
        XCTAssertTrue(signed.hasValidSignature)
        XCTAssertTrue(try Envelope.parse(signed.bytes).isAuthentic(onLinkFrom: nil))
        XCTAssertTrue(try Envelope.parse(signed.bytes).isAuthentic(onLinkFrom: carol.publicKey))
        // Deterministic (Ed25519): the signed form is what a frame signed at once would be.
        XCTAssertEqual(signed.bytes, env.signed(by: alice).bytes)
        XCTAssertEqual(signed.signed(by: alice).bytes, signed.bytes, "a signed frame is left as it is")
        // Only its author signs it: another key leaves it unsigned (and so refused off the link).
        XCTAssertEqual(env.signed(by: carol).bytes, env.bytes)
        // Signed, it passes the mailbox's opening; unsigned, it is refused there.
        let curve = try bob.curve25519SecretKey()
        XCTAssertNoThrow(try MailboxSeal.open(try MailboxSeal.seal(signed), identity: bob, curveSecretKey: curve,
                                              now: now, maximumAge: 86_400_000))
        XCTAssertThrowsError(try MailboxSeal.open(try MailboxSeal.seal(env), identity: bob, curveSecretKey: curve,
                                                  now: now, maximumAge: 86_400_000))
    }

    func testAForgedOrPartlyZeroSignatureIsVerifiedAndRefused() throws {
        var verifier = FrameVerifier(localPublicKey: bob.publicKey)
        // Not all zeros: a signature to verify, which fails, even on the author's link.
        var bytes = message().bytes
        bytes[bytes.count - 1] = 1
        guard case .failure(let r) = verifier.verify(bytes, linkPeer: alice.publicKey, now: now) else {
            return XCTFail("a MESSAGE with a forged signature accepted")
        }
        XCTAssertEqual(r.code, .badSignature)
        // A signed MESSAGE with one byte of its text changed, on the author's link.
        var tampered = message(signed: true).bytes
        tampered[Envelope.headerLength + 3] ^= 1
        guard case .failure(let r2) = verifier.verify(tampered, linkPeer: alice.publicKey, now: now) else {
            return XCTFail("a tampered signed MESSAGE accepted")
        }
        XCTAssertEqual(r2.code, .badSignature)
    }

    func testOtherTypesWithTheZeroSignatureAreRefusedOnTheAuthorsLink() throws {
        var verifier = FrameVerifier(localPublicKey: bob.publicKey)
        for type in [MessageType.friendRequest, .chatReaction, .retract, .chatForward, .challengeInvite, .presence] {
            let signed = Envelope.sign(type: type, author: alice, recipient: bob.publicKey, createdAt: now, payload: [])
            var bytes = signed.bytes
            bytes.replaceSubrange((bytes.count - 64)..., with: [UInt8](repeating: 0, count: 64))
            guard case .failure(let r) = verifier.verify(bytes, linkPeer: alice.publicKey, now: now) else {
                return XCTFail("\(type) with the zero signature accepted")
            }
            XCTAssertEqual(r.code, .badSignature, "\(type)")
        }
    }

    func testAnUnsignedMessageInsideAForwardIsRefused() throws {
        let thread = [UInt8](repeating: 7, count: 16)
        let inner = message(thread: thread)  // what a careless or hostile author would send the inviter
        let forward = ChatForwardMessage(challengeID: thread, inner: inner,
                                         content: .message(try ChatMessageBody(payload: inner.payload, createdAtMs: now)))
        XCTAssertThrowsError(try ChatForwardMessage(payload: forward.payload, forwarder: bob.publicKey),
                             "a forwarded frame must carry its author's signature")
        let signedInner = message(thread: thread, signed: true)
        let good = ChatForwardMessage(challengeID: thread, inner: signedInner,
                                      content: .message(try ChatMessageBody(payload: signedInner.payload, createdAtMs: now)))
        XCTAssertNoThrow(try ChatForwardMessage(payload: good.payload, forwarder: bob.publicKey))
    }

    func testPresenceAnnouncesIt() throws {
        var p = Tandem_V1_Presence()
        p.status = .idle
        XCTAssertFalse(try PresenceMessage(payload: try p.serializedBytes()).takesLinkAuthenticated, "an older node's PRESENCE")
        p.takesLinkAuthenticated = true
        XCTAssertTrue(try PresenceMessage(payload: try p.serializedBytes()).takesLinkAuthenticated)
        // Field 5, a varint: 0x28 0x01 on the wire.
        let wire: [UInt8] = try p.serializedBytes()
        XCTAssertEqual(Array(wire.suffix(2)), [0x28, 0x01])
    }
}
