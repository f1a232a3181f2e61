import Foundation
import XCTest
@testable import TandemProtocol

/// PRESENCE's shared health (issue 35): absent = not shared, 0 … 100 read exactly (0 is dead, not
/// "no value"), anything above 100 is malformed; an older node's PRESENCE still reads, and a
/// PRESENCE with health reads on a node that knows nothing of it (the field is skipped).
final class PresenceHealthTests: XCTestCase {
    func bytes(_ m: Tandem_V1_Presence) throws -> [UInt8] { try m.serializedBytes() }

    func testHealthIsOptionalAndExactAtTheBoundaries() throws {
        var p = Tandem_V1_Presence(); p.status = .idle; p.heartbeatSeconds = 10
        let old = try PresenceMessage(payload: bytes(p))
        XCTAssertNil(old.health)
        XCTAssertNil(old.healthState)
        for (h, state) in [(0, "dead"), (1, "weak"), (39, "weak"), (40, "tired"), (60, "concerned"), (80, "healthy"), (100, "healthy")] {
            p.health = UInt32(h)
            let m = try PresenceMessage(payload: bytes(p))
            XCTAssertEqual(m.health, h)
            XCTAssertEqual(m.healthState?.rawValue, state)
        }
        for bad: UInt32 in [101, 1000, UInt32.max] {
            p.health = bad
            XCTAssertThrowsError(try PresenceMessage(payload: bytes(p)), "\(bad)")
        }
    }

    func testOlderNodesSkipTheField() throws {
        // What an older node's decoder sees: a Presence with an unknown field 3 — status and
        // heartbeat as before. Modelled by decoding with field 3 as an unknown field of a message
        // that has only fields 1 and 2 (Ping has 1 and 2, both varints).
        var p = Tandem_V1_Presence(); p.status = .focusing; p.heartbeatSeconds = 10; p.health = 0
        let wire = try bytes(p)
        XCTAssertEqual(wire.suffix(2), [0x18, 0x00], "health 0 is on the wire, not dropped as a default")
        let seenByOld = try Tandem_V1_Ping(serializedBytes: wire)
        XCTAssertEqual(seenByOld.nonce, 2)
        XCTAssertEqual(seenByOld.sentAtMs, 10)
        XCTAssertFalse(seenByOld.unknownFields.data.isEmpty)
    }
}
