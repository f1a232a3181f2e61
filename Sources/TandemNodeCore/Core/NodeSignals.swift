import NIOConcurrencyHelpers

/// What one service tells the others, without knowing who listens.
package enum NodeSignal: Sendable, Equatable {
    /// Someone became or stopped being a friend (beacons change).
    case friendsChanged
    /// The discoverable setting changed (beacons change).
    case discoverableChanged
    /// Our display name changed (beacons change).
    case nameChanged
    /// A home relay came up or a friend's tunnel arrived: what waits may be deliverable now.
    case reachable
    /// A clock sample from this peer was accepted (challenge timers move with the offset).
    case clockSampled([UInt8])
    /// A mode was locked or opened (presence: friends see `focusing`).
    case focusChanged
    /// The main key ended a challenge's lock early: that challenge is quit with `reason`.
    case focusQuitChallenge(id: String, reason: String)
    /// The vault may have committed a change (an import, a removal, a favourite, a move, an album
    /// created, renamed or deleted, a PIN): what a backup carries may differ. Posted by the vault
    /// after each operation on an open vault; the backup scheduler (which the vault does not know)
    /// looks at once whether a holder's copy is behind (backup.md 4.1).
    case vaultChanged
    /// The outbox wrote these frames of `type` to `recipient` on a link (not yet acknowledged):
    /// the flow that sent them may record them as sent.
    case framesWritten(type: UInt16, recipient: [UInt8], ids: [[UInt8]])
}

/// The node's one internal signal stream. A service subscribes when it is built (so nothing posted
/// before it runs is lost) and reads its stream in its own `run()`; posting never blocks. Each
/// subscriber's buffer keeps the newest 256 signals (what it missed past that is older news).
package final class NodeSignals: Sendable {
    private let subscribers = NIOLockedValueBox<[(filter: @Sendable (NodeSignal) -> Bool,
                                                  continuation: AsyncStream<NodeSignal>.Continuation)]>([])

    /// How long readers that recompute from the store let a burst of signals settle (`coalesced`).
    package static let settle: Duration = .milliseconds(50)

    package init() {}

    /// A stream of the signals `filter` accepts, from now on. `keepingNewest`: how many wait for
    /// the reader at most (1 for a reader that only needs to know that something changed: what
    /// comes while it is busy folds into one more round).
    package func subscribe(keepingNewest limit: Int = 256, _ filter: @escaping @Sendable (NodeSignal) -> Bool) -> AsyncStream<NodeSignal> {
        let (stream, continuation) = AsyncStream.makeStream(of: NodeSignal.self, bufferingPolicy: .bufferingNewest(limit))
        subscribers.withLockedValue { $0.append((filter, continuation)) }
        return stream
    }

    /// Observers called with each signal as it is posted (`observe`).
    private let observers = NIOLockedValueBox<[@Sendable (NodeSignal) -> Void]>([])

    /// Calls `observer` with every signal from now on, on the poster's thread, before `post`
    /// returns: for bookkeeping of a lock and an append, which a stream would pay for with a task's
    /// wake-up per signal (the outbox posts one per write of a message). Never for work.
    package func observe(_ observer: @escaping @Sendable (NodeSignal) -> Void) {
        observers.withLockedValue { $0.append(observer) }
    }

    package func post(_ signal: NodeSignal) {
        for o in observers.withLockedValue({ $0 }) { o(signal) }
        let targets = subscribers.withLockedValue { $0.filter { $0.filter(signal) }.map(\.continuation) }
        for c in targets { c.yield(signal) }
    }

    /// Ends every stream (shutdown).
    package func finish() {
        for s in subscribers.withLockedValue({ $0 }) { s.continuation.finish() }
    }
}

/// One service loop's wake-up: `poke()` from anywhere; `wait(upTo:)` returns at the first poke or
/// when the time is up. A poke that comes while the loop is busy is kept, so the loop goes round
/// once more instead of sleeping through it. Cancellation ends a wait at once.
package final class Wakeup: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Void, Never>?
        var pending = false
    }
    private let state = NIOLockedValueBox(State())

    package init() {}

    package func poke() {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
            guard let w = s.waiter else {
                s.pending = true
                return nil
            }
            s.waiter = nil
            return w
        }
        waiter?.resume()
    }

    /// Waits for a poke (or one kept from earlier), at most `duration`.
    package func wait(upTo duration: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: duration) }  // cancelled: the wait ends
            group.addTask { await self.nextPoke() }
            await group.next()
            group.cancelAll()
        }
    }

    private func nextPoke() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLockedValue { s -> Bool in
                    if s.pending || Task.isCancelled {
                        s.pending = false
                        return true
                    }
                    s.waiter = c
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            let w = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in defer { s.waiter = nil }; return s.waiter }
            w?.resume()
        }
    }
}

extension AsyncStream where Element == NodeSignal {
    /// Runs `body` once per burst of signals: after a signal, waits `window` (what else comes
    /// meanwhile folds into the same round, on a stream keeping only the newest signal), then runs
    /// it. For work that recomputes from the store whatever the signal was: a burst of friend
    /// changes costs one recomputation, after the steps that made them, not one per change inside
    /// them. Ends with the stream or the task.
    package func coalesced(over window: Duration, _ body: @Sendable () async -> Void) async {
        for await _ in self {
            try? await Task.sleep(for: window)  // cancelled: the loop ends
            if Task.isCancelled { return }
            await body()
        }
    }
}
