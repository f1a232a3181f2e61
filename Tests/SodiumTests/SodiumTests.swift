import XCTest
@testable import Sodium

final class SodiumTests: XCTestCase {
    func testSignVerifyAndTamper() throws {
        let pair = SigningKeyPair.generate()
        let msg = Array("focus for thirty minutes".utf8)
        let sig = pair.sign(msg)
        XCTAssertEqual(sig.count, 64)
        XCTAssertTrue(Ed25519.verify(signature: sig, message: msg, publicKey: pair.publicKey))
        var bad = msg
        bad[0] ^= 1
        XCTAssertFalse(Ed25519.verify(signature: sig, message: bad, publicKey: pair.publicKey))
        XCTAssertFalse(Ed25519.verify(signature: Array(sig.dropLast()), message: msg, publicKey: pair.publicKey))
        XCTAssertFalse(Ed25519.verify(signature: sig, message: msg, publicKey: SigningKeyPair.generate().publicKey))
    }

    func testSeedIsDeterministicAndRoundTrips() throws {
        let seed = [UInt8](repeating: 7, count: 32)
        let a = try SigningKeyPair(seed: seed), b = try SigningKeyPair(seed: seed)
        XCTAssertEqual(a.publicKey, b.publicKey)
        XCTAssertEqual(a.seed(), seed)
        XCTAssertThrowsError(try SigningKeyPair(seed: [1, 2, 3]))
    }

    func testEd25519ToX25519AgreesWithScalarMult() throws {
        let alice = SigningKeyPair.generate(), bob = SigningKeyPair.generate()
        let a = try alice.curve25519(), b = try bob.curve25519()
        let ab = try X25519.sharedSecret(secretKey: a.secretKey, publicKey: b.publicKey)
        let ba = try X25519.sharedSecret(secretKey: b.secretKey, publicKey: a.publicKey)
        XCTAssertEqual(ab.exposedCopy, ba.exposedCopy)
        XCTAssertEqual(X25519.publicKey(secretKey: a.secretKey.exposedCopy), a.publicKey)
    }

    func testX25519RejectsLowOrderPoint() {
        let (_, sk) = X25519.keyPair()
        XCTAssertThrowsError(try X25519.sharedSecret(secretKey: sk, publicKey: [UInt8](repeating: 0, count: 32)))
    }

    func testSecretBoxRoundTripAndTamper() throws {
        let key = Sodium.randomBytes(32), nonce = Sodium.randomBytes(24)
        for size in [0, 1, 4096, 100_000] {
            let msg = Sodium.randomBytes(size)
            var box = try SecretBox.seal(msg, nonce: nonce, key: key)
            XCTAssertEqual(box.count, size + 16)
            XCTAssertEqual(SecretBox.open(box, nonce: nonce, key: key), msg)
            box[box.count - 1] ^= 0x80
            XCTAssertNil(SecretBox.open(box, nonce: nonce, key: key))
        }
        XCTAssertNil(SecretBox.open([1, 2, 3], nonce: nonce, key: key))
        XCTAssertThrowsError(try SecretBox.seal([], nonce: [0], key: key))
    }

    func testSealedBox() throws {
        let pair = try SigningKeyPair.generate().curve25519()
        let msg = Array("backup chunk".utf8)
        let sealed = try SealedBox.seal(msg, to: pair.publicKey)
        XCTAssertEqual(sealed.count, msg.count + SealedBox.overheadBytes)
        XCTAssertEqual(SealedBox.open(sealed, publicKey: pair.publicKey, secretKey: pair.secretKey), msg)
        let other = try SigningKeyPair.generate().curve25519()
        XCTAssertNil(SealedBox.open(sealed, publicKey: other.publicKey, secretKey: other.secretKey))
    }

    func testSecretStreamDetectsReorder() throws {
        let key = SecretStream.generateKey()
        var push = try SecretStream.Pusher(key: key)
        let c1 = push.push(Array("one".utf8)), c2 = push.push(Array("two".utf8), tag: .final)
        var pull = try SecretStream.Puller(key: key, header: push.header)
        XCTAssertEqual(pull.pull(c1)?.message, Array("one".utf8))
        let last = pull.pull(c2)
        XCTAssertEqual(last?.message, Array("two".utf8))
        XCTAssertEqual(last?.tag, .final)
        var reordered = try SecretStream.Puller(key: key, header: push.header)
        XCTAssertNil(reordered.pull(c2))
    }

    func testBlake2bKnownAnswer() {
        // BLAKE2b-256 of the empty string.
        XCTAssertEqual(hexOf(Hash.blake2b([])), "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8")
        XCTAssertEqual(Hash.blake2b(Array("abc".utf8), outputLength: 64).count, 64)
        XCTAssertNotEqual(Hash.blake2b([1], key: Array(repeating: 1, count: 32)), Hash.blake2b([1]))
    }

    func testSHA256AndHMAC() {
        XCTAssertEqual(hexOf(Hash.sha256(Array("abc".utf8))),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        // The parts of a multi-part hash are concatenated.
        XCTAssertEqual(Hash.sha256(Array("a".utf8), Array("bc".utf8)), Hash.sha256(Array("abc".utf8)))
        let key = [UInt8](repeating: 0x0b, count: 32)
        let tag = Hash.hmacSHA512_256(key: key, message: Array("Hi There".utf8))
        XCTAssertTrue(Hash.verifyHMACSHA512_256(tag: tag, key: key, message: Array("Hi There".utf8)))
        XCTAssertFalse(Hash.verifyHMACSHA512_256(tag: tag, key: key, message: Array("Hi there".utf8)))
    }

    func testXChaChaAndArgon2id() throws {
        let salt = [UInt8](repeating: 1, count: 16)
        func derive(_ pw: String) throws -> SecretBytes {
            try PasswordHash.deriveKey(length: 32, passphrase: Array(pw.utf8), salt: salt,
                                       opsLimit: PasswordHash.opsLimitInteractive, memLimit: 8 << 20)
        }
        let k1 = try derive("pw"), k2 = try derive("pw"), k3 = try derive("pW")
        XCTAssertEqual(k1.exposedCopy, k2.exposedCopy)
        XCTAssertNotEqual(k1.exposedCopy, k3.exposedCopy)
        let nonce = Sodium.randomBytes(24)
        let box = try XChaCha20Poly1305.seal([9, 9], additionalData: [1], nonce: nonce, key: k1)
        XCTAssertEqual(XChaCha20Poly1305.open(box, additionalData: [1], nonce: nonce, key: k1), [9, 9])
        XCTAssertNil(XChaCha20Poly1305.open(box, additionalData: [2], nonce: nonce, key: k1))
        XCTAssertNil(XChaCha20Poly1305.open(box, additionalData: [1], nonce: nonce, key: k3))
        XCTAssertThrowsError(try PasswordHash.deriveKey(length: 32, passphrase: [], salt: [1], opsLimit: 3, memLimit: 8 << 20))
    }

    func testWipeAndConstantTimeEqual() {
        var secret: [UInt8] = [1, 2, 3, 4]
        Sodium.wipe(&secret)
        XCTAssertEqual(secret, [0, 0, 0, 0])
        var owned: [UInt8] = [5, 6]
        let s = SecretBytes(consuming: &owned)
        XCTAssertEqual(owned, [0, 0])
        XCTAssertEqual(s.exposedCopy, [5, 6])
        XCTAssertTrue(Sodium.constantTimeEqual([1, 2], [1, 2]))
        XCTAssertFalse(Sodium.constantTimeEqual([1, 2], [1, 3]))
        XCTAssertFalse(Sodium.constantTimeEqual([1, 2], [1]))
        XCTAssertNotEqual(Sodium.randomBytes(16), Sodium.randomBytes(16))
    }
}

func hexOf(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
