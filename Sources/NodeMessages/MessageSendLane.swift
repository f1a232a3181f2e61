import NIOConcurrencyHelpers
import TandemNodeCore
import TandemStore

/// `message.send` requests on their way to the core, drained in batches: the sends that arrive
/// while the core is busy (a script's burst, several clients at once) share one store step and
/// so one synced commit (group commit), and their frames to one friend go on the link together.
/// Each send is still its own unit inside that step (a savepoint: one that fails rolls back only
/// its own rows and answers its own error), and every caller is answered only once the step that
/// holds its message has committed: durable before the command returns.
///
/// Order: the lane is FIFO, so sends handed in one after another get consecutive seqs in that order.
final class MessageSendLane: Sendable {
    /// Sends handled in one step at most (one commit for all of them).
    static let maximumBatch = 256

    struct Pending: Sendable {
        let params: JSONValue
        let answer: CheckedContinuation<JSONValue, Error>
    }
    private struct State {
        var waiting: [Pending] = []
        /// A drain is queued on the core (or running).
        var scheduled = false
    }
    private let state = NIOLockedValueBox(State())

    /// Sends waiting now.
    var waiting: Int { state.withLockedValue { $0.waiting.count } }

    /// Queues a send and waits for its answer. `drain` is queued on the core when no drain is.
    func submit(_ params: JSONValue, drain: @escaping @NodeCore @Sendable () -> Void) async throws -> JSONValue {
        try await withCheckedThrowingContinuation { answer in
            let schedule = state.withLockedValue { s -> Bool in
                s.waiting.append(Pending(params: params, answer: answer))
                guard !s.scheduled else { return false }
                s.scheduled = true
                return true
            }
            if schedule { NodeCore.submit(drain) }
        }
    }

    /// On the core: the next batch, oldest first. Empty when nothing waits (the lane is then no
    /// longer scheduled, and the next `submit` queues a drain).
    func take() -> [Pending] {
        state.withLockedValue { s -> [Pending] in
            guard !s.waiting.isEmpty else {
                s.scheduled = false
                return []
            }
            let n = min(s.waiting.count, Self.maximumBatch)
            let batch = Array(s.waiting.prefix(n))
            s.waiting.removeFirst(n)
            return batch
        }
    }
}

extension MessageService {
    /// `message.send` through the lane.
    nonisolated func submitSend(_ params: JSONValue) async throws -> JSONValue {
        try await sendLane.submit(params) { [self] in drainSends() }
    }

    /// On the core: one batch of waiting sends in one step, answered after its commit; then the
    /// lane's next turn (queued behind other core work, so inbound frames and timers are not held
    /// back by a long burst).
    func drainSends() {
        let batch = sendLane.take()
        guard !batch.isEmpty else { return }
        PathTrace.stamp(.sendDrained)
        var results: [Result<JSONValue, Error>] = []
        results.reserveCapacity(batch.count)
        var answered = false
        do {
            try store.step { step in
                if PathTrace.isArmed { step.afterCommit { PathTrace.stamp(.sendCommitted) } }
                var recipients: [[UInt8]] = []
                let memo = SendBatchMemo()
                for pending in batch {
                    // A savepoint per send: one that throws leaves nothing behind, the rest go on.
                    let eventsBefore = memo.events.count, scheduledBefore = memo.scheduled.count
                    let result = Result {
                        try step.write { _ in
                            let (answer, to) = try queueSend(pending.params, step, memo: memo)
                            recipients.append(contentsOf: to)
                            return answer
                        }
                    }
                    // Rolled back: the memo's conversation may be ahead of the store (read again).
                    if case .failure = result {
                        memo.forgetConversations()
                        memo.events.removeSubrange(min(eventsBefore, memo.events.count)...)
                        memo.scheduled.removeSubrange(min(scheduledBefore, memo.scheduled.count)...)
                    }
                    results.append(result)
                }
                // The sends' `message.sent` events, in send order with consecutive seqs: one multi-row
                // INSERT for the batch instead of a statement each (messages.md 11.6). Nothing else in
                // this step stores an event, so their seqs are those they had one at a time.
                events.emit(memo.events, in: step)
                // Once for the batch, not per send: the frames every send queued are scheduled as
                // written in one statement per recipient, and go on its link together after the commit.
                var seen = Set<[UInt8]>()
                // The frames stored already scheduled as written (the friend's link was up) are
                // handed over as they are: no read back and no update of each (messages.md 11.6).
                outbox.send(to: recipients.filter { seen.insert($0).inserted }, scheduled: memo.scheduled, in: step)
                markSent(in: step)
                // The callers are answered once the commit is durable, right after its frames went
                // to the link: before the store's work after the step (the search index of these
                // messages, messages.md 8) and before the events go out.
                step.afterCommit {
                    answered = true
                    for (pending, result) in zip(batch, results) { pending.answer.resume(with: result) }
                }
                PathTrace.stamp(.sendCommitting)
            }
        } catch {
            results = batch.map { _ in .failure(error) }
        }
        events.published()
        if !answered {
            for (pending, result) in zip(batch, results) { pending.answer.resume(with: result) }
        }
        NodeCore.submit { [self] in drainSends() }
    }
}
