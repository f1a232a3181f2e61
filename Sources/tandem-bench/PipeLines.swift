import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Lines from a child process's stdout pipe, read with a deadline (`tandem-bench serve` children,
/// tandem-relay). What follows the last newline read is kept for the next call.
struct PipeLines {
    private var pending: [UInt8] = []

    /// The next line from `fd` (without its newline), or nil on timeout, end of file or a read
    /// error, or once `running` says the writer is gone and no whole line is buffered.
    mutating func next(from fd: Int32, timeoutSeconds: Double, running: () -> Bool = { true }) -> String? {
        let deadline = monotonicNanos() + UInt64(timeoutSeconds * 1e9)
        while true {
            if let nl = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<nl], as: UTF8.self)
                pending.removeSubrange(...nl)
                return line
            }
            let now = monotonicNanos()
            guard now < deadline, running() else { return nil }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&pfd, 1, Int32(min(1000, (deadline - now) / 1_000_000 + 1)))
            if r < 0, errno == EINTR { continue }
            guard r >= 0 else { return nil }
            if r == 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &chunk, chunk.count)
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return nil }
            pending.append(contentsOf: chunk[..<n])
        }
    }
}
