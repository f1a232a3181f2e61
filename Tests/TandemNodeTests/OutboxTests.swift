import Foundation
import Logging
import NIOConcurrencyHelpers
import Sodium
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeFriends

/// The outbox over an in-memory (or temporary) store, a manual clock and a fake transport: what it
/// writes on which link, when it resends, dials, backs off and deposits mail, and exactly-once
/// across a restart.
@NodeCore
final class OutboxTests: XCTestCase {
    final class ManualClock: Sendable {
        private let ms = NIOLockedValueBox<Int64>(1_800_000_000_000)
        var now: Int64 { ms.withLockedValue { $0 } }
        func advance(_ d: Int64) { ms.withLockedValue { $0 += d } }
    }

    final class FakeLink: OutboxLink, @unchecked Sendable {
        let serial: UInt64
        private let box = NIOLockedValueBox<[Envelope]>([])
        /// Writes (by type) and flushes, in order.
        private let log = NIOLockedValueBox<[String]>([])
        /// The peer announced that it takes MESSAGEs unsigned (README 5.4).
        let takesLinkAuthenticated: Bool
        init(serial: UInt64, takesLinkAuthenticated: Bool = false) {
            self.serial = serial
            self.takesLinkAuthenticated = takesLinkAuthenticated
        }
        func write(_ envelope: Envelope) {
            box.withLockedValue { $0.append(envelope) }
            log.withLockedValue { $0.append("\(envelope.type)") }
        }
        func flush() { log.withLockedValue { $0.append("flush") } }
        var written: [Envelope] { box.withLockedValue { $0 } }
        var operations: [String] { log.withLockedValue { $0 } }
        var types: [MessageType] { written.map(\.type) }
    }

    final class FakeTransport: OutboxTransport, @unchecked Sendable {
        struct State {
            var links: [[UInt8]: FakeLink] = [:]
            var dialResult: [[UInt8]: DialOutcome] = [:]
            var dials: [[UInt8]] = []
            var deposits: [[Envelope]] = []
            var depositAccepts = true
        }
        let state = NIOLockedValueBox(State())
        func link(to key: [UInt8]) -> OutboxLink? { state.withLockedValue { $0.links[key] } }
        func dial(_ key: [UInt8]) async -> DialOutcome {
            state.withLockedValue { s in
                s.dials.append(key)
                let outcome = s.dialResult[key] ?? .unreachable
                if case .link(let l) = outcome, let fake = l as? FakeLink { s.links[key] = fake }
                return outcome
            }
        }
        func deposit(_ envelopes: [Envelope], via relay: RelayAddress) async throws -> [[UInt8]] {
            state.withLockedValue { s in
                s.deposits.append(envelopes)
                return s.depositAccepts ? envelopes.map(\.messageID.bytes) : []
            }
        }
        func setLink(_ key: [UInt8], _ link: FakeLink?) { state.withLockedValue { $0.links[key] = link } }
        var dials: [[UInt8]] { state.withLockedValue { $0.dials } }
    }

    struct Rig {
        let me: SigningKeyPair
        let store: NodeStore
        let transport: FakeTransport
        let clock: ManualClock
        let events: EventBus
        let outbox: Outbox
        let log: InMemoryEventLog

        init(me: SigningKeyPair = .generate(), store: NodeStore? = nil, clock: ManualClock = ManualClock(), window: Int? = nil,
             windowBytes: Int? = nil) throws {
            self.me = me
            self.store = try store ?? NodeStore.inMemory()
            transport = FakeTransport()
            self.clock = clock
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            log = InMemoryEventLog()
            events = EventBus(log: log, logger: logger)
            var configuration = Outbox.Configuration()
            if let window { configuration.window = window }
            if let windowBytes { configuration.windowBytes = windowBytes }
            outbox = Outbox(identity: me, store: self.store, transport: transport,
                            presence: PresenceState(heartbeatSeconds: 10), events: events, health: StoreHealth(logger: logger),
                            signals: nil, configuration: configuration, logger: logger, clock: { [clock] in clock.now })
        }

        /// A friend request to `key`, stored with its frame as the friends flow does.
        @discardableResult
        @NodeCore func request(_ key: [UInt8]) throws -> OutboxItem {
            try store.batch { step in try request(key, step) }
        }

        /// The same, in a step the caller holds.
        @NodeCore func request(_ key: [UInt8], _ step: StoreStep) throws -> OutboxItem {
            let item = outbox.frame(.friendRequest, to: key, payload: try Tandem_V1_FriendRequest().serializedBytes(), in: step)
            _ = try step.requestFriend(key, message: "hi", frame: item, nowMs: clock.now)
            return item
        }

        func eventTypes() throws -> [String] { try log.events(since: 0, limit: 1000).map(\.type) }

        /// `n` CONTACT_UPDATE frames to `key` (payloads of `payloadBytes`), created a millisecond apart (a
        /// defined order), queued in one step and handed to the outbox as a flow does; their ids in order.
        func queue(_ n: Int, to key: [UInt8], payloadBytes: Int = 0) async throws -> [[UInt8]] {
            try await NodeCore.perform {
                try store.batch { step in
                    var ids: [[UInt8]] = []
                    for _ in 0..<n {
                        clock.advance(1)
                        let item = outbox.frame(.contactUpdate, to: key, payload: [UInt8](repeating: 7, count: payloadBytes), in: step)
                        try step.enqueue(item)
                        ids.append(Array(item.messageId))
                    }
                    outbox.send(to: [key], in: step)
                    return ids
                }
            }
        }
    }

    func testEachFrameIsWrittenOncePerLinkUntilTheResendTime() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        let item = try rig.request(peer)
        let first = FakeLink(serial: 1)
        rig.transport.setLink(peer, first)
        await rig.outbox.deliver(to: peer)
        // A second round at once (a poke, the dial's own round racing "due at once"): nothing again.
        await rig.outbox.deliver(to: peer)
        await rig.outbox.deliverDue()
        XCTAssertEqual(first.written.map(\.messageID.bytes), [Array(item.messageId)])
        // Past the resend time with no ACK: written again on the same link.
        rig.clock.advance(30_001)
        await rig.outbox.deliverDue()
        XCTAssertEqual(first.types, [.friendRequest, .friendRequest])
        // A new link (the old one died): the frame goes out on it at once.
        let second = FakeLink(serial: 2)
        rig.transport.setLink(peer, second)
        await rig.outbox.deliver(to: peer)
        XCTAssertEqual(second.types, [.friendRequest])
        XCTAssertTrue(rig.transport.dials.isEmpty, "a peer with a link is not dialled")
    }

    /// A burst to one recipient goes out `window` frames at a time, oldest first; acknowledgements
    /// make room and the next frames follow right after their step's commit, each written once.
    func testABurstGoesOutWithinTheWindowAndAcknowledgementsBringTheRest() async throws {
        let rig = try Rig(window: 4)
        let peer = SigningKeyPair.generate().publicKey
        let link = FakeLink(serial: 1)
        rig.transport.setLink(peer, link)
        let ids = try await rig.queue(10, to: peer)
        XCTAssertEqual(link.written.map(\.messageID.bytes), Array(ids[0..<4]), "the oldest four, nothing more")
        // A round of the delivery loop meanwhile adds nothing: the window is full.
        rig.clock.advance(1_000)
        await rig.outbox.deliverDue()
        XCTAssertEqual(link.written.count, 4)
        // Two acknowledged in one step: the next two follow its commit, in order — with no step of
        // their own (a refill re-schedules nothing, messages.md 11.6, session 14): the two frames
        // keep the schedule they were queued with, due by now.
        let commitsBefore = rig.store.commits
        await NodeCore.run { try? rig.store.batch { step in for id in ids[0..<2] { _ = rig.outbox.delivered(id, by: peer, step) } } }
        XCTAssertEqual(link.written.map(\.messageID.bytes), Array(ids[0..<6]))
        XCTAssertEqual(rig.store.commits - commitsBefore, 1, "the acknowledgements' step, and no other for the refill")
        let refilled = try rig.store.outbox(for: peer).filter { ids[4..<6].contains(Array($0.messageId)) }
        XCTAssertEqual(refilled.count, 2)
        XCTAssertTrue(refilled.allSatisfy { $0.nextAttemptMs <= rig.clock.now }, "as queued: due")
        // The delivery loop's next round finds the recipient due but its window full: it writes
        // nothing again and commits nothing (the frames in flight are re-scheduled by a round that
        // finds room, or once `resendAfterMs` frees their places).
        let commitsBeforeRound = rig.store.commits
        await rig.outbox.deliverDue()
        XCTAssertEqual(link.written.count, 6)
        XCTAssertEqual(rig.store.commits, commitsBeforeRound)
        // The rest, as acknowledgements come: every frame written exactly once, in order.
        for i in 2..<10 {
            await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.delivered(ids[i], by: peer, step) } }
        }
        XCTAssertEqual(link.written.map(\.messageID.bytes), ids)
        XCTAssertEqual(try rig.store.outbox(for: peer).count, 0)
    }

    /// Large frames: the window's bytes hold them back, and every frame still goes once, in order,
    /// as acknowledgements free bytes (the refills read the rows after those in flight).
    func testLargeFramesGoWithinTheWindowsBytes() async throws {
        let rig = try Rig(window: 100, windowBytes: 3_900)
        let peer = SigningKeyPair.generate().publicKey
        let link = FakeLink(serial: 1)
        rig.transport.setLink(peer, link)
        let ids = try await rig.queue(8, to: peer, payloadBytes: 1000)
        XCTAssertEqual(link.written.map(\.messageID.bytes), Array(ids[0..<3]), "three frames of ~1.15 kB fit in 3,900 bytes, not a fourth")
        await rig.outbox.deliverDue()
        XCTAssertEqual(link.written.count, 3, "a round adds nothing while the bytes are in flight")
        for i in 0..<8 {
            await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.delivered(ids[i], by: peer, step) } }
            XCTAssertEqual(link.written.map(\.messageID.bytes), Array(ids[0..<min(8, i + 4)]), "after \(i + 1) acknowledged")
        }
        XCTAssertEqual(try rig.store.outbox(for: peer).count, 0)
    }

    /// A refill reads only the frames past those in flight (messages.md 11.6, session 14). A frame
    /// that sorts before them — queued while the clock was set back — is not lost for it: the
    /// delivery loop writes it once it is due and the window has room; every frame goes once.
    func testAFrameQueuedBeforeTheFramesInFlightIsStillWrittenOnce() async throws {
        let rig = try Rig(window: 2)
        let peer = SigningKeyPair.generate().publicKey
        let link = FakeLink(serial: 1)
        rig.transport.setLink(peer, link)
        let f = try await rig.queue(4, to: peer)
        XCTAssertEqual(link.written.map(\.messageID.bytes), Array(f[0..<2]))
        rig.clock.advance(-1_000)  // set back: the next frame sorts before all of them
        let g = try await rig.queue(1, to: peer)
        XCTAssertEqual(link.written.count, 2, "no room")
        // The first acknowledgement's refill writes the frame after those in flight, not g.
        await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.delivered(f[0], by: peer, step) } }
        XCTAssertEqual(link.written.map(\.messageID.bytes), Array(f[0..<3]))
        // The friend acknowledges what it gets; rounds of the delivery loop go on as time passes.
        var acknowledged = 1
        for _ in 0..<20 where try rig.store.outbox(for: peer).count > 0 {
            let written = link.written.map(\.messageID.bytes)
            if acknowledged < written.count {
                let id = written[acknowledged]
                acknowledged += 1
                await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.delivered(id, by: peer, step) } }
            } else {
                rig.clock.advance(1_000)
                await rig.outbox.deliverDue()
            }
        }
        XCTAssertEqual(try rig.store.outbox(for: peer).count, 0)
        let written = link.written.map(\.messageID.bytes)
        XCTAssertEqual(written.count, 5, "each frame once")
        XCTAssertEqual(Set(written), Set(f + g))
        XCTAssertEqual(written.filter { f.contains($0) }, f, "the others in their order")
    }

    /// A frame queued in a step while its recipient's link is up goes out right after the step's
    /// commit, and that commit already scheduled it as written (no commit of its own for the write).
    func testAFrameQueuedWithALinkUpIsScheduledInItsStepAndWrittenAfterTheCommit() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        let link = FakeLink(serial: 1)
        rig.transport.setLink(peer, link)
        let start = rig.clock.now
        let commitsBefore = rig.store.commits
        let item = try await NodeCore.perform { () -> OutboxItem in
            var item: OutboxItem?
            try rig.store.batch { step in
                item = try rig.request(peer, step)
                rig.outbox.send(to: [peer], in: step)
                XCTAssertTrue(link.written.isEmpty, "nothing goes out before the commit")
            }
            return item!
        }
        XCTAssertEqual(link.written.map(\.messageID.bytes), [Array(item.messageId)])
        XCTAssertEqual(rig.store.commits - commitsBefore, 1, "the step's commit, and no other for the write")
        let row = try XCTUnwrap(try rig.store.outbox(for: peer).first)
        XCTAssertEqual(row.attempts, 1)
        XCTAssertEqual(row.nextAttemptMs, start + 1000)
        XCTAssertEqual(row.lastError, "awaiting acknowledgement")
        // Not due before then: a round writes nothing and changes nothing.
        await rig.outbox.deliverDue()
        XCTAssertEqual(link.written.count, 1)
        XCTAssertEqual(try rig.store.outbox(for: peer).first?.attempts, 1)
        // Due with no ACK: the round backs off (a second attempt) and, within the resend time,
        // writes nothing again on the same link.
        rig.clock.advance(1000)
        await rig.outbox.deliverDue()
        XCTAssertEqual(link.written.count, 1)
        XCTAssertEqual(try rig.store.outbox(for: peer).first?.attempts, 2)
    }

    /// The link closes between the step that queued a frame and its commit: the frame is due at
    /// once again, and the next link gets it.
    func testAFrameScheduledForALinkThatClosedBeforeTheCommitIsDueAtOnce() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        rig.transport.setLink(peer, FakeLink(serial: 1))
        let item = try await NodeCore.perform { () -> OutboxItem in
            var item: OutboxItem?
            try rig.store.batch { step in
                item = try rig.request(peer, step)
                rig.outbox.send(to: [peer], in: step)
                rig.transport.setLink(peer, nil)
            }
            return item!
        }
        let row = try XCTUnwrap(try rig.store.outbox(for: peer).first)
        XCTAssertLessThanOrEqual(row.nextAttemptMs, rig.clock.now)
        let next = FakeLink(serial: 2)
        rig.transport.state.withLockedValue { $0.dialResult[peer] = .link(next) }
        await rig.outbox.deliverDue()
        XCTAssertEqual(next.written.map(\.messageID.bytes), [Array(item.messageId)])
    }

    func testOnlyTheRecipientsAckRemovesAFrame() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        let item = try rig.request(peer)
        await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.delivered(Array(item.messageId), by: SigningKeyPair.generate().publicKey, step) } }
        XCTAssertEqual(try rig.store.outbox(for: peer).count, 1, "someone else's ACK changes nothing")
        await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.delivered(Array(item.messageId), by: peer, step) } }
        XCTAssertEqual(try rig.store.outbox(for: peer).count, 0)
        XCTAssertTrue(try rig.eventTypes().contains("outbox.delivered"))
        // After the ACK nothing is written on a later link.
        let link = FakeLink(serial: 7)
        rig.transport.setLink(peer, link)
        rig.clock.advance(60_000)
        await rig.outbox.deliverDue()
        XCTAssertTrue(link.written.isEmpty)
    }

    func testAReplayedErrorCountsAsDelivered() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        let item = try rig.request(peer)
        var error = Tandem_V1_Error()
        error.code = .replayed
        error.refMessageID = item.messageId
        let reported = error
        await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.peerReportedError(reported, from: peer, step) } }
        XCTAssertEqual(try rig.store.outboxCount(), 0)
    }

    func testUnreachablePeersAreDialledWithBackoff() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        try rig.request(peer)
        await rig.outbox.deliverDue()
        XCTAssertEqual(rig.transport.dials.count, 1)
        // Deferred: the next round at once dials nobody.
        await rig.outbox.deliverDue()
        XCTAssertEqual(rig.transport.dials.count, 1)
        let row = try XCTUnwrap(try rig.store.outbox(for: peer).first)
        XCTAssertGreaterThan(row.nextAttemptMs, rig.clock.now)
        XCTAssertEqual(row.lastError, "unreachable")
        // Once due again, dialled again; this time it answers and gets the frame.
        rig.clock.advance(61_000)
        let link = FakeLink(serial: 3)
        rig.transport.state.withLockedValue { $0.dialResult[peer] = .link(link) }
        await rig.outbox.deliverDue()
        XCTAssertEqual(rig.transport.dials.count, 2)
        XCTAssertEqual(link.types, [.friendRequest])
        XCTAssertEqual(rig.outbox.book.withLockedValue { $0.failures(peer) }, 0, "a dial that worked clears the backoff")
    }

    func testFriendsWithoutLinksAreDialledWithBackoffEvenWithNothingToSend() async throws {
        let rig = try Rig()
        let friend = SigningKeyPair.generate().publicKey
        try rig.request(friend)
        _ = try rig.store.batch { try $0.receiveFriendAccept(from: friend, displayName: "f", record: [], recordVersion: 1, nowMs: rig.clock.now) }
        XCTAssertEqual(try rig.store.outboxCount(), 0)
        await rig.outbox.deliverDue()
        XCTAssertEqual(rig.transport.dials, [friend])
        await rig.outbox.deliverDue()
        XCTAssertEqual(rig.transport.dials.count, 1, "backing off after a failed dial")
        rig.clock.advance(120_000)
        await rig.outbox.deliverDue()
        XCTAssertEqual(rig.transport.dials.count, 2)
    }

    func testAnOfflinePeersFramesGoToItsRelayMailbox() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        try rig.request(peer)
        let relay = RelayAddress(id: NodeID(publicKey: SigningKeyPair.generate().publicKey), host: "127.0.0.1", port: 7)
        rig.transport.state.withLockedValue { $0.dialResult[peer] = .offline(relay) }
        await rig.outbox.deliverDue()
        XCTAssertEqual(rig.transport.state.withLockedValue { $0.deposits.map { $0.map(\.type) } }, [[.friendRequest]])
        XCTAssertEqual(try rig.store.outboxCount(), 0)
        XCTAssertTrue(try rig.eventTypes().contains("outbox.deposited"))
    }

    /// A direct MESSAGE is held unsigned; it leaves so only on a link whose peer takes it (README
    /// 5.4), signed on any other link and in relay mail — the same frame (id, created_at, payload).
    func testADirectMessageIsSignedWhereverItsLinkDoesNotVouchForIt() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        let body = ChatMessageBody(challengeID: nil, seq: 1, lamport: 1, text: "ready?", replyTo: nil, sentAtMs: 1)
        let item = try await NodeCore.perform {
            try rig.store.batch { step in
                let item = rig.outbox.frame(.chatMessage, to: peer, payload: body.payload, recipientIsFriend: true,
                                            linkAuthenticated: true, in: step)
                try step.enqueue(item)
                return item
            }
        }
        let stored = try Envelope.parse(Array(item.frame))
        XCTAssertTrue(stored.needsSignatureOffLink, "held unsigned")
        let setAside = try await NodeCore.perform { try rig.store.batch { try $0.quarantineInvalidRows(nowMs: rig.clock.now) } }
        XCTAssertEqual(setAside.count, 0, "an unsigned MESSAGE row is valid at start")
        XCTAssertEqual(try rig.store.outboxCount(), 1)
        let head = Array(stored.bytes.dropLast(64))

        // An older node's link (no PRESENCE flag): signed as it is written.
        let older = FakeLink(serial: 1)
        rig.transport.setLink(peer, older)
        await rig.outbox.deliver(to: peer)
        let onOlder = try XCTUnwrap(older.written.first)
        XCTAssertTrue(onOlder.hasValidSignature)
        XCTAssertEqual(Array(onOlder.bytes.dropLast(64)), head)
        XCTAssertTrue(try rig.store.outboxFrames([Array(item.messageId)], to: peer).values.allSatisfy {
            (try? Envelope.parse($0))?.needsSignatureOffLink == true
        }, "the outbox keeps it unsigned")

        // A link whose peer takes it: as held, the zero signature.
        let newer = FakeLink(serial: 2, takesLinkAuthenticated: true)
        rig.transport.setLink(peer, newer)
        await rig.outbox.deliver(to: peer)
        let onNewer = try XCTUnwrap(newer.written.first)
        XCTAssertTrue(onNewer.hasZeroSignature)
        XCTAssertEqual(onNewer.bytes, stored.bytes)

        // Offline: the mail is signed.
        rig.transport.setLink(peer, nil)
        rig.clock.advance(30_001)
        let relay = RelayAddress(id: NodeID(publicKey: SigningKeyPair.generate().publicKey), host: "127.0.0.1", port: 7)
        rig.transport.state.withLockedValue { $0.dialResult[peer] = .offline(relay) }
        await rig.outbox.deliverDue()
        let mailed = try XCTUnwrap(rig.transport.state.withLockedValue { $0.deposits.first?.first })
        XCTAssertTrue(mailed.hasValidSignature)
        XCTAssertEqual(mailed.bytes, onOlder.bytes)
        XCTAssertEqual(try rig.store.outboxCount(), 0)
    }

    func testARelayThatStoresNothingLeavesTheFramesDue() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        try rig.request(peer)
        let relay = RelayAddress(id: NodeID(publicKey: SigningKeyPair.generate().publicKey), host: "127.0.0.1", port: 7)
        rig.transport.state.withLockedValue { $0.dialResult[peer] = .offline(relay); $0.depositAccepts = false }
        await rig.outbox.deliverDue()
        let row = try XCTUnwrap(try rig.store.outbox(for: peer).first)
        XCTAssertEqual(row.lastError, "offline")
        XCTAssertGreaterThan(row.nextAttemptMs, rig.clock.now)
    }

    func testAnOwedPresenceFollowsTheFramesThatMakeItMeaningful() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        // They asked; we accept: FRIEND_ACCEPT waits in the outbox, and they are a friend now.
        _ = try rig.store.batch { try $0.receiveFriendRequest(from: peer, displayName: "p", message: "", record: [], recordVersion: 1, reply: nil,
                                               nowMs: rig.clock.now) }
        let accept = rig.outbox.frame(.friendAccept, to: peer, payload: try Tandem_V1_FriendAccept().serializedBytes(), in: rig.store)
        _ = try rig.store.batch { try $0.acceptFriend(peer, frame: accept, nowMs: rig.clock.now) }
        // The link is up: a PRESENCE is owed, not sent, while the accept waits.
        let due = rig.outbox.book.withLockedValue { $0.presenceDue(peer, framesWaiting: true) }
        XCTAssertFalse(due)
        let link = FakeLink(serial: 9)
        rig.transport.setLink(peer, link)
        await rig.outbox.deliver(to: peer)
        XCTAssertEqual(link.types, [.friendAccept, .presence])
        // The accept is on its way before the PRESENCE is signed: flushed apart, in that order.
        XCTAssertEqual(link.operations, ["\(MessageType.friendAccept)", "flush", "\(MessageType.presence)", "flush"])
        // Owed once: the next round writes neither again.
        await rig.outbox.deliver(to: peer)
        XCTAssertEqual(link.types, [.friendAccept, .presence])
    }

    func testFramesSurviveARestartAndAreDeliveredOnce() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("outbox-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path
        let me = SigningKeyPair.generate()
        let peer = SigningKeyPair.generate().publicKey
        let clock = ManualClock()
        let item: OutboxItem
        do {
            let rig = try Rig(me: me, store: try NodeStore(path: path), clock: clock)
            item = try rig.request(peer)
        }
        // A new process over the same file: the frame is still owed, and goes out.
        let rig = try Rig(me: me, store: try NodeStore(path: path), clock: clock)
        let link = FakeLink(serial: 1)
        rig.transport.setLink(peer, link)
        await rig.outbox.deliverDue()
        XCTAssertEqual(link.written.map(\.messageID.bytes), [Array(item.messageId)])
        await NodeCore.run { try? rig.store.batch { step in _ = rig.outbox.delivered(Array(item.messageId), by: peer, step) } }
        // Acknowledged, then another restart: never written again.
        let again = try Rig(me: me, store: try NodeStore(path: path), clock: clock)
        let later = FakeLink(serial: 2)
        again.transport.setLink(peer, later)
        clock.advance(60_000)
        await again.outbox.deliverDue()
        XCTAssertTrue(later.written.isEmpty)
        // Exactly once on the receiving side too: the handled mark commits with the change and
        // outlives the process.
        let incoming = Envelope.sign(type: .friendRequest, author: SigningKeyPair.generate(), recipient: me.publicKey,
                                     createdAt: UInt64(clock.now), payload: [])
        let mark = again.outbox.handledMark(incoming, in: again.store)
        let first = try again.store.batch { try $0.receiveFriendRequest(from: incoming.author, displayName: "x", message: "", record: [],
                                                         recordVersion: 1, reply: nil, nowMs: clock.now, handled: mark) }
        XCTAssertNotEqual(first, .duplicate)
        let reopened = try NodeStore(path: path)
        XCTAssertTrue(try reopened.wasHandled(incoming.messageID.bytes))
        let second = try reopened.batch { try $0.receiveFriendRequest(from: incoming.author, displayName: "x", message: "", record: [],
                                                       recordVersion: 1, reply: nil, nowMs: clock.now, handled: mark) }
        XCTAssertEqual(second, NodeStore.IncomingRequest.duplicate)
    }

    func testStrangersRepliesAreBudgeted() {
        var budget = ReplyBudget()
        let stranger = SigningKeyPair.generate().publicKey
        var allowed = 0
        for _ in 0..<100 where budget.allow(sender: stranger, address: "10.0.0.1", nowMs: 0) { allowed += 1 }
        XCTAssertEqual(allowed, Int(ReplyBudget.perSenderPerMinute))
        // A minute later the bucket is full again.
        XCTAssertTrue(budget.allow(sender: stranger, address: "10.0.0.1", nowMs: 60_000))
    }

    func testFriendRequestThrottlePerSenderAndAddress() {
        var t = RequestThrottle()
        let a = SigningKeyPair.generate().publicKey
        var ok = 0
        for _ in 0..<10 where t.allow(sender: a, address: "10.0.0.1", nowMs: 0, perSender: 5, perAddress: 30) { ok += 1 }
        XCTAssertEqual(ok, 5)
        // Other senders from the same address share its 30 (5 were taken above, and 5 refused ones cost the address too).
        var fromAddress = 0
        for _ in 0..<40 where t.allow(sender: SigningKeyPair.generate().publicKey, address: "10.0.0.1", nowMs: 0, perSender: 5, perAddress: 30) {
            fromAddress += 1
        }
        XCTAssertEqual(fromAddress, 20)
        XCTAssertEqual(t.noteThrottled(nowMs: 10_000), 1)
        XCTAssertNil(t.noteThrottled(nowMs: 11_000), "one report per 10 s")
    }
}
