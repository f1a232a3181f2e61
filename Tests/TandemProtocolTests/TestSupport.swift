import NIOCore
import Sodium
@testable import TandemProtocol

/// A small deterministic generator so random splits are reproducible from a seed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Cuts `bytes` into pieces: one byte each (`maxPiece` 1) or random sizes up to `maxPiece`.
func pieces(_ bytes: [UInt8], maxPiece: Int, rng: inout SplitMix64) -> [[UInt8]] {
    var out: [[UInt8]] = []
    var i = 0
    while i < bytes.count {
        let n = maxPiece == 1 ? 1 : Int.random(in: 1...maxPiece, using: &rng)
        out.append(Array(bytes[i..<min(i + n, bytes.count)]))
        i += n
    }
    return out
}

func buffer(_ bytes: [UInt8]) -> ByteBuffer {
    var b = ByteBufferAllocator().buffer(capacity: bytes.count)
    b.writeBytes(bytes)
    return b
}

func fixedPair(_ byte: UInt8) -> SigningKeyPair {
    try! SigningKeyPair(seed: [UInt8](repeating: byte, count: 32))
}
