import Foundation
import Sodium
import SwiftProtobuf
import TandemNode
import TandemProtocol

// The "node" target: structure-aware. Each input is a sequence of steps; most build a well-formed,
// correctly signed envelope of one of the message types a node handles, with fuzzer-chosen field
// values (plausible ones near now, and the edges of each wire type), from a friend, a group member
// who is not a friend, or a stranger, and hand it to a real node's flows (NodeHarness: the node's
// services over an in-memory store, frames delivered as relay mail). Other steps tick the
// challenge loop, accept an invite, quit, or end what runs. Invariants after the sequence: nothing
// trapped, nothing the node stored fails its own start-up validation, strangers left no rows.

extension FuzzTarget {
    static let node = FuzzTarget(name: "node", summary: "signed frames of every type into a node's handlers (in-memory store)",
                                 maximumLength: 2048, run: { NodeTarget.run(&$0) })
}

enum NodeTarget {
    static let me = try! SigningKeyPair(seed: [UInt8](repeating: 21, count: 32))
    static let friend = try! SigningKeyPair(seed: [UInt8](repeating: 22, count: 32))
    static let member = try! SigningKeyPair(seed: [UInt8](repeating: 23, count: 32))
    static let strangers: [SigningKeyPair] = (24...27).map { try! SigningKeyPair(seed: [UInt8](repeating: UInt8($0), count: 32)) }
    static let maximumSteps = 24

    static let types: [MessageType] = [.friendRequest, .friendAccept, .friendDecline, .friendRemove, .contactUpdate, .presence,
                                       .ack, .acks, .clockProbe, .clockReply, .challengeInvite, .challengeAnswer, .challengeStart,
                                       .challengeCancel, .challengeQuit, .challengeOutcome, .ping, .pong, .error,
                                       .chatMessage, .chatForward, .chatReaction, .cheer, .readReceipt, .retract, .gapRequest,
                                       .deliveryReceipt]

    /// Challenge ids the sequence plays with (so that frames find the challenge an invite made).
    static let ids: [[UInt8]] = (0..<3).map { [UInt8](repeating: UInt8(0xc0 + $0), count: 16) }

    /// One node for the whole run (building one per input leaks its loops and costs more than the
    /// input); its store is emptied before each input.
    static let harness: NodeHarness? = try? NodeHarness(identity: me)

    static func run(_ input: inout FuzzInput) {
        guard let node = harness else { return check(false, "the harness does not start") }
        do {
            try node.reset()
            try node.befriend(friend.publicKey)
        } catch {
            return check(false, "cannot reset the harness: \(error)")
        }
        let nowUs = Int64(Date().timeIntervalSince1970 * 1_000_000)
        for _ in 0..<maximumSteps where !input.isExhausted {
            switch input.u8() % 16 {
            case 0: node.tick()
            case 1: node.acceptFirstInvite()
            case 2: node.quitRunning(elapsedMs: input.bool() ? Int64(input.u16()) : input.int64())
            case 3: node.endAll()
            default:
                let sender: SigningKeyPair
                switch input.u8() % 4 {
                case 0, 1: sender = friend
                case 2: sender = member
                default: sender = strangers[input.pick(strangers.count)]
                }
                let type = types[input.pick(types.count)]
                let payload = Self.payload(type, &input, sender: sender, nowUs: nowUs)
                let createdAt = input.pick(8) == 0 ? input.uint64() : UInt64(clamping: nowUs / 1000 - Int64(input.u16()))
                let env = Envelope.sign(type: type, author: sender, recipient: me.publicKey, createdAt: createdAt, payload: payload)
                node.deliver(env)
            }
        }
        node.tick()
        node.endAll()
        if let bad = try? node.invalidStoredRows() {
            check(bad.isEmpty, "the node stored a challenge its own validation refuses: \(bad)")
        }
    }

    static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition {
            FileHandle.standardError.write(Data("node target: \(message())\n".utf8))
            abort()
        }
    }

    // MARK: - Field values

    /// A time in µs: near now (most of the time), or any 64-bit value.
    static func instant(_ input: inout FuzzInput, nowUs: Int64) -> UInt64 {
        switch input.u8() % 6 {
        case 0: return 0
        case 1: return input.uint64()
        case 2: return [UInt64(Int64.max), UInt64(Int64.max) + 1, UInt64.max, UInt64(1) << 60][input.pick(4)]
        default: return UInt64(clamping: nowUs + (Int64(input.u16()) - 4096) * 1_000_000)
        }
    }

    static func count(_ input: inout FuzzInput) -> UInt64 {
        switch input.u8() % 4 {
        case 0: return input.uint64()
        case 1: return UInt64(input.u16()) * 1000
        default: return UInt64(input.u16())
        }
    }

    static func key(_ input: inout FuzzInput, sender: SigningKeyPair) -> Data {
        switch input.u8() % 6 {
        case 0: return Data(me.publicKey)
        case 1: return Data(friend.publicKey)
        case 2: return Data(member.publicKey)
        case 3: return Data(sender.publicKey)
        case 4: return Data(input.take(Int(input.u8() % 40)))
        default: return Data(strangers[input.pick(strangers.count)].publicKey)
        }
    }

    static func challengeID(_ input: inout FuzzInput) -> Data {
        input.pick(16) == 0 ? Data(input.take(Int(input.u8() % 20))) : Data(ids[input.pick(ids.count)])
    }

    /// A thread (one of the sequence's challenge ids) or the direct conversation (empty).
    static func thread(_ input: inout FuzzInput) -> Data {
        input.bool() ? Data() : challengeID(&input)
    }

    /// A seq or lamport: small and in order (most of the time), near the window, or any value.
    static func seq(_ input: inout FuzzInput) -> UInt64 {
        switch input.u8() % 8 {
        case 0: return input.uint64()
        case 1: return [0, ChatLimits.maximumCounter, ChatLimits.maximumCounter + 1, ChatLimits.heldAboveGap + 2][input.pick(4)]
        default: return UInt64(1 + input.u8() % 8)
        }
    }

    static func messageRef(_ input: inout FuzzInput) -> Data {
        input.pick(8) == 0 ? Data(input.take(Int(input.u8() % 20))) : Data([UInt8](repeating: input.u8() % 4, count: 16))
    }

    /// The messaging payloads (Protocol/messages.md), fields near their edges; a FORWARD carries
    /// a MESSAGE, REACTION or RETRACT signed by the member, a stranger, or the forwarder itself.
    static func chatPayload(_ type: MessageType, _ input: inout FuzzInput, sender: SigningKeyPair, nowUs: Int64) -> [UInt8] {
        let nowMs = UInt64(clamping: nowUs / 1000)
        let message: any SwiftProtobuf.Message
        switch type {
        case .chatMessage:
            var m = Tandem_V1_ChatMessage()
            m.challengeID = thread(&input); m.seq = seq(&input); m.lamport = seq(&input)
            m.text = input.pick(16) == 0 ? String(repeating: "x", count: 16_385) : input.text()
            m.replyTo = input.bool() ? Data() : messageRef(&input)
            m.sentAtMs = input.pick(8) == 0 ? input.uint64() : nowMs - UInt64(input.u16())
            m.expiresAfterMs = input.pick(4) == 0 ? count(&input) : 0
            message = m
        case .chatForward:
            let author = [member, sender, strangers[0], friend][input.pick(4)]
            let innerType = [MessageType.chatMessage, .chatReaction, .retract, .ping][input.pick(4)]
            let inner = Envelope.sign(type: innerType, author: author, recipient: sender.publicKey,
                                      createdAt: nowMs - UInt64(input.u16()),
                                      payload: chatPayload(innerType == .ping ? .chatMessage : innerType, &input, sender: author, nowUs: nowUs))
            var bytes = inner.bytes
            if input.pick(8) == 0, !bytes.isEmpty { bytes[input.pick(bytes.count)] ^= 1 }  // tampered after signing
            var m = Tandem_V1_ChatForward(); m.challengeID = challengeID(&input); m.envelope = Data(bytes); message = m
        case .chatReaction:
            var m = Tandem_V1_ChatReaction(); m.challengeID = thread(&input); m.messageID = messageRef(&input)
            m.emoji = input.bool() ? "👍" : input.text(); message = m
        case .cheer:
            var m = Tandem_V1_Cheer(); m.challengeID = challengeID(&input); m.subject = key(&input, sender: sender)
            m.emoji = input.bool() ? "👏" : input.text(); m.text = input.text(); message = m
        case .readReceipt:
            var m = Tandem_V1_ReadReceipt(); m.readUpToSeq = seq(&input); m.readAtMs = nowMs; message = m
        case .retract:
            var m = Tandem_V1_Retract(); m.challengeID = thread(&input); m.messageID = messageRef(&input); message = m
        case .deliveryReceipt:
            // Ids of messages that exist, that do not, repeated ones, and more than a receipt holds.
            var m = Tandem_V1_DeliveryReceipt()
            m.messageIds = (0..<(input.pick(16) == 0 ? 257 : Int(input.u8() % 6))).map { _ in messageRef(&input) }
            message = m
        default:
            var m = Tandem_V1_GapRequest(); m.challengeID = thread(&input); m.author = key(&input, sender: sender)
            m.ranges = (0..<Int(input.u8() % 4)).map { _ in
                var r = Tandem_V1_SeqRange(); r.first = seq(&input); r.last = seq(&input); return r
            }
            message = m
        }
        return (try? message.serializedBytes()) ?? []
    }

    static func record(_ input: inout FuzzInput, sender: SigningKeyPair) -> Tandem_V1_ContactRecord {
        var r = Tandem_V1_ContactRecord()
        r.publicKey = input.pick(8) == 0 ? key(&input, sender: sender) : Data(sender.publicKey)
        r.displayName = input.text()
        r.addresses = (0..<Int(input.u8() % 10)).map { _ in
            switch input.u8() % 4 {
            case 0: return ":\(input.u16())"
            case 1: return "127.0.0.1:\(input.u16())"
            case 2: return "198.51.100.\(input.u8()):\(input.u16())"
            default: return input.text()
            }
        }
        r.homeRelay = input.pick(4) == 0 ? input.text() : ""
        r.version = count(&input)
        return r
    }

    static func payload(_ type: MessageType, _ input: inout FuzzInput, sender: SigningKeyPair, nowUs: Int64) -> [UInt8] {
        if input.pick(16) == 0 { return input.take(Int(input.u8())) }   // not the message at all
        let message: any SwiftProtobuf.Message
        switch type {
        case .friendRequest:
            var m = Tandem_V1_FriendRequest(); m.message = input.text(); m.contact = record(&input, sender: sender); message = m
        case .friendAccept:
            var m = Tandem_V1_FriendAccept(); m.contact = record(&input, sender: sender); message = m
        case .contactUpdate:
            var m = Tandem_V1_ContactUpdate(); m.contact = record(&input, sender: sender); message = m
        case .friendDecline, .friendRemove:
            var m = Tandem_V1_FriendFarewell(); m.reason = input.text(); message = m
        case .presence:
            var m = Tandem_V1_Presence(); m.status = Tandem_V1_PresenceStatus(rawValue: Int(input.u8() % 6)) ?? .idle
            m.heartbeatSeconds = input.u32()
            // Shared health (issue 35): absent, in range, or any u32 (out of range is malformed).
            switch input.pick(3) { case 0: break; case 1: m.health = UInt32(input.u8() % 101); default: m.health = input.u32() }
            m.takesAcks = input.bool()
            message = m
        case .ack:
            var m = Tandem_V1_Ack(); m.messageID = Data(input.take(Int(input.u8() % 20))); message = m
        case .acks:
            // 0 … 300 ids (the limit is 256), mostly of 16 bytes, sometimes one repeated.
            var m = Tandem_V1_Acks()
            let n = input.pick(8) == 0 ? Int(input.u16() % 301) : Int(input.u8() % 8)
            for _ in 0..<n {
                if input.pick(16) == 0, let last = m.messageIds.last { m.messageIds.append(last); continue }
                m.messageIds.append(Data(input.take(input.pick(16) == 0 ? Int(input.u8() % 20) : 16)))
            }
            message = m
        case .clockProbe:
            var m = Tandem_V1_ClockProbe(); m.t1Us = instant(&input, nowUs: nowUs); message = m
        case .clockReply:
            var m = Tandem_V1_ClockReply()
            m.t1Us = instant(&input, nowUs: nowUs); m.t2Us = instant(&input, nowUs: nowUs); m.t3Us = instant(&input, nowUs: nowUs)
            message = m
        case .challengeInvite:
            var m = Tandem_V1_ChallengeInvite()
            m.challengeID = challengeID(&input)
            var people = [Data(sender.publicKey)]
            for _ in 0..<Int(input.u8() % 4) { people.append(key(&input, sender: sender)) }
            if input.pick(4) != 0 { people.append(Data(me.publicKey)) }
            m.participants = people
            m.durationMs = input.bool() ? UInt64(1 + input.u16() % 30) * 1000 : count(&input)
            m.startAtUs = input.bool() ? 0 : instant(&input, nowUs: nowUs)
            m.expiresAtUs = instant(&input, nowUs: nowUs)
            m.message = input.text()
            m.graceMs = input.bool() ? 0 : count(&input)
            m.addressHints = (0..<Int(input.u8() % 4)).map { _ in input.pick(2) == 0 ? ":\(input.u16())" : input.text() }
            message = m
        case .challengeAnswer:
            var m = Tandem_V1_ChallengeAnswer(); m.challengeID = challengeID(&input); m.accept = input.bool(); message = m
        case .challengeStart:
            var m = Tandem_V1_ChallengeStart()
            m.challengeID = challengeID(&input)
            m.startAtUs = instant(&input, nowUs: nowUs)
            m.roster = [Data(sender.publicKey), Data(me.publicKey)] + (0..<Int(input.u8() % 3)).map { _ in key(&input, sender: sender) }
            message = m
        case .challengeCancel:
            var m = Tandem_V1_ChallengeCancel(); m.challengeID = challengeID(&input); m.reason = input.text(); message = m
        case .challengeQuit:
            var m = Tandem_V1_ChallengeQuit(); m.challengeID = challengeID(&input); m.elapsedMs = count(&input)
            m.reason = input.text(); message = m
        case .challengeOutcome:
            var r = Tandem_V1_OutcomeRecord()
            r.challengeID = challengeID(&input)
            r.startAtUs = instant(&input, nowUs: nowUs)
            r.durationMs = input.bool() ? UInt64(1 + input.u16() % 30) * 1000 : count(&input)
            r.inviter = input.bool() ? Data(me.publicKey) : Data(sender.publicKey)
            r.outcomes = [Data(me.publicKey), Data(sender.publicKey)].map { k in
                var o = Tandem_V1_ParticipantOutcome()
                o.publicKey = k
                o.result = Tandem_V1_ParticipantResult(rawValue: Int(input.u8() % 5)) ?? .completed
                if o.result == .quit || input.pick(8) == 0 { o.elapsedMs = count(&input); o.reason = input.text() }
                return o
            }
            let bytes = Outcome.encode(r)
            var m = Tandem_V1_ChallengeOutcome()
            m.record = Data(bytes)
            m.signature = Data(input.pick(8) == 0 ? input.take(64) : Outcome.sign(bytes, with: sender))
            message = m
        case .chatMessage, .chatForward, .chatReaction, .cheer, .readReceipt, .retract, .gapRequest, .deliveryReceipt:
            return chatPayload(type, &input, sender: sender, nowUs: nowUs)
        case .ping:
            var m = Tandem_V1_Ping(); m.nonce = input.uint64(); m.sentAtMs = input.uint64(); message = m
        case .pong:
            var m = Tandem_V1_Pong(); m.nonce = input.uint64(); message = m
        default:
            var m = Tandem_V1_Error(); m.detail = input.text(); message = m
        }
        return (try? message.serializedBytes()) ?? []
    }
}
