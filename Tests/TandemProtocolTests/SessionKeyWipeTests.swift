import Foundation
import NIOCore
import Sodium
import XCTest
@testable import TandemProtocol

private final class Wiped: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [UInt: [UInt8]] = [:]
    func record(_ b: UnsafeRawBufferPointer) { lock.lock(); seen[UInt(bitPattern: b.baseAddress)] = Array(b); lock.unlock() }
    func bytes(at a: UInt) -> [UInt8]? { lock.lock(); defer { lock.unlock() }; return seen[a] }
}

/// The box-stream keys a handshake yields live in guarded memory, are shared (not copied) by the
/// stream state, and are wiped when the last of them is released.
final class SessionKeyWipeTests: XCTestCase {
    func testSessionKeysAreWipedWhenTheStreamsGo() throws {
        let wiped = Wiped()
        SecureBytes._setReleaseObserver { wiped.record($0) }
        defer { SecureBytes._setReleaseObserver(nil) }
        let alice = fixedPair(1), bob = fixedPair(2)
        var addresses: [UInt] = []
        do {
            var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
            var s = SecretHandshake(serverIdentity: bob)
            var b1 = buffer(c.start()!)
            guard case .send(let m2) = try s.receive(&b1) else { return XCTFail("no server challenge") }
            var b2 = buffer(m2)
            guard case .send(let m3) = try c.receive(&b2) else { return XCTFail("no client auth") }
            var b3 = buffer(m3)
            guard case .complete(let m4?, let serverKeys) = try s.receive(&b3) else { return XCTFail("server did not finish") }
            var b4 = buffer(m4)
            guard case .complete(nil, let clientKeys) = try c.receive(&b4) else { return XCTFail("client did not finish") }
            XCTAssertEqual(clientKeys.encryptKey, serverKeys.decryptKey)
            for k in [clientKeys.encryptionKey, clientKeys.decryptionKey, serverKeys.encryptionKey, serverKeys.decryptionKey] {
                addresses.append(k.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) })
            }
            var encoder = BoxStreamEncoder(key: clientKeys.encryptionKey, nonce: clientKeys.encryptNonce)
            var reader = BoxStreamReader(key: serverKeys.decryptionKey, nonce: serverKeys.decryptNonce)
            var wire = ByteBufferAllocator().buffer(capacity: 64)
            encoder.seal(Array("hello".utf8), into: &wire)
            var plain = ByteBufferAllocator().buffer(capacity: 64)
            _ = try reader.read(&wire, into: &plain)
            XCTAssertEqual(plain.readBytes(length: plain.readableBytes), Array("hello".utf8))
            XCTAssertNil(wiped.bytes(at: addresses[0]), "still in use")
        }
        for a in addresses {
            XCTAssertEqual(wiped.bytes(at: a), [UInt8](repeating: 0, count: 32), "session key wiped on release")
        }
    }
}
