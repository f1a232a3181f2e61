import Foundation
import Sodium

// The sender's side of files (Protocol/messages.md 7): the chunk tree kept whole, and a safe name
// from a local file name.

extension FileName {
    /// A base name a receiver takes (messages.md 3) made from any local name: NFC; '/', '\\',
    /// controls, bidi controls and invisible characters become '_'; no leading '.'; at most 255
    /// bytes (cut at a character); "file" when nothing is left.
    public static func sanitised(_ raw: String) -> String {
        var s = String(String.UnicodeScalarView(raw.precomposedStringWithCanonicalMapping.unicodeScalars.map { sc in
            sc == "/" || sc == "\\" || ChatText.needsEscape(sc) || sc.value == 0x09 || sc.value == 0x0A ? "_" : sc
        }))
        while s.hasPrefix(".") { s.removeFirst() }
        while s.utf8.count > ChatLimits.fileNameBytes { s.removeLast() }
        return isSafe(s) ? s : "file"
    }
}

/// The whole chunk hash tree of one file, level by level, for the sender (Protocol/messages.md
/// 7.2): a path costs one lookup per level instead of rebuilding subtrees. Built bottom-up by
/// pairing neighbours left to right and carrying an odd last node up unchanged, which gives the
/// same tree as RFC 9162's "split at the largest power of two below n" (`ChunkTree`); the tests
/// check paths and roots against it.
///
/// Memory: 64 bytes per chunk (leaves and inner nodes), 1 MiB for a 4 GiB file.
public struct ChunkTreeLevels: Sendable, Equatable {
    /// levels[0] are the leaf hashes, the last level is the root alone.
    public let levels: [[[UInt8]]]

    /// From the leaf hashes (`H(0x00 ‖ chunk)`, at least one, 32 bytes each).
    public init(leaves: [[UInt8]]) {
        precondition(!leaves.isEmpty && leaves.allSatisfy { $0.count == 32 })
        var levels = [leaves]
        while let top = levels.last, top.count > 1 {
            var next: [[UInt8]] = []
            next.reserveCapacity((top.count + 1) / 2)
            var i = 0
            while i < top.count {
                next.append(i + 1 < top.count ? ChunkTree.nodeHash(top[i], top[i + 1]) : top[i])
                i += 2
            }
            levels.append(next)
        }
        self.levels = levels
    }

    /// From leaf hashes stored end to end (32 bytes each); nil when the length is not a positive
    /// multiple of 32 or names more than the largest file's chunks.
    public init?(packedLeaves: [UInt8]) {
        guard !packedLeaves.isEmpty, packedLeaves.count % 32 == 0, packedLeaves.count / 32 <= ChatLimits.maximumChunks else { return nil }
        self.init(leaves: stride(from: 0, to: packedLeaves.count, by: 32).map { Array(packedLeaves[$0..<($0 + 32)]) })
    }

    public var count: Int { levels[0].count }
    public var root: [UInt8] { levels[levels.count - 1][0] }
    public var packedLeaves: [UInt8] { levels[0].flatMap { $0 } }

    /// The path of leaf `index` (sibling hashes from the leaf up), as `ChunkTree.proof` gives it.
    public func proof(index: Int) -> [[UInt8]] {
        precondition(index >= 0 && index < count)
        var out: [[UInt8]] = []
        var i = index
        for level in levels.dropLast() {
            let sibling = i ^ 1
            if sibling < level.count { out.append(level[sibling]) }
            i >>= 1
        }
        return out
    }
}
