import Foundation
import SwiftProtobuf
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// The control-socket methods of messages (Protocol/control.md): send, list, react, retract,
/// cheer, search and the per-friend read-receipt setting. Each intent is one step: its rows and the
/// frames they send commit together, and the answer follows the commit (durable before answered).
extension MessageService {
    nonisolated static func usage(_ text: String) -> NodeError { .invalidArgument(text) }

    /// A friend named by Tandem ID or by display name (a unique match among friends).
    func friendKey(_ params: JSONValue, _ param: String, _ r: StoreReading) throws -> [UInt8] {
        guard let text = params[param]?.stringValue, !text.isEmpty else { throw Self.usage("missing parameter '\(param)'") }
        let key = try ContactNames.resolve(text, among: [.friend], in: r, anyID: true)
        guard key != me else { throw Self.usage("that is your own ID") }
        guard outbox.isFriend(key, in: r) else {
            throw NodeError.refused("\(NodeID(publicKey: key).display) is not your friend (tandem friend request ID first)")
        }
        return key
    }

    /// A stored message named by its id or a unique prefix of at least 6 hex digits.
    func message(_ params: JSONValue, _ param: String, _ r: StoreReading) throws -> StoredMessage {
        guard let text = params[param]?.stringValue?.lowercased(), !text.isEmpty else { throw Self.usage("missing parameter '\(param)'") }
        guard text.count >= 6, text.count <= 32, text.allSatisfy(\.isHexDigit) else {
            throw Self.usage("'\(ChatText.terminalSafe(text))' is not a message id (hex digits, at least 6; see tandem message list)")
        }
        let found = try r.messages(idPrefix: text)
        guard let first = found.first else { throw NodeError.nothingToActOn("no message \(text) (see tandem message list)") }
        guard found.count == 1 else { throw Self.usage("'\(text)' matches several messages; give more digits") }
        return first
    }

    func text(_ params: JSONValue) throws -> String {
        guard let raw = params["text"]?.stringValue else { throw Self.usage("missing parameter 'text'") }
        do {
            return try ChatText.normalised(raw)
        } catch {
            throw Self.usage("the message cannot be sent: \(error.description) (at most \(ChatLimits.textBytes) bytes of UTF-8)")
        }
    }

    /// Where our frames about conversation `c` go: the friend; in a thread, the inviter (who
    /// forwards them), or, when we are the inviter, every other participant (messages.md 4).
    func recipients(_ c: ConversationRow, _ r: StoreReading) throws -> [[UInt8]] {
        if let peer = c.peer { return [Array(peer)] }
        guard let thread = c.challengeId.map({ Array($0) }), let ch = try r.challenge(thread) else {
            throw NodeError.nothingToActOn("no such challenge")
        }
        guard ch.inviter == me else { return [ch.inviter] }
        let others = ch.participants.map(\.key).filter { $0 != me }
        guard !others.isEmpty else { throw NodeError.nothingToActOn("nobody else takes part in that challenge") }
        return others
    }

    /// One frame for each recipient, all signed under one message id (the first frame's): every
    /// copy of a thread message carries the same id and payload (messages.md 4 step 3).
    /// `memo`: what the send batch knows of its recipients (a contact read less per frame).
    /// `linkAuthenticated`: held unsigned, signed at the egress where it must be (a direct MESSAGE,
    /// README 5.4; `Outbox.frame`).
    func frames(_ type: MessageType, to recipients: [[UInt8]], payload: [UInt8], _ step: StoreStep,
                memo: SendBatchMemo? = nil, linkAuthenticated: Bool = false) -> [OutboxItem] {
        let id = MessageID.random()
        return recipients.map { key in
            let friend = memo?.isFriend(key) { outbox.isFriend($0, in: step) }
            return outbox.frame(type, to: key, payload: payload, messageID: id, recipientIsFriend: friend,
                                linkAuthenticated: linkAuthenticated, in: step)
        }
    }

    /// What `describe` shows besides the message row, read for a whole page at once (`message list`):
    /// a query per message shown for its reactions and another for its file cost ~80 k instructions
    /// a message (messages.md 11.6).
    struct PageExtras {
        var reactions: [Data: [StoredReaction]]
        var files: [Data: StoredFileTransfer]
    }

    func pageExtras(_ rows: [StoredMessage], _ r: StoreReading) throws -> PageExtras {
        let ids = rows.map { Array($0.id) }
        return PageExtras(reactions: try r.reactions(messageIds: ids),
                          files: health.read("read a file transfer", or: [:]) { try r.fileTransfers(messageIds: ids) })
    }

    func describe(_ m: StoredMessage, _ r: StoreReading, names: inout [[UInt8]: String], page: PageExtras? = nil) throws -> JSONValue {
        let reactions = try page.map { $0.reactions[m.id] ?? [] } ?? r.reactions(messageId: Array(m.id))
        let author = Array(m.author)
        let authorName = names[author] ?? name(author, r)
        names[author] = authorName
        return .object([
            "id": .string(hexString(Array(m.id))),
            "author": idText(author),
            "author_name": .string(authorName),
            "me": .bool(Array(m.author) == me),
            "text": .string(m.text),
            "sent_at": JSONValue.isoLocal(m.sentAtMs),
            "state": .string(m.retracted ? "retracted" : m.state.rawValue),
            "retracted": .bool(m.retracted),
            "seq": .int(m.seq),
            "reply_to": m.replyTo.map { .string(hexString(Array($0))) } ?? .null,
            "reactions": .array(reactions.map { .object(["author": idText(Array($0.author)), "emoji": .string($0.emoji)]) }),
            "file": page.map { page in page.files[m.id].map { fileField($0, r) } ?? .null } ?? fileField(m, r),
        ])
    }

    nonisolated public func registerControlMethods(on router: ControlRouter) {
        // Through the send lane: sends that arrive together share one step (group commit).
        router.register("message.send") { [self] params in try await submitSend(params) }
        router.registerOnCore(in: store, publishing: events, "message.list") { [self] params, step in try list(params, step) }
        router.registerOnCore(in: store, publishing: events, "message.react") { [self] params, step in try react(params, step) }
        router.registerOnCore(in: store, publishing: events, "message.retract") { [self] params, step in try retract(params, step) }
        router.registerOnCore(in: store, publishing: events, "message.cheer") { [self] params, step in try cheer(params, step) }
        router.registerOnCore(in: store, publishing: events, "message.settings") { [self] params, step in try settings(params, step) }
        registerInbox(on: router)
        router.registerOnCore("message.search") { [self] params in
            guard let text = params["text"]?.stringValue, !text.trimmingCharacters(in: .whitespaces).isEmpty else {
                throw Self.usage("missing parameter 'text'")
            }
            let friend = try params["friend"]?.stringValue.map { _ in try friendKey(params, "friend", store) }
            let limit = Int(clamping: params["limit"]?.intValue ?? 50)
            let hits = try store.searchMessages(text, friend: friend, limit: max(1, min(limit, 500)))
            var names: [[UInt8]: String] = [:]
            for author in Set(hits.map(\.author)) { names[author] = name(author, store) }
            return .object(["hits": .array(hits.map { h in
                .object(["id": .string(hexString(h.messageId)), "author": idText(h.author), "author_name": .string(names[h.author] ?? ""),
                         "sent_at": JSONValue.isoLocal(h.sentAtMs), "snippet": .string(h.snippet)])
            })])
        }
    }

    // MARK: - Intents

    /// Per-friend settings: read receipts, mute, the disappearing timer (sent to the friend: both
    /// sides enforce it, last writer wins). Answers the settings as they stand.
    func settings(_ params: JSONValue, _ step: StoreStep) throws -> JSONValue {
        let key = try friendKey(params, "friend", step)
        let receipts = params["read_receipts"]?.boolValue
        let muted = params["muted"]?.boolValue
        let timer = params["disappear_after_ms"]?.intValue
        if params["read_receipts"] != nil, receipts == nil { throw Self.usage("'read_receipts' is true or false") }
        if params["muted"] != nil, muted == nil { throw Self.usage("'muted' is true or false") }
        if let timer, timer != 0, !ChatLimits.disappearAfterMs.contains(UInt64(max(0, timer))) {
            throw Self.usage("a disappearing timer is off (0) or from 30 s to 365 days")
        }
        var c = try step.directConversation(peer: key, nowMs: now())
        guard let cid = c.id else { throw MessageStoreError.noSuchConversation }
        if let receipts { try step.setReadReceipts(peer: key, receipts, nowMs: now()) }
        if let muted { try step.setMuted(conversationId: cid, muted) }
        if let timer, timer != c.disappearAfterMs {
            let version = c.settingsVersion + 1
            let m = ConversationSettingsMessage(disappearAfterMs: UInt64(timer), version: UInt64(version))
            let frame = outbox.frame(.conversationSettings, to: key, payload: m.payload, in: step)
            try step.setDisappearingTimer(conversationId: cid, afterMs: timer, version: version, author: me, frame: frame)
            outbox.send(to: [key], in: step)
        }
        c = try step.conversation(id: cid) ?? c
        return .object(["friend": idText(key), "read_receipts": .bool(c.readReceipts), "muted": .bool(c.muted),
                        "disappear_after_ms": .int(c.disappearAfterMs)])
    }

    /// A message sent in `step` (a file offer's): its row and frames, handed to the outbox.
    func send(_ params: JSONValue, _ step: StoreStep) throws -> JSONValue {
        let (answer, to) = try queueSend(params, step)
        outbox.send(to: to, in: step)
        return answer
    }

    /// One `message.send` inside the lane's step (`drainSends`): the message row and its frames.
    /// Returns the answer and the recipients, whose frames the lane hands to the outbox once for
    /// the whole batch (messages.md 11.5).
    /// `memo`: the batch's knowledge of its recipients, when the send is one of a batch.
    func queueSend(_ params: JSONValue, _ step: StoreStep, memo: SendBatchMemo? = nil) throws -> (answer: JSONValue, to: [[UInt8]]) {
        let text = try text(params)
        let c: ConversationRow
        if let thread = params["challenge"]?.stringValue {
            guard let id = parseHex(thread.lowercased()), id.count == 16 else {
                throw Self.usage("'\(ChatText.terminalSafe(thread))' is not a challenge id (32 hex digits)")
            }
            guard let ch = try step.challenge(id), ch.participant(me) != nil else { throw NodeError.nothingToActOn("no such challenge") }
            c = try step.threadConversation(challengeId: id, nowMs: now())
        } else {
            let key: [UInt8]
            if let memo, let name = params["to"]?.stringValue {
                key = try memo.friend(named: name) { try friendKey(params, "to", step) }
                c = try memo.directConversation(key) { try step.directConversation(peer: key, nowMs: now()) }
            } else {
                key = try friendKey(params, "to", step)
                c = try step.directConversation(peer: key, nowMs: now())
            }
        }
        let to = try recipients(c, step)
        guard let cid = c.id else { throw MessageStoreError.noSuchConversation }
        var replyTo: [UInt8]?
        if params["reply_to"]?.stringValue != nil {
            let target = try message(params, "reply_to", step)
            guard target.conversationId == cid else { throw Self.usage("the message replied to is in another conversation") }
            replyTo = Array(target.id)
        }
        guard c.ownSeq < Int64(ChatLimits.maximumCounter), c.maxLamport < Int64(ChatLimits.maximumCounter) else {
            throw NodeError.refused("this conversation has run out of sequence numbers")
        }
        let seq = UInt64(c.ownSeq + 1), lamport = UInt64(c.maxLamport + 1)
        let sentAt = now()
        let timer = ChatLimits.disappearAfterMs.contains(UInt64(max(0, c.disappearAfterMs))) ? c.disappearAfterMs : 0
        let body = ChatMessageBody(challengeID: c.challengeId.map { Array($0) }, seq: seq, lamport: lamport, text: text,
                                   replyTo: replyTo, sentAtMs: UInt64(max(1, sentAt)), expiresAfterMs: UInt64(timer))
        // Made after `sentAt` was read: sent_at_ms is never later than the envelope's created_at. A
        // direct message is held unsigned and signed only where it must be (mail, an older friend's
        // link); a thread's is forwarded by the inviter, so it is signed now (README 5.4).
        let frames = frames(.chatMessage, to: to, payload: body.payload, step, memo: memo, linkAuthenticated: c.challengeId == nil)
        guard var first = frames.first else { throw MessageStoreError.noSuchConversation }
        let id = Array(first.messageId)
        let row = StoredMessage(id: id, conversationId: cid, author: me, seq: seq, lamport: lamport, sentLamport: lamport, text: text,
                                replyTo: replyTo, sentAtMs: sentAt, receivedAtMs: sentAt, state: .queued,
                                expiresAtMs: timer > 0 ? sentAt.addingSaturated(timer) : nil)
        // In a batch, to a friend whose link is up: the frame is stored as its first write leaves
        // it, and handed to the outbox with the batch (no read back and update of the row).
        var scheduled = false
        if memo != nil, c.peer != nil, frames.count == 1, let s = outbox.scheduledAsWritten(first) {
            first = s
            scheduled = true
        }
        try step.sendMessage(row, frame: first)
        if scheduled, let memo { memo.scheduled.append(first) }
        for f in frames.dropFirst() { try step.enqueue(f) }
        let sent: [String: JSONValue] = ["id": .string(hexString(id)), "to": .array(to.map(idText)), "conversation": conversationText(c),
                                         "seq": .int(Int64(seq))]
        // In a batch, stored with the batch's other `message.sent` rows in one INSERT (`drainSends`).
        if let memo { memo.events.append(events.record("message.sent", sent)) } else { events.emit("message.sent", sent, in: step) }
        if let memo, let peer = c.peer { memo.sent(to: Array(peer), seq: Int64(seq), lamport: Int64(lamport)) }
        return (.object(["id": .string(hexString(id)), "seq": .int(Int64(seq)), "sent_at": JSONValue.isoLocal(sentAt)]), to)
    }

    /// The conversation's newest messages (or those before `before`), newest last; the friend's
    /// messages shown are read here, and a READ goes to the friend when the reciprocal rule allows.
    func list(_ params: JSONValue, _ step: StoreStep) throws -> JSONValue {
        let c: ConversationRow
        var peer: [UInt8]?
        if let thread = params["challenge"]?.stringValue {
            guard let id = parseHex(thread.lowercased()), id.count == 16, let found = try step.conversation(challengeId: id) else {
                throw NodeError.nothingToActOn("no thread for challenge '\(ChatText.terminalSafe(thread))'")
            }
            c = found
        } else {
            let key = try friendKey(params, "friend", step)
            peer = key
            c = try step.directConversation(peer: key, nowMs: now())
        }
        guard let cid = c.id else { throw MessageStoreError.noSuchConversation }
        let limit = Int(clamping: params["limit"]?.intValue ?? 50)
        guard (1...1000).contains(limit) else { throw Self.usage("--limit is from 1 to 1000") }
        var before: [UInt8]?
        if params["before"]?.stringValue != nil {
            let anchor = try message(params, "before", step)
            guard anchor.conversationId == cid else { throw Self.usage("that message is in another conversation") }
            before = Array(anchor.id)
        }
        let rows = try step.messages(conversationId: cid, before: before, limit: limit).filter { $0.state != .held }
        var names: [[UInt8]: String] = [:]
        let page = try pageExtras(rows, step)
        let answer = JSONValue.object(["conversation": conversationText(c),
                                       "messages": .array(try rows.map { try describe($0, step, names: &names, page: page) })])
        if let peer {
            let shown = rows.filter { Array($0.author) == peer }.map(\.seq).max() ?? 0
            if shown > 0 {
                let due = ReadReceiptRule.receiptDue(shownSeq: UInt64(shown), lastSentSeq: UInt64(max(0, c.readSentUpToSeq)),
                                                     enabledForFriend: ReadReceiptRule.shouldSend(enabledForFriend: c.readReceipts,
                                                                                                 conversationIsDirect: true))
                let frame = due.map {
                    outbox.frame(.readReceipt, to: peer, payload: ReadReceiptMessage(readUpToSeq: $0, readAtMs: UInt64(max(0, now()))).payload,
                                 in: step)
                }
                try step.markReadLocally(conversationId: cid, peer: peer, upToSeq: shown, frame: frame)
                if frame != nil { outbox.send(to: [peer], in: step) }
            }
        }
        return answer
    }

    func react(_ params: JSONValue, _ step: StoreStep) throws -> JSONValue {
        let m = try message(params, "id", step)
        let emoji = (params["emoji"]?.stringValue ?? "").precomposedStringWithCanonicalMapping
        guard ChatText.isEmoji(emoji) else { throw Self.usage("an emoji is at most \(ChatLimits.emojiBytes) bytes, with no spaces or controls") }
        guard !m.retracted else { throw NodeError.refused("that message was retracted") }
        guard let c = try step.conversation(id: m.conversationId) else { throw MessageStoreError.noSuchConversation }
        let to = try recipients(c, step)
        let r = ChatReactionMessage(challengeID: c.challengeId.map { Array($0) }, messageID: Array(m.id), emoji: emoji)
        let frames = frames(.chatReaction, to: to, payload: r.payload, step)
        try step.setReaction(messageId: Array(m.id), author: me, emoji: emoji, atMs: now(), frame: frames.first)
        for f in frames.dropFirst() { try step.enqueue(f) }
        outbox.send(to: to, in: step)
        return .object(["id": .string(hexString(Array(m.id))), "emoji": .string(emoji)])
    }

    func retract(_ params: JSONValue, _ step: StoreStep) throws -> JSONValue {
        let m = try message(params, "id", step)
        guard Array(m.author) == me else { throw NodeError.refused("only its author can retract a message") }
        guard !m.retracted else { throw NodeError.nothingToActOn("that message is already retracted") }
        guard let c = try step.conversation(id: m.conversationId) else { throw MessageStoreError.noSuchConversation }
        let to = try recipients(c, step)
        let r = RetractMessage(challengeID: c.challengeId.map { Array($0) }, messageID: Array(m.id))
        let frames = frames(.retract, to: to, payload: r.payload, step)
        try step.retractMessage(Array(m.id), author: me, frame: frames.first)
        for f in frames.dropFirst() { try step.enqueue(f) }
        outbox.send(to: to, in: step)
        return .object(["id": .string(hexString(Array(m.id))), "retracted": true])
    }

    /// A cheer on a ledger entry (by its seq, `tandem ledger`): sent to the friend whose result it
    /// is (`friend`, or the entry's only other participant who is a friend).
    func cheer(_ params: JSONValue, _ step: StoreStep) throws -> JSONValue {
        guard let seq = params["entry"]?.intValue else { throw Self.usage("missing parameter 'entry' (a ledger entry's number)") }
        guard let entry = try step.ledger().first(where: { $0.entry.seq == seq })?.entry else {
            throw NodeError.nothingToActOn("no ledger entry \(seq) (see tandem ledger)")
        }
        guard let record = try? Tandem_V1_OutcomeRecord(serializedBytes: entry.record), record.challengeID.count == 16 else {  // the error is said below
            throw NodeError.failed("ledger entry \(seq) does not hold a readable outcome")  // a damaged row: said, not trapped on
        }
        let others = record.outcomes.map { Array($0.publicKey) }.filter { $0 != me && outbox.isFriend($0, in: step) }
        let subject: [UInt8]
        if params["friend"]?.stringValue != nil {
            subject = try friendKey(params, "friend", step)
            guard others.contains(subject) else { throw Self.usage("that friend has no result in ledger entry \(seq)") }
        } else {
            guard let only = others.first else { throw NodeError.nothingToActOn("ledger entry \(seq) has no result of a friend to cheer") }
            guard others.count == 1 else { throw Self.usage("several friends took part in entry \(seq): name one with --friend") }
            subject = only
        }
        let emoji = (params["emoji"]?.stringValue ?? "👏").precomposedStringWithCanonicalMapping
        guard ChatText.isEmoji(emoji), !emoji.isEmpty else { throw Self.usage("an emoji is at most \(ChatLimits.emojiBytes) bytes, with no spaces or controls") }
        let text: String
        do {
            text = try ChatText.normalised(params["text"]?.stringValue ?? "", maximumBytes: ChatLimits.cheerTextBytes, allowEmpty: true)
        } catch {
            throw Self.usage("the cheer's text: \(error.description)")
        }
        let challengeID = Array(record.challengeID)
        let m = CheerMessage(challengeID: challengeID, subject: subject, emoji: emoji, text: text)
        let frame = outbox.frame(.cheer, to: subject, payload: m.payload, in: step)
        try step.storeCheer(StoredCheer(challengeId: challengeID, subject: subject, author: me, emoji: emoji, text: text, atMs: now()),
                            frame: frame)
        outbox.send(to: [subject], in: step)
        return .object(["entry": .int(seq), "to": idText(subject), "emoji": .string(emoji), "text": .string(text)])
    }
}
