import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// The file frames (0x0509–0x050C) reach this flow, which the router asks before the message
/// service; a blocked author's are dropped before (messages.md 2). So does every FORWARD: one around a
/// FILE_OFFER (a thread's file, 7.7) is handled here, every other goes on to the message service.
extension MessageFiles: FrameFlow {
    package nonisolated func owns(_ type: MessageType) -> Bool {
        type == .fileOffer || type == .fileRequest || type == .fileChunk || type == .fileCancel || type == .chatForward
    }
    package nonisolated var dropsBlockedAuthors: Bool { true }

    /// FILE_CHUNK decoded on the event loop that received it (a friend's link); the core then checks
    /// only what is cheap and hands the chunk to the writing lane, which checks it against the tree
    /// before it writes it (messages.md 11.4).
    package nonisolated static let chunkPreparation = FramePreparation(types: [.fileChunk]) { envelope in
        try? FileChunkMessage(payload: envelope.payload)  // malformed: nil, and the core drops it as before
    }

    package func handle(_ envelope: Envelope, prepared: (any Sendable)?, from link: PeerLink?, _ step: StoreStep) {
        if envelope.type == .fileChunk, let chunk = prepared as? FileChunkMessage, link != nil {
            // Link-authenticated (the verifier accepted it only from its author's link); never mail.
            loadIfNeeded(step)
            return receive(chunk, from: envelope.author, checkedOffCore: true, step)
        }
        handle(envelope, from: link, step)
    }

    package func handle(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) {
        loadIfNeeded(step)
        switch envelope.type {
        case .fileRequest:
            // Direct, not acknowledged: a malformed or unknown one is dropped silently (messages.md 2).
            guard let link, outbox.isFriend(envelope.author, in: step),
                  let request = try? FileRequestMessage(payload: envelope.payload) else { return }  // malformed: dropped (messages.md 2)
            serve(request, from: envelope.author, link: link, step)
        case .fileChunk:
            // Link-authenticated (the verifier accepted it only from its author's link); never mail.
            guard link != nil, let chunk = try? FileChunkMessage(payload: envelope.payload) else { return }  // malformed: dropped
            receive(chunk, from: envelope.author, step)
        case .chatForward where ChatForwardMessage.innerType(payload: envelope.payload) != .fileOffer:
            messages.handle(envelope, from: link, step)  // a thread's message, reaction or retract (or malformed: it says so)
        case .fileOffer, .fileCancel, .chatForward:
            guard outbox.isFriend(envelope.author, in: step) else { return outbox.dropUnrelated(envelope, on: link, step) }
            do {
                if try step.wasHandled(envelope.messageID.bytes) { return outbox.acknowledge(envelope, on: link, step) }
                let handled = outbox.handledMark(envelope, fromFriend: true, in: step)
                switch envelope.type {
                case .fileOffer:
                    let offer = try FileOfferMessage(payload: envelope.payload)
                    guard try receiveOffer(offer, author: envelope.author, sender: envelope.author, envelope: envelope, step) else {
                        return outbox.dropUnrelated(envelope, on: link, step)
                    }
                case .chatForward:
                    guard try receiveForwardedOffer(envelope, step) else { return outbox.dropUnrelated(envelope, on: link, step) }
                default:
                    try receiveCancel(try FileCancelMessage(payload: envelope.payload), from: envelope.author, step)
                }
                _ = try step.markHandled(handled.messageId, createdAtMs: handled.createdAtMs, windowMs: handled.windowMs,
                                         nowMs: handled.nowMs, fromFriend: handled.fromFriend)
                outbox.acknowledge(envelope, on: link, step)
            } catch let e as PayloadError {
                outbox.refuseMalformed(envelope, e, on: link, step)
            } catch {
                logger.error("cannot handle a file frame", metadata: ["type": "\(envelope.type)", "error": "\(error)"])
            }
        default:
            outbox.dropUnrelated(envelope, on: link, step)
        }
    }

    /// A link to `key` came up: what we receive from it is asked for again at once (what was in
    /// flight on a lost link is not coming).
    package func linkUp(_ key: [UInt8], _ step: StoreStep) {
        loadIfNeeded(step)
        for (id, var t) in incoming where t.peer == key {
            t.receiver.linkLost()
            let actions = t.receiver.tick(nowMs: now())
            incoming[id] = t
            perform(actions, id, step)
        }
    }

    // MARK: - Receiving

    func fields(_ id: FileID, _ t: Incoming) -> [String: JSONValue] {
        var f: [String: JSONValue] = [
            "file_id": .string(id.description), "direction": "in", "from": idText(t.author), "name": .string(t.receiver.offer.name),
            "size": .int(Int64(t.receiver.offer.size)), "message_id": t.messageID.map { .string(hexString($0)) } ?? .null,
        ]
        if let thread = t.thread {
            f["conversation"] = .string("challenge:" + hexString(thread))
            f["via"] = idText(t.peer)  // the node the chunks come from
        }
        return f
    }

    /// A FILE_OFFER `author` signed, that came from `sender` (the author, or a thread's inviter inside
    /// FORWARD): in a direct conversation only from the author itself; in a thread as `ThreadFileRoute`
    /// allows. Stored within the bounds (else answered FILE_CANCEL `TOO_LARGE` and not stored), fetched
    /// from the node it came from at once when within the auto-accept limit — and always by a thread's
    /// inviter, who forwards `envelope` to the other participants and serves them the file (7.7).
    /// False: not ours to take (dropped).
    func receiveOffer(_ offer: FileOfferMessage, author: [UInt8], sender: [UInt8], envelope: Envelope?, _ step: StoreStep) throws -> Bool {
        var route: ThreadFileRoute?
        if let thread = offer.challengeID {
            guard let r = try threadRoute(thread, author: author, sender: sender, step) else { return false }
            route = r
        } else if sender != author {
            return false
        }
        let source = route?.fetchFrom ?? author
        if try step.fileTransfer(offer.fileID.bytes) != nil { return true }  // a second copy
        let (fromPeer, all) = try step.pendingIncomingFileTotals(peer: source)
        let size = Int64(offer.size)
        guard fromPeer < limits.pendingPerFriend, all.count < limits.pendingTotal,
              all.bytes.addingSaturated(size) <= limits.pendingBytesTotal else {
            let cancel = FileCancelMessage(fileID: offer.fileID, reason: .tooLarge)
            try step.enqueue(outbox.frame(.fileCancel, to: source, payload: cancel.payload, in: step))
            outbox.send(to: [source], in: step)
            events.emit("message.file_refused", ["file_id": .string(offer.fileID.description), "from": idText(author),
                                                 "name": .string(offer.name), "size": .int(size), "reason": "too many pending files"],
                        in: step)
            return true
        }
        let c = try offer.challengeID.map { try step.threadConversation(challengeId: $0, nowMs: now()) }
            ?? step.directConversation(peer: author, nowMs: now())
        guard let cid = c.id else { throw MessageStoreError.noSuchConversation }
        let nowMs = now()
        let deadline = nowMs.addingSaturated(limits.offerLifetimeMs)
        let row = StoredFileTransfer(offer: offer, conversationId: cid, direction: .incoming, peer: source,
                                     path: partialPath(offer.fileID), nowMs: nowMs, deadlineMs: deadline)
        guard try step.storeFileOffer(row) else { return true }
        let receiver = FileReceiver(offer: offer, nowMs: nowMs, deadlineMs: deadline, window: limits.window, refill: limits.refillChunks,
                                    requestTimeoutMs: limits.requestTimeoutMs)
        let t = Incoming(receiver: receiver, peer: source, author: author, thread: offer.challengeID, serves: route?.serves ?? false,
                         partial: partialPath(offer.fileID), messageID: offer.messageID, durable: Array(row.bitmap))
        incoming[offer.fileID] = t
        if let route, let thread = offer.challengeID, let envelope {
            try forwardOffer(envelope, offer, thread: thread, to: route.forwardTo, step)
        }
        let auto = t.serves || size <= autoAcceptBytes(author, step)
        var f = fields(offer.fileID, t)
        f["auto_accept"] = .bool(auto)
        events.emit("message.file_offered", f, in: step)
        if auto { try accept(offer.fileID, step) }
        return true
    }

    /// A FILE_OFFER straight from its author (a friend), with no envelope to forward.
    func receiveOffer(_ offer: FileOfferMessage, from author: [UInt8], _ step: StoreStep) throws {
        _ = try receiveOffer(offer, author: author, sender: author, envelope: nil, step)
    }

    /// The user (or the auto-accept setting) accepts: the first chunks are asked for.
    package func accept(_ id: FileID, _ step: StoreStep) throws {
        guard var t = incoming[id] else { throw NodeError.nothingToActOn("no file offer \(id) waiting") }
        let actions = t.receiver.accept(nowMs: now())
        guard t.receiver.phase == .receiving else { throw NodeError.nothingToActOn("that file is not waiting to be accepted") }
        incoming[id] = t
        try step.setFileProgress(id.bytes, state: .receiving, bitmap: t.durable, durable: true, nowMs: now())
        perform(actions, id, step)
    }

    /// The user cancels (an offer waiting, or a transfer under way), either direction.
    package func cancel(_ id: FileID, _ step: StoreStep) throws {
        if var t = incoming[id] {
            let actions = t.receiver.cancel()
            incoming[id] = t
            perform(actions, id, step)
            return
        }
        if let out = outgoing[id] {
            outgoing[id] = nil
            try step.endOutgoingFile(id.bytes, state: .failed, failure: "cancelled", nowMs: now())
            let cancel = FileCancelMessage(fileID: id, reason: .byUser)
            // In a thread: everyone the offer went to (as the inviter, every participant).
            let to = try out.thread.flatMap { try step.challenge($0) }
                .map { ThreadFileRoute.offerRecipients(me: me, inviter: $0.inviter, participants: $0.participants.map(\.key)) } ?? [out.peer]
            for key in to { try step.enqueue(outbox.frame(.fileCancel, to: key, payload: cancel.payload, in: step)) }
            outbox.send(to: to, in: step)
            events.emit("message.file_failed", ["file_id": .string(id.description), "direction": "out", "reason": "cancelled",
                                                "to": idText(out.peer)], in: step)
            return
        }
        throw NodeError.nothingToActOn("no transfer \(id) under way")
    }

    /// FILE_CANCEL from the friend: our offer to it (it declined, or gave up) or its offer to us ends.
    func receiveCancel(_ m: FileCancelMessage, from author: [UInt8], _ step: StoreStep) throws {
        let reason = Self.reasonText(m.reason)
        if let thread = outgoing[m.fileID]?.thread, let ch = try step.challenge(thread), ch.inviter == me {
            // Our offer to a whole thread: one participant declining ends nothing for the others.
            events.emit("message.file_declined", ["file_id": .string(m.fileID.description), "by": idText(author), "reason": .string(reason)],
                        in: step)
        } else if let out = outgoing[m.fileID], out.peer == author {
            outgoing[m.fileID] = nil
            try step.endOutgoingFile(m.fileID.bytes, state: .failed, failure: reason, nowMs: now())
            events.emit("message.file_failed", ["file_id": .string(m.fileID.description), "direction": "out", "reason": .string(reason),
                                                "to": idText(author)], in: step)
        } else if var t = incoming[m.fileID], t.peer == author {
            t.receiver.cancelledBySender(m.reason)
            incoming[m.fileID] = nil
            fail(m.fileID, t, reason: reason, step)
        }
    }

    nonisolated static func reasonText(_ r: FileCancelMessage.Reason) -> String {
        switch r {
        case .unspecified: "unspecified"
        case .byUser: "cancelled"
        case .tooLarge: "too large"
        case .gone: "gone"
        case .badData: "bad data"
        case .expired: "expired"
        }
    }

    /// A FILE_CHUNK: checked by the receiver machine; a good one goes to the writing lane. With
    /// `checkedOffCore`, its hash is checked there, before it is written (`chunksChecked`,
    /// `chunkFailedCheck` report back); else here, on the core.
    package func receive(_ chunk: FileChunkMessage, from author: [UInt8], checkedOffCore: Bool = false, _ step: StoreStep) {
        guard var t = incoming[chunk.fileID], t.peer == author else { return }  // not ours to take: dropped
        let result = checkedOffCore ? t.receiver.receiveUnchecked(chunk, nowMs: now()) : t.receiver.receive(chunk, nowMs: now())
        switch result {
        case .success(let actions):
            t.lastChunkMs = now()
            incoming[chunk.fileID] = t
            perform(actions, chunk.fileID, step)
        case .failure(let refusal):
            incoming[chunk.fileID] = t
            guard refusal.reason == .badHash else { return }
            badChunk(chunk.fileID, index: chunk.index, from: author, giveUp: refusal.giveUp, step)
        }
    }

    /// A chunk failed its path (refused, counted): the transfer ends at the 16th, else it is asked again.
    private func badChunk(_ id: FileID, index: Int, from author: [UInt8], giveUp: Bool, _ step: StoreStep) {
        guard let t = incoming[id] else { return }
        logger.info("file chunk refused: its path does not verify", metadata: ["file": "\(id)", "index": "\(index)"])
        events.emit("message.file_bad_chunk", ["file_id": .string(id.description), "from": idText(author),
                                               "index": .int(Int64(index)), "bad_chunks": .int(Int64(t.receiver.badChunks))],
                    in: step)
        if giveUp {
            perform([.cancel(.badData)], id, step)
        } else {
            // Asked again at once (the window has room now).
            perform(t.receiver.phase == .receiving ? tickActions(id) : [], id, step)
        }
    }

    /// The writing lane found that a chunk received with `checkedOffCore` does not match the tree:
    /// it was not written; refused and counted as on the core.
    func chunkFailedCheck(_ id: FileID, index: Int) {
        guard var t = incoming[id] else { return }
        let result = t.receiver.chunkFailedCheck(index)
        t.unsynced = max(0, t.unsynced - 1)
        incoming[id] = t
        guard case .failure(let refusal) = result else { return }
        defer { events.published() }
        health.attempt("refuse a file chunk") {
            try store.step(syncing: false) { step in badChunk(id, index: index, from: t.peer, giveUp: refusal.giveUp, step) }
        }
    }

    private func tickActions(_ id: FileID) -> [FileReceiver.Action] {
        guard var t = incoming[id] else { return [] }
        let a = t.receiver.tick(nowMs: now())
        incoming[id] = t
        return a
    }

    /// Carries out what the receiver machine asked for.
    func perform(_ actions: [FileReceiver.Action], _ id: FileID, _ step: StoreStep) {
        for action in actions {
            guard let t = incoming[id] else { return }
            switch action {
            case .request(let ranges):
                guard let link = peers.link(to: t.peer) else { continue }  // asked again on the next link
                let payload = FileRequestMessage(fileID: id, ranges: ranges).payload
                step.afterCommit { _ = link.send(type: .fileRequest, payload: payload) }
            case .write(let index, let offset, let data):
                incoming[id]?.unsynced += 1
                let sync = (t.unsynced + 1) >= limits.syncEveryChunks || t.receiver.everyChunkReceived
                disk.write(.init(fileID: id, path: t.partial, index: index, offset: offset, data: data, syncAfter: sync))
            case .checkAndWrite(let index, let offset, let data, let check):
                incoming[id]?.unsynced += 1
                let sync = (t.unsynced + 1) >= limits.syncEveryChunks || t.receiver.everyChunkReceived
                if !disk.write(.init(fileID: id, path: t.partial, index: index, offset: offset, data: data, syncAfter: sync, check: check)) {
                    incoming[id]?.receiver.chunkLost(index)  // asked again at the next tick
                    incoming[id]?.unsynced -= 1
                }
            case .hashWholeFile:
                disk.write(.init(fileID: id, path: t.partial, verify: t.receiver.offer.fileHash, name: t.receiver.offer.name))
            case .finish:
                break  // done when the verify job reports the file in place
            case .cancel(let reason):
                incoming[id] = nil
                let cancel = FileCancelMessage(fileID: id, reason: reason)
                health.attempt("cancel a file transfer") {
                    try step.enqueue(outbox.frame(.fileCancel, to: t.peer, payload: cancel.payload, in: step))
                }
                outbox.send(to: [t.peer], in: step)
                fail(id, t, reason: Self.reasonText(reason), step)
            }
        }
    }

    /// The transfer failed: its row says why, its partial file goes.
    func fail(_ id: FileID, _ t: Incoming, reason: String, _ step: StoreStep) {
        incoming[id] = nil
        cancelRelayed(id, t, step)
        health.attempt("record a failed file transfer") {
            try step.setFileProgress(id.bytes, state: .failed, bitmap: t.durable, failure: reason, durable: true, nowMs: now())
        }
        var f = fields(id, t)
        f["reason"] = .string(reason)
        events.emit("message.file_failed", f, in: step)
        disk.write(.init(fileID: id, path: t.partial, remove: true))
    }

    /// The syncing lane synced these chunks: their bits are stored (and progress told).
    func chunksDurable(_ id: FileID, indices: [Int], bytes: Int64) {
        guard var t = incoming[id] else { return }
        // Those checked by the writing lane matched the tree (only such are written): now held.
        let actions = t.receiver.chunksChecked(indices, nowMs: now())
        for i in indices { t.durable[i / 8] |= 1 << UInt8(i % 8) }
        t.unsynced = max(0, t.unsynced - indices.count)
        let count = t.durable.reduce(0) { $0 + $1.nonzeroBitCount }
        let percent = count * 100 / max(1, t.receiver.offer.chunkCount)
        let report = percent != t.reportedPercent
        t.reportedPercent = percent
        incoming[id] = t
        defer { events.published() }
        health.attempt("record a file's progress") {
            try store.step(syncing: false) { step in
                let state: StoredFileTransfer.State = t.receiver.phase == .verifying ? .verifying : .receiving
                try step.setFileProgress(id.bytes, state: state, bitmap: t.durable, durable: false, nowMs: now())
                try step.addFileBytesMoved(id.bytes, bytes)
                perform(actions, id, step)  // the last chunk checked: the whole file is hashed
                guard report else { return }
                var f = fields(id, t)
                f["percent"] = .int(Int64(percent))
                f["bytes_received"] = .int(try step.fileBytesMoved(id.bytes))
                events.emit("message.file_progress", f, in: step)
            }
        }
    }

    /// The writing or syncing lane could not write or sync (disk full, say): the transfer fails.
    func writeFailed(_ id: FileID, _ error: String) {
        guard let t = incoming[id] else { return }
        logger.error("cannot write a received file", metadata: ["file": "\(id)", "error": "\(error)"])
        defer { events.published() }
        health.attempt("fail a file transfer") {
            try store.step { step in
                incoming[id] = t
                perform([.cancel(.unspecified)], id, step)
            }
        }
    }

    /// The whole file was hashed and synced (and moved into place when it matched).
    func verified(_ id: FileID, hash: [UInt8], placedAt path: String?) {
        guard var t = incoming[id] else { return }
        let actions = t.receiver.wholeFileHashed(hash)
        incoming[id] = t
        defer { events.published() }
        health.attempt("finish a file transfer") {
            try store.step { step in
                guard actions == [.finish], let path else {
                    perform(actions.isEmpty ? [.cancel(.badData)] : actions, id, step)
                    return
                }
                incoming[id] = nil
                try step.setFileProgress(id.bytes, state: .complete, bitmap: t.durable, path: path, durable: true, nowMs: now())
                var f = fields(id, t)
                f["path"] = .string(path)
                f["bytes_received"] = .int(try step.fileBytesMoved(id.bytes))
                events.emit("message.file_received", f, in: step)
                relayWhenHashed(id, t, path: path, deadlineMs: t.receiver.deadlineMs, step)
                if let wanted = try step.fileVaultImport(id.bytes), wanted.itemId == nil {
                    let job = VaultJob(fileID: id, path: path, name: t.receiver.offer.name)
                    step.afterCommit { [self] in
                        if case .dropped = vaultInput.yield(job) { logger.warning("vault import backlog full", metadata: ["file": "\(id)"]) }
                    }
                }
            }
        }
    }

    /// Once a second: deadlines, requests unanswered, unsynced chunks of a stalled transfer,
    /// outgoing offers past their lifetime.
    package func tick() {
        loadIfNeeded(store)
        let nowMs = now()
        defer { events.published() }
        health.attempt("file transfers' timers") {
            try store.step(syncing: false) { step in
                for id in Array(incoming.keys) {
                    guard var t = incoming[id] else { continue }
                    let actions = t.receiver.tick(nowMs: nowMs)
                    incoming[id] = t
                    if t.unsynced > 0, nowMs.subtractingSaturated(t.lastChunkMs) > 1_000 {
                        disk.write(.init(fileID: id, path: t.partial, flush: true))
                    }
                    // A verifying transfer is re-hashed only after a restart (its job is queued otherwise).
                    perform(actions.filter { $0 != .hashWholeFile }, id, step)
                }
                for (id, out) in outgoing where nowMs >= out.deadlineMs {
                    outgoing[id] = nil
                    try step.endOutgoingFile(id.bytes, state: out.state == .complete ? .complete : .failed,
                                             failure: out.state == .complete ? nil : "expired", nowMs: nowMs)
                }
                try expireRelays(nowMs: nowMs, step)
            }
        }
    }

    /// After a start: transfers that were verifying are hashed again.
    func resumeVerifying() {
        loadIfNeeded(store)
        for (id, t) in incoming where t.receiver.phase == .verifying {
            disk.write(.init(fileID: id, path: t.partial, verify: t.receiver.offer.fileHash, name: t.receiver.offer.name))
        }
    }

    /// The disk lanes and the timer, until cancelled (a child of the node's group).
    package nonisolated func run() async {
        await NodeCore.run { self.resumeVerifying() }
        await withDiscardingTaskGroup { group in
            group.addTask { [self] in
                // Told to the core without waiting for it: the next batch is read and sent meanwhile
                // (the core, niced, may take a while to get a turn on a busy machine).
                await disk.runReads { job, outcome in NodeCore.submit { self.served(job, outcome) } }
            }
            group.addTask { [self] in
                for await job in vaultJobs { _ = try? await importToVault(job) }  // a failure is an event (message.file_vault_failed)
            }
            group.addTask { [self] in await runRelays() }
            group.addTask { [self] in
                await disk.runWrites { report in
                    await NodeCore.run {
                        switch report {
                        case .durable(let id, let indices, let bytes): self.chunksDurable(id, indices: indices, bytes: bytes)
                        case .failed(let id, let error): self.writeFailed(id, error)
                        case .verified(let id, let hash, let path): self.verified(id, hash: hash, placedAt: path)
                        case .badChunk(let id, let index): self.chunkFailedCheck(id, index: index)
                        }
                    }
                }
            }
            while !Task.isCancelled {
                await NodeCore.run { self.tick() }
                try? await Task.sleep(for: .seconds(1))  // cancelled: the loop ends
            }
            disk.finish()
            vaultInput.finish()
            relayInput.finish()
        }
    }
}
