import Foundation
import GRDB
import GRDBSQLite
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The write-ahead log is given its working size when the store opens (Protocol/messages.md 8 and
/// 11.5), so that commits overwrite blocks the file already has instead of appending to it.
///
/// A commit writes its pages at the end of the log and syncs it (`fdatasync`). While the log grows
/// (from the store's opening until SQLite's first checkpoint lets it start over, about 1,000 pages:
/// for a node that sends a few messages a day, every commit of the day), each sync must also
/// record the file's new size: a commit of the file system's journal, which is shared with every
/// other file on the disk and waits behind their changes (3–12 ms on a busy machine, 4 KiB
/// overwritten and synced 0.1 ms). Over blocks already written, the sync writes the pages only.
///
/// The log past its last frame is zeros: SQLite reads frames only up to the first one whose salt
/// and checksum do not match (zeros never do), as it does over the older frames it leaves behind
/// when it starts over. SQLite deletes the log when the store's last connection closes; the next
/// opening sizes it again.
enum WriteAheadLogSize {
    /// Frames the log is given: SQLite's automatic checkpoint starts the log over once it holds
    /// 1,000 pages, and a commit in flight can take it past that.
    static let frames = 1_200

    /// Extends the log at `walPath` with zeros to `frames` frames of `pageSize`-byte pages, and syncs
    /// it, when it is shorter. Run while holding the database's write lock (`BEGIN IMMEDIATE`): no
    /// connection, of this process or another, appends frames meanwhile. Best effort: a log that
    /// cannot grow (a full disk) stays as it is, and grows with its commits as before.
    /// Returns the bytes added.
    @discardableResult
    static func extend(_ walPath: String, pageSize: Int) -> Int {
        guard (512...65_536).contains(pageSize) else { return 0 }
        let fd = open(walPath, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return 0 }
        let size = Int(st.st_size), target = 32 + frames * (24 + pageSize)
        guard size < target else { return 0 }
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        var at = size
        while at < target {
            let n = pwrite(fd, zeros, min(zeros.count, target - at), off_t(at))
            guard n > 0 else { return at - size }
            at += n
        }
        // The blocks are allocated and written now, once, rather than by the first commits' syncs.
        guard fdatasync(fd) == 0 else { return at - size }
        return target - size
    }
}

extension NodeStore {
    /// Sizes the write-ahead log (`WriteAheadLogSize`) under the database's write lock.
    static func sizeWriteAheadLog(of pool: DatabasePool, walPath: String) throws {
        try pool.writeWithoutTransaction { db in
            let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            try db.execute(sql: "BEGIN IMMEDIATE")
            WriteAheadLogSize.extend(walPath, pageSize: pageSize)
            try db.execute(sql: "ROLLBACK")
        }
    }
}

/// When the write-ahead log is checkpointed (Protocol/messages.md 11.5): after a step, not inside
/// its commit.
///
/// SQLite's own policy checkpoints the log in the commit that takes it past 1,000 pages, before
/// that commit returns: the step whose commit it was (one message in about thirty, on a node
/// that sends one at a time) waited for the copy of the log's pages into the database and the
/// database's sync, several milliseconds. The store instead notes the log's length at each commit
/// (`sqlite3_wal_hook`, which replaces SQLite's automatic checkpoint on the writer connection) and
/// checkpoints (PASSIVE: it never waits for readers) once a step's after-commit actions have run
/// (ACKs, answers, frames and events are on their way), when the log holds `threshold` frames.
final class WriteAheadLogFrames: Sendable {
    /// SQLite's own default.
    static let threshold = 1_000
    /// Frames in the log after the latest commit.
    let frames = Atomic<Int>(0)
    /// Checkpoints made, and the frames the log held at the latest.
    let checkpoints = Atomic<Int>(0)

    /// Installs the hook on `db` (the writer connection). The hook's context is this object,
    /// retained for as long as the process runs (one small object per store opened).
    func install(on db: Database) {
        guard let connection = db.sqliteConnection else { return }
        let context = Unmanaged.passRetained(self).toOpaque()
        sqlite3_wal_hook(connection, { context, _, _, frames in
            guard let context else { return SQLITE_OK }
            Unmanaged<WriteAheadLogFrames>.fromOpaque(context).takeUnretainedValue().frames.store(Int(frames), ordering: .relaxed)
            return SQLITE_OK
        }, context)
    }

    var due: Bool { frames.load(ordering: .relaxed) >= Self.threshold }
}
