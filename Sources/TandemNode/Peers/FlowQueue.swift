import NIOConcurrencyHelpers
import NIOPosix
import TandemNet
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Takes the flows' work (store reads and writes, fsyncs) off the event loops: links hand each
/// frame and each link event over here, and one serial queue carries them out in arrival order.
/// An event loop only verifies, timestamps and enqueues, so a slow disk or a flood of frames that
/// each cost a transaction no longer delays every link's pings, clock replies and handshakes.
///
/// Bounded: at most `maximumPending` frames wait in all, and at most `maximumPendingPerAuthor`
/// from any one key; past either, a frame is dropped (counted). Durable frames are resent by
/// their sender's outbox, so a friend loses nothing but a little time; a stranger's flood fills
/// only its own share. Link events (up, down, an ERROR) are never dropped.
///
/// The queue is one thread of its own, at a lower CPU priority than the event loops (nice +10
/// where allowed): when a flood of frames that each cost store work saturates the machine, the
/// flows slow down, not the loops that answer friends' pings and run handshakes.
final class FlowQueue: FrameHandler, @unchecked Sendable {
    let router: NodeFrameRouter
    let maximumPending: Int
    let maximumPendingPerAuthor: Int
    private let queue: SerialWorker
    private struct State {
        var pending = 0
        var perAuthor: [[UInt8]: Int] = [:]
        var dropped = 0
    }
    private let state = NIOLockedValueBox(State())

    init(router: NodeFrameRouter, maximumPending: Int = 4_096, maximumPendingPerAuthor: Int = 64) {
        self.router = router
        self.maximumPending = maximumPending
        self.maximumPendingPerAuthor = maximumPendingPerAuthor
        self.queue = SerialWorker(niceIncrement: 10)
    }

    /// Frames dropped because the queue or the author's share was full.
    var dropped: Int { state.withLockedValue { $0.dropped } }

    func handle(_ envelope: Envelope, from link: PeerLink) {
        // Clock frames are timestamped on arrival, before anything else waits.
        if envelope.type == .clockProbe || envelope.type == .clockReply {
            router.handle(envelope, from: link)
            return
        }
        submit(author: envelope.author) { $0.handle(envelope, from: link) }
    }

    /// A LAN sighting (each beacon writes the sighting and the address): off the UDP event loop,
    /// within the same bounds, the sighted key counting as the author.
    func sighted(_ sighting: PeerSighting) {
        submit(author: sighting.publicKey) { $0.friends.sighted(sighting) }
    }

    private func submit(author: [UInt8], _ work: @escaping @Sendable (NodeFrameRouter) -> Void) {
        let admitted = state.withLockedValue { s -> Bool in
            guard s.pending < maximumPending, s.perAuthor[author, default: 0] < maximumPendingPerAuthor else {
                s.dropped += 1
                return false
            }
            s.pending += 1
            s.perAuthor[author, default: 0] += 1
            return true
        }
        guard admitted else { return }
        queue.async { [self] in
            defer {
                state.withLockedValue { s in
                    s.pending -= 1
                    let n = s.perAuthor[author, default: 1] - 1
                    s.perAuthor[author] = n > 0 ? n : nil
                }
            }
            work(router)
        }
    }

    func peerConnected(_ key: [UInt8], link: PeerLink) {
        queue.async { [router] in router.peerConnected(key, link: link) }
    }

    func peerDisconnected(_ key: [UInt8]) {
        queue.async { [router] in router.peerDisconnected(key) }
    }

    func peerReportedError(_ error: Tandem_V1_Error, from key: [UInt8]) {
        queue.async { [router] in router.peerReportedError(error, from: key) }
    }
}

/// Jobs run one at a time, in order, on one thread of a one-thread pool (shut down when released).
final class SerialWorker: Sendable {
    private let pool: NIOThreadPool

    /// `niceIncrement`: added to the thread's nice value (a lower CPU priority) where the system allows.
    init(niceIncrement: Int32 = 0) {
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        if niceIncrement != 0 {
            pool.submit { _ in
                #if canImport(Glibc)
                // On Linux, PRIO_PROCESS with who 0 is the calling thread only (nice is per thread).
                let which = __priority_which_t(PRIO_PROCESS.rawValue)
                _ = setpriority(which, 0, getpriority(which, 0) + niceIncrement)
                #endif
            }
        }
    }

    func async(_ job: @escaping @Sendable () -> Void) {
        pool.submit { state in
            if case .active = state { job() }
        }
    }

    deinit {
        pool.shutdownGracefully { _ in }
    }
}
