import Logging
import NIOConcurrencyHelpers

/// Store failures on paths that must go on (a delivery round, a presence update): each one is
/// logged with what was being done, and counted (`tandem status` shows `store_errors`), never
/// swallowed as "nothing to do".
package final class StoreHealth: Sendable {
    private let count = NIOLockedValueBox(0)
    let logger: Logger

    package init(logger: Logger) { self.logger = logger }

    package var errors: Int { count.withLockedValue { $0 } }

    /// A write whose failure must not stop the flow it belongs to.
    package func attempt(_ what: String, _ body: () throws -> Void) {
        do {
            try body()
        } catch {
            failed(what, error)
        }
    }

    /// A read whose failure must not stop the flow: `fallback` is used instead.
    package func read<T>(_ what: String, or fallback: T, _ body: () throws -> T) -> T {
        do {
            return try body()
        } catch {
            failed(what, error)
            return fallback
        }
    }

    package func failed(_ what: String, _ error: Error) {
        count.withLockedValue { $0 += 1 }
        logger.error("store access failed", metadata: ["what": "\(what)", "error": "\(error)"])
    }
}
