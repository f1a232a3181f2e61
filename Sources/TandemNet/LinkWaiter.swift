import NIOCore
import Sodium
import TandemProtocol

/// Watches a link for the client: completes when the handshake finishes, collects PONGs and
/// ERRORs for callers awaiting them, and passes other frames on.
public final class LinkWaiter: PeerLinkDelegate, @unchecked Sendable {
    // Mutated on the channel's event loop only; `link` is set once in the initializer.
    let established: EventLoopPromise<Void>
    private let eventLoop: EventLoop
    private let next: PeerLinkDelegate?
    var link: PeerLink?
    private var pongWaiters: [UInt64: EventLoopPromise<(Tandem_V1_Pong, UInt64)>] = [:]
    /// Called on the event loop for every ERROR frame the peer sends.
    public var onError: (@Sendable (Tandem_V1_Error) -> Void)?

    init(next: PeerLinkDelegate?, eventLoop: EventLoop) {
        self.next = next
        self.eventLoop = eventLoop
        self.established = eventLoop.makePromise()
    }

    deinit {
        // A connection that never opened leaves the promise pending; a completed one ignores this.
        established.fail(TandemError("the connection was not established"))
    }

    public func linkEstablished(_ link: PeerLink) {
        established.succeed(())
        next?.linkEstablished(link)
    }

    public func link(_ link: PeerLink, received envelope: Envelope) {
        if envelope.type == .pong, let pong = try? Tandem_V1_Pong(serializedBytes: envelope.payload) {
            link.channel.eventLoop.execute {
                self.pongWaiters.removeValue(forKey: pong.nonce)?.succeed((pong, wallClockMilliseconds()))
            }
            return
        }
        next?.link(link, received: envelope)
    }

    public func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {
        onError?(error)
        next?.link(link, receivedError: error, envelope: envelope)
    }

    public func linkClosed(_ link: PeerLink, error: Error?) {
        let e = error ?? TandemError("the peer closed the connection")
        established.fail(e)
        link.channel.eventLoop.execute {
            let waiters = self.pongWaiters
            self.pongWaiters = [:]
            for (_, p) in waiters { p.fail(e) }
        }
        next?.linkClosed(link, error: error)
    }

    /// Sends a signed PING and waits for the matching PONG. Returns the round-trip time.
    public func ping(timeout: TimeAmount = .seconds(10)) async throws -> (rtt: Duration, pong: Tandem_V1_Pong) {
        let clock = ContinuousClock()
        let start = clock.now
        let (pong, _) = try await sendPing(timeout: timeout).get()
        return (clock.now - start, pong)
    }

    /// Sends a signed PING; the future is its PONG (and when it came, wall-clock ms), or fails
    /// after `timeout` or when the link closes.
    public func sendPing(timeout: TimeAmount) -> EventLoopFuture<(Tandem_V1_Pong, UInt64)> {
        guard let link else { return eventLoop.makeFailedFuture(TandemError("not connected")) }
        let loop = link.channel.eventLoop
        let nonce = Sodium.randomUInt64()
        var ping = Tandem_V1_Ping()
        ping.nonce = nonce
        ping.sentAtMs = wallClockMilliseconds()
        let payload: [UInt8]
        do {
            payload = try ping.serializedBytes()
        } catch {
            return loop.makeFailedFuture(error)
        }
        // The promise is made on the loop, so a loop that is gone fails the submit and leaves none pending.
        return loop.submit { () -> EventLoopFuture<(Tandem_V1_Pong, UInt64)> in
            let promise = loop.makePromise(of: (Tandem_V1_Pong, UInt64).self)
            self.pongWaiters[nonce] = promise
            let timer = loop.scheduleTask(in: timeout) {
                self.pongWaiters.removeValue(forKey: nonce)?.fail(TandemError("no answer within \(timeout.nanoseconds / 1_000_000_000) s", exitCode: TandemError.timeoutExitCode))
            }
            promise.futureResult.whenComplete { _ in timer.cancel() }
            link.send(type: .ping, payload: payload)
            return promise.futureResult
        }.flatMap { $0 }
    }
}
