import Foundation
import NIOConcurrencyHelpers
import NIOCore
import TandemNet
import TandemProtocol

/// Our wall clock in µs since the epoch (what a faked clock shifts).
public func wallClockMicros() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
}

/// CLOCK_MONOTONIC in µs: what the node schedules on, and what tests compare across processes on
/// one machine (it is shared by every process and namespace, and not shifted by a faked wall clock).
public func monotonicMicros() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
}

/// Measures the offset of each peer's wall clock to ours over the peer links (CLOCK_PROBE /
/// CLOCK_REPLY, Protocol/README.md 13.4). Answers every probe; keeps a bounded estimator per peer.
public final class ClockSync: Sendable {
    private struct State {
        var estimators: [[UInt8]: ClockEstimator] = [:]
        /// Peers we probed and when (our clock, µs): only their replies are taken, so a stranger's
        /// unsolicited replies cannot crowd friends' estimators out.
        var probed: [[UInt8]: Int64] = [:]
    }
    private let state = NIOLockedValueBox(State())
    let peers: PeerManager
    /// `clockSampled` is posted after every accepted sample (challenges reschedule).
    let signals: NodeSignals
    static let maximumPeers = 1024

    package init(peers: PeerManager, signals: NodeSignals) {
        self.peers = peers
        self.signals = signals
    }

    /// Their clock minus ours (µs), when measured.
    public func offset(to key: [UInt8]) -> Int64? {
        state.withLockedValue { $0.estimators[key]?.offset(nowMicros: wallClockMicros()) }
    }

    /// The round trip of the best sample (µs).
    public func delay(to key: [UInt8]) -> Int64? {
        state.withLockedValue { $0.estimators[key]?.best(nowMicros: wallClockMicros())?.delayMicros }
    }

    public func hasSample(for key: [UInt8]) -> Bool {
        state.withLockedValue { !($0.estimators[key]?.samples.isEmpty ?? true) }
    }

    /// Sends `count` probes to the peer, `spacing` apart, on its current link.
    package func probe(_ key: [UInt8], count: Int = 1, spacing: TimeAmount = .milliseconds(15)) {
        guard let link = peers.link(to: key) else { return }
        state.withLockedValue { s in
            if s.probed[key] == nil, s.probed.count >= Self.maximumPeers { s.probed.removeAll() }
            s.probed[key] = wallClockMicros()
        }
        for i in 0..<count {
            link.channel.eventLoop.scheduleTask(in: spacing * Int64(i)) {
                var p = Tandem_V1_ClockProbe()
                p.t1Us = UInt64(wallClockMicros())
                link.send(type: .clockProbe, payload: (try? p.serializedBytes()) ?? [])  // a message of set fields always serializes
            }
        }
    }

    /// `receivedAt`: our clock when the frame came in, taken before anything else is done with it
    /// (a store read on the way would count as network delay on one leg only).
    func handle(_ envelope: Envelope, from link: PeerLink, receivedAt: Int64) {
        switch envelope.type {
        case .clockProbe:
            let t2 = receivedAt
            // Validated: t1 within a day of our clock (it is only echoed, but never trusted blindly).
            guard let p = try? ClockProbeMessage(payload: envelope.payload, nowUs: receivedAt) else { return }  // a malformed probe is a peer's, dropped
            var r = Tandem_V1_ClockReply()
            r.t1Us = UInt64(clamping: p.t1Us)
            r.t2Us = UInt64(clamping: t2)
            r.t3Us = UInt64(clamping: wallClockMicros())
            link.send(type: .clockReply, payload: (try? r.serializedBytes()) ?? [])  // a message of set fields always serializes
        case .clockReply:
            let t4 = receivedAt
            // Validated: every timestamp within a day of our clock, so the offset arithmetic fits.
            guard let r = try? ClockReplyMessage(payload: envelope.payload, nowUs: receivedAt) else { return }  // a malformed reply is a peer's, dropped
            let key = envelope.author
            let added = state.withLockedValue { s -> Bool in
                // A reply answers a probe of the last minute, or it is not ours.
                guard let sent = s.probed[key], t4.subtractingSaturated(sent) <= 60_000_000 else { return false }
                if s.estimators[key] == nil, s.estimators.count >= Self.maximumPeers { s.estimators.removeAll() }
                return s.estimators[key, default: ClockEstimator()].add(t1: r.t1Us, t2: r.t2Us, t3: r.t3Us, t4: t4)
            }
            if added { signals.post(.clockSampled(key)) }
        default:
            break
        }
    }
}

/// TimeAmount × Int64.
func * (lhs: TimeAmount, rhs: Int64) -> TimeAmount { .nanoseconds(lhs.nanoseconds * rhs) }
