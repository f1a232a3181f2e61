import NIOConcurrencyHelpers
import Synchronization
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Where one message's time goes (`tandem-bench messages`): a monotonic timestamp for each stage
/// of a MESSAGE's way from `message.send` to `message.delivered` at its sender, the first time each
/// stage is passed after `arm()`. Off unless a bench arms it: then each stage costs one atomic load.
/// Meant for one message in flight at a time (the bench's latency rounds): with more, a stage
/// records whichever message passed it first.
package enum PathTrace {
    /// The stages in the order a message passes them (Protocol/messages.md 11.5).
    package enum Stage: Int, CaseIterable, Sendable {
        /// The caller hands `message.send` in (stamped by the bench).
        case sendCalled
        /// The sender's core took the send batch (its send lane's drain started).
        case sendDrained
        /// The send step's rows are written; its synced commit starts.
        case sendCommitting
        /// The send step committed (synced); its after-commit actions start.
        case sendCommitted
        /// The sender's event loop runs the write of the MESSAGE frame.
        case frameOnLoop
        /// The receiver's event loop read, opened and verified it, and hands it to its inbound lane.
        case frameRead
        /// The receiver's core took the inbound batch that holds it.
        case inboundDrained
        /// The receiver's rows are written; its synced commit starts.
        case inboundCommitting
        /// The receiver's step committed (synced).
        case inboundCommitted
        /// The receiver's event loop runs the ACK's signing and write.
        case ackOnLoop
        /// The sender's event loop read and verified the ACK and hands it to its inbound lane.
        case ackRead
        /// The sender's core took the batch that holds the ACK.
        case ackDrained
        /// The ACK's step committed (not synced: soft state).
        case ackCommitted
        /// The ACK's step's other after-commit work is done: `message.delivered` goes to the subscribers.
        case deliveredPublished
        /// The bench's subscriber has it (stamped by the bench).
        case deliveredSeen
    }

    private static let armed = Atomic<Bool>(false)
    private static let stamps = NIOLockedValueBox([UInt64](repeating: 0, count: Stage.allCases.count))

    /// Nanoseconds of the monotonic clock.
    package static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    package static var isArmed: Bool { armed.load(ordering: .relaxed) }

    /// Clears the stamps and starts recording.
    package static func arm() {
        stamps.withLockedValue { $0 = [UInt64](repeating: 0, count: Stage.allCases.count) }
        armed.store(true, ordering: .releasing)
    }

    /// Stops recording and returns the stamps (0: a stage not passed).
    package static func disarm() -> [UInt64] {
        armed.store(false, ordering: .releasing)
        return stamps.withLockedValue { $0 }
    }

    /// Records `stage` now, unless it was recorded since `arm()`.
    @inline(__always)
    package static func stamp(_ stage: Stage) {
        guard armed.load(ordering: .relaxed) else { return }
        let t = now()
        stamps.withLockedValue { if $0[stage.rawValue] == 0 { $0[stage.rawValue] = t } }
    }

    /// Records `stage` when armed and `frames` holds a frame of `type`.
    @inline(__always)
    package static func stamp(_ stage: Stage, if type: MessageType, in frames: [Envelope]) {
        guard armed.load(ordering: .relaxed), frames.contains(where: { $0.type == type }) else { return }
        stamp(stage)
    }

    /// What an inbound batch carries, for the stages: a MESSAGE, an ACK, or neither (nil).
    package static func kind(of events: [InboundEvent]) -> MessageType? {
        guard armed.load(ordering: .relaxed) else { return nil }
        var ack = false
        for case .frame(let e, _, _, _) in events {
            if e.type == .chatMessage { return .chatMessage }
            if e.type == .ack { ack = true }
        }
        return ack ? .ack : nil
    }
}
