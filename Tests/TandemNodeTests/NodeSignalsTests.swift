import NIOConcurrencyHelpers
import XCTest
@testable import TandemNode
@testable import TandemNodeCore

/// The node's internal signal stream: filtering, and readers that fold a burst into one round.
final class NodeSignalsTests: XCTestCase {
    func testASubscriberGetsOnlyWhatItsFilterAccepts() async {
        let signals = NodeSignals()
        let names = signals.subscribe { $0 == .nameChanged }
        signals.post(.friendsChanged)
        signals.post(.nameChanged)
        signals.finish()
        var got: [NodeSignal] = []
        for await s in names { got.append(s) }
        XCTAssertEqual(got, [.nameChanged])
    }

    /// Ten friend changes in a burst cost a reader that recomputes at most two rounds (the first
    /// after the window, one more for what came meanwhile), none before the window has passed;
    /// a change after the burst gets a round of its own.
    func testACoalescedReaderFoldsABurstIntoAtMostTwoRounds() async throws {
        let signals = NodeSignals()
        let stream = signals.subscribe(keepingNewest: 1) { $0 == .friendsChanged }
        let rounds = NIOLockedValueBox<[ContinuousClock.Instant]>([])
        let reader = Task { await stream.coalesced(over: .milliseconds(100)) { rounds.withLockedValue { $0.append(.now) } } }
        defer { reader.cancel() }
        let start = ContinuousClock.now
        for _ in 0..<10 { signals.post(.friendsChanged) }
        try await Task.sleep(for: .milliseconds(500))
        let burst = rounds.withLockedValue { $0 }
        XCTAssertTrue((1...2).contains(burst.count), "\(burst.count) rounds for one burst")
        XCTAssertGreaterThanOrEqual(burst[0] - start, .milliseconds(100), "a round ran before the burst settled")
        signals.post(.friendsChanged)
        try await Task.sleep(for: .milliseconds(400))
        XCTAssertEqual(rounds.withLockedValue { $0.count }, burst.count + 1)
    }
}
