// The replayer's mutation mode (`tandem-fuzz -mutate=N`, used by `make fuzz-short`): a small,
// seeded, deterministic mutator over the seed corpus, for builds without libFuzzer. It finds
// less than libFuzzer (no coverage feedback) but needs no -sanitize=fuzzer build.

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny 64-bit generator, the same sequence on every
/// platform and Swift version for a given seed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in 0..<n (n > 0). Modulo bias is irrelevant here; the sequence is what matters.
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }

    /// A value in 0...n (n ≥ 0).
    mutating func upTo(_ n: Int) -> Int { below(n + 1) }
}

/// Makes new inputs from old ones: one to four stacked edits of one input, some of them taking
/// bytes from a second input. Results are never longer than `maximumLength`.
struct Mutator {
    enum Edit: CaseIterable {
        case flipBit, setInteresting, setRandomByte, addToByte
        case insertRandom, deleteRange, duplicateRange, splice, truncate, appendRandom
    }

    /// The bytes a peer's extreme values start with. Written 1, 2, 4 or 8 wide, big-endian as
    /// FuzzInput reads them: 0x7f then 0xff… is Int64.max, 0x80 then 0x00… is Int64.min.
    static let interestingBytes: [UInt8] = [0x00, 0xff, 0x7f, 0x80]

    let maximumLength: Int
    private var random: SplitMix64

    init(seed: UInt64, maximumLength: Int) {
        precondition(maximumLength > 0, "maximumLength must be positive")
        self.maximumLength = maximumLength
        random = SplitMix64(seed: seed)
    }

    /// The next index into a corpus of `count` inputs (count > 0).
    mutating func pick(_ count: Int) -> Int { random.below(count) }

    /// `input` changed by one to four edits; `other` is what `splice` takes bytes from.
    mutating func mutate(_ input: [UInt8], splicingWith other: [UInt8]) -> [UInt8] {
        var bytes = Array(input.prefix(maximumLength))
        for _ in 0...random.below(4) {
            apply(Edit.allCases[random.below(Edit.allCases.count)], to: &bytes, other: other)
        }
        return bytes
    }

    private mutating func apply(_ edit: Edit, to bytes: inout [UInt8], other: [UInt8]) {
        // Edits that change a byte in place need one; on an empty input, grow it instead.
        guard !bytes.isEmpty || edit == .splice || edit == .insertRandom else {
            appendRandom(to: &bytes)
            return
        }
        switch edit {
        case .flipBit:
            bytes[random.below(bytes.count)] ^= 1 << UInt8(random.below(8))
        case .setInteresting:
            let first = Self.interestingBytes[random.below(Self.interestingBytes.count)]
            let fill: UInt8 = first == 0x7f || first == 0xff ? 0xff : 0x00
            let at = random.below(bytes.count)
            let width = min([1, 2, 4, 8][random.below(4)], bytes.count - at)
            bytes[at] = first
            for i in at + 1 ..< at + width { bytes[i] = fill }
        case .setRandomByte:
            bytes[random.below(bytes.count)] = UInt8(truncatingIfNeeded: random.next())
        case .addToByte:
            let at = random.below(bytes.count)
            let delta = UInt8(1 + random.below(16))
            bytes[at] = random.below(2) == 0 ? bytes[at] &+ delta : bytes[at] &- delta
        case .insertRandom:
            let room = maximumLength - bytes.count
            guard room > 0 else { return }
            let fresh = randomBytes(min(room, 1 + random.below(16)))
            bytes.insert(contentsOf: fresh, at: random.upTo(bytes.count))
        case .deleteRange:
            let at = random.below(bytes.count)
            bytes.removeSubrange(at ..< at + 1 + random.below(min(bytes.count - at, 64)))
        case .duplicateRange:
            let room = maximumLength - bytes.count
            guard room > 0 else { return }
            let from = random.below(bytes.count)
            let length = 1 + random.below(min(bytes.count - from, room, 256))
            bytes.insert(contentsOf: bytes[from ..< from + length], at: random.upTo(bytes.count))
        case .splice:
            // A prefix of this input, then a suffix of the other one.
            let head = random.upTo(bytes.count)
            let tail = other.isEmpty ? 0 : random.below(other.count)
            bytes = Array((bytes[..<head] + other[tail...]).prefix(maximumLength))
        case .truncate:
            bytes.removeSubrange(random.below(bytes.count)...)
        case .appendRandom:
            appendRandom(to: &bytes)
        }
    }

    private mutating func appendRandom(to bytes: inout [UInt8]) {
        bytes += randomBytes(min(maximumLength - bytes.count, 1 + random.below(16)))
    }

    private mutating func randomBytes(_ count: Int) -> [UInt8] {
        (0 ..< max(0, count)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }
}
