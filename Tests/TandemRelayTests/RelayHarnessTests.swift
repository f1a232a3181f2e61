import Foundation
import NIOCore
import NIOEmbedded
import Sodium
import TandemProtocol
import XCTest
@testable import TandemRelay

/// The relay's frame handling without client sockets (RelayHarness, what the relay fuzz target
/// drives), and the self-checks the target asserts: RelayBook.violations, RelayMailbox.violations.
final class RelayHarnessTests: XCTestCase {
    let relayKey = SigningKeyPair.generate()
    let alice = SigningKeyPair.generate()
    let bob = SigningKeyPair.generate()
    let startMs: Int64 = 1_750_000_000_000

    func configuration() -> RelayConfiguration {
        var c = RelayConfiguration()
        c.maximumClients = 4
        c.maximumTunnelsPerClient = 2
        c.maximumTunnelsPerPair = 2
        c.mailboxItemCharge = 100
        c.mailboxItemBytes = 1000
        c.clientBytesPerSecond = 0
        return c
    }

    func frame(_ type: MessageType, from key: SigningKeyPair, _ payload: [UInt8] = []) -> Envelope {
        Envelope.sign(type: type, author: key, recipient: relayKey.publicKey, createdAt: UInt64(startMs), payload: payload)
    }

    func replies(_ link: RelayHarness.Link, _ type: MessageType) -> [[UInt8]] {
        link.takeSent().filter { $0.0 == type }.map(\.1)
    }

    func assertSound(_ relay: RelayHarness, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(relay.violations(), [], file: file, line: line)
    }

    /// Registration, a tunnel opened, announced, joined by two in-memory connections and spliced,
    /// bytes through it, then everything closed: at every step the book and mailbox are sound, and
    /// at the end the relay holds nothing.
    func testTunnelThroughTheHarnessSplicesAndLeavesNothing() throws {
        let relay = try RelayHarness(identity: relayKey, configuration: configuration(), startMs: startMs)
        let loop = EmbeddedEventLoop()
        let a = try XCTUnwrap(relay.connect(key: alice.publicKey, address: "198.51.100.1"))
        let b = try XCTUnwrap(relay.connect(key: bob.publicKey, address: "198.51.100.2"))
        relay.deliver(frame(.relayRegister, from: bob), on: b)
        XCTAssertEqual(replies(b, .relayRegistered).count, 1)
        XCTAssertTrue(try relay.server.mailbox.isRegistered(bob.publicKey))
        assertSound(relay)

        var open = Tandem_V1_TunnelOpen()
        open.requestID = 7
        open.target = Data(bob.publicKey)
        relay.deliver(frame(.tunnelOpen, from: alice, try open.serializedBytes()), on: a)
        let reply = try Tandem_V1_RelayReply(serializedBytes: try XCTUnwrap(replies(a, .relayReply).first))
        XCTAssertEqual(reply.requestID, 7)
        XCTAssertEqual(reply.status, .ok)
        let incoming = try Tandem_V1_TunnelIncoming(serializedBytes: try XCTUnwrap(replies(b, .tunnelIncoming).first))
        XCTAssertEqual(incoming.token, reply.token)
        XCTAssertEqual(Array(incoming.from), alice.publicKey)
        assertSound(relay)

        var ends: [EmbeddedChannel] = []
        for _ in 0..<2 {
            let ch = EmbeddedChannel(loop: loop)
            try ch.connect(to: SocketAddress(ipAddress: "198.51.100.3", port: 4000)).wait()
            try relay.accept(ch)
            try ch.writeInbound(ch.allocator.buffer(bytes: TunnelJoin.preamble(token: Array(reply.token))))
            loop.run()
            ends.append(ch)
        }
        loop.run()
        for ch in ends {
            XCTAssertEqual(try ch.readOutbound(as: ByteBuffer.self).map { Array($0.readableBytesView) }, [TunnelJoin.Answer.joined.rawValue])
        }
        XCTAssertEqual(relay.server.book.withLockedValue { $0.splicedTunnelCount }, 1)
        XCTAssertEqual(relay.server.book.withLockedValue { $0.tunnelLoad(of: bob.publicKey) }, 1)
        try ends[0].writeInbound(ends[0].allocator.buffer(bytes: [1, 2, 3]))
        loop.run()
        XCTAssertEqual(try ends[1].readOutbound(as: ByteBuffer.self).map { Array($0.readableBytesView) }, [1, 2, 3])
        assertSound(relay)

        // The initiator's link goes: the spliced tunnel stays counted until its connections close.
        relay.disconnect(a)
        XCTAssertEqual(relay.server.book.withLockedValue { $0.tunnelLoad(of: alice.publicKey) }, 1)
        assertSound(relay)
        ends[0].close(promise: nil)
        loop.run()
        XCTAssertEqual(relay.server.book.withLockedValue { $0.tunnelLoad(of: alice.publicKey) }, 0)
        relay.disconnect(b)
        relay.advance(by: 20_000)
        loop.run()
        assertSound(relay)
        XCTAssertTrue(relay.isIdle)
    }

    /// Mail for a registered node, then a goodbye for idleness after the idle timeout, on the
    /// harness's clock; an acknowledgement from another key removes nothing.
    func testMailAndIdleSweepOnTheManualClock() throws {
        let relay = try RelayHarness(identity: relayKey, configuration: configuration(), startMs: startMs)
        let a = try XCTUnwrap(relay.connect(key: alice.publicKey, address: "198.51.100.1"))
        let b = try XCTUnwrap(relay.connect(key: bob.publicKey, address: "198.51.100.2"))
        relay.deliver(frame(.relayRegister, from: bob), on: b)
        var put = Tandem_V1_MailboxPut()
        put.requestID = 1
        put.recipient = Data(bob.publicKey)
        put.sealed = Data([UInt8](repeating: 9, count: 10))
        relay.deliver(frame(.mailboxPut, from: alice, try put.serializedBytes()), on: a)
        let stored = try Tandem_V1_RelayReply(serializedBytes: try XCTUnwrap(replies(a, .relayReply).first))
        XCTAssertEqual(stored.status, .ok)
        let item = try Tandem_V1_MailboxItem(serializedBytes: try XCTUnwrap(replies(b, .mailboxItem).first))
        XCTAssertEqual(item.itemID, stored.itemID)
        XCTAssertEqual(relay.server.mailbox.depth.bytes, 100, "a 10-byte item is charged the minimum")
        var ack = Tandem_V1_MailboxAck()
        ack.itemIds = [item.itemID]
        relay.deliver(frame(.mailboxAck, from: alice, try ack.serializedBytes()), on: a)
        XCTAssertEqual(relay.server.mailbox.depth.items, 1, "only the recipient acknowledges its items")
        relay.deliver(frame(.mailboxAck, from: bob, try ack.serializedBytes()), on: b)
        XCTAssertEqual(relay.server.mailbox.depth.items, 0)
        assertSound(relay)

        relay.advance(by: 60_000)
        relay.deliver(frame(.ping, from: bob), on: b)
        relay.advance(by: 61_000)
        XCTAssertTrue(a.isClosed, "alice was silent for 121 s")
        XCTAssertFalse(b.isClosed, "bob spoke 61 s ago")
        XCTAssertTrue(a.takeSent().contains { $0.0 == .relayGoodbye })
        assertSound(relay)
    }

    /// The mailbox's self-check sees rows past the quotas it runs with (a store written under
    /// larger quotas) and totals that disagree with the rows.
    func testMailboxViolationsSeeQuotasExceeded() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mailbox-\(UUID()).sqlite").path
        defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        let large = RelayMailbox.Quotas(itemsPerRecipient: 10, bytesPerRecipient: 10_000, itemsPerSender: 10, totalItems: 100,
                                        totalBytes: 100_000, itemBytes: 100, ttlMs: 60_000)
        do {
            let m = try RelayMailbox(path: path, quotas: large)
            try m.register(bob.publicKey, nowMs: startMs)
            for _ in 0..<3 { _ = try m.put(recipient: bob.publicKey, sender: alice.publicKey, source: "a", sealed: [1, 2, 3], nowMs: startMs) }
            XCTAssertEqual(try m.violations(), [])
        }
        let small = RelayMailbox.Quotas(itemsPerRecipient: 2, bytesPerRecipient: 10_000, itemsPerSender: 10, totalItems: 100,
                                        totalBytes: 100_000, itemBytes: 100, ttlMs: 60_000)
        let reopened = try RelayMailbox(path: path, quotas: small)
        let problems = try reopened.violations()
        XCTAssertEqual(problems.count, 1, "\(problems)")
        XCTAssertTrue(problems.first?.contains("a recipient holds 3 items") == true, "\(problems)")
    }

    /// A book driven to each of its limits and back stays sound at every step, and empty at the end.
    func testBookViolationsStayEmptyAtTheLimits() {
        var book = RelayBook(limits: .init(maximumClients: 3, maximumPending: 3, maximumPendingPerAddress: 2, maximumTunnelsPerClient: 1,
                                           tunnelJoinTimeoutMs: 10, maximumConnections: 4, maximumClientsPerAddress: 2,
                                           maximumTunnelsPerPair: 1, maximumMailboxJobs: 2, maximumMailboxJobsPerClient: 1))
        let keys = (1...3).map { [UInt8](repeating: $0, count: 32) }
        for i in 0..<3 {
            XCTAssertEqual(book.admit(address: i < 2 ? "x" : "y"), .admitted)
            book.leavePending(address: i < 2 ? "x" : "y")
            XCTAssertEqual(book.authenticated(UInt64(i), key: keys[i], address: i < 2 ? "x" : "y"), .accepted)
            _ = book.register(UInt64(i))
            XCTAssertEqual(book.violations(), [])
        }
        XCTAssertEqual(book.openTunnel(from: 0, to: keys[1], token: [1], nowMs: 0), .ready(target: 1))
        XCTAssertEqual(book.openTunnel(from: 0, to: keys[2], token: [2], nowMs: 0), .limit("at most 1 tunnels per client"))
        XCTAssertEqual(book.join(token: [1], connection: 10, nowMs: 1), .waiting)
        if case .paired = book.join(token: [1], connection: 11, nowMs: 1) {} else { XCTFail("not paired") }
        XCTAssertEqual(book.startMailboxJob(client: 2), .accepted)
        XCTAssertEqual(book.violations(), [])
        book.finishMailboxJob(client: 2)
        for i in 0..<3 { book.clientClosed(UInt64(i)); book.connectionClosed() }
        XCTAssertEqual(book.violations(), [])
        XCTAssertFalse(book.isEmpty, "the spliced tunnel outlives its links")
        book.dropTunnel([1])
        XCTAssertEqual(book.violations(), [])
        XCTAssertTrue(book.isEmpty)
    }
}
