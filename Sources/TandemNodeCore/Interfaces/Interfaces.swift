import TandemNet
import TandemProtocol
import TandemStore

// The declared interfaces between the node's feature modules. A feature module imports only this
// core; when it needs another feature, it names one of these protocols, and the node's wiring
// (TandemNode) hands it the feature that conforms. Nothing else crosses between features.

/// A flow of peer frames (friends, challenges, backups, messages): what the core's frame router
/// hands it, on the core, inside the inbound batch's step.
@NodeCore
package protocol FrameFlow: AnyObject, Sendable {
    /// True for the frame types this flow owns. The router asks each flow in order; the friends
    /// flow comes last and takes the rest.
    nonisolated func owns(_ type: MessageType) -> Bool
    /// True when frames from a blocked contact must not reach this flow (the router drops them).
    nonisolated var dropsBlockedAuthors: Bool { get }
    /// A frame that passed the link rules (or came as relay mail: `link` is nil).
    func handle(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep)
    /// The same, with what the inbound lane's `FramePreparation` made of the frame on its event loop
    /// (nil: nothing). By default the prepared value is not used.
    func handle(_ envelope: Envelope, prepared: (any Sendable)?, from link: PeerLink?, _ step: StoreStep)
    /// A frame from `key` arrived over a link (before it is routed; mail does not count).
    func heard(_ key: [UInt8])
    /// An authenticated link to `key` came up.
    func linkUp(_ key: [UInt8], _ step: StoreStep)
    /// A LAN beacon was seen.
    func sighted(_ sighting: PeerSighting, _ step: StoreStep)
    /// `recipient` acknowledged (ACK, or REPLAYED) our frame `messageID` of a type this flow owns:
    /// it is stored on the recipient's node. Told in the step that removed it from the outbox.
    func delivered(_ messageID: [UInt8], type: MessageType, to recipient: [UInt8], _ step: StoreStep)
    /// The same for consecutive acknowledgements of one ACKS (or ACK) that this flow owns, in their
    /// order, told at once (a flow may then store their events in one statement: messages.md 11.6,
    /// session 10). By default each is told to `delivered(_:type:to:_:)` in turn.
    func delivered(_ deliveries: [(messageID: [UInt8], type: MessageType)], to recipient: [UInt8], _ step: StoreStep)
    /// True when this flow announces an ACK of its frames of `type` with an event of its own (a
    /// MESSAGE: `message.delivered`): the outbox then stores no `outbox.delivered` beside it (one
    /// event row per delivery, messages.md 11.6).
    nonisolated func announcesDelivery(of type: MessageType) -> Bool
    /// Every event of the inbound batch was handled, in `step`, which commits next: what a flow
    /// gathered over the batch (messages: one DELIVERED per author for the mail it stored) goes
    /// into the same commit.
    func batchEnded(_ step: StoreStep)
}

extension FrameFlow {
    package nonisolated var dropsBlockedAuthors: Bool { false }
    package nonisolated func announcesDelivery(of type: MessageType) -> Bool { false }
    package func handle(_ envelope: Envelope, prepared: (any Sendable)?, from link: PeerLink?, _ step: StoreStep) {
        handle(envelope, from: link, step)
    }
    package func heard(_ key: [UInt8]) {}
    package func linkUp(_ key: [UInt8], _ step: StoreStep) {}
    package func sighted(_ sighting: PeerSighting, _ step: StoreStep) {}
    package func delivered(_ messageID: [UInt8], type: MessageType, to recipient: [UInt8], _ step: StoreStep) {}
    package func delivered(_ deliveries: [(messageID: [UInt8], type: MessageType)], to recipient: [UInt8], _ step: StoreStep) {
        for d in deliveries { delivered(d.messageID, type: d.type, to: recipient, step) }
    }
    package func batchEnded(_ step: StoreStep) {}
}

/// What the challenges feature asks of local focus: a challenge started with `--mode` locks that
/// mode at its start and releases it at its end (an early unlock is a quit, told through
/// `NodeSignal.focusQuitChallenge`).
package protocol ChallengeModeLocks: Sendable {
    /// True while any mode is locked (presence then says `focusing`).
    var isLocked: Bool { get }
    /// Throws `NodeError.invalidArgument` when `mode` does not exist or cannot lock now.
    func checkLockable(mode: String) throws
    /// Remembers, in the challenge's step, that `challenge` locks `mode`.
    func attach(challenge idHex: String, mode: String, _ step: StoreStep) throws
    /// The mode `challenge` locks, if any.
    func mode(ofChallenge idHex: String) -> String?
    /// True when the lock on now is held by `challenge`.
    func holdsLock(challenge idHex: String) -> Bool
    @NodeCore func challengeStarted(_ idHex: String, _ step: StoreStep)
    @NodeCore func challengeEnded(_ idHex: String, _ step: StoreStep?)
    /// Quitting a challenge or a solo session early is a bypass the health pool charges: the line
    /// refusing it when the pool allows no bypass at `nowMs` (health 0, dead until local midnight),
    /// read through `reader` (the quitting step); nil when quitting is allowed.
    @NodeCore func earlyQuitRefusal(nowMs: Int64, _ reader: StoreReading) -> String?
}

/// The node's own signed contact record, which the friends feature keeps and announces; relays
/// change it (a home relay is part of it).
@NodeCore
package protocol OwnContactRecord: Sendable {
    /// Forget the cached record (what it says changed).
    nonisolated func recordChanged()
    /// Bump the record's version and send it to every friend, in `step`.
    func announceRecord(_ step: StoreStep) throws
}
