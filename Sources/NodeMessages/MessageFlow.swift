import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Messaging frames (0x05xx) reach this flow unless their author is blocked (the router hands a
/// blocked author's frames to the friends flow, which drops them).
extension MessageService: FrameFlow {
    package nonisolated func owns(_ type: MessageType) -> Bool { type.isMessage }
    package nonisolated var dropsBlockedAuthors: Bool { true }
    /// An ACK of a MESSAGE is announced as `message.delivered` (`delivered(_:type:to:_:)`).
    package nonisolated func announcesDelivery(of type: MessageType) -> Bool { type == .chatMessage }
}

extension MessageService {
    /// What became of an inbound frame: acknowledge it (stored, or a duplicate, or dropped for
    /// good), or not (over a bound: the sender's outbox retries later).
    enum Outcome {
        case acknowledge
        /// Over a bound: neither handled nor acknowledged.
        case withhold
        /// From someone who may not write here: acknowledged within the stranger budget, nothing stored.
        case drop
    }

    /// A messaging frame from a link or from mail. The payload becomes a validated message first
    /// (a malformed acknowledged type is answered MALFORMED and acknowledged, so the sender stops);
    /// nothing from someone who may not write here is stored (messages.md 2, "Who may send").
    package func handle(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) {
        do {
            let outcome: Outcome
            switch envelope.type {
            case .chatMessage, .chatReaction, .retract, .cheer, .readReceipt, .chatForward, .conversationSettings, .deliveryReceipt:
                outcome = try receiveDurable(envelope, viaMail: link == nil, step)
            case .gapRequest:
                // Not acknowledged (sent directly, repeated by the asker); a malformed one is dropped.
                guard let request = try? GapRequestMessage(payload: envelope.payload) else { return }  // dropped silently (messages.md 2)
                answerGapRequest(request, from: envelope.author, step)
                return
            default:
                // The file types are not in `MessageType.known` yet: the verifier answers them
                // UNKNOWN_TYPE before they get here. Anything else is acknowledged and dropped.
                outbox.dropUnrelated(envelope, on: link, step)
                return
            }
            switch outcome {
            case .acknowledge: outbox.acknowledge(envelope, on: link, step)
            case .withhold: break
            case .drop: outbox.dropUnrelated(envelope, on: link, step)
            }
        } catch let e as PayloadError {
            outbox.refuseMalformed(envelope, e, on: link, step)
        } catch {
            logger.error("cannot handle a messaging frame", metadata: ["type": "\(envelope.type)", "error": "\(error)"])
        }
    }

    /// Who may put `type` on this node: a friend for the direct conversation; for a thread, a
    /// participant of a challenge we take part in, writing to us as its inviter or being its inviter.
    /// `friend`: whether `author` is a friend, when the caller read it already in this step.
    func conversation(for author: [UInt8], thread: ThreadID?, friend: Bool? = nil, _ step: StoreStep) throws -> ConversationRow? {
        guard let thread else {
            guard friend ?? outbox.isFriend(author, in: step) else { return nil }
            return try step.directConversation(peer: author, nowMs: now())
        }
        guard let c = try step.challenge(thread), c.participant(me) != nil, c.participant(author) != nil,
              c.inviter == me || author == c.inviter else { return nil }
        return try step.threadConversation(challengeId: thread, nowMs: now())
    }

    /// The acknowledged types: admission, bounds, exactly once, then the change.
    /// `viaMail`: the frame came from a relay mailbox (no ACK can go back: a stored MESSAGE is
    /// answered with DELIVERED instead, messages.md 2.2).
    func receiveDurable(_ envelope: Envelope, viaMail: Bool = false, _ step: StoreStep) throws -> Outcome {
        let author = envelope.author
        // Cheap checks before anything is decoded or written: a frame from anyone but a friend is
        // dropped (and acknowledged within the stranger budget). Thread frames need no exception:
        // only friends invite, so a thread's inviter is our friend, and when we invited, every
        // participant was; partners who are not our friends reach us inside the inviter's FORWARD.
        let friend = outbox.isFriend(author, in: step)
        guard friend else { return .drop }
        if envelope.type != .readReceipt && envelope.type != .chatForward && envelope.type != .deliveryReceipt,
           !allowFrame(from: author) { return .withhold }
        if try step.wasHandled(envelope.messageID.bytes) { return .acknowledge }
        let handled = outbox.handledMark(envelope, fromFriend: true, in: step)
        switch envelope.type {
        case .chatMessage:
            let body = try ChatMessageBody(payload: envelope.payload, createdAtMs: envelope.createdAt)
            // A thread's MESSAGE is forwarded to participants who are not the author's friends, who
            // verify the author's signature themselves: it must be signed (README 5.4).
            if body.challengeID != nil, envelope.hasZeroSignature {
                throw PayloadError(.chatMessage, "a thread's MESSAGE must be signed (it is forwarded)")
            }
            let direct = body.challengeID == nil ? try inboundConversation(peer: author, step) : nil
            guard let c = try direct ?? conversation(for: author, thread: body.challengeID, friend: friend, step) else { return .drop }
            let outcome = try receiveMessage(envelope, body, c, handled: handled, step)
            if outcome == .acknowledge, c.challengeId != nil { try forward(envelope, .message(body), body.challengeID, step) }
            if outcome == .acknowledge, viaMail { oweReceipt(for: envelope.messageID.bytes, to: author, step) }
            return outcome
        case .chatReaction:
            let r = try ChatReactionMessage(payload: envelope.payload)
            guard let c = try conversation(for: author, thread: r.challengeID, step) else { return .drop }
            try receiveReaction(envelope, r, c, handled: handled, step)
            if c.challengeId != nil { try forward(envelope, .reaction(r), r.challengeID, step) }
            return .acknowledge
        case .retract:
            let r = try RetractMessage(payload: envelope.payload)
            guard let c = try conversation(for: author, thread: r.challengeID, step) else { return .drop }
            try receiveRetract(envelope, r, c, handled: handled, step)
            if c.challengeId != nil { try forward(envelope, .retract(r), r.challengeID, step) }
            return .acknowledge
        case .cheer:
            let m = try CheerMessage(payload: envelope.payload)
            try receiveCheer(envelope, m, handled: handled, step)
            return .acknowledge
        case .readReceipt:
            let m = try ReadReceiptMessage(payload: envelope.payload)
            try receiveRead(envelope, m, handled: handled, step)
            return .acknowledge
        case .chatForward:
            return try receiveForward(envelope, handled: handled, step)
        case .conversationSettings:
            let m = try ConversationSettingsMessage(payload: envelope.payload)
            try receiveSettings(envelope, m, handled: handled, step)
            return .acknowledge
        case .deliveryReceipt:
            let m = try DeliveryReceiptMessage(payload: envelope.payload)
            try receiveDeliveryReceipt(envelope, m, handled: handled, step)
            return .acknowledge
        default:
            return .acknowledge
        }
    }

    func mark(_ handled: HandledMark, _ step: StoreStep) throws {
        _ = try step.markHandled(handled.messageId, createdAtMs: handled.createdAtMs, windowMs: handled.windowMs,
                                 nowMs: handled.nowMs, fromFriend: handled.fromFriend)
    }

    func conversationText(_ c: ConversationRow) -> JSONValue {
        if let peer = c.peer { return idText(Array(peer)) }
        return .string("challenge:" + hexString(Array(c.challengeId ?? Data())))
    }

    // MARK: MESSAGE

    func receiveMessage(_ envelope: Envelope, _ body: ChatMessageBody, _ c: ConversationRow, handled: HandledMark?,
                        _ step: StoreStep) throws -> Outcome {
        guard let cid = c.id else { return .withhold }
        let author = envelope.author
        let id = envelope.messageID.bytes
        var o = try order(c, step)
        let nowMs = now()
        let expires = body.expiresAfterMs > 0 ? nowMs.addingSaturated(Int64(clamping: body.expiresAfterMs)) : nil
        func row(_ state: MessageState, display: UInt64) -> StoredMessage {
            StoredMessage(id: id, conversationId: cid, author: author, seq: body.seq, lamport: display, sentLamport: body.lamport,
                          text: body.text, replyTo: body.replyTo, sentAtMs: Int64(clamping: body.sentAtMs), receivedAtMs: nowMs,
                          state: state, expiresAtMs: expires)
        }
        switch o.receive(author: author, seq: body.seq, lamport: body.lamport, messageID: id) {
        case .duplicate:
            return .acknowledge
        case .refused(let why):
            logger.info("message refused", metadata: ["from": "\(NodeID(publicKey: author).short)", "why": "\(why)"])
            return .withhold
        case .held:
            let held = row(.held, display: body.lamport)
            let bound = bytesBound(author: author, cost: held.storedBytes, step)
            switch try step.receiveMessage(held, handled: handled, maximumBytesPerAuthor: bound) {
            case .stored:
                stored(author: author, cost: held.storedBytes, bound: bound)
                askForGap(&o, author: author, conversation: c, step)
                stage(o, conversation: cid, step)
                return .acknowledge
            case .duplicate: return .acknowledge
            case .overBound: return overBound(author, step)
            }
        case .released(let released):
            guard let head = released.first else { return .acknowledge }
            let first = row(.received, display: head.displayKey.lamport)
            let bound = bytesBound(author: author, cost: first.storedBytes, step)
            switch try step.receiveMessage(first, handled: handled, maximumBytesPerAuthor: bound) {
            case .stored: stored(author: author, cost: first.storedBytes, bound: bound)
            case .duplicate: return .acknowledge
            case .overBound: return overBound(author, step)
            }
            let rest = released.dropFirst()
            if !rest.isEmpty { try step.releaseHeld(rest.map { ($0.messageID, Int64(clamping: $0.displayKey.lamport)) }) }
            stage(o, conversation: cid, step)
            // The first one is the row just stored (no read back); the rest were held and released.
            announce(first, c, step)
            for r in rest {
                guard let m = try step.message(r.messageID) else { continue }
                announce(m, c, step)
            }
            return .acknowledge
        }
    }

    func overBound(_ author: [UInt8], _ step: StoreStep) -> Outcome {
        events.emit("message.over_bound", ["from": idText(author), "bytes": .int(limits.storedBytesPerAuthor)], in: step)
        return .withhold
    }

    /// `message.received` for a released message (its text as stored: made terminal-safe only where
    /// it is printed).
    func announce(_ m: StoredMessage, _ c: ConversationRow, _ step: StoreStep) {
        let author = Array(m.author)
        let id = hexString(Array(m.id)), from = canonicalID(author), fromName = announcedName(author, step)
        events.emit("message.received", [
            "id": .string(id), "from": .string(from), "from_name": .string(fromName),
            "conversation": conversationText(c), "seq": .int(m.seq), "text": .string(m.text),
            "reply_to": m.replyTo.map { .string(hexString(Array($0))) } ?? .null, "sent_at": JSONValue.isoLocal(m.sentAtMs),
            "muted": .bool(c.muted),
        ], in: step)
        guard hooks != nil, !c.muted else { return }
        // The hook sees the text as stored; a hook that prints it must make it safe itself
        // (TANDEM_TEXT_SAFE is the terminal-safe form, made by the hook runner: `MessageHookQueue.Job`).
        let job = MessageHookQueue.Job(id: id, from: from, fromName: fromName,
                                       conversation: conversationText(c).stringValue ?? "", text: m.text, sentAtMs: m.sentAtMs)
        // A step's messages go to the hook runner together, once it has committed.
        if hookJobsIn !== step {
            hookJobs = []
            hookJobsIn = step
            step.afterCommit { [self] in
                let jobs = hookJobs
                hookJobs = []
                hookJobsIn = nil
                if !hookQueue.append(jobs) { logger.warning("on-message hook backlog full: a message's hooks were skipped") }
            }
        }
        hookJobs.append(job)
    }

    /// Asks for what is missing below a held message (at most once per 30 s per author): directly
    /// on the link, to the author in a direct conversation and to the inviter in a thread.
    func askForGap(_ o: inout ConversationOrder, author: [UInt8], conversation c: ConversationRow, _ step: StoreStep) {
        guard let ranges = o.gapRequest(author: author, nowMs: now()) else { return }
        let thread = c.challengeId.map { Array($0) }
        var to = author
        if let thread, let ch = health.read("read a challenge", or: nil, { try step.challenge(thread) }) { to = ch.inviter }
        let request = GapRequestMessage(challengeID: thread, author: author, ranges: ranges)
        events.emit("message.gap", ["from": idText(author), "conversation": conversationText(c), "asked": idText(to),
                                    "ranges": .array(ranges.map { .array([.int(Int64(clamping: $0.first)), .int(Int64(clamping: $0.last))]) })],
                    in: step)
        guard to != me, let link = peers.link(to: to) else { return }
        let payload = request.payload
        step.afterCommit { _ = link.send(type: .gapRequest, payload: payload) }
    }

    /// A GAP_REQUEST: the asked seqs of `request.author` in the conversation are queued again, from
    /// the outbox when their frames are still there, else re-signed from the message table with
    /// the same ids (messages.md 2.1). Only our own messages (or, as a thread's inviter, the
    /// thread's: their authors' own frames, forwarded again) are re-sent, only to a friend or
    /// participant of that conversation.
    func answerGapRequest(_ request: GapRequestMessage, from asker: [UInt8], _ step: StoreStep) {
        health.attempt("answer a gap request") {
            guard let c = try conversation(for: asker, thread: request.challengeID, step), let cid = c.id else { return }
            guard request.author == me || (c.challengeId != nil && request.author != asker) else { return }
            var queued = false
            for range in request.ranges {
                for m in try step.messages(conversationId: cid, author: request.author, seqs: range.first...range.last) {
                    queued = try requeue(m, c, to: asker, step) || queued
                }
            }
            if queued { outbox.send(to: [asker], in: step) }
        }
    }

    /// Queues message `m` for `to` again; false when it cannot be (retracted, or already waiting).
    func requeue(_ m: StoredMessage, _ c: ConversationRow, to: [UInt8], _ step: StoreStep) throws -> Bool {
        if try step.hasOutboxFrame(Array(m.id), to: to) { return false }
        guard !m.retracted, !m.text.isEmpty else { return false }
        let thread = c.challengeId.map { Array($0) }
        if Array(m.author) != me {
            // A thread's message by someone else: its author's frame is forwarded again, as kept
            // when it was first forwarded (only the inviter keeps them).
            guard let thread, Array(m.author) != to, let bytes = try step.threadFrame(Array(m.id)),
                  let inner = try? Envelope.parse(bytes), inner.messageID.bytes == Array(m.id),  // a damaged row: not forwarded
                  let body = try? ChatMessageBody(payload: inner.payload, createdAtMs: inner.createdAt) else { return false }  // as above
            let payload = ChatForwardMessage(challengeID: thread, inner: inner, content: .message(body)).payload
            try step.enqueue(outbox.frame(.chatForward, to: to, payload: payload, in: step))
            return true
        }
        let body = ChatMessageBody(challengeID: thread, seq: UInt64(m.seq), lamport: UInt64(max(1, m.sentLamport)), text: m.text,
                                   replyTo: m.replyTo.map { Array($0) }, sentAtMs: UInt64(max(1, m.sentAtMs)))
        // As when it was first sent: a direct message held unsigned (signed at the egress where it must be).
        let createdAt = UInt64(clamping: max(now(), m.sentAtMs))
        let env = thread == nil
            ? Envelope.unsigned(type: .chatMessage, messageID: MessageID(bytes: Array(m.id)), author: identity.publicKey,
                                recipient: to, createdAt: createdAt, payload: body.payload)
            : Envelope.sign(type: .chatMessage, messageID: MessageID(bytes: Array(m.id)), author: identity,
                            recipient: to, createdAt: createdAt, payload: body.payload)
        try step.enqueue(OutboxItem(messageId: env.messageID.bytes, recipient: to, type: MessageType.chatMessage.rawValue,
                                    frame: env.bytes, nowMs: now()))
        return true
    }

    // MARK: REACTION, RETRACT, CHEER, READ

    func receiveReaction(_ envelope: Envelope, _ r: ChatReactionMessage, _ c: ConversationRow, handled: HandledMark,
                         _ step: StoreStep) throws {
        try mark(handled, step)
        guard let target = try step.message(r.messageID), target.conversationId == c.id else { return }
        try step.setReaction(messageId: r.messageID, author: envelope.author, emoji: r.emoji, atMs: now())
        events.emit("message.reaction", ["id": .string(hexString(r.messageID)), "from": idText(envelope.author),
                                         "from_name": .string(name(envelope.author, step)), "emoji": .string(r.emoji),
                                         "conversation": conversationText(c)], in: step)
    }

    func receiveRetract(_ envelope: Envelope, _ r: RetractMessage, _ c: ConversationRow, handled: HandledMark,
                        _ step: StoreStep) throws {
        try mark(handled, step)
        guard let target = try step.message(r.messageID), target.conversationId == c.id, Array(target.author) == envelope.author else { return }
        guard try step.retractMessage(r.messageID, author: envelope.author) else { return }
        events.emit("message.retracted", ["id": .string(hexString(r.messageID)), "from": idText(envelope.author),
                                          "conversation": conversationText(c)], in: step)
    }

    func receiveCheer(_ envelope: Envelope, _ m: CheerMessage, handled: HandledMark, _ step: StoreStep) throws {
        try mark(handled, step)
        // A cheer on a result of a challenge we hold (our ledger's entries come from those).
        guard let ch = try step.challenge(m.challengeID), ch.participant(m.subject) != nil else { return }
        try step.storeCheer(StoredCheer(challengeId: m.challengeID, subject: m.subject, author: envelope.author, emoji: m.emoji,
                                        text: m.text, atMs: now()))
        events.emit("message.cheer", ["challenge_id": .string(hexString(m.challengeID)), "subject": idText(m.subject),
                                      "from": idText(envelope.author), "from_name": .string(name(envelope.author, step)),
                                      "emoji": .string(m.emoji), "text": .string(m.text)], in: step)
    }

    /// A READ is shown only while we send ours to that friend (the reciprocal rule, messages.md 6);
    /// one that arrives while receipts are off is acknowledged and dropped.
    func receiveRead(_ envelope: Envelope, _ m: ReadReceiptMessage, handled: HandledMark, _ step: StoreStep) throws {
        try mark(handled, step)
        let c = try step.directConversation(peer: envelope.author, nowMs: now())
        guard ReadReceiptRule.shouldShow(enabledForFriend: c.readReceipts, conversationIsDirect: true), let cid = c.id else { return }
        let ids = try step.markReadByPeer(conversationId: cid, ownAuthor: me, upToSeq: Int64(clamping: m.readUpToSeq))
        guard !ids.isEmpty else { return }
        events.emit("message.read", ["by": idText(envelope.author), "ids": .array(ids.map { .string(hexString($0)) }),
                                     "read_at": JSONValue.isoLocal(Int64(clamping: m.readAtMs))], in: step)
    }

    /// The direct conversation's disappearing timer, last writer wins (messages.md 9).
    func receiveSettings(_ envelope: Envelope, _ m: ConversationSettingsMessage, handled: HandledMark, _ step: StoreStep) throws {
        try mark(handled, step)
        let c = try step.directConversation(peer: envelope.author, nowMs: now())
        guard let cid = c.id else { return }
        guard try step.setDisappearingTimer(conversationId: cid, afterMs: Int64(clamping: m.disappearAfterMs),
                                            version: Int64(clamping: m.version), author: envelope.author) else { return }
        events.emit("message.timer", ["friend": idText(envelope.author), "by": idText(envelope.author),
                                      "disappear_after_ms": .int(Int64(clamping: m.disappearAfterMs))], in: step)
    }

    /// Deletes the messages whose disappearing timer ran out by `nowMs` (from the tables and the
    /// search index), in a step of its own.
    package func expire(nowMs: Int64) {
        defer { events.published() }
        health.attempt("expire disappearing messages") {
            try store.step { step in
                let gone = try step.expireMessages(nowMs: nowMs)
                guard !gone.isEmpty else { return }
                events.emit("message.expired", ["ids": .array(gone.map { .string(hexString($0)) })], in: step)
            }
        }
    }

    /// Asks again about every gap still open (at most once per 30 s each, `ConversationOrder`):
    /// a GAP_REQUEST lost with its link, or asked while the peer was away, is repeated.
    package func askAboutGaps() {
        defer { events.published() }
        health.attempt("ask about gaps") {
            try store.step(syncing: false) { step in
                for (cid, author) in try step.heldAuthors() {
                    guard let c = try step.conversation(id: cid) else { continue }
                    var o = try order(c, step)
                    let before = o
                    askForGap(&o, author: author, conversation: c, step)
                    if o != before { stage(o, conversation: cid, step) }
                }
            }
        }
    }

    /// Expires disappearing messages once a second, asks about open gaps every 5 s, and records
    /// written frames as sent, until cancelled (a child of the node's group).
    package nonisolated func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in await runHooks() }
            var second = 0
            while !Task.isCancelled {
                await NodeCore.run {
                    self.expire(nowMs: self.now())
                    self.markSent()
                }
                second += 1
                if second % 5 == 0 { await NodeCore.run { self.askAboutGaps() } }
                try? await Task.sleep(for: .seconds(1))  // cancelled: the loop ends
            }
            hookQueue.finish()  // the hook runner ends once it has taken what is queued
            group.cancelAll()
        }
    }

    // MARK: FORWARD (a challenge's thread)

    /// The inviter stored a thread frame from `envelope.author`: every other participant gets it,
    /// byte for byte, inside a FORWARD (messages.md 4, step 2), in this same step.
    func forward(_ envelope: Envelope, _ content: ChatForwardMessage.Content, _ thread: ThreadID?, _ step: StoreStep) throws {
        guard let thread, let ch = try step.challenge(thread), ch.inviter == me, envelope.author != me else { return }
        // The author's MESSAGE is kept, byte for byte, to forward again on a GAP_REQUEST (5.2).
        if case .message = content { try step.keepThreadFrame(envelope.messageID.bytes, envelope: envelope.bytes) }
        let payload = ChatForwardMessage(challengeID: thread, inner: envelope, content: content).payload
        let others = ch.participants.map(\.key).filter { $0 != me && $0 != envelope.author }
        for key in others { try step.enqueue(outbox.frame(.chatForward, to: key, payload: payload, in: step)) }
        if !others.isEmpty { outbox.send(to: others, in: step) }
    }

    /// A FORWARD from a thread's inviter: the decoder checked the inner frame (type, thread,
    /// addressed to the forwarder, its signature); here: the forwarder is the inviter of a challenge
    /// we take part in, and the inner author is one of its participants. Then the inner frame is
    /// handled as if its author had sent it, deduplicated by its own id.
    func receiveForward(_ envelope: Envelope, handled: HandledMark, _ step: StoreStep) throws -> Outcome {
        let f = try ChatForwardMessage(payload: envelope.payload, forwarder: envelope.author)
        guard let ch = try step.challenge(f.challengeID), ch.inviter == envelope.author, ch.participant(me) != nil,
              ch.participant(f.inner.author) != nil, f.inner.author != me else {
            logger.info("forwarded frame refused", metadata: ["from": "\(NodeID(publicKey: envelope.author).short)"])
            return .drop
        }
        let c = try step.threadConversation(challengeId: f.challengeID, nowMs: now())
        let inner = f.inner
        if try step.wasHandled(inner.messageID.bytes) { return .acknowledge }
        let innerMark = outbox.handledMark(inner, fromFriend: outbox.isFriend(inner.author, in: step), in: step)
        let outcome: Outcome
        switch f.content {
        case .message(let body): outcome = try receiveMessage(inner, body, c, handled: innerMark, step)
        case .reaction(let r):
            try receiveReaction(inner, r, c, handled: innerMark, step)
            outcome = .acknowledge
        case .retract(let r):
            try receiveRetract(inner, r, c, handled: innerMark, step)
            outcome = .acknowledge
        case .fileOffer:
            // The file flow takes every FORWARD around a FILE_OFFER before this one (messages.md 7.7).
            return .drop
        }
        // The FORWARD is handled only with what it carried: one withheld (over a bound) comes again.
        if outcome == .acknowledge { try mark(handled, step) }
        return outcome
    }
}

extension JSONValue {
    /// An instant (ms since the epoch) as ISO 8601 in the local time zone, with its offset.
    static func isoLocal(_ ms: Int64) -> JSONValue { .string(ISOTime.local(ms)) }
}
