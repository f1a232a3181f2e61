/// Which TUNNEL_INCOMING announcements a node joins (Protocol/README.md 14.7), as a plain value:
/// at most `total` joins in progress at once, at most `perInitiator` for one announced initiator
/// key, and at most `strangers` for all non-friends together. A join holds its slot until it
/// ends (joined and handed over, failed, or timed out after 10 s), so without the last two bounds
/// 16 opens that are never joined (from one stranger, or a few) would starve the node's friends
/// for as long as they keep coming. Friends always find `total − strangers` slots.
struct IncomingTunnelSlots: Sendable {
    struct Limits: Sendable, Equatable {
        var total = 16
        var perInitiator = 2
        var strangers = 8
    }

    enum Verdict: Equatable, Sendable {
        case admitted(Slot)
        /// `total` joins are in progress.
        case full
        /// This initiator already has `perInitiator` joins in progress.
        case initiatorBusy
        /// Strangers hold `strangers` joins already.
        case strangersFull
    }

    /// What an admitted join holds; hand it back to `release` when the join ends.
    struct Slot: Equatable, Sendable {
        let initiator: [UInt8]
        let stranger: Bool
    }

    let limits: Limits
    private(set) var inProgress = 0
    private(set) var strangerCount = 0
    private(set) var byInitiator: [[UInt8]: Int] = [:]

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    mutating func admit(_ initiator: [UInt8], isFriend: Bool) -> Verdict {
        guard inProgress < limits.total else { return .full }
        guard byInitiator[initiator, default: 0] < limits.perInitiator else { return .initiatorBusy }
        guard isFriend || strangerCount < limits.strangers else { return .strangersFull }
        inProgress += 1
        byInitiator[initiator, default: 0] += 1
        if !isFriend { strangerCount += 1 }
        return .admitted(Slot(initiator: initiator, stranger: !isFriend))
    }

    mutating func release(_ slot: Slot) {
        guard let n = byInitiator[slot.initiator] else { return }
        byInitiator[slot.initiator] = n > 1 ? n - 1 : nil
        inProgress = max(0, inProgress - 1)
        if slot.stranger { strangerCount = max(0, strangerCount - 1) }
    }
}
