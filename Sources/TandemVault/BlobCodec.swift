import Sodium

/// One chunk as stored in a pack: the blob.
///
///     nonce (24) ‖ XChaCha20-Poly1305-IETF( flags (1) ‖ plaintext length (u32 BE) ‖ payload ) ‖ tag (16)
///
/// with the chunk id (32 bytes) as additional data, so a blob copied under another id does not
/// open. `flags` bit 0 says the payload is a zstd frame; other bits are reserved and must be zero.
/// The plaintext length (inside the encryption, so hidden) bounds decompression. A fresh random
/// nonce per blob: 192 bits make collisions negligible without any counter to keep.
enum BlobCodec {
    static let nonceBytes = XChaCha20Poly1305.nonceBytes
    static let tagBytes = XChaCha20Poly1305.tagBytes
    /// flags + plaintext length.
    static let innerHeaderBytes = 5
    /// Bytes a blob adds to its payload: 45.
    static let overhead = nonceBytes + innerHeaderBytes + tagBytes
    /// The largest plaintext a blob may hold: a chunk (or a thumbnail) of at most 8 MiB.
    static let maximumPlaintext = Chunker.maximumSize
    /// The largest blob: a stored (not compressed) maximum chunk plus the overhead.
    static let maximumBlob = maximumPlaintext + overhead
    /// Compress only when zstd saves at least 3 %: less is not worth the decompression on every read.
    static func worthwhileCompressedSize(_ raw: Int) -> Int { raw - (raw * 3 + 99) / 100 }

    static let flagCompressed: UInt8 = 0x01

    /// Seals `plaintext` as the blob of `id` into `destination` (room for `plaintext.count +
    /// overhead` bytes), compressing first when `tryCompress` and it pays. Returns the blob length.
    static func seal(_ plaintext: UnsafeRawBufferPointer, id: ChunkID, tryCompress: Bool, key: SecretBytes,
                     zstd: Zstd, into destination: UnsafeMutableRawPointer) -> (length: Int, compressed: Bool) {
        precondition(plaintext.count <= maximumPlaintext, "blob plaintext larger than a chunk")
        let raw = plaintext.count
        Sodium.fillRandom(UnsafeMutableRawBufferPointer(start: destination, count: nonceBytes))
        let inner = destination + nonceBytes
        let payload = inner + innerHeaderBytes
        var payloadLength = raw
        var flags: UInt8 = 0
        if tryCompress, raw > 0, zstd.looksCompressible(plaintext, worthwhile: worthwhileCompressedSize) {
            let room = worthwhileCompressedSize(raw)
            if room > 0, let n = zstd.compress(plaintext, into: UnsafeMutableRawBufferPointer(start: payload, count: room)) {
                payloadLength = n
                flags = flagCompressed
            }
        }
        if flags == 0, raw > 0, let src = plaintext.baseAddress {
            payload.copyMemory(from: src, byteCount: raw)
        }
        inner.storeBytes(of: flags, as: UInt8.self)
        let be = UInt32(raw).bigEndian
        withUnsafeBytes(of: be) { (inner + 1).copyMemory(from: $0.baseAddress!, byteCount: 4) }
        let innerLength = innerHeaderBytes + payloadLength
        id.bytes.withUnsafeBytes { ad in
            XChaCha20Poly1305.sealInPlace(inner, count: innerLength, additionalData: ad, nonce: destination, key: key)
        }
        return (nonceBytes + innerLength + tagBytes, flags == flagCompressed)
    }

    /// Opens a blob (decrypted in place in `blob`, which the caller owns) and returns its plaintext,
    /// after checking that the plaintext's keyed id is `id`. Every way a blob can be bad (short,
    /// forged, moved, a corrupt frame, a wrong length) is a `.corrupt` error naming `what`.
    static func open(_ blob: UnsafeMutableRawBufferPointer, id: ChunkID, keys: VaultKeys, zstd: Zstd,
                     what: @autoclosure () -> String) throws -> [UInt8] {
        guard let base = blob.baseAddress, blob.count >= overhead, blob.count <= maximumBlob else {
            throw VaultError.corrupt("\(what()): blob length \(blob.count) out of range")
        }
        let inner = base + nonceBytes
        let sealedLength = blob.count - nonceBytes
        let ok = id.bytes.withUnsafeBytes { ad in
            XChaCha20Poly1305.openInPlace(inner, count: sealedLength, additionalData: ad, nonce: base, key: keys.dataKey)
        }
        guard ok else { throw VaultError.corrupt("\(what()): blob does not authenticate (damaged or tampered with)") }
        let innerLength = sealedLength - tagBytes
        let flags = inner.load(as: UInt8.self)
        var be: UInt32 = 0
        withUnsafeMutableBytes(of: &be) { $0.copyMemory(from: UnsafeRawBufferPointer(start: inner + 1, count: 4)) }
        let raw = Int(UInt32(bigEndian: be))
        let payload = UnsafeRawBufferPointer(start: inner + innerHeaderBytes, count: innerLength - innerHeaderBytes)
        guard flags & ~flagCompressed == 0 else { throw VaultError.corrupt("\(what()): unknown blob flags \(flags)") }
        guard raw <= maximumPlaintext else { throw VaultError.corrupt("\(what()): plaintext length \(raw) too large") }
        var out = [UInt8](repeating: 0, count: raw)
        if flags & flagCompressed != 0 {
            let good = out.withUnsafeMutableBytes { zstd.decompress(payload, into: $0) }
            guard good else { throw VaultError.corrupt("\(what()): compressed payload does not decompress to \(raw) bytes") }
        } else {
            guard payload.count == raw else { throw VaultError.corrupt("\(what()): stored payload length mismatch") }
            out.withUnsafeMutableBytes { dst in
                if raw > 0 { dst.baseAddress!.copyMemory(from: payload.baseAddress!, byteCount: raw) }
            }
        }
        let actual = out.withUnsafeBytes { keys.chunkID($0) }
        guard actual == id else { throw VaultError.corrupt("\(what()): plaintext does not match its id") }
        return out
    }
}
