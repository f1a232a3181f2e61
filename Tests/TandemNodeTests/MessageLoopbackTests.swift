import Foundation
import Logging
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// Messages between two in-process nodes on loopback, through their control methods: sent,
/// received once and in order, delivered on the friend's ACK (after its commit), offline friends,
/// a burst, reactions and retracts.
final class MessageLoopbackTests: XCTestCase, MessageNodeCalls {
    func testSendIsReceivedAndDelivered() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let id = try await send(a.node, to: b.node, "ready? \u{1b}[31m")
        let received = try await event(b.node, "message.received")
        XCTAssertEqual(received.fields["id"]?.stringValue, id)
        XCTAssertEqual(received.fields["from"]?.stringValue, a.node.id.canonical)
        XCTAssertEqual(received.fields["conversation"]?.stringValue, a.node.id.canonical)
        XCTAssertEqual(received.fields["text"]?.stringValue, "ready? \u{1b}[31m", "stored as sent; made safe only where printed")
        let delivered = try await event(a.node, "message.delivered")
        XCTAssertEqual(delivered.fields["id"]?.stringValue, id)
        XCTAssertEqual(delivered.fields["to"]?.stringValue, b.node.id.canonical)
        // Delivered is recorded after the friend's commit: its stored row exists when our event does.
        XCTAssertLessThanOrEqual(received.timeMs, delivered.timeMs)
        let mine = try await list(a.node, with: b.node)
        XCTAssertEqual(mine.map { $0["state"]?.stringValue }, ["delivered"])
        XCTAssertEqual(mine.first?["author"]?.stringValue, a.node.id.canonical)
        let theirs = try await list(b.node, with: a.node)
        XCTAssertEqual(theirs.map { $0["id"]?.stringValue }, [id])
        XCTAssertEqual(theirs.first?["text"]?.stringValue, "ready? \u{1b}[31m")
        // A reply sorts below what it answers on both sides.
        let reply = try await send(b.node, to: a.node, "yes", ["reply_to": .string(String(id.prefix(8)))])
        _ = try await event(a.node, "message.received", where: { $0.fields["id"]?.stringValue == reply })
        for (node, other) in [(a.node, b.node), (b.node, a.node)] {
            let shown = try await list(node, with: other)
            XCTAssertEqual(shown.map { $0["id"]?.stringValue }, [id, reply])
            XCTAssertEqual(shown.last?["reply_to"]?.stringValue, id)
        }
    }

    func testBadSendsAreRefusedWithClearErrors() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let stranger = NodeID(publicKey: SigningKeyPair.generate().publicKey).canonical
        for (params, code) in [
            (["to": .string(stranger), "text": "hi"] as [String: JSONValue], Int32(1)),
            (["to": "nobody-by-that-name", "text": "hi"], TandemError.nothingToActOnExitCode),
            (["to": .string(b.node.id.canonical), "text": .string(String(repeating: "x", count: 16_385))], TandemError.usageExitCode),
            (["to": .string(b.node.id.canonical), "text": ""], TandemError.usageExitCode),
            (["to": .string(b.node.id.canonical), "text": "hi", "reply_to": "zz"], TandemError.usageExitCode),
        ] {
            do {
                _ = try await call(a.node, "message.send", params)
                XCTFail("\(params) was sent")
            } catch let e as NodeError {
                XCTAssertEqual(e.exitCode, code, e.message)
            }
        }
        // Exactly 16 KiB goes.
        _ = try await send(a.node, to: b.node, String(repeating: "y", count: 16_384))
    }

    func testABurstArrivesExactlyOnceAndInOrder() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        var ids: [String] = []
        for i in 1...200 { ids.append(try await send(a.node, to: b.node, "burst \(i)")) }
        let last = ids[199]
        _ = try await event(a.node, "message.delivered", seconds: 60, where: { $0.fields["id"]?.stringValue == last })
        let received = try await events(b.node, "message.received")
        XCTAssertEqual(received.map { $0.fields["id"]?.stringValue ?? "" }, ids, "each once, in order")
        XCTAssertEqual(received.map { $0.fields["seq"]?.intValue ?? 0 }, Array(1...200))
        let stored = try await list(b.node, with: a.node)
        XCTAssertEqual(stored.map { $0["text"]?.stringValue ?? "" }, (1...200).map { "burst \($0)" })
        try await outboxDrains(a.node)
        let deliveredEvents = try await events(a.node, "message.delivered")
        XCTAssertEqual(Set(deliveredEvents.map { $0.fields["id"]?.stringValue ?? "" }), Set(ids))
        XCTAssertEqual(deliveredEvents.count, 200, "delivered once each")
    }

    func testAReactionAndARetract() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let id = try await send(a.node, to: b.node, "that was hard")
        _ = try await event(b.node, "message.received")
        _ = try await call(b.node, "message.react", ["id": .string(id), "emoji": "💪"])
        let reacted = try await event(a.node, "message.reaction")
        XCTAssertEqual(reacted.fields["emoji"]?.stringValue, "💪")
        XCTAssertEqual(reacted.fields["from"]?.stringValue, b.node.id.canonical)
        let shown = try await list(a.node, with: b.node)
        XCTAssertEqual(shown.first?["reactions"]?.arrayValue?.first?["emoji"]?.stringValue, "💪")
        // Found by search before, not after the retract.
        let hits = try await call(b.node, "message.search", ["text": "hard"])["hits"]?.arrayValue ?? []
        XCTAssertEqual(hits.map { $0["id"]?.stringValue }, [id])
        XCTAssertEqual(hits.first?["snippet"]?.stringValue, "that was [hard]")
        do {
            _ = try await call(b.node, "message.retract", ["id": .string(id)])
            XCTFail("retracted someone else's message")
        } catch let e as NodeError {
            XCTAssertEqual(e.exitCode, 1)
        }
        _ = try await call(a.node, "message.retract", ["id": .string(id)])
        let retracted = try await event(b.node, "message.retracted")
        XCTAssertEqual(retracted.fields["id"]?.stringValue, id)
        let after = try await list(b.node, with: a.node)
        XCTAssertEqual(after.first?["state"]?.stringValue, "retracted")
        XCTAssertEqual(after.first?["text"]?.stringValue, "")
        XCTAssertEqual(after.first?["reactions"]?.arrayValue?.count, 0)
        let gone = try await call(b.node, "message.search", ["text": "hard"])["hits"]?.arrayValue ?? []
        XCTAssertTrue(gone.isEmpty)
    }

    func testReadReceiptsAreReciprocal() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        // Only b turns them on: b sends READ, a does not show it (a sends none of its own).
        _ = try await call(b.node, "message.settings", ["friend": .string(a.node.id.canonical), "read_receipts": true])
        let first = try await send(a.node, to: b.node, "one")
        _ = try await event(a.node, "message.delivered", where: { $0.fields["id"]?.stringValue == first })
        _ = try await list(b.node, with: a.node)  // b reads it, and sends READ
        try await outboxDrains(b.node)  // a acknowledged the READ: handled, and not shown
        let unshown = try await list(a.node, with: b.node)
        XCTAssertEqual(unshown.map { $0["state"]?.stringValue }, ["delivered"], "a READ that came while a's receipts were off")
        _ = try await call(a.node, "message.settings", ["friend": .string(b.node.id.canonical), "read_receipts": true])
        let second = try await send(a.node, to: b.node, "two")
        _ = try await event(b.node, "message.received", where: { $0.fields["id"]?.stringValue == second })
        _ = try await list(b.node, with: a.node)  // b reads it: now a shows it
        let read = try await event(a.node, "message.read")
        // One READ covers everything up to its seq (messages.md 6).
        XCTAssertEqual(read.fields["ids"]?.arrayValue?.compactMap(\.stringValue), [first, second])
        let states = try await list(a.node, with: b.node).map { $0["state"]?.stringValue }
        XCTAssertEqual(states, ["read", "read"])
    }

    /// A challenge's thread among three: carol and bob are friends of alice (the inviter), not of
    /// each other. Each writes to alice, whose node stores and forwards the author-signed frame.
    func testAThreadReachesParticipantsWhoAreNotFriends() async throws {
        let alice = try await RunningNode.start(), bob = try await RunningNode.start(), carol = try await RunningNode.start()
        defer { alice.task.cancel(); bob.task.cancel(); carol.task.cancel() }
        try await befriend(alice, bob)
        try await befriend(alice, carol)
        let invited = try await call(alice.node, "challenge.invite", ["ids": [.string(bob.node.id.canonical), .string(carol.node.id.canonical)],
                                                                      "duration_ms": 60_000, "start_in_ms": 600_000])
        let thread = try XCTUnwrap(invited["id"]?.stringValue)
        _ = try await event(bob.node, "challenge.invited")
        _ = try await event(carol.node, "challenge.invited")
        let sent = try await call(carol.node, "message.send", ["challenge": .string(thread), "text": "who's in?"])
        let id = try XCTUnwrap(sent["id"]?.stringValue)
        let atBob = try await event(bob.node, "message.received", where: { $0.fields["id"]?.stringValue == id })
        XCTAssertEqual(atBob.fields["from"]?.stringValue, carol.node.id.canonical, "the author, not the forwarder")
        XCTAssertEqual(atBob.fields["conversation"]?.stringValue, "challenge:" + thread)
        _ = try await event(alice.node, "message.received", where: { $0.fields["id"]?.stringValue == id })
        _ = try await event(carol.node, "message.delivered", where: { $0.fields["id"]?.stringValue == id })
        // Bob answers; carol gets it through alice.
        let answer = try await call(bob.node, "message.send", ["challenge": .string(thread), "text": "me", "reply_to": .string(id)])
        let answerID = try XCTUnwrap(answer["id"]?.stringValue)
        _ = try await event(carol.node, "message.received", where: { $0.fields["id"]?.stringValue == answerID })
        for node in [alice.node, bob.node, carol.node] {
            let shown = try await call(node, "message.list", ["challenge": .string(thread)])["messages"]?.arrayValue ?? []
            XCTAssertEqual(shown.map { $0["id"]?.stringValue }, [id, answerID], "the same order on every node")
        }
        // The inviter writes to every participant directly, one id on every copy.
        let own = try await call(alice.node, "message.send", ["challenge": .string(thread), "text": "starting soon"])
        let ownID = try XCTUnwrap(own["id"]?.stringValue)
        for node in [bob.node, carol.node] {
            let got = try await event(node, "message.received", where: { $0.fields["id"]?.stringValue == ownID })
            XCTAssertEqual(got.fields["from"]?.stringValue, alice.node.id.canonical)
        }
        // A reaction by carol on alice's message reaches bob through alice, and a retract by alice both.
        _ = try await call(carol.node, "message.react", ["id": .string(ownID), "emoji": "🔥"])
        _ = try await event(bob.node, "message.reaction", where: { $0.fields["id"]?.stringValue == ownID })
        _ = try await call(alice.node, "message.retract", ["id": .string(ownID)])
        for node in [bob.node, carol.node] {
            _ = try await event(node, "message.retracted", where: { $0.fields["id"]?.stringValue == ownID })
        }
        try await outboxDrains(alice.node)
    }

    /// After a challenge, bob cheers alice's result in the ledger entry they share; alice's ledger
    /// shows it beside the entry.
    func testACheerOnALedgerEntry() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let invited = try await call(a.node, "challenge.invite", ["ids": [.string(b.node.id.canonical)], "duration_ms": 1000])
        let challenge = try XCTUnwrap(invited["id"]?.stringValue)
        _ = try await event(b.node, "challenge.invited")
        _ = try await call(b.node, "challenge.accept", ["id": .string(challenge)])
        _ = try await event(a.node, "ledger.appended", seconds: 30)
        let entry = try await event(b.node, "ledger.appended", seconds: 30)
        let seq = try XCTUnwrap(entry.fields["entry"]?.intValue)
        do {
            _ = try await call(b.node, "message.cheer", ["entry": .int(seq + 7)])
            XCTFail("cheered a ledger entry that does not exist")
        } catch let e as NodeError {
            XCTAssertEqual(e.exitCode, TandemError.nothingToActOnExitCode)
        }
        let cheered = try await call(b.node, "message.cheer", ["entry": .int(seq), "text": "well done"])
        XCTAssertEqual(cheered["to"]?.stringValue, a.node.id.canonical)
        let got = try await event(a.node, "message.cheer")
        XCTAssertEqual(got.fields["challenge_id"]?.stringValue, challenge)
        XCTAssertEqual(got.fields["subject"]?.stringValue, a.node.id.canonical)
        XCTAssertEqual(got.fields["text"]?.stringValue, "well done")
        XCTAssertEqual(got.fields["emoji"]?.stringValue, "👏")
        let ledger = try await call(a.node, "ledger.list")["entries"]?.arrayValue ?? []
        let cheers = ledger.first { $0["challenge_id"]?.stringValue == challenge }?["cheers"]?.arrayValue ?? []
        XCTAssertEqual(cheers.map { $0["from"]?.stringValue }, [b.node.id.canonical])
        XCTAssertEqual(cheers.first?["text"]?.stringValue, "well done")
        // `stats` shows it beside the entry, and counts it; the cheerer's own stats count none.
        let stats = try await call(a.node, "stats")
        XCTAssertEqual(stats["cheers_received"]?.intValue, 1)
        let recent = try XCTUnwrap(stats["recent"]?.arrayValue?.first)
        XCTAssertEqual(recent["seq"]?.intValue, ledger.first { $0["challenge_id"]?.stringValue == challenge }?["seq"]?.intValue)
        XCTAssertEqual(recent["cheers"]?.arrayValue?.map { $0["text"]?.stringValue }, ["well done"])
        XCTAssertEqual(recent["cheers"]?.arrayValue?.first?["from"]?.stringValue, b.node.id.canonical)
        let theirs = try await call(b.node, "stats")
        XCTAssertEqual(theirs["cheers_received"]?.intValue, 0)
        XCTAssertEqual(theirs["recent"]?.arrayValue?.first?["cheers"]?.arrayValue?.count, 0)
    }

    /// A disappearing timer set on one side reaches the other; each message carries it and both
    /// nodes delete it once it runs out. Mute marks the received events.
    func testADisappearingTimerAndMute() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let set = try await call(a.node, "message.settings", ["friend": .string(b.node.id.canonical), "disappear_after_ms": 60_000])
        XCTAssertEqual(set["disappear_after_ms"]?.intValue, 60_000)
        let told = try await event(b.node, "message.timer")
        XCTAssertEqual(told.fields["disappear_after_ms"]?.intValue, 60_000)
        do {
            _ = try await call(a.node, "message.settings", ["friend": .string(b.node.id.canonical), "disappear_after_ms": 5])
            XCTFail("a 5 ms timer was accepted")
        } catch let e as NodeError {
            XCTAssertEqual(e.exitCode, TandemError.usageExitCode)
        }
        _ = try await call(b.node, "message.settings", ["friend": .string(a.node.id.canonical), "muted": true])
        let id = try await send(a.node, to: b.node, "this goes away")
        let got = try await event(b.node, "message.received", where: { $0.fields["id"]?.stringValue == id })
        XCTAssertEqual(got.fields["muted"]?.boolValue, true)
        _ = try await event(a.node, "message.delivered", where: { $0.fields["id"]?.stringValue == id })
        // Not yet: a minute has not passed.
        let now = Int64(wallClockMilliseconds())
        await NodeCore.run { b.node.messages.expire(nowMs: now) }
        let kept = try await list(b.node, with: a.node)
        XCTAssertEqual(kept.count, 1)
        for node in [a.node, b.node] {
            await NodeCore.run { node.messages.expire(nowMs: now + 61_000) }
            let gone = try await event(node, "message.expired")
            XCTAssertEqual(gone.fields["ids"]?.arrayValue?.compactMap(\.stringValue), [id])
        }
        let left = try await list(b.node, with: a.node)
        XCTAssertTrue(left.isEmpty)
        let found = try await call(b.node, "message.search", ["text": "goes"])["hits"]?.arrayValue ?? []
        XCTAssertTrue(found.isEmpty, "gone from the search index too")
    }

    /// Written on a link but not acknowledged: `sent`, not `delivered`. A link with bob's key
    /// whose node does not run (nothing handles what it receives, so nothing is acknowledged).
    func testAFrameWrittenButNotAcknowledgedIsSent() async throws {
        let bobKey = SigningKeyPair.generate()
        let a = try await RunningNode.start()
        defer { a.task.cancel() }
        let b = try await RunningNode.start(identity: bobKey)
        try await befriend(a, b)
        await b.stop()
        let ghost = try NodeRuntime(identity: bobKey, configuration: TestSupport.loopbackConfiguration(), logger: TestSupport.quietLogger)
        let id = try await send(a.node, to: b.node, "anyone there?")
        let (link, _) = try await ghost.connect(host: "127.0.0.1", port: a.port, to: a.node.id)
        defer { link.close() }
        var state: String?
        for _ in 0..<100 {
            state = try await list(a.node, with: b.node).first?["state"]?.stringValue
            if state == "sent" { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTAssertEqual(state, "sent")
        let delivered = try await events(a.node, "message.delivered").filter { $0.fields["id"]?.stringValue == id }
        XCTAssertTrue(delivered.isEmpty)
    }

    /// Past the stored-bytes bound for an author, a message is not stored and not acknowledged
    /// (it stays in the sender's outbox), and the receiver's user is told.
    func testTheStoredBytesBoundHoldsBackWhatPassesIt() async throws {
        let a = try await RunningNode.start()
        let b = try await RunningNode.start(configure: { $0.messageLimits.storedBytesPerAuthor = 1000 })
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let text = String(repeating: "z", count: 300)  // 500 bytes each with the row's overhead
        let first = try await send(a.node, to: b.node, text)
        let second = try await send(a.node, to: b.node, text)
        let third = try await send(a.node, to: b.node, text)
        _ = try await event(a.node, "message.delivered", where: { $0.fields["id"]?.stringValue == second })
        let over = try await event(b.node, "message.over_bound")
        XCTAssertEqual(over.fields["from"]?.stringValue, a.node.id.canonical)
        let stored = try await list(b.node, with: a.node).map { $0["id"]?.stringValue }
        XCTAssertEqual(stored, [first, second])
        let states = try await list(a.node, with: b.node).map { $0["id"]?.stringValue == third ? $0["state"]?.stringValue : nil }
        XCTAssertNotEqual(states.last, "delivered", "not acknowledged: it waits in the outbox")
    }

    /// A friend offline when the messages are sent gets them once, in order, when it starts.
    func testAnOfflineFriendGetsEverythingOnceInOrder() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tdm-msg-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: dir) }
        let bIdentity = SigningKeyPair.generate()
        /// b keeps its store in `dir` across the restart.
        func startB() async throws -> (node: NodeRuntime, port: Int, task: Task<Void, Error>) {
            let node = try NodeRuntime(identity: bIdentity, configuration: TestSupport.loopbackConfiguration(),
                                       dataDirectory: DataDirectory(explicit: dir.path), logger: TestSupport.quietLogger)
            let task = Task { try await node.run(signals: false) }
            return (node, try await node.listener.boundAddress.port ?? 0, task)
        }
        let a = try await RunningNode.start()
        defer { a.task.cancel() }
        let b1 = try await startB()
        _ = try await a.node.friends.request(bIdentity.publicKey, message: "", address: ("127.0.0.1", b1.port))
        _ = try await event(b1.node, "friend.request.received")
        _ = try await b1.node.friends.accept(a.node.identity.publicKey)
        _ = try await event(a.node, "friend.accepted")
        b1.task.cancel()
        _ = await b1.task.result
        var ids: [String] = []
        for i in 1...5 { ids.append(try await send(a.node, to: b1.node, "while you were out \(i)")) }
        let queued = try await list(a.node, with: b1.node)
        XCTAssertEqual(queued.map { $0["state"]?.stringValue }, Array(repeating: "queued", count: 5))
        let b2 = try await startB()
        defer { b2.task.cancel() }
        let lastID = ids[4]
        _ = try await event(a.node, "message.delivered", seconds: 30, where: { $0.fields["id"]?.stringValue == lastID })
        let received = try await events(b2.node, "message.received")
        XCTAssertEqual(received.map { $0.fields["id"]?.stringValue ?? "" }, ids)
        let states = try await list(a.node, with: b2.node).map { $0["state"]?.stringValue }
        XCTAssertEqual(states, Array(repeating: "delivered", count: 5))
    }
}
