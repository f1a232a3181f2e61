import CZstd

/// zstd through reusable contexts (one per repository: a context costs a few hundred KiB to set up,
/// a chunk takes milliseconds to compress). Not thread-safe, like the repository that owns it.
final class Zstd {
    /// Level 1, zstd's fastest standard level: on documents it stores about 5 % more than level 3
    /// (the library's default) at about twice the speed, which made the import of documents 1.25–1.29×
    /// restic's instead of 1.02–1.08× (`tandem-bench vault`, Protocol/vault.md). Media, most of a
    /// vault's bytes, are not compressed at all.
    static let level: Int32 = 1

    private let cctx: OpaquePointer
    private let dctx: OpaquePointer

    init() {
        // ZSTD_create*Ctx fail only when malloc does: like any allocation failure, fatal.
        guard let c = ZSTD_createCCtx(), let d = ZSTD_createDCtx() else { fatalError("zstd: out of memory") }
        cctx = c
        dctx = d
    }

    deinit {
        probeScratch.deallocate()
        ZSTD_freeCCtx(cctx)
        ZSTD_freeDCtx(dctx)
    }

    static func compressBound(_ n: Int) -> Int { ZSTD_compressBound(n) }

    /// Bytes of a chunk the compressibility probe compresses.
    static let probeBytes = 64 << 10
    private lazy var probeScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.probeBytes, alignment: 16)

    /// Whether a chunk is worth compressing whole: chunks larger than four probes are judged by
    /// 64 KiB from their middle (data that does not shrink there rarely shrinks elsewhere; random
    /// and encrypted data then costs one small probe instead of a failed pass over the chunk).
    func looksCompressible(_ source: UnsafeRawBufferPointer, worthwhile: (Int) -> Int) -> Bool {
        guard source.count > 4 * Self.probeBytes else { return true }
        let start = (source.count - Self.probeBytes) / 2
        let sample = UnsafeRawBufferPointer(rebasing: source[start..<(start + Self.probeBytes)])
        let room = worthwhile(Self.probeBytes)
        return compress(sample, into: UnsafeMutableRawBufferPointer(rebasing: probeScratch[0..<room])) != nil
    }

    /// Compresses `source` into `destination`; the compressed length, or nil when it does not fit
    /// (the caller sizes `destination` to the largest result worth keeping, so zstd stops early on
    /// data that does not shrink enough).
    func compress(_ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer) -> Int? {
        guard let dst = destination.baseAddress, destination.count > 0 else { return nil }
        let rc = ZSTD_compressCCtx(cctx, dst, destination.count, source.baseAddress, source.count, Self.level)
        if ZSTD_isError(rc) != 0 { return nil }
        return rc
    }

    /// Decompresses one frame into exactly `destination.count` bytes: true only when the frame is
    /// valid and fills the destination exactly. The destination bounds the work and the memory, so a
    /// corrupt or hostile frame cannot claim more.
    func decompress(_ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer) -> Bool {
        var dummy: UInt8 = 0
        return withUnsafeMutablePointer(to: &dummy) { d in
            let dst = destination.baseAddress ?? UnsafeMutableRawPointer(d)
            let rc = ZSTD_decompressDCtx(dctx, dst, destination.count, source.baseAddress, source.count)
            return ZSTD_isError(rc) == 0 && rc == destination.count
        }
    }
}
