import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemProtocol
import XCTest
@testable import TandemNode
@testable import TandemNodeCore

/// Two discovery services in one process on loopback, with unicast targets instead of broadcast
/// (the broadcast path is covered in Tests/lan with network namespaces).
final class DiscoveryServiceTests: XCTestCase {
    let logger: Logger = {
        var l = Logger(label: "test")
        l.logLevel = .critical
        return l
    }()

    private func config(targets: [SocketAddress], interval: TimeAmount = .seconds(60)) -> DiscoveryConfiguration {
        var c = DiscoveryConfiguration()
        c.bindHost = "127.0.0.1"
        c.port = 0
        c.targets = targets
        c.interval = interval
        return c
    }

    private func waitFor(_ seconds: Double, _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    func testOpenAndPrivateBeaconsOnLoopbackAndPromptCancellation() async throws {
        let alice = SigningKeyPair.generate()
        let bob = SigningKeyPair.generate()
        let seen = Locked<[PeerSighting]>([])
        let bound = Locked<SocketAddress?>(nil)
        let group = MultiThreadedEventLoopGroup.singleton

        let listener = DiscoveryService(
            identity: bob, configuration: config(targets: []), group: group, logger: logger,
            state: { DiscoveryState(discoverable: false, displayName: "bob", tcpPort: 7810, friends: [alice.publicKey]) },
            onSighting: { s in seen.withLockedValue { $0.append(s) } },
            onReady: { a in bound.withLockedValue { $0 = a } })
        let bobTask = Task { try await listener.run() }
        let ready = await waitFor(5) { bound.withLockedValue { $0 } != nil }
        XCTAssertTrue(ready)
        let bobAddress = try XCTUnwrap(bound.withLockedValue { $0 })

        // Alice starts discoverable, with Bob as a friend: one open and one private beacon per round.
        let aliceState = Locked(DiscoveryState(discoverable: true, displayName: "Alice", tcpPort: 40100,
                                                          friends: [bob.publicKey]))
        let announcer = DiscoveryService(
            identity: alice, configuration: config(targets: [bobAddress]), group: group, logger: logger,
            state: { aliceState.withLockedValue { $0 } }, onSighting: { _ in })
        let aliceTask = Task { try await announcer.run() }

        // At start, not an interval (60 s) later.
        let both = await waitFor(5) { seen.withLockedValue { $0.count } >= 2 }
        XCTAssertTrue(both, "\(seen.withLockedValue { $0 })")
        let first = seen.withLockedValue { $0 }
        XCTAssertTrue(first.contains { $0.publicKey == alice.publicKey && !$0.isFriendBeacon && $0.displayName == "Alice"
                                       && $0.port == 40100 && $0.host == "127.0.0.1" })
        XCTAssertTrue(first.contains { $0.publicKey == alice.publicKey && $0.isFriendBeacon && $0.displayName == nil
                                       && $0.port == 40100 })

        // A state change announced at once: private only, another port.
        aliceState.withLockedValue { $0.discoverable = false; $0.tcpPort = 40101 }
        announcer.announceNow()
        let changed = await waitFor(5) { seen.withLockedValue { $0.contains { $0.port == 40101 } } }
        XCTAssertTrue(changed)
        let after = seen.withLockedValue { $0.filter { $0.port == 40101 } }
        XCTAssertTrue(after.allSatisfy { $0.isFriendBeacon })

        XCTAssertEqual(announcer.metrics.sendFailed, 0)
        XCTAssertGreaterThanOrEqual(announcer.metrics.sent, 3)
        XCTAssertEqual(listener.metrics.acceptedOpen, 1)
        XCTAssertGreaterThanOrEqual(listener.metrics.acceptedPrivate, 2)

        // Cancellation ends both promptly.
        let start = ContinuousClock.now
        aliceTask.cancel()
        bobTask.cancel()
        _ = await aliceTask.result
        _ = await bobTask.result
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2))
    }

    func testGarbageIsCountedAndTheSocketSurvives() async throws {
        let bob = SigningKeyPair.generate()
        let bound = Locked<SocketAddress?>(nil)
        let service = DiscoveryService(
            identity: bob, configuration: config(targets: []), group: MultiThreadedEventLoopGroup.singleton, logger: logger,
            state: { DiscoveryState(discoverable: false, displayName: "", tcpPort: 7810, friends: []) },
            onSighting: { _ in }, onReady: { a in bound.withLockedValue { $0 = a } })
        let task = Task { try await service.run() }
        defer { task.cancel() }
        _ = await waitFor(5) { bound.withLockedValue { $0 } != nil }
        let target = try XCTUnwrap(bound.withLockedValue { $0 })

        let sender = try await DatagramBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        defer { sender.close(promise: nil) }
        let datagrams: [[UInt8]] = [[], [1, 2, 3], BeaconFormat.magic + [1, 1], [UInt8](repeating: 7, count: 513),
                                    [UInt8](repeating: 7, count: 2000)]
        for d in datagrams {
            try await sender.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: sender.allocator.buffer(bytes: d)))
        }
        let counted = await waitFor(5) { service.metrics.received == datagrams.count }
        XCTAssertTrue(counted, "\(service.metrics)")
        XCTAssertEqual(service.metrics.dropped, ["malformed": 3, "oversized": 2])
    }
}

/// A value behind a lock, for callbacks that run on event loops.
private final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLockedValue<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
