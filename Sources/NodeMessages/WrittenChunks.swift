import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The chunks of a partial file that were written to it, perhaps not yet synced (messages.md 7.3),
/// kept beside it as `<file_id>.written`: the kernel's boot id (36 bytes), then one bit per chunk,
/// least significant first. The writing lane rewrites it (no sync) after every chunk it writes.
///
/// What a process wrote is in the kernel's page cache, so a kill -9 of the node loses none of it:
/// started again within the same boot, the node takes these bits as held and asks only for the
/// others. After a reboot (a power cut may have lost what was not synced) only the bits the store
/// holds count, which are set once the chunks are synced. Either way the whole file is checked
/// against `file_hash` at the end.
struct WrittenChunks {
    private(set) var bitmap: [UInt8]
    private let fd: Int32

    /// The sidecar of the partial file at `partial`.
    static func path(_ partial: String) -> String {
        (partial.hasSuffix(".part") ? String(partial.dropLast(5)) : partial) + ".written"
    }

    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), nil where there is none.
    static let bootID: [UInt8]? = {
        // try?: no boot id (not Linux, no /proc) means no sidecar is trusted, which is only slower.
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else { return nil }
        let id = Array(text.trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        return id.count == 36 ? id : nil
    }()

    /// The bits the sidecar of `partial` holds if it was written during this boot (`bytes` of bitmap,
    /// extra bits cleared by the caller), else nil.
    static func load(partial: String, bytes: Int) -> [UInt8]? {
        guard var bits = stored(partial) else { return nil }
        if bits.count > bytes { bits.removeLast(bits.count - bytes) }
        if bits.count < bytes { bits += [UInt8](repeating: 0, count: bytes - bits.count) }
        return bits
    }

    /// The sidecar's bits as stored, if written during this boot.
    private static func stored(_ partial: String) -> [UInt8]? {
        guard let boot = bootID, let data = FileManager.default.contents(atPath: path(partial)),
              data.count >= 36, Array(data.prefix(36)) == boot else { return nil }
        return Array(data.dropFirst(36))
    }

    /// Opens (creating) the sidecar of `partial`, starting from its bits of this boot.
    init(partial: String) throws {
        let p = Self.path(partial)
        bitmap = Self.stored(partial) ?? []
        while bitmap.last == 0 { bitmap.removeLast() }
        fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw FileDisk.HashError.io("cannot open \(p): \(String(cString: strerror(errno)))") }
    }

    /// Chunk `index` is written: its bit is set and the sidecar rewritten (when the boot is known).
    mutating func written(_ index: Int) throws {
        guard index >= 0, let boot = Self.bootID else { return }
        if bitmap.count <= index / 8 { bitmap += [UInt8](repeating: 0, count: index / 8 + 1 - bitmap.count) }
        bitmap[index / 8] |= 1 << UInt8(index % 8)
        let bytes = boot + bitmap
        let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, 0) }
        guard n == bytes.count else { throw FileDisk.HashError.io("cannot record a written chunk: \(String(cString: strerror(errno)))") }
    }

    func close() { _ = Glibc.close(fd) }

    /// Removes the sidecar of `partial`.
    static func remove(partial: String) { unlink(path(partial)) }
}
