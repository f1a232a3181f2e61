import NIOCore
import Sodium
import XCTest
@testable import TandemProtocol

/// Drives a client and a server Secret Handshake against each other in memory, delivering the
/// bytes in pieces chosen by `split`, and returns both sides' keys.
private func runHandshake(client: inout SecretHandshake, server: inout SecretHandshake,
                          split: (_ bytes: [UInt8]) -> [[UInt8]]) throws -> (SessionKeys, SessionKeys) {
    var toServer: [UInt8] = client.start()!
    var toClient: [UInt8] = []
    var serverIn = ByteBufferAllocator().buffer(capacity: 256)
    var clientIn = ByteBufferAllocator().buffer(capacity: 256)
    var serverKeys: SessionKeys?
    var clientKeys: SessionKeys?
    var rounds = 0
    while serverKeys == nil || clientKeys == nil {
        rounds += 1
        XCTAssertLessThan(rounds, 10, "handshake does not converge")
        if rounds >= 10 { throw HandshakeError.unexpectedData }
        for piece in split(toServer) where serverKeys == nil {
            serverIn.writeBytes(piece)
            loop: while true {
                switch try server.receive(&serverIn) {
                case .needMoreData: break loop
                case .send(let b): toClient += b
                case .complete(let send, let keys):
                    toClient += send ?? []
                    serverKeys = keys
                    break loop
                }
            }
        }
        toServer = []
        for piece in split(toClient) where clientKeys == nil {
            clientIn.writeBytes(piece)
            loop: while true {
                switch try client.receive(&clientIn) {
                case .needMoreData: break loop
                case .send(let b): toServer += b
                case .complete(let send, let keys):
                    toServer += send ?? []
                    clientKeys = keys
                    break loop
                }
            }
        }
        toClient = []
    }
    return (clientKeys!, serverKeys!)
}

final class HandshakeTests: XCTestCase {
    let alice = fixedPair(1)
    let bob = fixedPair(2)

    func testWholeMessagesAgreeOnCrossedKeys() throws {
        var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
        var s = SecretHandshake(serverIdentity: bob)
        let (ck, sk) = try runHandshake(client: &c, server: &s) { [$0] }
        XCTAssertEqual(ck.encryptKey, sk.decryptKey)
        XCTAssertEqual(ck.encryptNonce, sk.decryptNonce)
        XCTAssertEqual(sk.encryptKey, ck.decryptKey)
        XCTAssertEqual(sk.encryptNonce, ck.decryptNonce)
        XCTAssertNotEqual(ck.encryptKey, ck.decryptKey)
        XCTAssertEqual(ck.remotePublicKey, bob.publicKey)
        XCTAssertEqual(sk.remotePublicKey, alice.publicKey)
        XCTAssertTrue(c.isFinished && s.isFinished)
    }

    func testByteByByteAndRandomSplits() throws {
        var rng = SplitMix64(seed: 42)
        for maxPiece in [1, 3, 17, 64, 200] {
            var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
            var s = SecretHandshake(serverIdentity: bob)
            let (ck, sk) = try runHandshake(client: &c, server: &s) { pieces($0, maxPiece: maxPiece, rng: &rng) }
            XCTAssertEqual(ck.encryptKey, sk.decryptKey, "maxPiece \(maxPiece)")
            XCTAssertEqual(sk.encryptKey, ck.decryptKey, "maxPiece \(maxPiece)")
        }
    }

    func testEveryProperPrefixOfEachMessageNeedsMoreData() throws {
        var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
        var s = SecretHandshake(serverIdentity: bob)
        let m1 = c.start()!
        XCTAssertEqual(m1.count, SecretHandshake.challengeLength)
        for n in 0..<m1.count {
            var probe = s
            var b = buffer(Array(m1[0..<n]))
            guard case .needMoreData = try probe.receive(&b) else { return XCTFail("prefix \(n) of msg1") }
            XCTAssertEqual(b.readableBytes, n, "a prefix must not be consumed")
        }
        var b1 = buffer(m1)
        guard case .send(let m2) = try s.receive(&b1) else { return XCTFail("server did not answer") }
        XCTAssertEqual(m2.count, SecretHandshake.challengeLength)
        var b2 = buffer(m2)
        guard case .send(let m3) = try c.receive(&b2) else { return XCTFail("client did not authenticate") }
        XCTAssertEqual(m3.count, SecretHandshake.clientAuthLength)
        for n in 0..<m3.count {
            var probe = s
            var b = buffer(Array(m3[0..<n]))
            guard case .needMoreData = try probe.receive(&b) else { return XCTFail("prefix \(n) of msg3") }
        }
        var b3 = buffer(m3)
        guard case .complete(let m4?, _) = try s.receive(&b3) else { return XCTFail("server did not accept") }
        XCTAssertEqual(m4.count, SecretHandshake.serverAcceptLength)
        for n in 0..<m4.count {
            var probe = c
            var b = buffer(Array(m4[0..<n]))
            guard case .needMoreData = try probe.receive(&b) else { return XCTFail("prefix \(n) of msg4") }
        }
    }

    func testBytesAfterTheHandshakeAreLeftForBoxStream() throws {
        var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
        var s = SecretHandshake(serverIdentity: bob)
        var b1 = buffer(c.start()!)
        guard case .send(let m2) = try s.receive(&b1) else { return XCTFail() }
        var b2 = buffer(m2)
        guard case .send(let m3) = try c.receive(&b2) else { return XCTFail() }
        var b3 = buffer(m3 + [0xAA, 0xBB])
        guard case .complete = try s.receive(&b3) else { return XCTFail() }
        XCTAssertEqual(b3.readableBytesView.map { $0 }, [0xAA, 0xBB])
    }

    func testWrongNetworkKeyIsRefusedByTheServer() {
        var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey,
                                networkKey: Hash.sha256(Array("another network".utf8)))
        var s = SecretHandshake(serverIdentity: bob)
        var b = buffer(c.start()!)
        XCTAssertThrowsError(try s.receive(&b)) { XCTAssertEqual($0 as? HandshakeError, .wrongNetworkKey) }
    }

    func testWrongNetworkKeyIsRefusedByTheClient() throws {
        var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
        var s = SecretHandshake(serverIdentity: bob, networkKey: Hash.sha256(Array("another network".utf8)))
        var rogue = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey,
                                    networkKey: Hash.sha256(Array("another network".utf8)))
        var b = buffer(rogue.start()!)
        guard case .send(let m2) = try s.receive(&b) else { return XCTFail() }
        _ = c.start()
        var b2 = buffer(m2)
        XCTAssertThrowsError(try c.receive(&b2)) { XCTAssertEqual($0 as? HandshakeError, .wrongNetworkKey) }
    }

    func testClientExpectingAnotherServerKeyFailsAtTheServer() throws {
        let carol = fixedPair(3)
        var c = SecretHandshake(clientIdentity: alice, serverPublicKey: carol.publicKey)
        var s = SecretHandshake(serverIdentity: bob)
        XCTAssertThrowsError(try runHandshake(client: &c, server: &s) { [$0] }) {
            XCTAssertEqual($0 as? HandshakeError, .badClientAuthentication)
        }
    }

    func testTamperedMessagesFail() throws {
        // Flip one bit in message 3, then separately in message 4.
        for target in [3, 4] {
            var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
            var s = SecretHandshake(serverIdentity: bob)
            var b1 = buffer(c.start()!)
            guard case .send(let m2) = try s.receive(&b1) else { return XCTFail() }
            var b2 = buffer(m2)
            guard case .send(var m3) = try c.receive(&b2) else { return XCTFail() }
            if target == 3 {
                m3[50] ^= 1
                var b3 = buffer(m3)
                XCTAssertThrowsError(try s.receive(&b3)) { XCTAssertEqual($0 as? HandshakeError, .badClientAuthentication) }
                continue
            }
            var b3 = buffer(m3)
            guard case .complete(var m4?, _) = try s.receive(&b3) else { return XCTFail() }
            m4[10] ^= 1
            var b4 = buffer(m4)
            XCTAssertThrowsError(try c.receive(&b4)) { XCTAssertEqual($0 as? HandshakeError, .badServerAcceptance) }
        }
    }

    func testLowOrderEphemeralIsRefused() throws {
        var s = SecretHandshake(serverIdentity: bob)
        let zero = [UInt8](repeating: 0, count: 32)
        let hmac = Hash.hmacSHA512_256(key: TandemConstants.networkKey, message: zero)
        var b = buffer(hmac + zero)
        XCTAssertThrowsError(try s.receive(&b)) { XCTAssertEqual($0 as? HandshakeError, .weakKey) }
    }

    func testGarbageIsRefusedAndAFailedMachineStaysClosed() throws {
        var rng = SplitMix64(seed: 7)
        for _ in 0..<50 {
            var s = SecretHandshake(serverIdentity: bob)
            var b = buffer((0..<64).map { _ in UInt8.random(in: 0...255, using: &rng) })
            XCTAssertThrowsError(try s.receive(&b))
            var more = buffer([1, 2, 3])
            XCTAssertThrowsError(try s.receive(&more))
        }
        var client = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey)
        var early = buffer([1])
        XCTAssertThrowsError(try client.receive(&early)) { XCTAssertEqual($0 as? HandshakeError, .unexpectedData) }
        var server = SecretHandshake(serverIdentity: bob)
        XCTAssertNil(server.start(), "a server does not speak first")
    }

    func testFixedEphemeralsMakeTheHandshakeDeterministic() throws {
        func transcript() throws -> (SessionKeys, SessionKeys) {
            var c = SecretHandshake(clientIdentity: alice, serverPublicKey: bob.publicKey,
                                    ephemeralSecret: [UInt8](repeating: 5, count: 32))
            var s = SecretHandshake(serverIdentity: bob, ephemeralSecret: [UInt8](repeating: 6, count: 32))
            return try runHandshake(client: &c, server: &s) { [$0] }
        }
        let (a, _) = try transcript(), (b, _) = try transcript()
        XCTAssertEqual(a.encryptKey, b.encryptKey)
        XCTAssertEqual(a.decryptNonce, b.decryptNonce)
    }
}
