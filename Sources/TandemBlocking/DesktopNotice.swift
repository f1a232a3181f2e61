#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// A desktop notification through `notify-send` (libnotify), when the machine has one and the
/// node runs in a desktop session: tells the person why an app just closed. Best effort: without
/// `notify-send` or a session bus nothing happens (the event still says it). At most one notice per
/// app name every 30 s, so a program restarted in a loop does not flood the desktop.
public final class DesktopNotice: Sendable {
    private let executable: String?
    private let environment: [String]
    private let lastShown = Mutex<[String: Int64]>([:])

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let session = environment["DBUS_SESSION_BUS_ADDRESS"] != nil || environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil
        let candidates: [String] = (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map { String($0) + "/notify-send" }
        let path = candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
        executable = session ? path : nil
        self.environment = environment.map { "\($0.key)=\($0.value)" }
    }

    /// Whether notices can be shown at all.
    public var isAvailable: Bool { executable != nil }

    /// Shows `body` under `title` for `key` (an app name), unless one was shown in the last 30 s.
    public func show(key: String, title: String, body: String, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) {
        guard let executable else { return }
        let due = lastShown.withLock { shown -> Bool in
            if let last = shown[key], nowMs - last < 30_000 { return false }
            if shown.count > 1_000 { shown.removeAll() }
            shown[key] = nowMs
            return true
        }
        guard due else { return }
        guard case .success(let child) = Spawned.spawn(path: executable, arguments: ["--app-name=Tandem", "--urgency=normal", title, body],
                                                       environment: environment, newProcessGroup: true, captureOutput: false) else { return }
        var status: Int32 = 0
        _ = waitpid(child.pid, &status, 0)  // notify-send returns at once; no zombie left
    }
}
