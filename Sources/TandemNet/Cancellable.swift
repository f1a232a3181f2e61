import NIOConcurrencyHelpers
import NIOCore

extension EventLoopFuture {
    /// The future's value, or `CancellationError` as soon as the waiting task is cancelled —
    /// without waiting for the future, whose timeouts may be many seconds long (a connect, a
    /// handshake, a relay join). A value that arrives after the waiter gave up goes to
    /// `abandoned` (close the channel it names), so nothing opened for a cancelled task lingers.
    ///
    /// A service's shutdown must not wait on the network: the service group gives cancelled
    /// services two seconds before it ends the process.
    public func valueUnlessCancelled(abandoned: @escaping @Sendable (Value) -> Void = { _ in }) async throws -> Value
    where Value: Sendable {
        let wait = NIOLockedValueBox(CancellableWait.waiting)
        let relay = eventLoop.makePromise(of: Value.self)
        whenComplete { result in
            // Exactly one of this and the cancellation handler completes `relay`.
            let gaveUp = wait.withLockedValue { w -> Bool in
                if w == .cancelled { return true }
                w = .done
                return false
            }
            if gaveUp {
                if case .success(let value) = result { abandoned(value) }
            } else {
                relay.completeWith(result)
            }
        }
        return try await withTaskCancellationHandler {
            try await relay.futureResult.get()
        } onCancel: {
            let cancel = wait.withLockedValue { w -> Bool in
                guard w == .waiting else { return false }
                w = .cancelled
                return true
            }
            if cancel { relay.fail(CancellationError()) }
        }
    }
}

/// Where a cancellable wait stands.
private enum CancellableWait { case waiting, cancelled, done }

extension Task where Failure == Error {
    /// The task's value, or `CancellationError` as soon as the waiting task is cancelled; the task
    /// itself goes on (others may be waiting for it) and `abandoned` gets what it returns then.
    public func valueUnlessCancelled(on loop: EventLoop,
                                     abandoned: @escaping @Sendable (Success) -> Void = { _ in }) async throws -> Success {
        let promise = loop.makePromise(of: Success.self)
        promise.completeWithTask { try await self.value }
        return try await promise.futureResult.valueUnlessCancelled(abandoned: abandoned)
    }
}
