import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemNodeCore

/// A validated answer from a holder (backup.md 2).
enum BackupAnswer: Sendable {
    case have(BackupHaveReplyMessage)
    case reply(BackupReplyMessage)
    case list(BackupListReplyMessage)
    case proof(BackupProofMessage)
    case fetched(BackupFetchedMessage)
    case kit(BackupKitMessage)

    var requestID: BackupRequestID {
        switch self {
        case .have(let m): return m.requestID
        case .reply(let m): return m.requestID
        case .list(let m): return m.requestID
        case .proof(let m): return m.requestID
        case .fetched(let m): return m.requestID
        case .kit(let m): return m.requestID
        }
    }

    /// Decodes an answer frame; nil for a request type or a payload that breaks its rules (an
    /// answer is dropped silently then: the asker's timeout covers it).
    init?(_ envelope: Envelope) {
        do {
            switch envelope.type {
            case .backupHaveReply: self = .have(try BackupHaveReplyMessage(payload: envelope.payload))
            case .backupReply: self = .reply(try BackupReplyMessage(payload: envelope.payload))
            case .backupListReply: self = .list(try BackupListReplyMessage(payload: envelope.payload))
            case .backupProof: self = .proof(try BackupProofMessage(payload: envelope.payload))
            case .backupFetched: self = .fetched(try BackupFetchedMessage(payload: envelope.payload))
            case .backupKit: self = .kit(try BackupKitMessage(payload: envelope.payload))
            default: return nil
            }
        } catch {
            return nil
        }
    }

    static let types: Set<MessageType> = [.backupHaveReply, .backupReply, .backupListReply, .backupProof, .backupFetched, .backupKit]
}

/// Routes holders' answers to the exchange that asked, by request id (backup.md 2: "The asker
/// matches answers by request_id and ignores answers it is not waiting for").
final class BackupAnswers: Sendable {
    private let waiting = NIOLockedValueBox<[BackupRequestID: (peer: [UInt8], exchange: BackupExchange)]>([:])

    func register(_ id: BackupRequestID, peer: [UInt8], _ exchange: BackupExchange) {
        waiting.withLockedValue { $0[id] = (peer, exchange) }
    }

    func unregister(_ ids: [BackupRequestID]) {
        waiting.withLockedValue { w in for id in ids { w[id] = nil } }
    }

    /// An answer frame from `author`: handed to its exchange when one waits for it from that key.
    func deliver(_ envelope: Envelope) {
        guard let answer = BackupAnswer(envelope) else { return }
        let target = waiting.withLockedValue { w -> BackupExchange? in
            guard let entry = w[answer.requestID], entry.peer == envelope.author else { return nil }
            w[answer.requestID] = nil
            return entry.exchange
        }
        target?.arrived(answer)
    }
}

/// The owner's conversation with one holder over one link: requests out, answers in, with
/// timeouts. Used by one task at a time; answers and the link's close come in from event loops.
/// While that task waits in `next`, a `.tick` comes at least every 250 ms (a timer on the link's
/// event loop: no task of its own), so its timeouts are checked even when the holder is silent.
final class BackupExchange: Sendable {
    enum Event: Sendable {
        case answer(BackupAnswer)
        case tick
        case closed
    }

    struct LinkLost: Error, CustomStringConvertible {
        var description: String { "the link to the holder closed" }
    }

    struct NoAnswer: Error, CustomStringConvertible {
        let what: String
        var description: String { "the holder did not answer \(what) (5 tries)" }
    }

    static let tickInterval: Duration = .milliseconds(250)

    let peer: [UInt8]
    let link: PeerLink
    let answers: BackupAnswers
    private struct State {
        var events = CircularBuffer<Event>()
        /// The task waiting in `next`, and the token its tick timer carries.
        var waiter: (token: UInt64, continuation: CheckedContinuation<Event?, Never>)?
        var nextToken: UInt64 = 0
        var nextTick = ContinuousClock.now + BackupExchange.tickInterval
        var registered = Set<BackupRequestID>()
        var isClosed = false
        var bytesSent: Int64 = 0
    }
    private let state = NIOLockedValueBox(State())

    init(peer: [UInt8], link: PeerLink, answers: BackupAnswers) {
        self.peer = peer
        self.link = link
        self.answers = answers
        link.channel.closeFuture.whenComplete { [weak self] _ in self?.push(.closed) }
    }

    deinit {
        answers.unregister(Array(state.withLockedValue { $0.registered }))
    }

    var isClosed: Bool { state.withLockedValue { $0.isClosed } }
    /// Payload bytes of every frame this exchange sent.
    var bytesSent: Int64 { state.withLockedValue { $0.bytesSent } }

    private func push(_ event: Event) {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Event?, Never>? in
            if let w = s.waiter {
                s.waiter = nil
                return w.continuation
            }
            s.events.append(event)
            return nil
        }
        waiter?.resume(returning: event)
    }

    func arrived(_ answer: BackupAnswer) {
        _ = state.withLockedValue { $0.registered.remove(answer.requestID) }
        push(.answer(answer))
    }

    static func newRequestID() -> BackupRequestID { BackupRequestID(bytes: Sodium.randomBytes(16))! }

    /// Sends a request, signed (a piece is link-authenticated instead: README 5.4); its answer (to
    /// `id`) comes as an event.
    func send(_ type: MessageType, id: BackupRequestID, payload: [UInt8], flush: Bool = true) throws {
        guard !isClosed else { throw LinkLost() }
        let env = Envelope.sign(type: type, author: link.identity, recipient: peer, createdAt: wallClockMilliseconds(), payload: payload)
        state.withLockedValue { s in
            s.registered.insert(id)
            s.bytesSent += Int64(env.payload.count)
        }
        answers.register(id, peer: peer, self)
        link.send(env, flush: flush)
    }

    func flush() { link.channel.flush() }

    /// Forgets requests whose answers are no longer wanted.
    func abandon(_ ids: [BackupRequestID]) {
        state.withLockedValue { s in for id in ids { s.registered.remove(id) } }
        answers.unregister(ids)
    }

    /// The next event (a `.tick` once 250 ms passed since the last); throws once the link closed
    /// or the task is cancelled.
    func next() async throws -> Event {
        try Task.checkCancellation()
        let e = await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Event?, Never>) in
                let now = ContinuousClock.now
                let (ready, token, wait) = state.withLockedValue { s -> (Event?, UInt64, Duration) in
                    if now >= s.nextTick {
                        s.nextTick = now + Self.tickInterval
                        return (.tick, 0, .zero)
                    }
                    if let e = s.events.popFirst() { return (e, 0, .zero) }
                    s.nextToken += 1
                    s.waiter = (s.nextToken, c)
                    return (nil, s.nextToken, s.nextTick - now)
                }
                if let ready { return c.resume(returning: ready) }
                let micros = wait.components.seconds * 1_000_000 + wait.components.attoseconds / 1_000_000_000_000
                link.channel.eventLoop.scheduleTask(in: .microseconds(max(1, micros))) {
                    self.resumeWaiter(token: token, with: .tick, advancingTick: true)
                }
                // Cancelled before the waiter was in place: the handler below found nothing to end.
                if Task.isCancelled { resumeWaiter(token: token, with: nil) }
            }
        } onCancel: {
            resumeWaiter(token: nil, with: nil)
        }
        guard let e else { throw CancellationError() }
        if case .closed = e {
            state.withLockedValue { $0.isClosed = true }
            throw LinkLost()
        }
        return e
    }

    /// Ends the wait in `next` (only the one `token` names, when given).
    private func resumeWaiter(token: UInt64?, with event: Event?, advancingTick: Bool = false) {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Event?, Never>? in
            guard let w = s.waiter, token == nil || w.token == token else { return nil }
            s.waiter = nil
            if advancingTick { s.nextTick = ContinuousClock.now + Self.tickInterval }
            return w.continuation
        }
        waiter?.resume(returning: event)
    }

    /// One request and its answer: waits 30 s, then asks again with a new id, at most 5 times
    /// with 1, 2, 4, 8 s of backoff (backup.md 2). `make` builds the payload for an id.
    func request(_ type: MessageType, what: String, timeout: Duration = .seconds(30),
                 _ make: (BackupRequestID) -> [UInt8]) async throws -> BackupAnswer {
        var backoff: Duration = .seconds(1)
        for attempt in 0..<5 {
            let id = Self.newRequestID()
            try send(type, id: id, payload: make(id))
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if case .answer(let a) = try await next(), a.requestID == id { return a }
            }
            abandon([id])
            if attempt < 4 {
                try await Task.sleep(for: backoff)
                backoff *= 2
            }
        }
        throw NoAnswer(what: what)
    }
}
