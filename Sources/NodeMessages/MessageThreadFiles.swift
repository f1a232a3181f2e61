import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Files in a challenge's thread (Protocol/messages.md 7.7). An author offers a file once, to the
/// thread's inviter; the inviter stores the offer, forwards the author's envelope byte for byte inside
/// FORWARD to every other participant, fetches the file for itself and, once it holds it whole and
/// checked, serves it to them. Each participant fetches from the node the offer came from
/// (`ThreadFileRoute`), so FILE_REQUEST and FILE_CHUNK stay on links between friends, and checks every
/// chunk against the author's signed `chunk_root` and the whole file against `file_hash`.
extension MessageFiles {
    /// The thread of a stored transfer (nil: a direct conversation).
    func threadOf(_ row: StoredFileTransfer, _ r: StoreReading) -> ThreadID? {
        health.read("read a file's conversation", or: nil) { try r.conversation(id: row.conversationId) }?.challengeId.map { Array($0) }
    }

    /// Whether we relay `author`'s files in `thread`: we are its inviter, and not the author.
    func relaysThread(_ thread: ThreadID, author: [UInt8], _ r: StoreReading) -> Bool {
        guard author != me, let ch = health.read("read a challenge", or: nil, { try r.challenge(thread) }) else { return false }
        return ch.inviter == me
    }

    /// Whether `requester` may fetch our offered file `out`: the friend offered to; in a thread, who
    /// `ThreadFileRoute.mayFetch` allows (as the inviter, every participant).
    func mayFetch(_ requester: [UInt8], _ out: Outgoing, _ r: StoreReading) -> Bool {
        guard let thread = out.thread else { return out.peer == requester }
        guard let ch = health.read("read a challenge", or: nil, { try r.challenge(thread) }) else { return false }
        return ThreadFileRoute.mayFetch(requester: requester, me: me, inviter: ch.inviter, participants: ch.participants.map(\.key), author: me)
    }

    /// After a start: the thread files we relay as inviter and whose offer still lives; one whose
    /// leaf hashes are not stored yet (a crash after it became whole) is hashed again.
    func loadRelays(_ r: StoreReading, nowMs: Int64) {
        let rows = health.read("read the relayed thread files", or: []) { try r.receivedThreadFiles() }
        for row in rows where row.deadlineMs > nowMs {
            guard let offer = row.offer, let path = row.path, let thread = threadOf(row, r),
                  let ch = health.read("read a challenge", or: nil, { try r.challenge(thread) }), ch.inviter == me else { continue }
            let author = offer.messageID.flatMap { id in health.read("read a file's message", or: nil) { try r.message(id) } }
            guard author.map({ Array($0.author) != me }) ?? true else { continue }
            let hasLeaves = health.read("read a file's chunk hashes", or: nil) { try r.fileLeaves(offer.fileID.bytes) } != nil
            if hasLeaves {
                relays[offer.fileID] = Relay(offer: offer, thread: thread, path: path, tree: nil, deadlineMs: row.deadlineMs)
            } else if case .enqueued = relayInput.yield(RelayJob(offer: offer, thread: thread, path: path, deadlineMs: row.deadlineMs)) {
                relayPending[offer.fileID] = thread
            }
        }
    }

    // MARK: - Receiving an offer in a thread

    /// The route of a thread offer `author` signed that came from `sender`, or nil (dropped): a
    /// challenge we hold and take part in, an author among its participants, and the way 4 allows.
    func threadRoute(_ thread: ThreadID, author: [UInt8], sender: [UInt8], _ step: StoreStep) throws -> ThreadFileRoute? {
        guard let ch = try step.challenge(thread) else { return nil }
        return ThreadFileRoute.receive(me: me, inviter: ch.inviter, participants: ch.participants.map(\.key), author: author, sender: sender)
    }

    /// A FORWARD around a FILE_OFFER (the router gives every FORWARD to this flow; the others go on to
    /// the message service). The decoder checked the inner frame (a FILE_OFFER of the same thread,
    /// addressed to the forwarder, not its own, its author's signature); here: the forwarder is the
    /// thread's inviter and the author a participant. Deduplicated by the inner id and by the file id.
    /// False: dropped.
    func receiveForwardedOffer(_ envelope: Envelope, _ step: StoreStep) throws -> Bool {
        let f = try ChatForwardMessage(payload: envelope.payload, forwarder: envelope.author)
        guard case .fileOffer(let offer) = f.content else { return false }
        let inner = f.inner
        guard try threadRoute(f.challengeID, author: inner.author, sender: envelope.author, step) != nil else {
            logger.info("forwarded file offer refused", metadata: ["from": "\(NodeID(publicKey: envelope.author).short)"])
            return false
        }
        if try step.wasHandled(inner.messageID.bytes) { return true }
        let mark = outbox.handledMark(inner, fromFriend: outbox.isFriend(inner.author, in: step), in: step)
        guard try receiveOffer(offer, author: inner.author, sender: envelope.author, envelope: inner, step) else { return false }
        _ = try step.markHandled(mark.messageId, createdAtMs: mark.createdAtMs, windowMs: mark.windowMs, nowMs: mark.nowMs,
                                 fromFriend: mark.fromFriend)
        return true
    }

    /// As the inviter: the author's FILE_OFFER goes to every other participant inside FORWARD, byte for
    /// byte, in this step (messages.md 4 step 2).
    func forwardOffer(_ envelope: Envelope, _ offer: FileOfferMessage, thread: ThreadID, to others: [[UInt8]], _ step: StoreStep) throws {
        guard !others.isEmpty else { return }
        let payload = ChatForwardMessage(challengeID: thread, inner: envelope, content: .fileOffer(offer)).payload
        for key in others { try step.enqueue(outbox.frame(.chatForward, to: key, payload: payload, in: step)) }
        outbox.send(to: others, in: step)
    }

    /// As the inviter: our copy of a file we relay failed (the author cancelled it, it did not match,
    /// our user cancelled it): the participants we forwarded the offer to get FILE_CANCEL `GONE`,
    /// since they fetch from us.
    func cancelRelayed(_ id: FileID, _ t: Incoming, _ step: StoreStep) {
        deferred[id] = nil
        guard t.serves, let thread = t.thread,
              let ch = health.read("read a challenge", or: nil, { try step.challenge(thread) }), ch.inviter == me else { return }
        let others = ch.participants.map(\.key).filter { $0 != me && $0 != t.author }
        guard !others.isEmpty else { return }
        let payload = FileCancelMessage(fileID: id, reason: .gone).payload
        health.attempt("cancel a relayed file") {
            for key in others { try step.enqueue(outbox.frame(.fileCancel, to: key, payload: payload, in: step)) }
        }
        outbox.send(to: others, in: step)
    }

    // MARK: - Serving as the inviter

    /// A FILE_REQUEST for a thread file we relay: served from our whole, checked copy; before we hold
    /// it whole the request waits (the latest per participant) and is answered then.
    func serveRelayed(_ request: FileRequestMessage, from requester: [UInt8], link: PeerLink, _ step: StoreStep) {
        let id = request.fileID
        if var relay = relays[id] {
            guard now() < relay.deadlineMs, request.fits(chunkCount: relay.offer.chunkCount),
                  let ch = health.read("read a challenge", or: nil, { try step.challenge(relay.thread) }), ch.inviter == me,
                  ThreadFileRoute.mayFetch(requester: requester, me: me, inviter: ch.inviter, participants: ch.participants.map(\.key),
                                           author: [])  // relayed: any participant but us
            else { return }
            if relay.tree == nil {
                let packed = health.read("read a file's chunk hashes", or: nil) { try step.fileLeaves(id.bytes) }
                relay.tree = packed.flatMap { ChunkTreeLevels(packedLeaves: $0) }
                guard let tree = relay.tree, tree.count == relay.offer.chunkCount, tree.root == relay.offer.chunkRoot else {
                    logger.error("a relayed file's chunk hashes are missing or wrong", metadata: ["file": "\(id)"])
                    return relayGone(id, step)
                }
                relays[id] = relay
            }
            guard let tree = relay.tree else { return }
            queueRead(request, path: relay.path, size: relay.offer.size, tree: tree, for: requester, link: link)
            return
        }
        // Not whole yet (or being hashed): a chunk we lack is not sent; the request is kept and answered once the file is served.
        let waiting = incoming[id].flatMap { t in t.serves ? t.thread.map { (t.receiver.offer.chunkCount, $0) } : nil }
        guard case let (chunks, thread)? = waiting ?? relayPending[id].map({ (Int.max, $0) }), request.fits(chunkCount: chunks),
              let ch = health.read("read a challenge", or: nil, { try step.challenge(thread) }),
              ThreadFileRoute.mayFetch(requester: requester, me: me, inviter: ch.inviter, participants: ch.participants.map(\.key), author: [])
        else { return }
        deferred[id, default: [:]][requester] = request
    }

    /// A relayed file became whole and matched `file_hash` (in `verified`): hashed once more off the core
    /// for its tree, then served.
    func relayWhenHashed(_ id: FileID, _ t: Incoming, path: String, deadlineMs: Int64, _ step: StoreStep) {
        guard t.serves, let thread = t.thread else { return }
        let job = RelayJob(offer: t.receiver.offer, thread: thread, path: path, deadlineMs: deadlineMs)
        step.afterCommit { [self] in
            if case .dropped = relayInput.yield(job) {
                logger.warning("relay backlog full: a thread's file is not served", metadata: ["file": "\(id)"])
                deferred[id] = nil
            } else {
                relayPending[id] = thread
            }
        }
    }

    /// The relayed file's tree is known (nil: it could not be read, or does not match the offer): it
    /// is served from now on, and the requests that waited are answered.
    func relayReady(_ job: RelayJob, _ hashed: FileDisk.Hashed?) {
        let id = job.offer.fileID
        relayPending[id] = nil
        defer { events.published() }
        guard let hashed, hashed.size == job.offer.size, hashed.fileHash == job.offer.fileHash, hashed.tree.root == job.offer.chunkRoot else {
            logger.warning("a thread's file cannot be served: it is gone or changed", metadata: ["file": "\(id)"])
            return relayGone(id)
        }
        health.attempt("serve a thread's file") {
            try store.step { step in
                try step.keepServedFileLeaves(id.bytes, leaves: hashed.tree.packedLeaves)
                relays[id] = Relay(offer: job.offer, thread: job.thread, path: job.path, tree: hashed.tree, deadlineMs: job.deadlineMs)
                events.emit("message.file_relayed", ["file_id": .string(id.description), "name": .string(job.offer.name),
                                                     "conversation": .string("challenge:" + hexString(job.thread))], in: step)
                for (requester, request) in deferred.removeValue(forKey: id) ?? [:] {
                    guard let link = peers.link(to: requester) else { continue }  // it asks again on the next link
                    serveRelayed(request, from: requester, link: link, step)
                }
            }
        }
    }

    /// A relayed file is no longer served (gone from disk, or its offer ran out): in `step`, or in a
    /// step of its own.
    func relayGone(_ id: FileID, _ step: StoreStep? = nil) {
        relays[id] = nil
        deferred[id] = nil
        relayPending[id] = nil
        health.attempt("stop serving a thread's file") {
            if let step { return try step.endServedFile(id.bytes, nowMs: now()) }
            try store.step { step in try step.endServedFile(id.bytes, nowMs: now()) }
        }
    }

    /// The relayed files whose offer ran out by `nowMs` (in the timer's step).
    func expireRelays(nowMs: Int64, _ step: StoreStep) throws {
        for (id, relay) in relays where nowMs >= relay.deadlineMs {
            relays[id] = nil
            deferred[id] = nil
            try step.endServedFile(id.bytes, nowMs: nowMs)
        }
    }

    /// Hashes each relayed file that became whole, one at a time (a child task of `run()`).
    nonisolated func runRelays() async {
        for await job in relayJobs {
            let hashed = try? await disk.hash(path: job.path)  // nil: gone (sent into the vault, removed): not served, logged in relayReady
            await NodeCore.run { self.relayReady(job, hashed) }
        }
    }
}
