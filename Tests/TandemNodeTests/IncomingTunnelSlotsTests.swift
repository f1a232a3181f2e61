import XCTest
@testable import TandemNode
@testable import TandemNodeCore

/// The node's share-out of incoming tunnel joins: a stranger, or a few, cannot take every slot.
final class IncomingTunnelSlotsTests: XCTestCase {
    func key(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 32) }

    func admitted(_ v: IncomingTunnelSlots.Verdict, file: StaticString = #filePath, line: UInt = #line) -> IncomingTunnelSlots.Slot? {
        guard case .admitted(let slot) = v else {
            XCTFail("not admitted: \(v)", file: file, line: line)
            return nil
        }
        return slot
    }

    func testPerInitiatorBoundary() {
        var slots = IncomingTunnelSlots()
        let a = admitted(slots.admit(key(1), isFriend: false))
        XCTAssertNotNil(admitted(slots.admit(key(1), isFriend: false)))  // 2 = the cap
        XCTAssertEqual(slots.admit(key(1), isFriend: false), .initiatorBusy)
        XCTAssertEqual(slots.admit(key(1), isFriend: true), .initiatorBusy, "a friend is bound per key as well")
        slots.release(a!)
        XCTAssertNotNil(admitted(slots.admit(key(1), isFriend: false)))
        XCTAssertEqual(slots.inProgress, 2)
    }

    /// The attack: unjoined tunnels from strangers. Before, 16 of them starved every friend.
    func testStrangersCannotTakeTheSlotsFriendsNeed() {
        var slots = IncomingTunnelSlots()
        var stranger: [IncomingTunnelSlots.Slot] = []
        for k in 1...20 {
            for _ in 0..<2 {
                if case .admitted(let s) = slots.admit(key(UInt8(k)), isFriend: false) { stranger.append(s) }
            }
        }
        XCTAssertEqual(stranger.count, 8, "strangers share 8 slots")
        XCTAssertEqual(slots.admit(key(99), isFriend: false), .strangersFull)
        // Friends get the other 8.
        for k in 100..<104 {
            XCTAssertNotNil(admitted(slots.admit(key(UInt8(k)), isFriend: true)))
            XCTAssertNotNil(admitted(slots.admit(key(UInt8(k)), isFriend: true)))
        }
        XCTAssertEqual(slots.inProgress, 16)
        XCTAssertEqual(slots.admit(key(200), isFriend: true), .full)
        // A stranger's join ends: a stranger may take its place, a friend may not exceed the total.
        slots.release(stranger[0])
        XCTAssertEqual(slots.strangerCount, 7)
        XCTAssertNotNil(admitted(slots.admit(key(50), isFriend: false)))
        XCTAssertEqual(slots.admit(key(200), isFriend: true), .full)
    }

    func testFriendsMayUseEverySlotStrangersLeave() {
        var slots = IncomingTunnelSlots()
        var held: [IncomingTunnelSlots.Slot] = []
        for k in 1...8 {
            for _ in 0..<2 { held.append(admitted(slots.admit(key(UInt8(k)), isFriend: true))!) }
        }
        XCTAssertEqual(slots.inProgress, 16)
        XCTAssertEqual(slots.strangerCount, 0)
        XCTAssertEqual(slots.admit(key(9), isFriend: false), .full)
        for s in held { slots.release(s) }
        XCTAssertEqual(slots.inProgress, 0)
        XCTAssertTrue(slots.byInitiator.isEmpty)
    }

    /// The slot remembers how it was counted, whatever the relationship is when it ends.
    func testReleaseUsesTheSlotNotTheCurrentRelationship() {
        var slots = IncomingTunnelSlots(limits: .init(total: 4, perInitiator: 2, strangers: 1))
        let s = admitted(slots.admit(key(1), isFriend: false))!
        XCTAssertEqual(slots.admit(key(2), isFriend: false), .strangersFull)
        slots.release(s)
        XCTAssertEqual(slots.strangerCount, 0)
        // Releasing twice, or a slot never handed out, changes nothing.
        slots.release(s)
        slots.release(IncomingTunnelSlots.Slot(initiator: key(7), stranger: true))
        XCTAssertEqual(slots.inProgress, 0)
        XCTAssertEqual(slots.strangerCount, 0)
        XCTAssertNotNil(admitted(slots.admit(key(2), isFriend: false)))
    }
}
