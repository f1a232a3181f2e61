import Foundation
import XCTest
@testable import Sodium

/// Collects what `SecureBytes` shows its release observer: the buffer's address and contents
/// after the wipe, before `sodium_free`.
private final class Releases: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [(address: UInt, bytes: [UInt8])] = []

    func record(_ buffer: UnsafeRawBufferPointer) {
        let entry = (UInt(bitPattern: buffer.baseAddress), Array(buffer))
        lock.lock(); seen.append(entry); lock.unlock()
    }

    func bytes(at address: UInt) -> [UInt8]? {
        lock.lock(); defer { lock.unlock() }
        return seen.last { $0.address == address }?.bytes
    }
}

final class SecureBytesTests: XCTestCase {
    private var releases = Releases()

    override func setUp() {
        releases = Releases()
        let r = releases
        SecureBytes._setReleaseObserver { r.record($0) }
    }

    override func tearDown() {
        SecureBytes._setReleaseObserver(nil)
    }

    private func address(_ s: SecureBytes) -> UInt { s.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) } }

    func testHoldsTheBytesAndReadsZerosAfterRelease() throws {
        var source: [UInt8] = (0..<48).map { UInt8($0 + 1) }
        var secret: SecureBytes? = SecureBytes(consuming: &source)
        XCTAssertEqual(source, [UInt8](repeating: 0, count: 48), "the caller's copy is wiped")
        XCTAssertEqual(secret?.count, 48)
        XCTAssertEqual(secret?.exposedCopy, (0..<48).map { UInt8($0 + 1) })
        let where_ = address(secret!)
        XCTAssertNil(releases.bytes(at: where_))
        secret = nil
        XCTAssertEqual(releases.bytes(at: where_), [UInt8](repeating: 0, count: 48), "wiped before it was freed")
    }

    func testEmptyAndFilledInPlace() throws {
        let empty = SecureBytes([])
        XCTAssertEqual(empty.count, 0)
        XCTAssertEqual(empty.exposedCopy, [])
        let filled = SecureBytes(count: 16) { buf in
            for i in buf.indices { buf[i] = UInt8(0xA0 + i) }
        }
        XCTAssertEqual(filled.exposedCopy, (0..<16).map { UInt8(0xA0 + $0) })
        struct Stop: Error {}
        XCTAssertThrowsError(try SecureBytes(count: 8) { _ in throw Stop() })
    }

    /// The identity key lives in guarded memory, still signs, and is wiped when the pair goes.
    func testSigningKeyPairKeyIsGuardedSignsAndIsWiped() throws {
        let seed = [UInt8](repeating: 9, count: 32)
        var pair: SigningKeyPair? = try SigningKeyPair(seed: seed)
        let publicKey = pair!.publicKey
        let message = Array("thirty minutes, no phone".utf8)
        let signature = pair!.sign(message)
        XCTAssertTrue(Ed25519.verify(signature: signature, message: message, publicKey: publicKey))
        XCTAssertEqual(pair!.seed(), seed)
        XCTAssertEqual(Array(pair!.secretKey.exposedCopy[32...]), publicKey, "libsodium's layout: seed then public key")
        let where_ = address(pair!.secretKey)
        pair = nil
        XCTAssertEqual(releases.bytes(at: where_), [UInt8](repeating: 0, count: 64))
        // The same seed gives the same key, and the signature still verifies against it.
        let again = try SigningKeyPair(seed: seed)
        XCTAssertEqual(again.sign(message), signature)
    }

    func testPassphraseInGuardedMemoryDerivesTheSameKey() throws {
        let salt = [UInt8](repeating: 4, count: PasswordHash.saltBytes)
        let plain = try PasswordHash.deriveKey(length: 32, passphrase: Array("pass".utf8), salt: salt,
                                               opsLimit: PasswordHash.opsLimitInteractive, memLimit: PasswordHash.memLimitInteractive)
        let guarded = try PasswordHash.deriveKey(length: 32, passphrase: SecureBytes(Array("pass".utf8)), salt: salt,
                                                 opsLimit: PasswordHash.opsLimitInteractive, memLimit: PasswordHash.memLimitInteractive)
        XCTAssertEqual(plain.exposedCopy, guarded.exposedCopy)
        XCTAssertEqual(PasswordHash.opsLimitModerate, 3)
        XCTAssertEqual(PasswordHash.memLimitModerate, 256 << 20)
    }
}
