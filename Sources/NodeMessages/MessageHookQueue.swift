import NIOConcurrencyHelpers
import TandemBlocking
import TandemProtocol

/// Received messages waiting for their `on-message` hooks (messages.md 11.6, session 9): the core
/// appends what a step announced, and the hook runner takes everything that waits at once, looks
/// for the hooks once for all of it on the blocking pool, and runs them for each message in order.
/// It replaced a stream element, a hop onto the blocking pool and two `stat`s per message — a
/// tenth of the receiving node's CPU in a burst, with no hook installed. What the hooks see is made
/// there too, not on the core.
final class MessageHookQueue: Sendable {
    /// One received message as its hooks see it.
    struct Job: Sendable {
        let id: String
        let from: String
        let fromName: String
        let conversation: String
        let text: String
        let sentAtMs: Int64

        /// The hook's environment (the text as stored; TANDEM_TEXT_SAFE is its terminal-safe form).
        var variables: [String: String] {
            ["TANDEM_MESSAGE_ID": id, "TANDEM_FROM": from, "TANDEM_FROM_NAME": fromName, "TANDEM_CONVERSATION": conversation,
             "TANDEM_TEXT": text, "TANDEM_TEXT_SAFE": ChatText.terminalSafe(text), "TANDEM_SENT_AT_MS": String(sentAtMs)]
        }
    }

    private struct State {
        var waiting: [Job] = []
        var finished = false
    }
    private let state = NIOLockedValueBox(State())
    /// Wakes the runner; at most one wake-up waits (it takes everything queued by then).
    private let wake: AsyncStream<Void>
    private let wakeInput: AsyncStream<Void>.Continuation
    let backlog: Int

    /// `backlog`: at most this many messages wait; more are dropped (and the caller logs it).
    init(backlog: Int) {
        self.backlog = backlog
        (wake, wakeInput) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Queues `jobs` (a step's messages, in order); false when some were dropped for the backlog.
    func append(_ jobs: [Job]) -> Bool {
        let kept = state.withLockedValue { s -> Bool in
            guard !s.finished else { return true }
            let room = max(0, backlog - s.waiting.count)
            s.waiting.append(contentsOf: jobs.prefix(room))
            return jobs.count <= room
        }
        wakeInput.yield()
        return kept
    }

    /// No more jobs: the runner ends once it has taken what waits.
    func finish() {
        state.withLockedValue { $0.finished = true }
        wakeInput.finish()
    }

    /// Hands each group of jobs that waited together to `run`, in order, until `finish()` (or the
    /// task is cancelled).
    func run(_ body: ([Job]) async -> Void) async {
        for await _ in wake {
            let jobs = state.withLockedValue { s -> [Job] in
                defer { s.waiting.removeAll(keepingCapacity: true) }
                return s.waiting
            }
            if !jobs.isEmpty { await body(jobs) }
        }
    }
}
