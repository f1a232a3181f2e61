import CSodium

/// BLAKE2b (`crypto_generichash`) over memory the caller already holds, and incrementally.
///
/// The vault hashes every chunk (keyed, to name it) and every pack file (unkeyed, so a holder can
/// check it without keys). Both run at disk speed on megabytes, so they take raw buffers instead of
/// copying into arrays, and a pack is hashed while it is written.
public struct Blake2b: ~Copyable {
    public static let minimumOutputBytes = 16
    public static let maximumOutputBytes = 64
    public static let maximumKeyBytes = 64

    // crypto_generichash_state is 64-byte aligned, which Swift cannot import: an aligned
    // allocation of crypto_generichash_statebytes() bytes stands in for it.
    private let state: OpaquePointer
    private let stateMemory: UnsafeMutableRawPointer
    private let outputLength: Int

    /// A hasher giving `outputLength` bytes (16...64), keyed when `key` is given (1...64 bytes).
    public init(outputLength: Int = 32, key: UnsafeRawBufferPointer? = nil) {
        Sodium.ensureInitialized()
        precondition((Self.minimumOutputBytes...Self.maximumOutputBytes).contains(outputLength),
                     "BLAKE2b output length must be 16...64")
        self.outputLength = outputLength
        stateMemory = UnsafeMutableRawPointer.allocate(byteCount: crypto_generichash_statebytes(), alignment: 64)
        state = OpaquePointer(stateMemory)
        if let key, let k = key.baseAddress, key.count > 0 {
            precondition(key.count <= Self.maximumKeyBytes, "BLAKE2b key must be at most 64 bytes")
            _ = crypto_generichash_init(state, k.assumingMemoryBound(to: UInt8.self), key.count, outputLength)
        } else {
            _ = crypto_generichash_init(state, nil, 0, outputLength)
        }
    }

    deinit {
        sodium_memzero(stateMemory, crypto_generichash_statebytes())
        stateMemory.deallocate()
    }

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = crypto_generichash_update(state, base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest; the hasher is consumed.
    public consuming func finalize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: outputLength)
        _ = crypto_generichash_final(state, &out, outputLength)
        return out
    }

    /// One-shot BLAKE2b of `message` keyed with `key` (a 32-byte secret, e.g. a vault's id key).
    public static func keyedHash(_ message: UnsafeRawBufferPointer, key: SecretBytes, outputLength: Int = 32) -> [UInt8] {
        Sodium.ensureInitialized()
        precondition((minimumOutputBytes...maximumOutputBytes).contains(outputLength))
        precondition((1...maximumKeyBytes).contains(key.count), "BLAKE2b key must be 1...64 bytes")
        var out = [UInt8](repeating: 0, count: outputLength)
        key.withUnsafeBytes { k in
            let kp = k.baseAddress!.assumingMemoryBound(to: UInt8.self)
            var dummy: UInt8 = 0
            withUnsafeMutablePointer(to: &dummy) { d in
                let m = message.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafePointer(d)
                _ = crypto_generichash(&out, outputLength, m, UInt64(message.count), kp, k.count)
            }
        }
        return out
    }

    /// Keyed BLAKE2b of a byte array.
    public static func keyedHash(_ message: [UInt8], key: SecretBytes, outputLength: Int = 32) -> [UInt8] {
        message.withUnsafeBytes { keyedHash($0, key: key, outputLength: outputLength) }
    }
}

/// Subkeys from one master key (`crypto_kdf_derive_from_key`, BLAKE2b underneath), so each use of a
/// key (encryption, naming, chunking) has its own and learning one says nothing about the others.
public enum KeyDerivation {
    public static let masterKeyBytes = 32
    public static let contextBytes = 8

    /// Subkey number `id` (`length` 16...64 bytes) of `masterKey` in an 8-byte `context`.
    public static func deriveSubkey(length: Int = 32, id: UInt64, context: String, masterKey: SecretBytes) throws -> SecretBytes {
        Sodium.ensureInitialized()
        let ctx = Array(context.utf8)
        guard ctx.count == contextBytes else {
            throw SodiumError(.invalidLength, "KDF context must be \(contextBytes) bytes, got \(ctx.count)")
        }
        guard masterKey.count == masterKeyBytes else {
            throw SodiumError(.invalidLength, "KDF master key must be \(masterKeyBytes) bytes, got \(masterKey.count)")
        }
        guard length >= Int(crypto_kdf_bytes_min()), length <= Int(crypto_kdf_bytes_max()) else {
            throw SodiumError(.invalidLength, "KDF subkey length must be 16...64 bytes")
        }
        var out = [UInt8](repeating: 0, count: length)
        let rc = ctx.withUnsafeBufferPointer { c in
            c.baseAddress!.withMemoryRebound(to: CChar.self, capacity: contextBytes) { cc in
                masterKey.withUnsafeBytes { k in
                    crypto_kdf_derive_from_key(&out, length, id, cc, k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        guard rc == 0 else { throw SodiumError(.invalidParameters, "crypto_kdf_derive_from_key failed") }
        return SecretBytes(consuming: &out)
    }
}

extension XChaCha20Poly1305 {
    /// Encrypts `count` bytes at `data` in place and writes the 16-byte tag right after them (so
    /// `data` must have room for `count + 16` bytes). Combined mode, as `seal`; no allocation.
    public static func sealInPlace(_ data: UnsafeMutableRawPointer, count: Int, additionalData: UnsafeRawBufferPointer,
                                   nonce: UnsafeRawPointer, key: SecretBytes) {
        Sodium.ensureInitialized()
        precondition(key.count == keyBytes, "XChaCha20 key must be 32 bytes")
        let d = data.assumingMemoryBound(to: UInt8.self)
        var outLen: UInt64 = 0
        key.withUnsafeBytes { k in
            _ = crypto_aead_xchacha20poly1305_ietf_encrypt(
                d, &outLen, d, UInt64(count),
                additionalData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(additionalData.count),
                nil, nonce.assumingMemoryBound(to: UInt8.self), k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// Decrypts `count` bytes (ciphertext then 16-byte tag) at `data` in place. False when it does not
    /// authenticate (the data is then left unspecified); on success the first `count - 16` bytes hold
    /// the plaintext.
    public static func openInPlace(_ data: UnsafeMutableRawPointer, count: Int, additionalData: UnsafeRawBufferPointer,
                                   nonce: UnsafeRawPointer, key: SecretBytes) -> Bool {
        Sodium.ensureInitialized()
        guard count >= tagBytes, key.count == keyBytes else { return false }
        let d = data.assumingMemoryBound(to: UInt8.self)
        var outLen: UInt64 = 0
        let rc = key.withUnsafeBytes { k in
            crypto_aead_xchacha20poly1305_ietf_decrypt(
                d, &outLen, nil, d, UInt64(count),
                additionalData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(additionalData.count),
                nonce.assumingMemoryBound(to: UInt8.self), k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return rc == 0
    }
}
