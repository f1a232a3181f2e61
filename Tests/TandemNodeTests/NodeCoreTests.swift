import NIOConcurrencyHelpers
import Sodium
import TandemNet
import TandemProtocol
import XCTest
@testable import TandemNode
@testable import TandemNodeCore

/// The node core (`@NodeCore`, one thread) and a node's bounded inbound lane: links are paused, not
/// frames dropped, when the lane is full, and read again once it has drained to half; work goes
/// before inbound events; order is kept.
final class NodeCoreTests: XCTestCase {
    final class FakeLink: PausableLink, @unchecked Sendable {
        let serial: UInt64
        let remotePublicKey: [UInt8]?
        private let state = NIOLockedValueBox((paused: false, pauses: 0, resumes: 0))
        init(serial: UInt64, key: [UInt8]) {
            self.serial = serial
            self.remotePublicKey = key
        }
        func pauseReading() { state.withLockedValue { $0.paused = true; $0.pauses += 1 } }
        func resumeReading() { state.withLockedValue { $0.paused = false; $0.resumes += 1 } }
        var paused: Bool { state.withLockedValue { $0.paused } }
        var resumes: Int { state.withLockedValue { $0.resumes } }
    }

    /// Blocks on each event until released, recording the authors in order.
    final class GatedConsumer: InboundConsumer, @unchecked Sendable {
        let gate = ConditionLock(value: 0)
        private let seen = NIOLockedValueBox<[[UInt8]]>([])
        var authors: [[UInt8]] { seen.withLockedValue { $0 } }
        @NodeCore func handle(_ events: [InboundEvent]) {
            for event in events {
                if case .sighting(let s) = event { seen.withLockedValue { $0.append(s.publicKey) } }
            }
            batches.withLockedValue { $0.append(events.count) }
            gate.lock(whenValue: 1)
            gate.unlock(withValue: 1)
        }
        let batches = NIOLockedValueBox<[Int]>([])
        func open() { gate.lock(); gate.unlock(withValue: 1) }
    }

    private func sighting(_ key: [UInt8]) -> PeerSighting {
        PeerSighting(publicKey: key, host: "10.0.0.2", port: 1, displayName: nil, isFriendBeacon: false, seenAtMs: 0)
    }

    private func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<250 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    func testAFullQueuePausesTheLinkInsteadOfDroppingAndResumesAtHalf() async throws {
        let core = InboundLane(maximumPending: 8, maximumPendingPerAuthor: 8)
        let key = SigningKeyPair.generate().publicKey
        let link = FakeLink(serial: 1, key: key)
        // No consumer yet: events wait.
        for _ in 0..<8 { core.enqueue(.sighting(sighting(key)), author: key, pausing: link) }
        XCTAssertFalse(link.paused)
        core.enqueue(.sighting(sighting(key)), author: key, pausing: link)
        XCTAssertTrue(link.paused, "the frame past the bound pauses its link")
        XCTAssertEqual(core.pendingFrames, 9, "and is kept, not dropped")
        XCTAssertEqual(core.dropped, 0)
        let consumer = GatedConsumer()
        consumer.open()
        let task = Task { await core.consume(with: consumer) }
        // The consumer has them once the batch was handed over, which comes after the resume.
        let drained = await eventually { consumer.authors.count == 9 }
        XCTAssertTrue(drained)
        XCTAssertEqual(core.pendingFrames, 0)
        XCTAssertFalse(link.paused)
        XCTAssertEqual(link.resumes, 1)
        XCTAssertEqual(consumer.authors.count, 9)
        XCTAssertEqual(consumer.batches.withLockedValue { $0 }, [9], "what waited together is handed over together (one commit)")
        task.cancel()
        await task.value
    }

    func testOneAuthorsShareIsBoundedApartFromOthers() async throws {
        let core = InboundLane(maximumPending: 100, maximumPendingPerAuthor: 4)
        let flooder = SigningKeyPair.generate().publicKey, friend = SigningKeyPair.generate().publicKey
        let flooding = FakeLink(serial: 1, key: flooder), friendly = FakeLink(serial: 2, key: friend)
        for _ in 0..<5 { core.enqueue(.sighting(sighting(flooder)), author: flooder, pausing: flooding) }
        core.enqueue(.sighting(sighting(friend)), author: friend, pausing: friendly)
        XCTAssertTrue(flooding.paused)
        XCTAssertFalse(friendly.paused, "another author's link reads on")
    }

    func testSightingsWithNoLinkAreDroppedWhenFullAndCounted() {
        let core = InboundLane(maximumPending: 2, maximumPendingPerAuthor: 2)
        let key = SigningKeyPair.generate().publicKey
        for _ in 0..<5 { core.sighted(sighting(key)) }
        XCTAssertEqual(core.pendingFrames, 2)
        XCTAssertEqual(core.dropped, 3)
    }

    func testWorkRunsBeforeWaitingInboundEventsAndInOrder() async throws {
        let lane = InboundLane()
        let order = NIOLockedValueBox<[Int]>([])
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<20 { group.addTask { try await NodeCore.perform { order.withLockedValue { $0.append(i) }; return i } } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(Set(results), Set(0..<20))
        XCTAssertEqual(order.withLockedValue { $0.count }, 20)
        // Errors come back to the caller.
        struct Boom: Error {}
        do {
            _ = try await NodeCore.perform { () throws -> Int in throw Boom() }
            XCTFail("expected an error")
        } catch is Boom {}
        // Inbound events wait behind work, and keep their order.
        let consumer = GatedConsumer()
        let keys = (0..<5).map { _ in SigningKeyPair.generate().publicKey }
        for k in keys { lane.enqueue(.sighting(sighting(k)), author: k, pausing: nil) }
        let task = Task { await lane.consume(with: consumer) }
        // The consumer blocks on its batch; work submitted now still runs once it is done.
        let ran = NIOLockedValueBox(false)
        NodeCore.submit { ran.withLockedValue { $0 = true } }
        consumer.open()
        let done = await eventually { consumer.authors.count == 5 && ran.withLockedValue { $0 } }
        XCTAssertTrue(done)
        XCTAssertEqual(consumer.authors, keys)
        task.cancel()
        await task.value
    }

    /// Work submitted while a batch runs goes before the lane's next batch.
    func testWorkSubmittedDuringABatchGoesBeforeTheNextBatch() async throws {
        let lane = InboundLane()
        let log = NIOLockedValueBox<[String]>([])
        final class Recorder: InboundConsumer {
            let log: NIOLockedValueBox<[String]>
            init(_ log: NIOLockedValueBox<[String]>) { self.log = log }
            @NodeCore func handle(_ events: [InboundEvent]) {
                log.withLockedValue { $0.append("batch \(events.count)") }
                // Work handed in from inside a batch (a timer, a control intent) waits for it only.
                if log.withLockedValue({ $0.count }) == 1 { NodeCore.submit { self.log.withLockedValue { $0.append("work") } } }
            }
        }
        let key = SigningKeyPair.generate().publicKey
        for _ in 0..<(InboundLane.maximumBatch + 1) { lane.enqueue(.sighting(sighting(key)), author: nil, pausing: nil) }
        let task = Task { await lane.consume(with: Recorder(log)) }
        let done = await eventually { log.withLockedValue { $0.count } == 3 }
        XCTAssertTrue(done)
        XCTAssertEqual(log.withLockedValue { $0 }, ["batch \(InboundLane.maximumBatch)", "work", "batch 1"])
        task.cancel()
        await task.value
    }

    /// Code isolated to `@NodeCore` runs on the core's one thread, whoever calls it.
    func testCoreWorkRunsOnTheCoresThread() async throws {
        let onCore = await NodeCore.run { CoreExecutor.shared.isCurrent }
        XCTAssertTrue(onCore)
        XCTAssertFalse(CoreExecutor.shared.isCurrent)
        let fromBlocking = NodeCore.blocking { CoreExecutor.shared.isCurrent }
        XCTAssertTrue(fromBlocking)
    }

    func testALaneNobodyHoldsIsReleased() async throws {
        weak var released: InboundLane?
        do {
            let lane = InboundLane()
            released = lane
            lane.enqueue(.sighting(sighting(SigningKeyPair.generate().publicKey)), author: nil, pausing: nil)
            let consumer = GatedConsumer()
            consumer.open()
            let task = Task { await lane.consume(with: consumer) }
            let drained = await eventually { consumer.authors.count == 1 }
            XCTAssertTrue(drained)
            task.cancel()
            await task.value
        }
        let gone = await eventually { released == nil }
        XCTAssertTrue(gone, "the core keeps a lane only while it has a turn")
    }

}
