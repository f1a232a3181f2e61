import Foundation
import Sodium
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The unavoidable work per byte of a file's data path and of the box-stream bulk path, measured
/// in this process on one thread (CPU nanoseconds per byte, the thread's own clock, so what other
/// processes take of the machine does not count), and the transfer rate the machine's cores allow
/// each path if they did nothing else (messages.md 11.4).
///
/// The file path must, per byte: read it on the sender (`pread` from the page cache), seal it
/// (box-stream), open it, hash it for its leaf (BLAKE2b), write it into the page cache, and hash
/// it into the whole-file hash (BLAKE2b). The bulk path only seals and opens. Both also copy each
/// byte through the kernel's socket on each side; that is the same for both and left out (it
/// makes the bound of each path higher, not their ratio lower).
struct FileFloors {
    var seal = 0.0, open = 0.0, hash = 0.0, read = 0.0, writeFresh = 0.0, writeReused = 0.0

    /// ns/byte of CPU on this thread.
    static func nsPerByte(_ r: Floors.Rate) -> Double { r.cpu > 0 ? 1e9 / r.cpu : 0 }

    static func measure(in directory: URL, seconds: Double = 0.4) -> FileFloors {
        var f = FileFloors()
        let box = Floors.secretbox(blockLength: BoxStream.maximumBodyLength, seconds: 2 * seconds)
        (f.seal, f.open) = (nsPerByte(box.seal), nsPerByte(box.open))
        let chunk = Sodium.randomBytes(ChatLimits.chunkBytes)
        f.hash = nsPerByte(Floors.rate(seconds: seconds, opsPerCall: chunk.count) { _ = ChunkTree.leafHash(chunk) })
        let path = directory.appendingPathComponent("floors-\(getpid())").path
        defer { unlink(path) }
        // Writes of 256 KiB chunks into a new file: pages never touched by this process (fresh), then,
        // after a sync and POSIX_FADV_DONTNEED, into a second new file (the pages just freed: what the
        // receiver does, 7.3). 64 MiB each.
        let chunks = 256
        func writeFile() -> Double {
            let fd = Glibc.open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return 0 }
            defer { close(fd) }
            let t0 = threadCPUNanos()
            for i in 0..<chunks {
                _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, off_t(i * chunk.count)) }
            }
            let used = threadCPUNanos() - t0
            fdatasync(fd)
            _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
            return Double(used) / Double(chunks * chunk.count)
        }
        f.writeFresh = writeFile()
        unlink(path)
        f.writeReused = writeFile()
        // Reads of a file in the page cache (the sender's file, read again right after its offer).
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        if fd >= 0 {
            defer { close(fd) }
            for i in 0..<32 { _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, off_t(i * chunk.count)) } }
            var buffer = [UInt8](repeating: 0, count: chunk.count)
            var i = 0
            f.read = nsPerByte(Floors.rate(seconds: seconds, opsPerCall: chunk.count) {
                _ = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, $0.count, off_t((i % 32) * chunk.count)) }
                i += 1
            })
        }
        return f
    }

    var sender: Double { read + seal }
    var receiver: Double { open + 2 * hash + writeReused }
    var file: Double { sender + receiver }
    var bulk: Double { seal + open }

    /// MB/s (10^6 bytes) that `cores` allow a path whose work is `total` ns/byte, done in stages no
    /// single one of which can go faster than `stage` ns/byte (one thread each).
    static func ceiling(total: Double, stage: Double, cores: Double) -> Double {
        guard total > 0, stage > 0 else { return 0 }
        return min(cores * 1e3 / total, 1e3 / stage)
    }

    /// The JSON of the floors, the ceilings on `cores` cores, and the same ceiling from the CPU the
    /// nodes really used per byte (`senderNs`, `receiverNs`; the busiest thread of either,
    /// `busiestThreadNs`, as the slowest stage), beside the bulk figure measured.
    func json(cores: Double, senderNs: Double, receiverNs: Double, busiestThreadNs: Double, bulkMBps: Double,
              bulkSenderNs: Double, bulkReceiverNs: Double) -> [String: Any] {
        // The receiver's stages: its event loop opens; its writing lane hashes twice and writes.
        let fileCeiling = Self.ceiling(total: file, stage: max(sender, open, 2 * hash + writeReused), cores: cores)
        let bulkCeiling = Self.ceiling(total: bulk, stage: max(seal, open), cores: cores)
        let measuredCeiling = Self.ceiling(total: senderNs + receiverNs, stage: busiestThreadNs > 0 ? busiestThreadNs : max(senderNs, receiverNs), cores: cores)
        var out: [String: Any] = [
            "ns_per_byte": [
                "box_stream_seal": round3(seal), "box_stream_open": round3(open), "blake2b_256": round3(hash),
                "pread_page_cache": round3(read), "pwrite_fresh_pages": round3(writeFresh), "pwrite_reused_pages": round3(writeReused),
            ],
            "file_path_ns_per_byte": ["sender": round3(sender), "receiver": round3(receiver), "both": round3(file)],
            "bulk_path_ns_per_byte": round3(bulk),
            "cores": cores,
            "ceiling_mb_per_s": ["file_floors": round3(fileCeiling), "bulk_floors": round3(bulkCeiling),
                                 "file_measured_cpu": round3(measuredCeiling)],
            "ceiling_share_of_bulk_ceiling": round3(bulkCeiling > 0 ? fileCeiling / bulkCeiling : 0),
            "method": "each floor on one thread of the bench process, CPU time of that thread: crypto_secretbox on 4096-byte boxes "
                + "(box-stream's body), BLAKE2b-256 of a 256 KiB chunk (ChunkTree.leafHash), pwrite of 64 MiB in 256 KiB chunks into a "
                + "new file (fresh pages), then into another after a sync and POSIX_FADV_DONTNEED (reused pages: what the receiver "
                + "does), pread of 256 KiB from the page cache. Sender = pread + seal; receiver = open + 2 BLAKE2b + pwrite (reused). "
                + "ceiling = min(cores / (sender + receiver), 1 / the slowest single stage) for the file path, "
                + "min(cores / (seal + open), 1 / max(seal, open)) for bulk; file_measured_cpu: the same from the nodes' measured "
                + "CPU per byte (both processes) and their busiest thread's; bulk_measured_cpu: the same from the bulk "
                + "processes' CPU per byte (each one thread). ceiling_share_measured_cpu = file_measured_cpu / bulk_measured_cpu: "
                + "the share of bulk the file path can reach on `cores` cores with nothing else running. Socket copies (the same in both paths) are left out.",
        ]
        if bulkSenderNs > 0, bulkReceiverNs > 0 {
            // The bulk path's processes are one busy thread each (their event loops).
            let bulkMeasured = Self.ceiling(total: bulkSenderNs + bulkReceiverNs, stage: max(bulkSenderNs, bulkReceiverNs), cores: cores)
            out["ceiling_mb_per_s"] = ["file_floors": round3(fileCeiling), "bulk_floors": round3(bulkCeiling),
                                       "file_measured_cpu": round3(measuredCeiling), "bulk_measured_cpu": round3(bulkMeasured)]
            out["ceiling_share_measured_cpu"] = round3(bulkMeasured > 0 ? measuredCeiling / bulkMeasured : 0)
        }
        if bulkMBps > 0 {
            out["file_floors_ceiling_share_of_measured_bulk"] = round3(fileCeiling / bulkMBps)
            out["file_measured_cpu_ceiling_share_of_measured_bulk"] = round3(measuredCeiling / bulkMBps)
        }
        return out
    }
}
