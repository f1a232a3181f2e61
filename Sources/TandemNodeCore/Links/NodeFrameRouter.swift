import TandemNet
import TandemProtocol
import TandemStore

/// Hands each inbound event to the flow it belongs to, on the node core: clock sync here, then
/// the feature flows in the order the node's wiring lists them (each `owns` its frame types:
/// challenges 0x02xx, backups 0x04xx, messages 0x05xx), and the last flow (friends: requests,
/// acknowledgements, presence) takes the rest. A flow that `dropsBlockedAuthors` never sees a
/// blocked contact's frame; the friends flow drops those itself.
@NodeCore
package struct NodeFrameRouter: InboundConsumer {
    let flows: [any FrameFlow]
    let fallback: any FrameFlow
    let presence: PresenceService
    let outbox: Outbox
    let clock: ClockSync
    let store: NodeStore
    let events: EventBus
    let health: StoreHealth

    /// - Parameters:
    ///   - flows: asked in order for each frame type they own.
    ///   - fallback: takes every frame no flow owns (the friends flow).
    package nonisolated init(flows: [any FrameFlow], fallback: any FrameFlow, presence: PresenceService, outbox: Outbox,
                             clock: ClockSync, store: NodeStore, events: EventBus, health: StoreHealth) {
        (self.flows, self.fallback, self.presence, self.outbox, self.clock) = (flows, fallback, presence, outbox, clock)
        (self.store, self.events, self.health) = (store, events, health)
    }

    /// Handles the events in one batch of the store: their changes share one commit, and the
    /// acknowledgements, frames and event deliveries they cause follow it.
    ///
    /// A batch of acknowledgements, PRESENCE frames and LAN sightings only commits without a sync
    /// of its own (what they change is soft state, `NodeStore.write(durable:)`); any other frame
    /// in it makes the commit synced.
    package func handle(_ events: [InboundEvent]) {
        // Stages of a traced message (`PathTrace`, benches only): nil unless armed.
        let traced = PathTrace.kind(of: events)
        if let traced { PathTrace.stamp(traced == .ack ? .ackDrained : .inboundDrained) }
        do {
            try store.step(syncing: events.contains { $0.mayChangeDurableState }) { step in
                if let traced { step.afterCommit { PathTrace.stamp(traced == .ack ? .ackCommitted : .inboundCommitted) } }
                trust(events, step)
                let blocked = BlockedAuthors()
                for event in events { handle(event, blocked, step) }
                for flow in flows { flow.batchEnded(step) }
                // Once the batch is durable, first what its frames left for after the commit — the
                // ACKs its senders wait for (their latency, messages.md 11.5), frames, signals — then
                // its events to subscribers (reading the store's event tail and waking each one).
                // (Stamped before: a subscriber woken by `published()` may start the next round first.)
                if traced == .ack { step.afterCommit { PathTrace.stamp(.deliveredPublished) } }
                step.afterCommit { [self] in self.events.published() }
                if traced == .chatMessage { PathTrace.stamp(.inboundCommitting) }
            }
        } catch {
            // Nothing of the batch was kept and nothing acknowledged: senders resend.
            health.failed("commit \(events.count) inbound events", error)
        }
        self.events.published()
    }

    /// A friend's link is trusted (its own frame budget, not its address's; its REPLAYED copies do
    /// not close it: `LinkLimits.trustedFramesPerSecond`), anyone else's is not: looked at once per
    /// link per batch, so a friendship made or ended with the link up takes effect within a batch.
    private func trust(_ events: [InboundEvent], _ step: StoreStep) {
        var seen = Set<UInt64>()
        for event in events {
            let link: PeerLink
            switch event {
            case .frame(_, let l, _, _), .linkUp(_, let l): link = l
            case .mail, .linkDown, .peerError, .sighting: continue
            }
            guard seen.insert(link.serial).inserted, let key = link.remotePublicKey else { continue }
            let friend = outbox.isFriend(key, in: step)
            if friend != link.isTrusted { link.setTrusted(friend) }
        }
    }

    private func handle(_ event: InboundEvent, _ blocked: BlockedAuthors, _ step: StoreStep) {
        switch event {
        case .frame(let envelope, let link, let receivedAtUs, let prepared):
            frame(envelope, from: link, receivedAtUs: receivedAtUs, prepared: prepared, blocked, step)
        case .mail(let envelope, let relay, let done):
            events.emit("mailbox.received", ["from": .string(NodeID(publicKey: envelope.author).canonical),
                                             "message_type": .string(envelope.type.description), "relay": .string(relay.description)],
                        in: step)
            // Mail does not count as hearing from its author (it may be hours old).
            route(envelope, from: nil, blocked, step)
            // Acknowledged to the relay once what it changed is durable.
            step.afterCommit(done)
        case .linkUp(let key, _):
            presence.linkUp(key, step)
            for flow in flows { flow.linkUp(key, step) }
            fallback.linkUp(key, step)
        case .linkDown(let key):
            presence.linkDown(key, step)
        case .peerError(let error, let key):
            if let (id, type) = outbox.peerReportedError(error, from: key, step) { tellDelivered(id, type: type, to: key, step) }
        case .sighting(let sighting):
            for flow in flows { flow.sighted(sighting, step) }
            fallback.sighted(sighting, step)
        }
    }

    private func frame(_ envelope: Envelope, from link: PeerLink, receivedAtUs: Int64, prepared: (any Sendable)?,
                       _ blocked: BlockedAuthors, _ step: StoreStep) {
        for flow in flows { flow.heard(envelope.author) }
        if envelope.type == .clockProbe || envelope.type == .clockReply {
            // Timestamped on arrival. A blocked peer has no link (blocking closes it), and answering
            // a probe costs one signature.
            clock.handle(envelope, from: link, receivedAt: receivedAtUs)
            return
        }
        route(envelope, prepared: prepared, from: link, blocked, step)
    }

    private func route(_ envelope: Envelope, prepared: (any Sendable)? = nil, from link: PeerLink?, _ blocked: BlockedAuthors,
                       _ step: StoreStep) {
        if envelope.type == .ack || envelope.type == .acks { return acknowledged(envelope, from: link, blocked, step) }
        for flow in flows where flow.owns(envelope.type) {
            if flow.dropsBlockedAuthors {
                if blocked.isBlocked(envelope.author, step, health) { break }  // to the friends flow, which drops it (and counts it)
            }
            return flow.handle(envelope, prepared: prepared, from: link, step)
        }
        fallback.handle(envelope, prepared: prepared, from: link, step)
    }
}

extension NodeFrameRouter {
    /// An ACK, or an ACKS (README 12.5: each of its ids as an ACK of its own): the outbox drops the
    /// frame each names (only its recipient can acknowledge it; an id that names no frame queued
    /// for the author changes nothing), and the flow that owns the frame's type is told in the same
    /// step. A blocked contact's acknowledgement is dropped, a malformed one answered MALFORMED and
    /// counted for none of its ids.
    private func acknowledged(_ envelope: Envelope, from link: PeerLink?, _ blocked: BlockedAuthors, _ step: StoreStep) {
        guard !blocked.isBlocked(envelope.author, step, health) else { return }
        let ids: [[UInt8]]
        do {
            ids = envelope.type == .acks ? try AcksMessage(payload: envelope.payload).messageIDs
                                         : [try AckMessage(payload: envelope.payload).messageID]
        } catch let e as PayloadError {
            return outbox.refuseMalformed(envelope, e, on: link, step)
        } catch {
            return  // the decoders throw only PayloadError
        }
        // The deliveries are told to their flows in runs (consecutive ids of one flow, in order), so a
        // flow can store a run's events in one statement. A run is told before anything else stores
        // an event: before the outbox's `outbox.delivered` of a frame no flow announces, and at the
        // end. So the step's events keep the order one at a time gave them.
        let flows = self.flows
        var run: [(messageID: [UInt8], type: MessageType)] = []
        var runFlow: (any FrameFlow)?
        let author = envelope.author
        func tellRun() {
            guard let flow = runFlow, !run.isEmpty else { return }
            flow.delivered(run, to: author, step)
            run = []
            runFlow = nil
        }
        let announce = { (type: MessageType?) -> Bool in
            let announced = !flows.contains { flow in type.map { flow.owns($0) && flow.announcesDelivery(of: $0) } ?? false }
            if announced { tellRun() }  // the outbox stores its event next
            return announced
        }
        for id in ids {
            guard let type = outbox.delivered(id, by: author, step, announce: announce) else { continue }
            let flow = owner(of: type)
            if let runFlow, runFlow !== flow { tellRun() }
            runFlow = flow
            run.append((id, type))
        }
        tellRun()
    }

    /// The flow that owns frames of `type` (the fallback when none does).
    private func owner(of type: MessageType) -> any FrameFlow {
        for flow in flows where flow.owns(type) { return flow }
        return fallback
    }

    private func tellDelivered(_ id: [UInt8], type: MessageType, to recipient: [UInt8], _ step: StoreStep) {
        owner(of: type).delivered(id, type: type, to: recipient, step)
    }
}

/// Whether an author is blocked, read once per author and inbound batch (every frame of a burst,
/// ACKs included, asked it of the store). Only a local intent blocks, in a step of its own, so the
/// answer cannot change within a batch.
@NodeCore
final class BlockedAuthors {
    private var known: [ByteKey: Bool] = [:]  // hashed in one go (messages.md 11.6)

    func isBlocked(_ author: [UInt8], _ step: StoreStep, _ health: StoreHealth) -> Bool {
        if let b = known[ByteKey(author)] { return b }
        let b = health.read("read a contact", or: nil) { try step.relationship(author) } == .blocked
        known[ByteKey(author)] = b
        return b
    }
}

extension InboundEvent {
    /// False for events whose handling changes soft state only (`NodeStore.write(durable:)`); a
    /// durable write made anyway is still synced before anything waits on it.
    var mayChangeDurableState: Bool {
        switch self {
        case .frame(let envelope, _, _, _):
            switch envelope.type {
            case .ack, .acks, .presence, .ping, .pong, .clockProbe, .clockReply: return false
            default: return true
            }
        case .sighting: return false
        case .mail, .linkUp, .linkDown, .peerError: return true
        }
    }
}
