/// NTP-style clock offset estimation between two nodes (Protocol/README.md, section 13.4). Pure:
/// the node feeds it the four timestamps of each exchange and asks for the current estimate.
///
/// A probe leaves at t1 (our clock), arrives at t2 (their clock), the reply leaves at t3 (their
/// clock) and arrives at t4 (our clock). Then
///
///     offset = ((t2 - t1) + (t3 - t4)) / 2     their clock minus ours
///     delay  = (t4 - t1) - (t3 - t2)           round trip spent on the network
///
/// The error of one sample's offset is at most delay / 2, so the sample with the smallest delay
/// among the recent ones is the estimate.
public struct ClockSample: Equatable, Sendable {
    /// Their clock minus ours, in microseconds.
    public let offsetMicros: Int64
    /// The exchange's network round trip, in microseconds.
    public let delayMicros: Int64
    /// When the exchange ended, on our clock (µs), to age samples out.
    public let takenAtMicros: Int64

    /// Saturating: the node only feeds timestamps within a day of its clock (`ClockReplyMessage`),
    /// but no timestamps, however chosen, make this trap.
    public init(t1: Int64, t2: Int64, t3: Int64, t4: Int64) {
        let there = t2.subtractingSaturated(t1), back = t3.subtractingSaturated(t4)
        let (sum, overflow) = there.addingReportingOverflow(back)
        // On overflow, halve before adding (two halves cannot overflow).
        offsetMicros = overflow ? there / 2 + back / 2 : sum / 2
        delayMicros = max(0, t4.subtractingSaturated(t1).subtractingSaturated(t3.subtractingSaturated(t2)))
        takenAtMicros = t4
    }

    public init(offsetMicros: Int64, delayMicros: Int64, takenAtMicros: Int64) {
        self.offsetMicros = offsetMicros
        self.delayMicros = delayMicros
        self.takenAtMicros = takenAtMicros
    }
}

public struct ClockEstimator: Sendable {
    /// Samples kept (the newest); the estimate is the one with the least delay among them.
    public let capacity: Int
    /// Samples older than this no longer count (clocks drift), unless nothing newer exists.
    public let maximumAgeMicros: Int64
    /// Samples whose exchange took longer than this are not kept (a stalled reply says nothing).
    public let maximumDelayMicros: Int64
    public private(set) var samples: [ClockSample] = []

    public init(capacity: Int = 16, maximumAgeMicros: Int64 = 600_000_000, maximumDelayMicros: Int64 = 2_000_000) {
        precondition(capacity > 0)
        self.capacity = capacity
        self.maximumAgeMicros = maximumAgeMicros
        self.maximumDelayMicros = maximumDelayMicros
    }

    /// Slack on top of the half delays when two samples are compared (timestamp rounding, drift).
    public static let consistencyToleranceMicros: Int64 = 1_000

    /// Adds the result of one exchange; false when it was refused (negative or too long a round
    /// trip, or t4 before t1: the reply answers a probe we did not send in this order).
    ///
    /// Each sample's offset is within half its delay of the truth, so two samples whose offsets
    /// differ by more than their half delays together cannot both hold: the peer's clock was
    /// stepped (or the peer restarted with another clock) in between. The older samples that
    /// disagree with the new one are dropped; otherwise a quick exchange from before the step would
    /// keep winning on delay, and the estimate would stay off by the step for `maximumAgeMicros`.
    @discardableResult
    public mutating func add(t1: Int64, t2: Int64, t3: Int64, t4: Int64) -> Bool {
        guard t4 >= t1, t3 >= t2 else { return false }
        let sample = ClockSample(t1: t1, t2: t2, t3: t3, t4: t4)
        guard sample.delayMicros <= maximumDelayMicros else { return false }
        samples.removeAll {
            let gap = $0.offsetMicros.subtractingSaturated(sample.offsetMicros)
            let gapMagnitude = gap == .min ? .max : abs(gap)
            return gapMagnitude > ($0.delayMicros / 2).addingSaturated(sample.delayMicros / 2).addingSaturated(Self.consistencyToleranceMicros)
        }
        samples.append(sample)
        if samples.count > capacity { samples.removeFirst(samples.count - capacity) }
        return true
    }

    /// The best current sample: least delay among those younger than `maximumAgeMicros` at `now`
    /// (our clock, µs); the newest sample when all are older; nil without samples.
    public func best(nowMicros: Int64) -> ClockSample? {
        let fresh = samples.filter { nowMicros.subtractingSaturated($0.takenAtMicros) <= maximumAgeMicros }
        if let b = fresh.min(by: { $0.delayMicros < $1.delayMicros }) { return b }
        return samples.last
    }

    /// Their clock minus ours (µs), when known.
    public func offset(nowMicros: Int64) -> Int64? { best(nowMicros: nowMicros)?.offsetMicros }
}
