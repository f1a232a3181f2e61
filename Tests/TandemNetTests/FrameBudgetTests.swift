import NIOCore
import NIOEmbedded
import TandemNet
import XCTest

/// The node-wide budget of partly received frames, carried out by the frame decoder: a frame that
/// does not arrive whole is charged its announced length until it completes or the link closes,
/// and a link whose frame does not fit is closed.
final class FrameBudgetTests: XCTestCase {
    func channel(_ budget: FrameBudget) throws -> EmbeddedChannel {
        let ch = EmbeddedChannel()
        try ch.pipeline.syncOperations.addHandler(
            ByteToMessageHandler(FrameByteDecoder(maximumEnvelopeLength: 1 << 20, budget: budget)))
        return ch
    }

    func bytes(_ b: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: b) }

    func testAPartialFrameIsChargedUntilItCompletes() throws {
        let budget = FrameBudget(capacity: 2_000)
        let ch = try channel(budget)
        // A whole frame in one read costs nothing.
        try ch.writeInbound(bytes([0, 0, 0, 3, 1, 2, 3]))
        XCTAssertEqual(try ch.readInbound(as: [UInt8].self), [1, 2, 3])
        XCTAssertEqual(budget.used, 0)
        // Announces 1,000 bytes, sends 10: charged 1,004.
        try ch.writeInbound(bytes([0, 0, 0x03, 0xE8] + [UInt8](repeating: 7, count: 10)))
        XCTAssertEqual(budget.used, 1_004)
        try ch.writeInbound(bytes([UInt8](repeating: 7, count: 990)))
        XCTAssertEqual(try ch.readInbound(as: [UInt8].self)?.count, 1_000)
        XCTAssertEqual(budget.used, 0, "released when the frame completes")
        // Charged again, then released when the link closes mid-frame.
        try ch.writeInbound(bytes([0, 0, 0x03, 0xE8, 1]))
        XCTAssertEqual(budget.used, 1_004)
        _ = try ch.finish()
        XCTAssertEqual(budget.used, 0, "released when the link goes away")
    }

    func testALinkWhoseFrameDoesNotFitIsClosed() throws {
        let budget = FrameBudget(capacity: 1_500)
        let a = try channel(budget), b = try channel(budget)
        try a.writeInbound(bytes([0, 0, 0x03, 0xE8, 1]))
        XCTAssertEqual(budget.used, 1_004)
        XCTAssertThrowsError(try b.writeInbound(bytes([0, 0, 0x03, 0xE8, 1]))) { error in
            XCTAssertEqual((error as? LinkLimitExceeded)?.reason, "frame_budget")
        }
        XCTAssertEqual(budget.used, 1_004, "the refused link took nothing")
        // Exactly what is left fits (492 + 4 = 496); one byte more does not.
        let c = try channel(budget), d = try channel(budget)
        XCTAssertThrowsError(try d.writeInbound(bytes([0, 0, 0x01, 0xED])))   // 493 + 4
        try c.writeInbound(bytes([0, 0, 0x01, 0xEC]))                          // 492 + 4
        XCTAssertEqual(budget.used, 1_500)
        _ = try? a.finish()
        _ = try? c.finish()
        XCTAssertEqual(budget.used, 0)
    }
}
