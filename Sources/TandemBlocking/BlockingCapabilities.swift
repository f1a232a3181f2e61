#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// What blocking cannot do with this process's rights, for one clear message at the node's start.
/// The lock itself works either way; only the named enforcement is off or limited.
public enum BlockingCapabilities {
    static let capKill = 5  // CAP_KILL's bit in the capability sets

    /// One line per limitation, empty when everything is possible:
    /// - the hosts file (or, when it does not exist, its directory) not writable → site blocking off;
    /// - `/proc` not listable → app blocking off;
    /// - the app guard acting for another uid (`appUser`, see `AppGuard.user`) without CAP_KILL, or
    ///   with other users' processes hidden (`hidepid`, systemd's `ProtectProc=invisible`) → app
    ///   blocking off. Acting for its own uid, the node needs neither.
    public static func probe(hostsPath: String, appUser: uid_t = geteuid()) -> [String] {
        var notes: [String] = []
        if let note = hostsNote(hostsPath) { notes.append(note) }

        let uid = geteuid()
        if Proc.pids(limit: 1) == nil {
            notes.append("app blocking off: /proc cannot be listed by this process")
        } else {
            let caps = Proc.effectiveCapabilities() ?? 0
            if appUser != uid && caps & (1 << UInt64(capKill)) == 0 {
                notes.append("app blocking off: the node stops only the processes of uid \(appUser), and as uid \(uid) "
                             + "it cannot signal them without CAP_KILL")
            } else if appUser != uid && procHidesOthers() {
                notes.append("app blocking off: /proc hides other users' processes (hidepid, or systemd's "
                             + "ProtectProc=invisible), so the processes of uid \(appUser) are not seen")
            }
        }
        return notes
    }

    static func hostsNote(_ path: String) -> String? {
        var st = stat()
        if stat(path, &st) == 0 {
            if faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0 {
                return "site blocking off: \(path) is not writable by this user (\(BlockingError.errorText(errno))); "
                    + "see Deploy/README.md, \"Blocking while focused\", or use --hosts-file PATH"
            }
            return nil
        }
        let code = errno
        if code != ENOENT {
            return "site blocking off: \(path) cannot be examined (\(BlockingError.errorText(code)))"
        }
        let dir = (path as NSString).deletingLastPathComponent
        if faccessat(AT_FDCWD, dir.isEmpty ? "." : dir, W_OK | X_OK, AT_EACCESS) != 0 {
            return "site blocking off: \(path) does not exist and cannot be created by this user"
        }
        return nil
    }

    /// Whether `/proc` is mounted with `hidepid` other than 0/off (mountinfo's super options).
    static func procHidesOthers() -> Bool {
        guard let bytes = Proc.read("/proc/self/mountinfo", limit: 256 << 10) else { return false }
        for line in bytes.split(separator: 10) {
            let text = String(decoding: line, as: UTF8.self)
            let fields = text.split(separator: " ")
            guard fields.count > 4, fields[4] == "/proc", let dash = fields.firstIndex(of: "-"),
                  dash + 1 < fields.count, fields[dash + 1] == "proc" else { continue }
            for option in fields[(dash + 1)...].joined(separator: ",").split(separator: ",")
            where option.hasPrefix("hidepid=") {
                let value = option.dropFirst("hidepid=".count)
                return !(value == "0" || value == "off")
            }
        }
        return false
    }
}
