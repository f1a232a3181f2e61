import Foundation
import NIOCore
import NIOEmbedded
import Sodium
import SwiftProtobuf
import TandemProtocol
import TandemRelay

// The "relay" target: structure-aware, over the relay's own frame handling (RelayHarness: the real
// RelayServer with an in-memory mailbox, a manual clock, mailbox jobs inline, recording client
// links). Each input is a sequence of steps: clients (six keys, three addresses) connect and
// disconnect; they send well-formed, correctly signed RELAY_REGISTER, TUNNEL_OPEN, MAILBOX_PUT,
// MAILBOX_ACK (and PING, PONG, ERROR, types a relay does not handle, payloads that do not parse)
// with fuzzer-chosen field values (request ids and item ids at the edges of uint64, targets and
// recipients that are members, strangers, oneself, the relay or not keys at all, empty and
// oversize mail); tunnel ends join with tokens the relay handed out (or made up) on in-memory
// channels through the relay's front handler, join and splice code; the clock moves (forwards
// and backwards, past the join, idle, registration and mail time limits); the mailbox jobs those
// frames queue run when the input says (so the queue fills, and jobs outlive their links).
// Invariants after every step: the book's and the mailbox's own checks (RelayBook.violations,
// RelayMailbox.violations: counters agree with what they count, no quota exceeded, nothing stored
// that a put would refuse), every frame the relay sent parses and goes to whom it should
// (RELAY_REGISTERED only once the key's registration is on disk, MAILBOX_ITEM only the
// recipient's own items, TUNNEL_INCOMING only on a home link, replies only to request ids the
// client used, a goodbye closes the link), every join answered at most once. After the input,
// everything closes and the relay must hold nothing.

extension FuzzTarget {
    static let relay = FuzzTarget(name: "relay",
                                  summary: "signed relay frames, connects, tunnel joins and clock jumps into a relay's handlers (in-memory mailbox)",
                                  maximumLength: 2048, run: { RelayTarget.run(&$0) })
}

enum RelayTarget {
    static let relayKey = try! SigningKeyPair(seed: [UInt8](repeating: 31, count: 32))
    static let keys: [SigningKeyPair] = (32...37).map { try! SigningKeyPair(seed: [UInt8](repeating: UInt8($0), count: 32)) }
    static let addresses = ["198.51.100.7", "198.51.100.8", "2001:db8:1:2::"]
    static let maximumSteps = 48

    /// Small limits, so that a short input reaches every one of them.
    static let configuration: RelayConfiguration = {
        var c = RelayConfiguration()
        c.dataDirectory = nil
        c.maximumClients = 6
        c.maximumClientsPerAddress = 3
        c.maximumPendingConnections = 8
        c.maximumPendingPerAddress = 4
        c.maximumTunnelsPerClient = 3
        c.maximumTunnelsPerPair = 2
        c.tunnelJoinTimeoutSeconds = 10
        c.idleTimeoutSeconds = 120
        c.handshakeTimeoutSeconds = 10
        c.clientBytesPerSecond = 0
        c.mailboxItemsPerRecipient = 6
        c.mailboxBytesPerRecipient = 8192
        c.mailboxItemsPerSender = 4
        c.mailboxTotalItems = 12
        c.mailboxTotalBytes = 16384
        c.mailboxItemBytes = 2048
        c.mailboxTTLSeconds = 3600
        c.mailboxBytesPerSender = 6000
        c.mailboxBytesPerAddress = 10_000
        c.mailboxItemCharge = 512
        c.mailboxQueueJobs = 4
        c.mailboxQueueJobsPerClient = 2
        return c
    }()

    /// What one input has seen, to aim later steps at it.
    struct Run {
        var links: [RelayHarness.Link] = []
        var requests: [UInt64: Set<UInt64>] = [:]
        var tokens: [[UInt8]] = []
        var itemIDs: [UInt64] = []
        var joins: [(channel: EmbeddedChannel, answered: Bool)] = []
    }

    static func run(_ input: inout FuzzInput) {
        let relay: RelayHarness
        do {
            relay = try RelayHarness(identity: relayKey, configuration: configuration, startMs: Int64(FuzzKeys.now), maximumConnections: 12,
                                 deferMailboxJobs: true)
        } catch {
            return check(false, "the harness does not start: \(error)")
        }
        let loop = EmbeddedEventLoop()
        var run = Run()
        for _ in 0..<maximumSteps where !input.isExhausted {
            // Only frames and clock steps reach the mailbox (its checks are SQL queries).
            var mailboxTouched = false
            switch input.u8() % 16 {
            case 0, 1:
                let key = keys[input.pick(keys.count)]
                if let link = relay.connect(key: key.publicKey, address: addresses[input.pick(addresses.count)]) { run.links.append(link) }
            case 2:
                if let link = pickLink(&input, run) { relay.disconnect(link) }
            case 3:
                let delta = advance(&input)
                if delta > 0 { loop.advanceTime(by: .milliseconds(min(delta, 3_600_000))) }
                relay.advance(by: delta)
                mailboxTouched = true
            case 4:
                join(&input, relay: relay, loop: loop, run: &run)
            case 6:
                // One job at a time, each checked: a later job (an acknowledgement, an expiry) may
                // remove what an earlier one delivered.
                for _ in 0..<(1 + Int(input.u8() % 4)) {
                    relay.runMailboxJobs(1)
                    observe(relay, &run)
                }
                mailboxTouched = true
            case 5:
                if !run.joins.isEmpty {
                    let j = run.joins[input.pick(run.joins.count)].channel
                    if input.bool() { _ = try? j.writeInbound(j.allocator.buffer(bytes: input.take(Int(input.u8() % 64)))) }
                    else { j.close(promise: nil) }
                }
            default:
                guard let link = pickLink(&input, run) else { continue }
                let (type, payload) = frame(&input, from: link, run: &run)
                let env = Envelope.sign(type: type, author: keys.first { $0.publicKey == link.key }!, recipient: relayKey.publicKey,
                                        createdAt: FuzzKeys.now, payload: payload)
                relay.deliver(env, on: link)
                mailboxTouched = type == .relayRegister || type == .mailboxPut || type == .mailboxAck
            }
            loop.run()
            relay.settle()
            observe(relay, &run, mailbox: mailboxTouched)
        }
        // Everything closes; past the join timeout the relay must hold nothing.
        for j in run.joins { j.channel.close(promise: nil) }
        loop.run()
        for link in run.links { relay.disconnect(link) }
        relay.runMailboxJobs()
        relay.advance(by: configuration.tunnelJoinTimeoutSeconds * 1000 + 1000)
        // The sweep may have queued an expiry job: a queued job holds the relay (it would outlive the input).
        relay.runMailboxJobs()
        loop.run()
        relay.settle()
        observe(relay, &run)
        check(relay.isIdle && relay.queuedMailboxJobs == 0, "the relay still holds state after every connection closed")
        try? loop.syncShutdownGracefully()
    }

    static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition {
            FileHandle.standardError.write(Data("relay target: \(message())\n".utf8))
            abort()
        }
    }

    static func pickLink(_ input: inout FuzzInput, _ run: Run) -> RelayHarness.Link? {
        let open = run.links.filter { !$0.isClosed }
        return open.isEmpty ? nil : open[input.pick(open.count)]
    }

    /// A clock step in ms: a little, past one of the relay's time limits, backwards, or to the ends.
    static func advance(_ input: inout FuzzInput) -> Int64 {
        switch input.u8() % 8 {
        case 0: return Int64(input.u16())
        case 1: return configuration.tunnelJoinTimeoutSeconds * 1000 + Int64(input.u8())
        case 2: return configuration.idleTimeoutSeconds * 1000 + 1
        case 3: return 3_600_000 + 1
        case 4: return configuration.mailboxTTLSeconds * 1000 + 60_000
        case 5: return -Int64(input.u16()) * 1000
        case 6: return input.bool() ? .max : .min
        default: return Int64(input.u8()) * 1000
        }
    }

    /// A tunnel end connects and joins with a token the relay handed out (or one it never did),
    /// sometimes sending early data, sometimes splitting the preamble.
    static func join(_ input: inout FuzzInput, relay: RelayHarness, loop: EmbeddedEventLoop, run: inout Run) {
        let channel = EmbeddedChannel(loop: loop)
        _ = try? channel.connect(to: SocketAddress(ipAddress: ["198.51.100.7", "198.51.100.9"][input.pick(2)], port: 40_000))
        loop.run()
        do {
            try relay.accept(channel)
        } catch {
            return check(false, "accept threw: \(error)")
        }
        run.joins.append((channel, false))
        let token: [UInt8]
        switch input.u8() % 4 {
        case 0: token = input.exactly(TunnelJoin.tokenLength)
        default: token = run.tokens.isEmpty ? [UInt8](repeating: 0, count: 32) : run.tokens[input.pick(run.tokens.count)]
        }
        var bytes = TunnelJoin.preamble(token: token)
        switch input.u8() % 6 {
        case 0: bytes += input.take(Int(input.u8() % 16))          // early data
        case 1: bytes = Array(bytes.prefix(Int(input.u8()) % bytes.count))   // a part only
        case 2: bytes = Array(input.take(Int(input.u8() % 80)))    // not a join: a "handshake"
        default: break
        }
        if channel.isActive, !bytes.isEmpty {
            let split = input.pick(bytes.count + 1)
            _ = try? channel.writeInbound(channel.allocator.buffer(bytes: bytes.prefix(split)))
            if split < bytes.count, channel.isActive {
                _ = try? channel.writeInbound(channel.allocator.buffer(bytes: bytes.dropFirst(split)))
            }
        }
    }

    // MARK: frames

    static func requestID(_ input: inout FuzzInput) -> UInt64 {
        input.bool() ? UInt64(input.u8()) : input.uint64()
    }

    /// A key field as a client might fill it: a member's, one's own, the relay's, or not a key.
    static func keyField(_ input: inout FuzzInput, from link: RelayHarness.Link) -> Data {
        switch input.u8() % 8 {
        case 0: return Data(link.key)
        case 1: return Data(relayKey.publicKey)
        case 2: return Data(input.take(Int(input.u8() % 40)))
        case 3: return Data()
        case 4: return Data(link.key + [0])
        default: return Data(keys[input.pick(keys.count)].publicKey)
        }
    }

    static func sealed(_ input: inout FuzzInput) -> Data {
        let limit = configuration.mailboxItemBytes
        let fill = input.u8()
        switch input.u8() % 8 {
        case 0: return Data()
        case 1: return Data([fill])
        case 2: return Data(repeating: fill, count: limit)
        case 3: return Data(repeating: fill, count: limit + 1)
        case 4: return Data(repeating: fill, count: configuration.mailboxItemCharge - 1 + Int(input.u8() % 3))
        case 5: return Data(repeating: fill, count: 60 * 1024)
        default: return Data(input.take(1 + Int(input.u8() % 64)))
        }
    }

    static func itemIDs(_ input: inout FuzzInput, run: Run) -> [UInt64] {
        let n = input.pick(8) == 0 ? 1000 + Int(input.u16() % 1200) : Int(input.u8() % 6)
        return (0..<n).map { _ in
            switch input.u8() % 4 {
            case 0: return input.uint64()
            default: return run.itemIDs.isEmpty ? UInt64(input.u8()) : run.itemIDs[input.pick(run.itemIDs.count)]
            }
        }
    }

    static func frame(_ input: inout FuzzInput, from link: RelayHarness.Link, run: inout Run) -> (MessageType, [UInt8]) {
        let types: [MessageType] = [.relayRegister, .relayRegister, .tunnelOpen, .tunnelOpen, .mailboxPut, .mailboxPut, .mailboxPut,
                                    .mailboxAck, .mailboxAck, .ping, .pong, .error, .relayReply, .mailboxItem, .friendRequest]
        let type = types[input.pick(types.count)]
        if input.pick(16) == 0 {   // a payload that may not parse (when it does, its request id counts)
            let raw = input.take(Int(input.u8() % 48))
            if let m = try? Tandem_V1_TunnelOpen(serializedBytes: raw) { run.requests[link.connection, default: []].insert(m.requestID) }
            if let m = try? Tandem_V1_MailboxPut(serializedBytes: raw) { run.requests[link.connection, default: []].insert(m.requestID) }
            return (type, raw)
        }
        let message: any SwiftProtobuf.Message
        switch type {
        case .relayRegister:
            var m = Tandem_V1_RelayRegister(); m.agent = input.text(); message = m
        case .tunnelOpen:
            var m = Tandem_V1_TunnelOpen(); m.requestID = requestID(&input); m.target = keyField(&input, from: link)
            run.requests[link.connection, default: []].insert(m.requestID)
            message = m
        case .mailboxPut:
            var m = Tandem_V1_MailboxPut(); m.requestID = requestID(&input); m.recipient = keyField(&input, from: link)
            m.sealed = sealed(&input)
            run.requests[link.connection, default: []].insert(m.requestID)
            message = m
        case .mailboxAck:
            var m = Tandem_V1_MailboxAck(); m.itemIds = itemIDs(&input, run: run); message = m
        case .ping:
            var m = Tandem_V1_Ping(); m.nonce = input.uint64(); m.sentAtMs = input.uint64(); message = m
        case .pong:
            var m = Tandem_V1_Pong(); m.nonce = input.uint64(); message = m
        case .relayReply:
            var m = Tandem_V1_RelayReply(); m.requestID = requestID(&input); m.status = .ok; m.token = Data(input.take(32)); message = m
        case .mailboxItem:
            var m = Tandem_V1_MailboxItem(); m.itemID = input.uint64(); m.sealed = sealed(&input); message = m
        case .friendRequest:
            var m = Tandem_V1_FriendRequest(); m.message = input.text(); message = m
        default:
            var m = Tandem_V1_Error(); m.detail = input.text(); message = m
        }
        return (type, (try? message.serializedBytes()) ?? [])
    }

    // MARK: checks

    /// Checks what the relay sent since the last step, and its state.
    static func observe(_ relay: RelayHarness, _ run: inout Run, mailbox: Bool = true) {
        for link in run.links {
            let open = !link.isClosed
            for (type, payload) in link.takeSent() {
                switch type {
                case .relayReply:
                    guard let m = try? Tandem_V1_RelayReply(serializedBytes: payload) else { return check(false, "a RELAY_REPLY that does not parse") }
                    check(run.requests[link.connection]?.contains(m.requestID) == true, "a reply to request \(m.requestID) the client never made")
                    check(m.status != .unspecified, "a reply without a status")
                    if !m.token.isEmpty {
                        check(m.status == .ok && m.token.count == TunnelJoin.tokenLength, "a reply with a \(m.token.count)-byte token")
                        run.tokens.append(Array(m.token))
                    }
                    if m.itemID != 0 { run.itemIDs.append(m.itemID) }
                case .relayRegistered:
                    guard let m = try? Tandem_V1_RelayRegistered(serializedBytes: payload) else { return check(false, "a RELAY_REGISTERED that does not parse") }
                    check((try? relay.server.mailbox.isRegistered(link.key)) == true, "RELAY_REGISTERED before the registration is on disk")
                    check(m.mailboxMaxItems == UInt32(configuration.mailboxItemsPerRecipient) && m.maxTunnels == UInt32(configuration.maximumTunnelsPerClient),
                          "RELAY_REGISTERED announces limits that are not the relay's")
                case .mailboxItem:
                    guard let m = try? Tandem_V1_MailboxItem(serializedBytes: payload) else { return check(false, "a MAILBOX_ITEM that does not parse") }
                    check(!m.sealed.isEmpty && m.sealed.count <= configuration.mailboxItemBytes, "a MAILBOX_ITEM of \(m.sealed.count) bytes")
                    check(m.sender.count == 32, "a MAILBOX_ITEM whose sender is not a key")
                    if open {
                        let mine = (try? relay.server.mailbox.items(for: link.key).map(\.id)) ?? []
                        check(mine.contains(Int64(bitPattern: m.itemID)), "MAILBOX_ITEM \(m.itemID) handed to a client it is not for")
                    }
                    run.itemIDs.append(m.itemID)
                case .tunnelIncoming:
                    guard let m = try? Tandem_V1_TunnelIncoming(serializedBytes: payload) else { return check(false, "a TUNNEL_INCOMING that does not parse") }
                    check(m.from.count == 32 && Array(m.from) != link.key, "a TUNNEL_INCOMING from \(m.from.count) bytes or from oneself")
                    check(m.token.count == TunnelJoin.tokenLength, "a TUNNEL_INCOMING with a \(m.token.count)-byte token")
                    if open {
                        check(relay.homeConnection(of: link.key) == link.connection,
                              "TUNNEL_INCOMING on a link that is not its key's home link")
                    }
                    run.tokens.append(Array(m.token))
                case .relayGoodbye:
                    guard let m = try? RelayGoodbyeMessage(payload: payload) else { return check(false, "a RELAY_GOODBYE its own validation refuses") }
                    _ = m
                    check(link.isClosed, "a RELAY_GOODBYE on a link that stays open")
                case .error:
                    check((try? Tandem_V1_Error(serializedBytes: payload)) != nil, "an ERROR that does not parse")
                default:
                    check(false, "the relay sent \(type) to a client")
                }
            }
        }
        for i in run.joins.indices {
            let channel = run.joins[i].channel
            while let out = try? channel.readOutbound(as: ByteBuffer.self) {
                if run.joins[i].answered { continue }   // spliced: the partner's bytes
                run.joins[i].answered = true
                check(out.readableBytes >= 1, "an empty join answer")
                let answer = out.getInteger(at: out.readerIndex, as: UInt8.self).flatMap(TunnelJoin.Answer.init(rawValue:))
                check(answer != nil, "a join answer that is not one")
                if answer != .joined { check(!channel.isActive, "a refused join left open") }
            }
        }
        let problems = relay.violations(mailbox: mailbox)
        check(problems.isEmpty, problems.joined(separator: "; "))
    }
}
