import Logging
import NIOConcurrencyHelpers

/// Store failures on paths that must go on (a delivery round, a presence update): each one is
/// logged with what was being done, and counted (`tandem status` shows `store_errors`), never
/// swallowed as "nothing to do".
final class StoreHealth: Sendable {
    private let count = NIOLockedValueBox(0)
    let logger: Logger

    init(logger: Logger) { self.logger = logger }

    var errors: Int { count.withLockedValue { $0 } }

    /// A write whose failure must not stop the flow it belongs to.
    func attempt(_ what: String, _ body: () throws -> Void) {
        do {
            try body()
        } catch {
            failed(what, error)
        }
    }

    /// A read whose failure must not stop the flow: `fallback` is used instead.
    func read<T>(_ what: String, or fallback: T, _ body: () throws -> T) -> T {
        do {
            return try body()
        } catch {
            failed(what, error)
            return fallback
        }
    }

    func failed(_ what: String, _ error: Error) {
        count.withLockedValue { $0 += 1 }
        logger.error("store access failed", metadata: ["what": "\(what)", "error": "\(error)"])
    }
}
