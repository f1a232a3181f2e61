import Foundation
import Sodium
import SwiftProtobuf

// Files between friends (Protocol/messages.md 7): FILE_OFFER, FILE_REQUEST, FILE_CHUNK, FILE_CANCEL,
// and the chunk hash tree every chunk is checked against.

/// The hash tree over a file's chunks (messages.md 7.2): RFC 9162's Merkle tree hash with
/// BLAKE2b-256. A leaf is `H(0x00 ‖ chunk)`, an inner node `H(0x01 ‖ left ‖ right)`; a tree of `n > 1`
/// leaves splits at the largest power of two below `n`. The prefixes keep a leaf from ever being
/// mistaken for an inner node (no second preimage by moving a level).
public enum ChunkTree {
    public static func leafHash(_ chunk: some Collection<UInt8>) -> [UInt8] {
        // Hashed where it lies (a chunk is 256 KiB: no copy of it for the hash).
        if let leaf = chunk.withContiguousStorageIfAvailable({ leafHash(UnsafeRawBufferPointer($0)) }) { return leaf }
        return Array(chunk).withUnsafeBytes { leafHash($0) }
    }

    public static func leafHash(_ chunk: UnsafeRawBufferPointer) -> [UInt8] {
        var h = Blake2b(outputLength: 32)
        h.update([0x00])
        h.update(chunk)
        return h.finalize()
    }

    static func nodeHash(_ left: [UInt8], _ right: [UInt8]) -> [UInt8] {
        Hash.blake2b([0x01] + left + right)
    }

    /// The largest power of two strictly below `n` (n ≥ 2).
    static func split(_ n: Int) -> Int {
        var k = 1
        while k << 1 < n { k <<= 1 }
        return k
    }

    /// The root over the leaf hashes (at least one).
    public static func root(_ leaves: ArraySlice<[UInt8]>) -> [UInt8] {
        precondition(!leaves.isEmpty)
        if leaves.count == 1 { return leaves[leaves.startIndex] }
        let k = split(leaves.count)
        let mid = leaves.startIndex + k
        return nodeHash(root(leaves[leaves.startIndex..<mid]), root(leaves[mid...]))
    }

    public static func root(_ leaves: [[UInt8]]) -> [UInt8] { root(leaves[...]) }

    /// The path of leaf `index`: sibling hashes from the leaf up.
    public static func proof(index: Int, _ leaves: ArraySlice<[UInt8]>) -> [[UInt8]] {
        precondition(leaves.indices.contains(leaves.startIndex + index))
        if leaves.count == 1 { return [] }
        let k = split(leaves.count)
        let mid = leaves.startIndex + k
        if index < k {
            return proof(index: index, leaves[leaves.startIndex..<mid]) + [root(leaves[mid...])]
        }
        return proof(index: index - k, leaves[mid...]) + [root(leaves[leaves.startIndex..<mid])]
    }

    public static func proof(index: Int, _ leaves: [[UInt8]]) -> [[UInt8]] { proof(index: index, leaves[...]) }

    /// Whether `leaf` is leaf `index` of a tree of `count` leaves with this `root` (RFC 9162 2.1.3.2).
    /// Any `index`, `count` and proof length are safe: a path of the wrong length fails.
    public static func verify(leaf: [UInt8], index: Int, count: Int, proof: [[UInt8]], root: [UInt8]) -> Bool {
        guard index >= 0, index < count else { return false }
        var fn = index, sn = count - 1, r = leaf
        for p in proof {
            guard sn != 0, p.count == 32 else { return false }
            if fn & 1 == 1 || fn == sn {
                r = nodeHash(p, r)
                while fn & 1 == 0 && fn != 0 {
                    fn >>= 1
                    sn >>= 1
                }
            } else {
                r = nodeHash(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && r.count == 32 && Sodium.constantTimeEqual(r, root)
    }

    /// Chunks in a file of `size` bytes (size ≥ 1).
    public static func chunkCount(size: UInt64, chunkBytes: Int = ChatLimits.chunkBytes) -> Int {
        Int((size - 1) / UInt64(chunkBytes)) + 1
    }

    /// Bytes in chunk `index` of a file of `size` bytes.
    public static func chunkLength(index: Int, size: UInt64, chunkBytes: Int = ChatLimits.chunkBytes) -> Int {
        let start = UInt64(index) * UInt64(chunkBytes)
        return Int(min(UInt64(chunkBytes), size - start))
    }
}

/// A file id: 16 random bytes chosen by the sender.
public struct FileID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
    }
    public static func random() -> FileID { FileID(bytes: Sodium.randomBytes(16))! }
    public var description: String { hexString(bytes) }
}

private func fileID(_ d: Data, _ type: MessageType) throws -> FileID {
    guard let id = FileID(bytes: Array(d)) else { throw PayloadError(type, "file id is \(d.count) bytes, not 16") }
    return id
}

private func decodeFile<M: SwiftProtobuf.Message>(_ m: M.Type, _ type: MessageType, _ payload: [UInt8],
                                                  max: Int = ChatLimits.maximumPayloadBytes) throws -> M {
    guard payload.count <= max else { throw PayloadError(type, "payload of \(payload.count) bytes exceeds \(max)") }
    do {
        return try M(serializedBytes: payload)
    } catch {
        throw PayloadError(type, "payload is not a \(M.protoMessageName)")
    }
}

private func serialize(_ m: some SwiftProtobuf.Message) -> [UInt8] { (try? m.serializedBytes()) ?? [] }

/// A file name as offered: its base name, safe to create in a downloads folder.
public enum FileName {
    /// 1 … 255 bytes of UTF-8 in NFC, no '/', no '\', no NUL or other control, not "." or "..", not
    /// starting with '.' (no hidden files planted) and no bidi controls (a name that reads as
    /// "photo.jpg" but is "photo<U+202E>gpj.exe").
    public static func isSafe(_ s: String) -> Bool {
        let n = s.utf8.count
        guard n >= 1, n <= ChatLimits.fileNameBytes, !s.hasPrefix(".") else { return false }
        return !s.unicodeScalars.contains { sc in
            sc == "/" || sc == "\\" || ChatText.needsEscape(sc) || sc.value == 0x09 || sc.value == 0x0A
        }
    }
}

/// FILE_OFFER (0x0509). `challengeID` set: the file is offered in that challenge's thread (messages.md
/// 7.7), signed once by its author to the inviter, who forwards the envelope inside FORWARD.
public struct FileOfferMessage: Equatable, Sendable {
    public let fileID: FileID
    public let name: String
    public let size: UInt64
    public let fileHash: [UInt8]
    public let chunkBytes: Int
    public let chunkRoot: [UInt8]
    public let messageID: [UInt8]?
    /// nil: a direct conversation; else the 16-byte id of the challenge whose thread it is offered in.
    public let challengeID: ThreadID?

    public init(fileID: FileID, name: String, size: UInt64, fileHash: [UInt8], chunkRoot: [UInt8], messageID: [UInt8]? = nil,
                challengeID: ThreadID? = nil) {
        precondition(FileName.isSafe(name) && (1...ChatLimits.maximumFileBytes).contains(size))
        precondition(fileHash.count == 32 && chunkRoot.count == 32 && (messageID.map { $0.count == 16 } ?? true))
        precondition(challengeID.map { $0.count == 16 } ?? true)
        self.fileID = fileID
        self.name = name
        self.size = size
        self.fileHash = fileHash
        self.chunkBytes = ChatLimits.chunkBytes
        self.chunkRoot = chunkRoot
        self.messageID = messageID
        self.challengeID = challengeID
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.fileOffer
        let m = try decodeFile(Tandem_V1_FileOffer.self, t, payload)
        fileID = try TandemProtocol.fileID(m.fileID, t)
        let nfc = m.name.precomposedStringWithCanonicalMapping
        guard FileName.isSafe(m.name), FileName.isSafe(nfc) else { throw PayloadError(t, "file name is not a safe base name") }
        name = nfc
        guard (1...ChatLimits.maximumFileBytes).contains(m.size) else { throw PayloadError(t, "size \(m.size) out of range 1…4 GiB") }
        size = m.size
        guard m.fileHash.count == 32, m.chunkRoot.count == 32 else { throw PayloadError(t, "file hash and chunk root must be 32 bytes") }
        fileHash = Array(m.fileHash)
        chunkRoot = Array(m.chunkRoot)
        guard m.chunkSize == UInt32(ChatLimits.chunkBytes) else { throw PayloadError(t, "chunk size \(m.chunkSize) is not \(ChatLimits.chunkBytes)") }
        chunkBytes = ChatLimits.chunkBytes
        if m.messageID.isEmpty {
            messageID = nil
        } else {
            guard m.messageID.count == 16 else { throw PayloadError(t, "message id is \(m.messageID.count) bytes, not 16") }
            messageID = Array(m.messageID)
        }
        if m.challengeID.isEmpty {
            challengeID = nil
        } else {
            guard m.challengeID.count == 16 else { throw PayloadError(t, "challenge id is \(m.challengeID.count) bytes, not 16") }
            challengeID = Array(m.challengeID)
        }
    }

    public var chunkCount: Int { ChunkTree.chunkCount(size: size, chunkBytes: chunkBytes) }

    public var payload: [UInt8] {
        var m = Tandem_V1_FileOffer()
        m.fileID = Data(fileID.bytes)
        m.name = name
        m.size = size
        m.fileHash = Data(fileHash)
        m.chunkSize = UInt32(chunkBytes)
        m.chunkRoot = Data(chunkRoot)
        m.messageID = Data(messageID ?? [])
        m.challengeID = Data(challengeID ?? [])
        return serialize(m)
    }
}

/// Chunk indexes [first, first + count).
public struct ChunkRange: Equatable, Hashable, Sendable {
    public let first: Int
    public let count: Int
    public init(first: Int, count: Int) {
        precondition(first >= 0 && count >= 1 && count <= ChatLimits.maximumChunks)
        self.first = first
        self.count = count
    }
    public var end: Int { first + count }
}

/// FILE_REQUEST (0x050A). Whether the ranges lie within the file is checked against the offer by
/// the sender (`FileRequestMessage.fits`).
public struct FileRequestMessage: Equatable, Sendable {
    public let fileID: FileID
    public let ranges: [ChunkRange]

    public init(fileID: FileID, ranges: [ChunkRange]) {
        precondition((1...ChatLimits.fileRequestRanges).contains(ranges.count))
        self.fileID = fileID
        self.ranges = ranges
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.fileRequest
        let m = try decodeFile(Tandem_V1_FileRequest.self, t, payload)
        fileID = try TandemProtocol.fileID(m.fileID, t)
        guard (1...ChatLimits.fileRequestRanges).contains(m.ranges.count) else {
            throw PayloadError(t, "\(m.ranges.count) ranges (1…\(ChatLimits.fileRequestRanges))")
        }
        var out: [ChunkRange] = []
        for r in m.ranges {
            // Both below 2^14 + 1 after these checks: the sum cannot overflow.
            guard r.count >= 1, Int(r.count) <= ChatLimits.maximumChunks, Int(r.first) < ChatLimits.maximumChunks,
                  Int(r.first) + Int(r.count) <= ChatLimits.maximumChunks else {
                throw PayloadError(t, "range \(r.first)+\(r.count) out of range")
            }
            if let previous = out.last, Int(r.first) <= previous.end {
                throw PayloadError(t, "ranges are not ascending and apart")
            }
            out.append(ChunkRange(first: Int(r.first), count: Int(r.count)))
        }
        ranges = out
    }

    /// Every range lies within a file of `chunkCount` chunks.
    public func fits(chunkCount: Int) -> Bool { ranges.allSatisfy { $0.end <= chunkCount } }

    public var payload: [UInt8] {
        var m = Tandem_V1_FileRequest()
        m.fileID = Data(fileID.bytes)
        m.ranges = ranges.map { r in
            var p = Tandem_V1_ChunkRange()
            p.first = UInt32(r.first)
            p.count = UInt32(r.count)
            return p
        }
        return serialize(m)
    }
}

/// FILE_CHUNK (0x050B). Checked against the offer (length, path) by `FileReceiver`.
public struct FileChunkMessage: Equatable, Sendable {
    public let fileID: FileID
    public let index: Int
    public let data: [UInt8]
    public let proof: [[UInt8]]

    public init(fileID: FileID, index: Int, data: [UInt8], proof: [[UInt8]]) {
        precondition(index >= 0 && index < ChatLimits.maximumChunks && !data.isEmpty && data.count <= ChatLimits.chunkBytes)
        precondition(proof.count <= ChatLimits.maximumProofHashes && proof.allSatisfy { $0.count == 32 })
        self.fileID = fileID
        self.index = index
        self.data = data
        self.proof = proof
    }

    /// Decodes and validates a FILE_CHUNK payload. The usual layout — the fields in number order,
    /// each of 1–3 at most once, as `payload` writes them — is read in place (the chunk is copied
    /// once, out of the payload; SwiftProtobuf would copy it twice, through `Data`); anything else
    /// (unknown fields, another order, a repeated field, another wire type) goes to SwiftProtobuf,
    /// so both read every input alike (tests and the fuzz target compare them).
    public init(payload: [UInt8]) throws {
        let t = MessageType.fileChunk
        guard payload.count <= ChatLimits.maximumChunkPayloadBytes else {
            throw PayloadError(t, "payload of \(payload.count) bytes exceeds \(ChatLimits.maximumChunkPayloadBytes)")
        }
        if let f = Self.inOrderFields(payload) {
            try self.init(checking: payload[f.fileID], index: f.index, data: payload[f.data], proof: f.proof.map { payload[$0] })
        } else {
            let m = try decodeFile(Tandem_V1_FileChunk.self, t, payload, max: ChatLimits.maximumChunkPayloadBytes)
            try self.init(checking: m.fileID, index: m.index, data: m.data, proof: m.proof)
        }
    }

    /// The same decoder, always through SwiftProtobuf: what the in-place reading is compared with
    /// (tests, the fuzz target).
    public static func decodedBySwiftProtobuf(_ payload: [UInt8]) throws -> FileChunkMessage {
        let m = try decodeFile(Tandem_V1_FileChunk.self, .fileChunk, payload, max: ChatLimits.maximumChunkPayloadBytes)
        return try FileChunkMessage(checking: m.fileID, index: m.index, data: m.data, proof: m.proof)
    }

    private init<B: Collection<UInt8>>(checking id: B, index: UInt32, data: B, proof: [B]) throws {
        let t = MessageType.fileChunk
        guard let fileID = FileID(bytes: Array(id)) else { throw PayloadError(t, "file id is \(id.count) bytes, not 16") }
        self.fileID = fileID
        guard Int(index) < ChatLimits.maximumChunks else { throw PayloadError(t, "chunk index \(index) out of range") }
        self.index = Int(index)
        guard !data.isEmpty, data.count <= ChatLimits.chunkBytes else { throw PayloadError(t, "chunk of \(data.count) bytes") }
        self.data = Array(data)
        guard proof.count <= ChatLimits.maximumProofHashes, proof.allSatisfy({ $0.count == 32 }) else {
            throw PayloadError(t, "path of \(proof.count) hashes, or a hash not 32 bytes")
        }
        self.proof = proof.map { Array($0) }
    }

    /// Where the fields of a FileChunk written in number order lie: field 1 (bytes), 2 (varint), 3
    /// (bytes) at most once each, then any number of field 4 (bytes); every varint at most 5 bytes
    /// and 32 bits. Nil for any other layout (SwiftProtobuf reads it).
    static func inOrderFields(_ p: [UInt8]) -> (fileID: Range<Int>, index: UInt32, data: Range<Int>, proof: [Range<Int>])? {
        var i = 0
        func varint() -> UInt32? {
            var v: UInt64 = 0
            for shift in stride(from: UInt64(0), to: 35, by: 7) {
                guard i < p.count else { return nil }
                let b = p[i]
                i += 1
                v |= UInt64(b & 0x7f) << shift
                if b < 0x80 { return v <= UInt64(UInt32.max) ? UInt32(v) : nil }
            }
            return nil
        }
        var fileID = 0..<0, data = 0..<0, index: UInt32 = 0, proof: [Range<Int>] = [], last: UInt32 = 0
        while i < p.count {
            guard let key = varint() else { return nil }
            let field = key >> 3, wire = key & 7
            guard (1...4).contains(field), field > last || field == 4 else { return nil }
            last = field
            if field == 2 {
                guard wire == 0, let v = varint() else { return nil }
                index = v
                continue
            }
            guard wire == 2, let n = varint(), Int(n) <= p.count - i else { return nil }
            let range = i..<(i + Int(n))
            i += Int(n)
            switch field {
            case 1: fileID = range
            case 3: data = range
            default: proof.append(range)
            }
        }
        return (fileID, index, data, proof)
    }

    /// The `FileChunk` message's bytes, written straight into one array (a chunk is 256 KiB: no
    /// intermediate `Data`). The same bytes SwiftProtobuf writes for it: fields in number order,
    /// `index` left out when 0 (proto3), every path hash written (tests compare the two).
    public var payload: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + proof.count * 34 + fileID.bytes.count + 16)
        func varint(_ v: UInt64) {
            var v = v
            while v >= 0x80 {
                out.append(UInt8(truncatingIfNeeded: v) | 0x80)
                v >>= 7
            }
            out.append(UInt8(v))
        }
        func bytes(_ field: UInt64, _ b: [UInt8]) {
            varint(field << 3 | 2)
            varint(UInt64(b.count))
            out.append(contentsOf: b)
        }
        if !fileID.bytes.isEmpty { bytes(1, fileID.bytes) }
        if index != 0 {
            varint(2 << 3)
            varint(UInt64(index))
        }
        if !data.isEmpty { bytes(3, data) }
        for hash in proof { bytes(4, hash) }
        return out
    }
}

/// What checking one chunk against its file's hash tree needs (messages.md 7.2: the leaf hash of
/// its data, its path, up to `chunk_root`), so the check can run where the chunk is about to be
/// written rather than on the node core (messages.md 11.4). Made by `FileReceiver` from the offer
/// it holds and the chunk's path; the chunk's bytes are checked with `matches`.
public struct ChunkCheck: Sendable, Equatable {
    public let index: Int
    public let count: Int
    public let proof: [[UInt8]]
    public let root: [UInt8]

    public init(index: Int, count: Int, proof: [[UInt8]], root: [UInt8]) {
        (self.index, self.count, self.proof, self.root) = (index, count, proof, root)
    }

    /// True when `data` is chunk `index` of the file the root names.
    public func matches(_ data: some Collection<UInt8>) -> Bool {
        ChunkTree.verify(leaf: ChunkTree.leafHash(data), index: index, count: count, proof: proof, root: root)
    }
}

/// FILE_CANCEL (0x050C).
public struct FileCancelMessage: Equatable, Sendable {
    public enum Reason: Int, Sendable, CaseIterable {
        case unspecified = 0, byUser, tooLarge, gone, badData, expired
    }
    public let fileID: FileID
    public let reason: Reason

    public init(fileID: FileID, reason: Reason) {
        self.fileID = fileID
        self.reason = reason
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.fileCancel
        let m = try decodeFile(Tandem_V1_FileCancel.self, t, payload)
        fileID = try TandemProtocol.fileID(m.fileID, t)
        // An unknown reason reads as unspecified (a newer sender's reason is still a cancel).
        reason = Reason(rawValue: m.reason.rawValue) ?? .unspecified
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_FileCancel()
        m.fileID = Data(fileID.bytes)
        m.reason = Tandem_V1_FileCancelReason(rawValue: reason.rawValue) ?? .fileCancelUnspecified
        return serialize(m)
    }
}
