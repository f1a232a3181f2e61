import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Sodium
import TandemNet
import TandemProtocol

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
/// timeouts. Used by one task at a time.
final class BackupExchange: @unchecked Sendable {
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

    let peer: [UInt8]
    let link: PeerLink
    let answers: BackupAnswers
    private let continuation: AsyncStream<Event>.Continuation
    private var iterator: AsyncStream<Event>.Iterator
    private let ticker: Task<Void, Never>
    private let registered = NIOLockedValueBox<Set<BackupRequestID>>([])
    private(set) var isClosed = false
    /// Payload bytes of every frame this exchange sent.
    private(set) var bytesSent: Int64 = 0

    init(peer: [UInt8], link: PeerLink, answers: BackupAnswers) {
        self.peer = peer
        self.link = link
        self.answers = answers
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .unbounded)
        self.continuation = continuation
        self.iterator = stream.makeAsyncIterator()
        ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                continuation.yield(.tick)
            }
        }
        link.channel.closeFuture.whenComplete { _ in continuation.yield(.closed) }
    }

    deinit {
        ticker.cancel()
        continuation.finish()
        answers.unregister(Array(registered.withLockedValue { $0 }))
    }

    func arrived(_ answer: BackupAnswer) {
        _ = registered.withLockedValue { $0.remove(answer.requestID) }
        continuation.yield(.answer(answer))
    }

    static func newRequestID() -> BackupRequestID { BackupRequestID(bytes: Sodium.randomBytes(16))! }

    /// Sends a request, signed (a piece is link-authenticated instead: README 5.4); its answer (to
    /// `id`) comes as an event.
    func send(_ type: MessageType, id: BackupRequestID, payload: [UInt8], flush: Bool = true) throws {
        guard !isClosed else { throw LinkLost() }
        let env = Envelope.sign(type: type, author: link.identity, recipient: peer, createdAt: wallClockMilliseconds(), payload: payload)
        registered.withLockedValue { _ = $0.insert(id) }
        answers.register(id, peer: peer, self)
        bytesSent += Int64(env.payload.count)
        link.send(env, flush: flush)
    }

    func flush() { link.channel.flush() }

    /// Forgets requests whose answers are no longer wanted.
    func abandon(_ ids: [BackupRequestID]) {
        registered.withLockedValue { r in for id in ids { r.remove(id) } }
        answers.unregister(ids)
    }

    /// The next event; throws once the link closed or the task is cancelled.
    func next() async throws -> Event {
        while true {
            try Task.checkCancellation()
            guard let e = await iterator.next() else { throw CancellationError() }
            if case .closed = e {
                isClosed = true
                throw LinkLost()
            }
            return e
        }
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
