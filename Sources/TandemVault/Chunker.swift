import Sodium

/// Content-defined chunking with a gear hash, FastCDC-style with normalized chunking.
///
/// A boundary depends only on the last 64 bytes before it (the gear hash shifts one bit per byte),
/// so inserting or deleting bytes in a file moves the boundaries near the edit only, and the chunks
/// elsewhere keep their ids: that is what makes a changed file cost only its changed chunks.
///
/// Sizes: no chunk is shorter than `minimumSize` (except the last of a file) or longer than
/// `maximumSize`. Between the minimum and `averageSize` a boundary needs `strictMaskBits` zero bits
/// (hard to hit), past the average only `looseMaskBits` (easy): "normalized chunking", which packs
/// chunk sizes tightly around the average (about 1 MiB here) instead of the long tail plain
/// content-defined chunking gives. The first `minimumSize - 64` bytes of a chunk are not hashed at
/// all (no boundary can fall there), which is most of FastCDC's speed.
///
/// The gear table (256 random 64-bit words) comes from the vault's chunker key: with a public table,
/// an observer who sees blob sizes could test whether a vault holds a known file by its chunk-size
/// sequence. With a keyed table the sizes depend on a secret.
///
/// Streaming: `feed` takes slices of any size, `finish` ends the file. The boundaries are the same
/// whatever the split, because the state carried between calls (the current chunk and the hash) is
/// exactly what a single pass would hold at that point. Memory: one buffer of at most `maximumSize`.
public struct Chunker: ~Copyable {
    /// No chunk but a file's last is shorter (512 KiB).
    public static let minimumSize = 512 * 1024
    /// Past this length a boundary gets easier (1 MiB); chunk sizes cluster around it.
    public static let averageSize = 1024 * 1024
    /// A chunk is cut here whatever its content (8 MiB).
    public static let maximumSize = 8 * 1024 * 1024
    /// Zero bits a boundary needs while the chunk is shorter than `averageSize` (log2(average) + 2).
    public static let strictMaskBits = 22
    /// Zero bits a boundary needs once the chunk reaches `averageSize` (log2(average) - 2).
    public static let looseMaskBits = 18
    /// The gear hash remembers this many bytes: hashing starts this far before `minimumSize`.
    static let window = 64

    // The top bits of the hash depend on the most bytes, so the masks test those.
    static let strictMask: UInt64 = ~UInt64(0) << UInt64(64 - strictMaskBits)
    static let looseMask: UInt64 = ~UInt64(0) << UInt64(64 - looseMaskBits)

    private let gear: UnsafeMutableBufferPointer<UInt64>
    private let buffer: UnsafeMutableRawBufferPointer
    /// Bytes of the current chunk held in `buffer`.
    private var length = 0
    private var hash: UInt64 = 0
    /// The most bytes `buffer` ever held (at most `maximumSize`): tests check memory stays bounded.
    public private(set) var bufferHighWaterMark = 0

    /// A chunker whose gear table is derived from `key` (the vault's chunker key).
    public init(key: SecretBytes) {
        gear = .allocate(capacity: 256)
        buffer = .allocate(byteCount: Self.maximumSize, alignment: 64)
        // 256 words = 2048 bytes = 32 keyed BLAKE2b-512 outputs of a counter.
        for block in 0..<32 {
            let digest = Blake2b.keyedHash([UInt8(block)], key: key, outputLength: 64)
            for w in 0..<8 {
                var word: UInt64 = 0
                for b in 0..<8 { word |= UInt64(digest[w * 8 + b]) << UInt64(8 * b) }
                gear[block * 8 + w] = word
            }
        }
    }

    deinit {
        gear.deallocate()
        buffer.deallocate()
    }

    /// Takes the next slice of the stream; calls `onChunk` (in order) for every chunk completed. The
    /// chunk's bytes are valid only during the call.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer, onChunk: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        guard let src = bytes.baseAddress, bytes.count > 0 else { return }
        let input = src.assumingMemoryBound(to: UInt8.self)
        let n = bytes.count
        let hashStart = Self.minimumSize - Self.window
        var i = 0
        while i < n {
            if length < hashStart {
                // No boundary can fall here and the hash would forget these bytes anyway: copy only.
                let take = Swift.min(hashStart - length, n - i)
                append(input + i, take)
                i += take
                continue
            }
            let regionEnd: Int
            let mask: UInt64
            if length < Self.minimumSize {
                regionEnd = Self.minimumSize; mask = 0
            } else if length < Self.averageSize {
                regionEnd = Self.averageSize; mask = Self.strictMask
            } else {
                regionEnd = Self.maximumSize; mask = Self.looseMask
            }
            let take = Swift.min(regionEnd - length, n - i)
            var h = hash
            var consumed = take
            var cut = false
            let g = UnsafePointer(gear.baseAddress!)
            let p = input + i
            if mask == 0 {
                for j in 0..<take { h = (h &<< 1) &+ g[Int(p[j])] }
            } else {
                var j = 0
                while j < take {
                    h = (h &<< 1) &+ g[Int(p[j])]
                    j += 1
                    if h & mask == 0 { cut = true; break }
                }
                consumed = j
            }
            hash = h
            append(p, consumed)
            i += consumed
            if cut || length == Self.maximumSize {
                try emit(onChunk)
            }
        }
    }

    /// Array convenience for `feed`.
    public mutating func feed(_ bytes: [UInt8], onChunk: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        try bytes.withUnsafeBytes { try feed($0, onChunk: onChunk) }
    }

    /// Starts a new stream with the same key and buffer (a batch import chunks file after file
    /// in one chunker: one 8 MiB buffer for the batch, not one allocated and freed per file).
    public mutating func reset() {
        length = 0
        hash = 0
    }

    /// Ends the stream: the bytes still held (if any) are the last chunk.
    public mutating func finish(onChunk: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        if length > 0 { try emit(onChunk) }
    }

    private mutating func append(_ p: UnsafePointer<UInt8>, _ count: Int) {
        guard count > 0 else { return }
        (buffer.baseAddress! + length).copyMemory(from: p, byteCount: count)
        length += count
        if length > bufferHighWaterMark { bufferHighWaterMark = length }
    }

    private mutating func emit(_ onChunk: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        let chunk = UnsafeRawBufferPointer(start: buffer.baseAddress, count: length)
        length = 0
        hash = 0
        try onChunk(chunk)
    }

    /// The chunk lengths of a whole buffer (tests, tools).
    public static func chunkLengths(of data: [UInt8], key: SecretBytes) -> [Int] {
        var chunker = Chunker(key: key)
        var lengths: [Int] = []
        chunker.feed(data) { lengths.append($0.count) }
        chunker.finish { lengths.append($0.count) }
        return lengths
    }
}
