import Foundation
import Logging
import NIOCore
import Sodium
import TandemNet
import TandemNode
import TandemProtocol
import TandemRelay

/// The second act of `tandem demo`: two nodes that know no address of each other meet through a
/// tandem-relay, focus together through an end-to-end encrypted tunnel, and leave mail for each
/// other while one is away. Everything on loopback, in this process.
enum RelayDemoScenario {
    static func run(say: @escaping @Sendable (String) -> Void) async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tandem-relay-demo-\(getpid())-\(Sodium.randomUInt64() % 100_000)")
        defer { try? FileManager.default.removeItem(at: root) }
        var logger = Logger(label: "demo")
        logger.logLevel = .critical

        say("")
        say("Part two: Carol and Dave live in different cities. Their nodes share no LAN and know no address of")
        say("each other; both can reach a tandem-relay.")
        var relayConfig = RelayConfiguration()
        relayConfig.listenHost = "127.0.0.1"
        relayConfig.listenPort = 0
        let relay = RelayServer(identity: SigningKeyPair.generate(), configuration: relayConfig,
                                mailbox: try RelayMailbox(path: nil, quotas: .init(
                                    itemsPerRecipient: 256, bytesPerRecipient: 1 << 20, itemsPerSender: 64, totalItems: 10_000,
                                    totalBytes: 64 << 20, itemBytes: 16 * 1024, ttlMs: 7 * 86_400_000)),
                                logger: logger)
        let carolDir = DataDirectory(url: root.appendingPathComponent("carol"))
        let daveDir = DataDirectory(url: root.appendingPathComponent("dave"))
        let carol = try IdentityFile.create(in: carolDir)
        let dave = try IdentityFile.create(in: daveDir)
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.discovery = nil

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await relay.run() }
            let bound = try await relay.boundAddress
            let relayAddress = try RelayAddress(parsing: relay.address(bound: bound))
            say("15. The relay has its own identity; operators hand out its address: \(relayAddress.id.short)…@\(relayAddress.host):\(relayAddress.port)")

            let carolNode = try NodeRuntime(identity: carol, configuration: config, dataDirectory: carolDir, logger: logger)
            var daveNode = try NodeRuntime(identity: dave, configuration: config, dataDirectory: daveDir, logger: logger)
            try await carolNode.friends.setName("Carol")
            try await daveNode.friends.setName("Dave")
            let c = DemoNode(name: "Carol", node: carolNode, events: carolNode.eventBus.subscribe(since: nil))
            var d = DemoNode(name: "Dave", node: daveNode, events: daveNode.eventBus.subscribe(since: nil))
            let carolTask = Task { try await carolNode.run(signals: false) }
            let firstDave = daveNode
            var daveTask = Task { try await firstDave.run(signals: false) }
            defer { carolTask.cancel(); daveTask.cancel() }

            for side in [c, d] {
                _ = try await side.call("relay.add", ["address": .string(relayAddress.description)])
            }
            for side in [c, d] { _ = try await DemoScenario.next(side.events, "relay.connected", [:]) }
            say("16. Both add it (`tandem relay add ID@host:port`); each node keeps one authenticated link to it,")
            say("    proven with the relay's key in the Secret Handshake, and registers there as its home.")

            let share = try await d.call("node.share", [:])["share"]?.stringValue ?? ""
            say("17. Dave sends Carol his share code (`tandem id --share`), one string with his ID and his relay:")
            say("    \(share.prefix(38))…\(share.suffix(24))")
            _ = try await c.call("friend.request", ["id": .string(share), "message": .string("Focus buddies across the map?")])
            _ = try await DemoScenario.next(d.events, "friend.request.received", ["id": carolNode.id.canonical])
            say("    Carol's node asks the relay for a tunnel to Dave; both nodes open a fresh connection to the relay,")
            say("    which splices them, and run their own Secret Handshake through it: the relay forwards ciphertext only.")
            _ = try await d.call("friend.accept", ["id": .string(carolNode.id.canonical)])
            _ = try await DemoScenario.next(c.events, "friend.accepted", ["id": daveNode.id.canonical])
            let list = try await c.call("friend.list", [:])
            let via = list["friends"]?.arrayValue?.first?["via"]?.stringValue ?? "?"
            say("    Dave accepts. `tandem friend list` on Carol's side: Dave, online, via \(via).")

            say("18. Carol invites Dave to focus for 4 seconds; Dave gives up after 2. The notice crosses the relay:")
            try await DemoScenario.challenge(inviter: c, invitee: d, durationMs: 4000, message: "through the relay",
                                             quitter: d, quitAfterSeconds: 2, say: say)

            say("19. Dave's node stops (his laptop is closed). Carol invites him anyway.")
            daveTask.cancel()
            _ = try? await daveTask.value
            _ = try await DemoScenario.next(c.events, "peer.offline", ["id": daveNode.id.canonical])
            let invite = try await c.call("challenge.invite", ["ids": [.string(daveNode.id.canonical)], "duration_ms": .int(60_000),
                                                               "start_in_ms": .int(600_000), "message": .string("tomorrow morning?")])
            let challengeID = invite["id"]?.stringValue ?? ""
            _ = try await DemoScenario.next(c.events, "outbox.deposited", ["to": daveNode.id.canonical])
            // And a message: durable in her outbox when the command returns, then mail like the invite.
            let text = "if not tomorrow, Thursday?"
            let sent = try await c.call("message.send", ["to": .string(daveNode.id.canonical), "text": .string(text)])
            let messageID = sent["id"]?.stringValue ?? ""
            _ = try await DemoScenario.next(c.events, "outbox.deposited", ["message_id": messageID])
            say("    The relay says Dave is offline, so Carol's node seals the signed invite to Dave's key and leaves it")
            say("    in his mailbox there; so does the message she writes him (`tandem message send Dave \"\(text)\"`):")
            say("    the relay holds \(relay.mailbox.depth.items) items it cannot read, and Carol's message shows `sent`, not yet delivered.")

            daveNode = try NodeRuntime(identity: dave, configuration: config, dataDirectory: daveDir, logger: logger)
            d = DemoNode(name: "Dave", node: daveNode, events: daveNode.eventBus.subscribe(since: nil))
            let restarted = daveNode
            daveTask = Task { try await restarted.run(signals: false) }
            _ = try await DemoScenario.next(d.events, "challenge.invited", ["id": challengeID])
            _ = try await DemoScenario.next(d.events, "message.received", ["id": messageID])
            // The acknowledgement reaches the relay a moment later.
            for _ in 0..<100 where relay.mailbox.depth.items > 0 { try await Task.sleep(for: .milliseconds(20)) }
            say("    Dave's node starts again, registers, and gets the mail: the invite (“tomorrow morning?”) shows up once;")
            say("    his node acknowledges it and the relay forgets it (mailbox now holds \(relay.mailbox.depth.items)).")
            let shown = try await d.call("message.list", ["friend": .string(carolNode.id.canonical)])["messages"]?.arrayValue ?? []
            let received = try await d.call("events.list", ["types": ["message.received"], "limit": 100])["events"]?.arrayValue?.count ?? 0
            say("    Dave reads Carol's message (`tandem message list Carol`), once: \(shown.count) shown, \(received) received event:")
            for m in shown { say("      Carol: “\(ChatText.terminalSafe(m["text"]?.stringValue ?? ""))”") }
            _ = try await DemoScenario.next(c.events, "message.delivered", ["id": messageID])
            say("    His node answers the mail with a signed DELIVERED receipt; Carol's message is now `delivered`.")

            let m = relay.metrics.snapshot
            say("20. The relay's counters (also at /metrics): tunnels \(m.tunnelsOpened), bytes of ciphertext relayed \(m.bytesRelayed),")
            say("    mail items stored \(m.mailboxStored), delivered \(m.mailboxDelivered).")
            daveTask.cancel()
            carolTask.cancel()
            _ = try? await daveTask.value
            _ = try? await carolTask.value
            tasks.cancelAll()
            _ = try? await tasks.next()
        }
        say("21. The relay and both nodes shut down. Done.")
    }
}
