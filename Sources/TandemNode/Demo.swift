import Foundation
import TandemKeys
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemProtocol
import TandemNodeCore
import NodeFriends
import NodeChallenges
import NodeBackup
import NodeVault
import NodeFocus
#if canImport(Glibc)
import Glibc
#endif

/// `tandem demo`: two throwaway nodes on loopback, told as a story: they find each other, become
/// friends, prove who they are, focus together (both countdowns side by side), one quits early,
/// and both end up with the same co-signed ledger.
public enum DemoScenario {
    public static func run(say: @escaping @Sendable (String) -> Void) async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tandem-demo-\(getpid())-\(Sodium.randomUInt64() % 100_000)")
        defer { try? FileManager.default.removeItem(at: root) }  // a temporary directory
        var logger = Logger(label: "demo")
        logger.logLevel = .critical

        say("Tandem demo: two nodes, Alice and Bob, on this machine (loopback only).")
        let aliceDir = DataDirectory(url: root.appendingPathComponent("alice"))
        let bobDir = DataDirectory(url: root.appendingPathComponent("bob"))
        try IdentityFile.create(in: aliceDir)
        try IdentityFile.create(in: bobDir)
        let alice = try IdentityFile.load(from: aliceDir)
        let bob = try IdentityFile.load(from: bobDir)
        let aliceID = NodeID(publicKey: alice.publicKey), bobID = NodeID(publicKey: bob.publicKey)
        say("1. Each gets a fresh Ed25519 identity in a temporary data directory:")
        say("   Alice  \(aliceID.display)")
        say("   Bob    \(bobID.display)")

        // Loopback has no broadcast address, so each node's beacons go straight to the other's
        // discovery port; on a real LAN they go to every interface's broadcast address.
        let (alicePort, bobPort) = (try freeUDPPort(), try freeUDPPort())
        func config(discoveryPort: Int, target: Int) throws -> NodeConfiguration {
            var c = NodeConfiguration()
            c.host = "127.0.0.1"
            c.port = 0
            var d = DiscoveryConfiguration()
            d.bindHost = "127.0.0.1"
            d.port = discoveryPort
            d.interval = .milliseconds(300)
            d.targets = [try SocketAddress(ipAddress: "127.0.0.1", port: target)]
            c.discovery = d
            return c
        }
        var aliceConfig = try config(discoveryPort: alicePort, target: bobPort)
        // Alice's site block goes into a hosts file of the demo's own, not /etc/hosts.
        let aliceHosts = root.appendingPathComponent("alice-hosts")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try "127.0.0.1 localhost\n".write(to: aliceHosts, atomically: true, encoding: .utf8)
        aliceConfig.focus.hostsFile = aliceHosts.path
        let aliceNode = try NodeRuntime(identity: alice, configuration: aliceConfig,
                                        dataDirectory: aliceDir, logger: logger)
        let bobNode = try NodeRuntime(identity: bob, configuration: try config(discoveryPort: bobPort, target: alicePort),
                                      dataDirectory: bobDir, logger: logger)
        try await aliceNode.friends.setName("Alice")
        try await bobNode.friends.setName("Bob")
        let aliceEvents = aliceNode.eventBus.subscribe(since: nil)
        let bobEvents = bobNode.eventBus.subscribe(since: nil)

        // Alice's node runs until the demo ends or until the vault scene "loses" it (`stopAlice`).
        let (aliceStop, stopAlice) = AsyncStream<Void>.makeStream()
        let (aliceGone, aliceEnded) = AsyncStream<Void>.makeStream()
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                defer { aliceEnded.yield(); aliceEnded.finish() }
                try await withThrowingTaskGroup(of: Void.self) { own in
                    own.addTask { try await aliceNode.run(signals: false) }
                    for await _ in aliceStop { break }  // also ends when the demo's group is cancelled
                    own.cancelAll()
                    try await own.waitForAll()
                }
            }
            tasks.addTask { try await bobNode.run(signals: false) }
            let aliceAddr = try await aliceNode.listener.boundAddress
            let bobAddr = try await bobNode.listener.boundAddress
            say("2. Both nodes start: Alice listens at \(aliceAddr.hostPort), Bob at \(bobAddr.hostPort), and each sends")
            say("   signed UDP beacons so nodes nearby can find it. Nobody tells either node where the other is.")

            let seen = try await next(bobEvents, "peer.discovered", ["id": aliceID.canonical])
            say("3. Bob's node hears Alice's beacon: \(seen.fields["name"]?.stringValue ?? "?") at \(seen.fields["address"]?.stringValue ?? "?").")

            _ = try await bobNode.friends.request(alice.publicKey, message: "Focus together this week?", address: nil)
            say("4. Bob sends Alice a friend request (stored in his outbox first, then delivered over the link).")
            let req = try await next(aliceEvents, "friend.request.received", ["id": bobID.canonical])
            say("   Alice's node checks the signature and shows it: \(req.fields["name"]?.stringValue ?? "?") asks “\(req.fields["message"]?.stringValue ?? "")”.")

            _ = try await aliceNode.friends.accept(bob.publicKey)
            _ = try await next(bobEvents, "friend.accepted", ["id": aliceID.canonical])
            _ = try await next(bobEvents, "peer.online", ["id": aliceID.canonical])
            say("5. Alice accepts. Bob's node gets her signed answer: they are friends, and each sees the other online.")
            say("   From now on their beacons are private: only a friend can tell who sent them.")

            let (link, waiter) = try await aliceNode.connect(host: "127.0.0.1", port: bobAddr.port!, to: bobID)
            say("6. Every connection starts with the Secret Handshake (both identities proven, Tandem network key);")
            say("   then every byte is encrypted with box-stream. Alice pings Bob over a fresh link:")
            for i in 1...3 {
                let (rtt, _) = try await waiter.ping()
                say("   signed PING #\(i) → signed PONG in \(formatDuration(rtt))")
            }

            // A replayed frame is refused.
            var ping = Tandem_V1_Ping()
            ping.nonce = 7
            ping.sentAtMs = wallClockMilliseconds()
            let frame = Envelope.sign(type: .ping, author: alice, recipient: bob.publicKey,
                                      createdAt: wallClockMilliseconds(), payload: try ping.serializedBytes())
            let errorSeen = RejectionCatcher(eventLoop: link.channel.eventLoop)
            waiter.onError = { errorSeen.record($0) }
            try await link.send(frame).get()
            try await link.send(frame).get()
            let code = try await errorSeen.first.futureResult.get()
            say("7. Alice sends the very same signed frame twice: Bob answers the first and rejects the copy (\(code)).")
            link.close()

            // The challenges go through the same control methods the CLI calls over the socket.
            let a = DemoNode(name: "Alice", node: aliceNode, events: aliceEvents)
            let b = DemoNode(name: "Bob", node: bobNode, events: bobEvents)
            say("8. Alice invites Bob to focus together for 5 seconds (`tandem challenge invite`).")
            try await challenge(inviter: a, invitee: b, durationMs: 5000, message: "5 seconds, no phone", say: say)

            say("9. Now Bob invites Alice, and this time Bob gives up early (`tandem challenge quit`).")
            try await challenge(inviter: b, invitee: a, durationMs: 5000, message: "one more?", quitter: b, quitAfterSeconds: 2, say: say)

            try showLedgers(a, b, say: say)

            try await messageDemo(a, b, root: root, say: say)

            try await focusDemo(a, hosts: root.appendingPathComponent("alice-hosts"), say: say)

            let restored = try await vaultDemo(a, b, bobPort: bobAddr.port ?? 0, root: root, logger: logger, say: say) {
                stopAlice.yield()
                for await _ in aliceGone { break }
                try? FileManager.default.removeItem(at: aliceDir.url)  // gone with the laptop; the check below says if not
            }
            say("    Alice's data directory is gone: \(FileManager.default.fileExists(atPath: aliceDir.url.path) ? "NOT removed?!" : "yes").")
            tasks.addTask { try await restored.node.run(signals: false) }
            try await reopen(restored, ledgerEntries: try bobNode.store.ledger().count, say: say)

            let m = bobNode.metrics.snapshot
            say("13. Bob's counters: \(m.handshakesSucceeded) handshakes, \(m.framesAccepted) frames accepted, \(m.framesRejected.values.reduce(0, +)) rejected.")
            tasks.cancelAll()
            _ = try? await tasks.next()  // the demo reports by its own checks
        }
        say("14. Both nodes shut down and their temporary data directories are removed. Done.")
    }

    /// Local focus with an object key: Alice enrols a mug from depth frames (generated here, as a
    /// depth camera would give them), locks a mode with it (the hosts file gets the block), a box is
    /// refused, the mug opens it again.
    static func focusDemo(_ a: DemoNode, hosts: URL, say: @escaping @Sendable (String) -> Void) async throws {
        func frames(_ shape: String, _ seed: UInt64, _ count: Int) -> [JSONValue] {
            guard let s = SyntheticShapes.named(shape) else { return [] }
            return (0..<count).map { i in
                .string(Data(KeyFrameWire.encode(SyntheticShapes.view(of: s, seed: seed + UInt64(i), points: 6000))).base64EncodedString())
            }
        }
        func present(_ method: String, _ frames: [JSONValue], _ extra: [String: JSONValue]) async throws -> JSONValue {
            let session = hexString(Sodium.randomBytes(8))
            for f in frames {
                var p = extra
                p["session"] = .string(session)
                p["frame_b64"] = f
                let r = try await a.call(method, .object(p))
                if r["done"]?.boolValue == true { return r }
            }
            var p = extra
            p["session"] = .string(session)
            p["last"] = true
            return try await a.call(method, .object(p))
        }
        func block() -> [String] {
            ((try? String(contentsOf: hosts, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init).filter { $0.contains("news.example") }  // no file: nothing blocked
        }
        say("11. Local focus: Alice enrols her mug as a key from 10 depth frames (`tandem key enroll mug --object …`),")
        let enrolled = try await present("key.enroll", frames("mug", 100, 10), ["name": "mug"])
        say("    \(enrolled["good_frames"]?.intValue ?? 0) good frames; the template is encrypted at rest. Mode deep blocks news.example:")
        _ = try await a.call("mode.create", ["name": "deep", "block_sites": ["news.example"], "main_key": "mug"])
        _ = try await present("lock.lock", frames("mug", 500, 8), ["mode": "deep"])
        say("    locked with the mug; her hosts file now holds \(block().joined(separator: ", ")).")
        do {
            _ = try await present("lock.unlock", frames("box-2-3-4", 900, 4), [:])
        } catch {
            say("    A box is shown instead: refused (\(ControlError.from(error).message)).")
        }
        _ = try await present("lock.unlock", frames("mug", 800, 8), [:])
        say("    The mug again: unlocked, and the block is gone (\(block().isEmpty ? "no news.example line left" : "still there?!")).")
    }

    /// The vault and its backup at a friend: Alice puts two files in her vault (PIN-locked,
    /// encrypted), Bob offers space and her node pushes a snapshot he cannot read; then her laptop
    /// is lost (`lose` stops her node and removes its data directory) and a fresh directory becomes
    /// her node again from the recovery code she wrote down and Bob's copy. Returns the restored
    /// node, not yet running.
    static func vaultDemo(_ a: DemoNode, _ b: DemoNode, bobPort: Int, root: URL, logger: Logger,
                          say: @escaping @Sendable (String) -> Void, lose: () async throws -> Void) async throws -> DemoNode {
        let pin = "482916"
        let files = root.appendingPathComponent("alice-files")
        try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
        let contents: [(String, Data)] = [("passport-scan.bin", Data(Sodium.randomBytes(300_000))),
                                          ("diary.txt", Data(String(repeating: "Day 12: focused 50 minutes with Bob.\n", count: 200).utf8))]
        for (name, data) in contents { try data.write(to: files.appendingPathComponent(name)) }

        let created = try await a.call("vault.init", ["pin": .string(pin)])
        let code = created["recovery_code"]?.stringValue ?? ""
        say("12. Alice's vault (`tandem vault init`): encrypted files behind a PIN. Her node prints the recovery code")
        say("    once — she writes it down: \(code)")
        let last = NIOLockedValueBox(JSONValue.null)  // the stream's final item
        try await a.node.router.stream("vault.import", ["pin": .string(pin),
                                                         "paths": .array(contents.map { .string(files.appendingPathComponent($0.0).path) })]) {
            if let result = $0["result"] { last.withLockedValue { $0 = result } }
        }
        let names = last.withLockedValue { $0 }["items"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
        say("    She imports \(names.count) files (\(names.joined(separator: ", "))): sealed in packs, names and all.")

        _ = try await b.call("backup.offer", ["id": .string(a.node.id.canonical), "quota_bytes": .int(64 << 20)])
        _ = try await next(a.events, "backup.offer.received", ["from": b.node.id.canonical])
        say("    Bob offers to keep her backups, up to 64 MiB (`tandem backup offer Alice --quota 64MiB`).")
        try await a.node.router.stream("backup.push", ["to": .string(b.node.id.canonical)]) { item in
            if item["result"] != nil { last.withLockedValue { $0 = item } }
        }
        let pushed = last.withLockedValue { $0 }
        let held = try await next(b.events, "backup.held", ["owner": a.node.id.canonical])
        say("    Her node pushes a snapshot to Bob (`tandem backup push`): \(held.fields["blobs"]?.intValue ?? 0) blobs, "
            + "\((pushed["result"]?["bytes_sent"]?.intValue ?? 0) / 1024) KiB sent —")
        say("    ciphertext under keys Bob never has, plus her recovery kit, sealed to her recovery code.")

        try await lose()
        say("    Alice's laptop is lost: her node stops and its data directory is deleted.")
        let restoredDir = DataDirectory(url: root.appendingPathComponent("alice-restored"))
        let client = RestoreClient(group: MultiThreadedEventLoopGroup.singleton, logger: logger)
        let report = try await client.run(.init(holder: b.node.id, host: "127.0.0.1", port: bobPort,
                                                code: try RecoveryCode(parsing: code), dataDirectory: restoredDir)) { _ in }
        say("    On a new machine: `tandem restore --from <Bob's address>`, and she types the code. From Bob's copy come")
        say("    her identity \(report.id == a.node.id ? "(the same ID)" : "(A DIFFERENT ID?!)"), \(report.friends) friend\(report.friends == 1 ? "" : "s"), "
            + "\(report.ledgerEntries) ledger entries and the vault: \(report.items) items, \(report.bytes / 1024) KiB, every blob checked.")
        if !report.freshness.isEmpty { say("    \(report.freshness)") }

        let identity = try IdentityFile.load(from: restoredDir)
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let node = try NodeRuntime(identity: identity, configuration: config, dataDirectory: restoredDir, logger: logger)
        return DemoNode(name: "Alice", node: node, events: node.eventBus.subscribe(since: nil))
    }

    /// The restored node, running: the vault opens with the old PIN and holds the same files, the
    /// ledger is the one Bob has.
    static func reopen(_ a: DemoNode, ledgerEntries: Int, say: @escaping @Sendable (String) -> Void) async throws {
        _ = try await a.node.listener.boundAddress
        _ = try await a.call("vault.unlock", ["pin": "482916"])
        let items = try await a.call("vault.list", [:])["items"]?.arrayValue ?? []
        let names = items.compactMap { $0["name"]?.stringValue }.sorted()
        let ledger = try a.node.store.ledger().count
        say("    Her restored node starts: the old PIN opens the vault (\(names.joined(separator: ", "))), and her ledger has")
        say("    \(ledger) entries, \(ledger == ledgerEntries ? "the same as Bob's" : "NOT the same as Bob's (\(ledgerEntries))").")
    }

    /// One challenge between two friends: invite, accept, both countdowns printed side by side
    /// once a second until the end; `quitter` (when set) quits `quitAfterSeconds` in. Returns
    /// once both nodes have written the co-signed outcome to their ledgers.
    public static func challenge(inviter: DemoNode, invitee: DemoNode, durationMs: Int64, message: String,
                          quitter: DemoNode? = nil, quitAfterSeconds: Int = 0,
                          say: @escaping @Sendable (String) -> Void) async throws {
        let invite = try await inviter.call("challenge.invite", ["ids": [.string(invitee.node.id.canonical)],
                                                                 "duration_ms": .int(durationMs), "message": .string(message)])
        guard let id = invite["id"]?.stringValue else { throw NodeError.failed("the invite has no id") }
        let match = ["id": id]
        let invited = try await next(invitee.events, "challenge.invited", match)
        say("   \(invitee.name)'s node receives the signed invite (“\(invited.fields["message"]?.stringValue ?? "")”, " +
            "\((invited.fields["duration_ms"]?.intValue ?? 0) / 1000) s), and \(invitee.name) accepts (`tandem challenge accept`).")
        _ = try await invitee.call("challenge.accept", ["id": .string(id)])
        _ = try await next(inviter.events, "challenge.scheduled", match)
        let scheduled = try await next(invitee.events, "challenge.scheduled", match)
        let offset = Double(scheduled.fields["offset_us"]?.intValue ?? 0) / 1000
        say("   \(inviter.name)'s node fixes the start 2 s ahead on its own clock and sends it. \(invitee.name)'s node has measured")
        say(String(format: "   %@'s clock over the link (%+.3f ms from its own: same machine here; across a LAN it may be", inviter.name, offset))
        say("   seconds off) and sets its timer on its monotonic clock for the same instant.")

        let startedA = try await next(inviter.events, "challenge.started", match)
        let startedB = try await next(invitee.events, "challenge.started", match)
        say("   Both countdowns start \(gap(startedA, startedB)) apart:")
        let startMono = startedA.fields["mono_us"]?.intValue ?? monotonicMicros()
        let width = max(inviter.name.count, invitee.name.count)
        for second in 0..<Int(durationMs / 1000) {
            // A little after each whole second, so a display rounds to the second it shows.
            let wait = startMono + Int64(second) * 1_000_000 + 100_000 - monotonicMicros()
            if wait > 0 { try await Task.sleep(for: .microseconds(wait)) }
            if let quitter, second == quitAfterSeconds {
                let other = quitter.node === inviter.node ? invitee : inviter
                _ = try await quitter.call("challenge.quit", ["id": .string(id), "reason": "a phone call"])
                let quit = try await next(quitter.events, "challenge.quit", match)
                let told = try await next(other.events, "challenge.partner.quit", match)
                say("   \(quitter.name) quits (“a phone call”). \(other.name)'s node is told at once: \(gap(quit, told)) after")
                say("   \(quitter.name)'s own node recorded it. \(other.name) keeps going.")
            }
            var cells: [String] = []
            for side in [inviter, invitee] {
                cells.append(countdownCell(try await side.call("challenge.show", ["id": .string(id)]), name: side.name, width: width))
            }
            say(countdownLine(cells, nameWidth: width))
        }
        let endedA = try await next(inviter.events, "challenge.ended", match)
        let endedB = try await next(invitee.events, "challenge.ended", match)
        say(countdownLine([(inviter, endedA), (invitee, endedB)].map { side, ended in
            "\(pad(side.name, width)) \(clock(0)) \(bar(0)) \(ended.fields["result"]?.stringValue ?? "?")"
        }, nameWidth: width))
        say("   Both end \(gap(endedA, endedB)) apart. Each node signs its view of the outcome and sends it to the other;")
        _ = try await next(inviter.events, "ledger.appended", ["challenge_id": id])
        _ = try await next(invitee.events, "ledger.appended", ["challenge_id": id])
        say("   once both signatures are on the same record, each node appends it to its ledger.")
    }

    /// "Alice 00:04 [########..]", or "Bob   quit after 00:02", from a `challenge.show` answer.
    static func countdownCell(_ c: JSONValue, name: String, width: Int) -> String {
        if c["result"]?.stringValue == "quit" {
            let me = c["participants"]?.arrayValue?.first { $0["me"]?.boolValue == true }
            return "\(pad(name, width)) quit after \(clock(me?["quit_elapsed_ms"]?.intValue ?? 0))"
        }
        let remaining = c["remaining_ms"]?.intValue ?? 0, duration = max(1, c["duration_ms"]?.intValue ?? 1)
        return "\(pad(name, width)) \(clock(remaining)) \(bar(Double(remaining) / Double(duration)))"
    }

    /// Countdown cells side by side, in columns as wide as "Alice 00:00 [..........] completed".
    static func countdownLine(_ cells: [String], nameWidth: Int) -> String {
        let line = "   " + cells.map { pad($0, nameWidth + 29) }.joined(separator: "   ")
        return String(line.reversed().drop(while: { $0 == " " }).reversed())
    }

    static func pad(_ text: String, _ width: Int) -> String { text.padding(toLength: max(width, text.count), withPad: " ", startingAt: 0) }

    /// mm:ss, rounded to the nearest second.
    static func clock(_ ms: Int64) -> String {
        let s = (max(0, ms) + 500) / 1000
        return String(format: "%02d:%02d", s / 60, s % 60)
    }

    /// A 10-cell bar of the time left.
    static func bar(_ fraction: Double) -> String {
        let full = Int((min(1, max(0, fraction)) * 10).rounded())
        return "[" + String(repeating: "#", count: full) + String(repeating: ".", count: 10 - full) + "]"
    }

    /// How far apart two events happened, by their CLOCK_MONOTONIC stamps (`mono_us`).
    static func gap(_ a: NodeEvent, _ b: NodeEvent) -> String {
        let us = abs((a.fields["mono_us"]?.intValue ?? 0) - (b.fields["mono_us"]?.intValue ?? 0))
        return formatDuration(.microseconds(us))
    }

    /// Both ledgers, entry by entry: the record, each signature (checked), the chained hashes;
    /// then whether the two ledgers are identical and whether each verifies.
    static func showLedgers(_ a: DemoNode, _ b: DemoNode, say: @escaping @Sendable (String) -> Void) throws {
        let names = [a.node.identity.publicKey: a.name, b.node.identity.publicKey: b.name]
        func name(_ key: [UInt8]) -> String { names[key] ?? NodeID(publicKey: key).short }
        let ledgerA = try a.node.store.ledger().map(\.entry), ledgerB = try b.node.store.ledger().map(\.entry)
        say("10. \(a.name)'s ledger (`tandem ledger`): one entry per challenge, co-signed, each hash chained to the one before.")
        for e in ledgerA {
            guard let r = Outcome.decode(e.record) else { continue }
            say("   #\(e.seq)  challenge \(hexString(r.challengeID).prefix(8)), \(r.durationMs / 1000) s, invited by \(name(Array(r.inviter)))")
            for o in r.outcomes {
                let result: String
                switch o.result {
                case .quit: result = "quit after \(clock(Int64(o.elapsedMs))) (“\(o.reason)”)"
                case .completed: result = "completed"
                case .outOfContact: result = "out of contact"
                case .unspecified, .UNRECOGNIZED(_): result = "?"
                }
                say("       \(name(Array(o.publicKey)).padding(toLength: 6, withPad: " ", startingAt: 0)) \(result)")
            }
            for s in e.signatures {
                let valid = Outcome.verify(e.record, signature: s.signature, by: s.key)
                say("       signed by \(pad(name(s.key) + ":", 6)) \(hexString(s.signature).prefix(24))…  \(valid ? "valid" : "INVALID")")
            }
            say("       hash \(hexString(e.hash).prefix(24))…  previous \(hexString(e.previousHash).prefix(24))…")
        }
        let same = ledgerA == ledgerB
        say("   \(b.name)'s ledger: \(ledgerB.count) entries, " + (same
            ? "identical: the same records, signatures and hashes (head \(hexString(ledgerB.last?.hash ?? []).prefix(24))…)."
            : "DIFFERENT from \(a.name)'s."))
        for (side, ledger) in [(a, ledgerA), (b, ledgerB)] {
            let broken = Ledger.verify(ledger)
            say("   `tandem ledger verify` on \(side.name)'s node: " + (broken.map { "BROKEN at \($0)" }
                ?? "every hash and every signature holds, and everyone who completed signed."))
        }
    }

    /// Bob cheers Alice's result in their first ledger entry; Alice answers with a message, which
    /// is delivered once Bob's node has stored it.
    static func messageDemo(_ a: DemoNode, _ b: DemoNode, root: URL, say: @escaping @Sendable (String) -> Void) async throws {
        let entries = try await b.call("ledger.list", .object([:]))["entries"]?.arrayValue ?? []
        guard let first = entries.first?["seq"]?.intValue else { return }
        say("    \(b.name) cheers \(a.name)'s result in entry #\(first) (`tandem cheer \(first) \"well done\"`):")
        _ = try await b.call("message.cheer", .object(["entry": .int(first), "text": "well done"]))
        let cheer = try await next(a.events, "message.cheer", [:])
        say("    \(a.name)'s node stores it beside the entry: \(ChatText.terminalSafe(cheer.fields["emoji"]?.stringValue ?? "")) from "
            + "\(b.name), “\(ChatText.terminalSafe(cheer.fields["text"]?.stringValue ?? ""))”.")
        let text = "thanks! same time tomorrow?"
        let started = ContinuousClock.now
        let sent = try await a.call("message.send", .object(["to": .string(b.node.id.canonical), "text": .string(text)]))
        let id = sent["id"]?.stringValue ?? ""
        _ = try await next(b.events, "message.received", ["id": id])
        _ = try await next(a.events, "message.delivered", ["id": id])
        let took = ContinuousClock.now - started
        let ms = Double(took.components.seconds) * 1000 + Double(took.components.attoseconds) / 1e15
        say("    \(a.name) writes back (`tandem message send Bob \"\(text)\"`): stored in her outbox, delivered over the link,")
        say(String(format: "    stored by %@'s node, which acknowledges only after its commit: delivered %.1f ms after sending.", b.name, ms))

        let path = root.appendingPathComponent("tomorrow.md")
        let body = Data(String(repeating: "- 09:00 focus 50 minutes\n- 09:50 walk, no phone\n", count: 2_500).utf8)
        try body.write(to: path)
        _ = try await a.call("message.send_file", .object(["to": .string(b.node.id.canonical), "path": .string(path.path),
                                                           "text": "the plan for tomorrow"]))
        let got = try await next(b.events, "message.file_received", ["name": "tomorrow.md"])
        let same = got.fields["path"]?.stringValue.flatMap { FileManager.default.contents(atPath: $0) } == body
        say("    She sends a file too (`tandem message send Bob --file tomorrow.md`): offered first, then fetched by \(b.name)'s")
        say("    node (within his auto-accept limit) chunk by chunk, each checked against the offer's hash tree:")
        say("    \(body.count / 1024) KiB, \(same ? "byte for byte the same" : "DIFFERENT?!") in his downloads folder.")
    }

    /// Waits for the next event of `type` whose fields include `match`.
    public static func next(_ events: AsyncStream<NodeEvent>, _ type: String, _ match: [String: String],
                     timeout: Duration = .seconds(20)) async throws -> NodeEvent {
        try await withThrowingTaskGroup(of: NodeEvent?.self) { group in
            group.addTask {
                for await e in events where e.type == type {
                    if match.allSatisfy({ e.fields[$0.key]?.stringValue == $0.value }) { return e }
                }
                return nil
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let event = first else {
                throw NodeError.timedOut("the demo timed out waiting for \(type)")
            }
            return event
        }
    }

    /// A UDP port that was free a moment ago.
    static func freeUDPPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw NodeError.failed("cannot open a UDP socket") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bind(fd, sa, len) == 0 && getsockname(fd, sa, &len) == 0
            }
        }
        guard ok else { throw NodeError.failed("cannot find a free UDP port") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    public static func formatDuration(_ d: Duration) -> String {
        let us = Double(d.components.seconds) * 1e6 + Double(d.components.attoseconds) / 1e12
        if us < 1000 { return String(format: "%.0f µs", us) }
        return String(format: "%.2f ms", us / 1000)
    }
}

/// One node of the demo, its name and its event stream.
public struct DemoNode: Sendable {
    public let name: String
    public let node: NodeRuntime
    public let events: AsyncStream<NodeEvent>

    public init(name: String, node: NodeRuntime, events: AsyncStream<NodeEvent>) {
        self.name = name
        self.node = node
        self.events = events
    }

    /// Calls a control method in-process, with the same parameters the CLI sends over the socket.
    public func call(_ method: String, _ params: JSONValue) async throws -> JSONValue {
        guard case .unary(let handler)? = node.router.entry(method) else { throw NodeError.failed("no control method \(method)") }
        return try await handler(params)
    }
}

/// Completes with the first ERROR code a peer reports.
final class RejectionCatcher: Sendable {
    let first: EventLoopPromise<String>
    private let done = NIOLockedValueBox(false)
    init(eventLoop: EventLoop) {
        self.first = eventLoop.makePromise()
    }
    func record(_ error: Tandem_V1_Error) {
        let isFirst = done.withLockedValue { done in
            defer { done = true }
            return !done
        }
        if isFirst { first.succeed(error.code.name) }
    }
}
