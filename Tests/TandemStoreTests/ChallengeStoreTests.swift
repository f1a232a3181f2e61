import Foundation
import Sodium
import XCTest
import TandemProtocol
@_spi(StoreOwner) @testable import TandemStore

final class ChallengeStoreTests: XCTestCase {
    let me = SigningKeyPair.generate()

    func soloEnded(_ durationMs: Int64 = 1000) throws -> Challenge {
        var c = try Challenge.solo(id: Sodium.randomBytes(16), me: me.publicKey, durationMs: durationMs, nowUs: 1_000_000)
        c.markStarted(localUs: 1_000_000)
        _ = try c.markEnded(localUs: 2_000_000, signer: me)
        return c
    }

    func testStateAndFramesAreStoredTogether() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-store-\(UUID())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path
        let bob = SigningKeyPair.generate().publicKey
        let (c, _) = try Challenge.invite(id: Sodium.randomBytes(16), me: me.publicKey, invitees: [bob], durationMs: 60_000,
                                          startAtUs: 0, nowUs: 1, message: "hi")
        let frame = OutboxItem(messageId: Sodium.randomBytes(16), recipient: bob, type: 0x0201, frame: [1, 2, 3], nowMs: 5)
        _ = try NodeStore(path: path).batch { try $0.saveChallenge(c, frames: [frame], nowMs: 5) }
        // A new store on the same file (a restarted node) sees both.
        let reopened = try NodeStore(path: path)
        XCTAssertEqual(try reopened.challenge(c.id), c)
        XCTAssertEqual(try reopened.outbox(for: bob).map(\.messageId), [frame.messageId])
        XCTAssertEqual(try reopened.activeChallenges().map(\.id), [c.id])
        XCTAssertEqual(try reopened.challenges(idPrefix: String(c.idHex.prefix(6))).map(\.id), [c.id])
        XCTAssertEqual(try reopened.challenges(idPrefix: "zz"), [])
    }

    func testLedgerAppendsOncePerChallengeAndChains() throws {
        let store = try NodeStore.inMemory()
        let first = try soloEnded()
        _ = try store.batch { try $0.saveChallenge(first, nowMs: 1) }
        let e1 = try XCTUnwrap(try store.batch { try $0.commitToLedger(first, nowMs: 10) })
        XCTAssertNil(try store.batch { try $0.commitToLedger(first, nowMs: 11) }, "a challenge goes in once")
        XCTAssertEqual(try store.challenge(first.id)?.committed, true)
        XCTAssertFalse(try store.challenge(first.id)!.isActive)
        let second = try soloEnded(2000)
        _ = try store.batch { try $0.saveChallenge(second, nowMs: 2) }
        let e2 = try XCTUnwrap(try store.batch { try $0.commitToLedger(second, nowMs: 20) })
        XCTAssertEqual(e2.previousHash, e1.hash)
        let ledger = try store.ledger()
        XCTAssertEqual(ledger.map(\.entry.seq), [1, 2])
        XCTAssertEqual(ledger.map(\.committedAtMs), [10, 20])
        XCTAssertNil(Ledger.verify(ledger.map(\.entry)))
    }
}
