import CSodium

/// XSalsa20-Poly1305 (`crypto_secretbox`).
public enum SecretBox {
    public static let keyBytes = 32
    public static let nonceBytes = 24
    public static let macBytes = 16

    public static func generateKey() -> SecretBytes {
        var k = Sodium.randomBytes(keyBytes)
        return SecretBytes(consuming: &k)
    }

    /// MAC ‖ ciphertext, as `crypto_secretbox_easy`.
    public static func seal(_ message: [UInt8], nonce: [UInt8], key: [UInt8]) throws -> [UInt8] {
        Sodium.ensureInitialized()
        try requireLength(nonce, nonceBytes, "secretbox nonce")
        try requireLength(key, keyBytes, "secretbox key")
        var out = [UInt8](repeating: 0, count: message.count + macBytes)
        withBytes(message) { m in
            _ = crypto_secretbox_easy(&out, m, UInt64(message.count), nonce, key)
        }
        return out
    }

    /// Opens MAC ‖ ciphertext; nil when it does not authenticate.
    public static func open(_ box: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8]? {
        Sodium.ensureInitialized()
        guard box.count >= macBytes, nonce.count == nonceBytes, key.count == keyBytes else { return nil }
        var out = [UInt8](repeating: 0, count: box.count - macBytes)
        let rc = withBytes(box) { b in
            out.withUnsafeMutableBufferPointer { o in
                var dummy: UInt8 = 0
                return crypto_secretbox_open_easy(o.baseAddress ?? withUnsafeMutablePointer(to: &dummy) { $0 },
                                                  b, UInt64(box.count), nonce, key)
            }
        }
        return rc == 0 ? out : nil
    }

    /// Encrypts `count` bytes at `data` in place and writes the 16-byte MAC to `mac`
    /// (`crypto_secretbox_detached`). The hot path of box-stream: no allocation.
    public static func sealDetachedInPlace(_ data: UnsafeMutableRawPointer, count: Int,
                                           mac: UnsafeMutableRawPointer,
                                           nonce: UnsafeRawPointer, key: UnsafeRawPointer) {
        Sodium.ensureInitialized()
        let d = data.assumingMemoryBound(to: UInt8.self)
        _ = crypto_secretbox_detached(d, mac.assumingMemoryBound(to: UInt8.self), d, UInt64(count),
                                      nonce.assumingMemoryBound(to: UInt8.self),
                                      key.assumingMemoryBound(to: UInt8.self))
    }

    /// Encrypts `count` bytes from `plaintext` into `ciphertext` (which may be the same memory) and
    /// writes the 16-byte MAC to `mac` (`crypto_secretbox_detached`). No allocation.
    public static func sealDetached(_ plaintext: UnsafeRawPointer, count: Int, into ciphertext: UnsafeMutableRawPointer,
                                    mac: UnsafeMutableRawPointer, nonce: UnsafeRawPointer, key: UnsafeRawPointer) {
        Sodium.ensureInitialized()
        _ = crypto_secretbox_detached(ciphertext.assumingMemoryBound(to: UInt8.self),
                                      mac.assumingMemoryBound(to: UInt8.self),
                                      plaintext.assumingMemoryBound(to: UInt8.self), UInt64(count),
                                      nonce.assumingMemoryBound(to: UInt8.self),
                                      key.assumingMemoryBound(to: UInt8.self))
    }

    /// Decrypts `count` bytes from `ciphertext` into `plaintext` (which may be the same memory),
    /// checking `mac` first. False when it does not authenticate (`plaintext` is then left
    /// unspecified). No allocation.
    public static func openDetached(_ ciphertext: UnsafeRawPointer, count: Int, into plaintext: UnsafeMutableRawPointer,
                                    mac: UnsafeRawPointer, nonce: UnsafeRawPointer, key: UnsafeRawPointer) -> Bool {
        Sodium.ensureInitialized()
        return crypto_secretbox_open_detached(plaintext.assumingMemoryBound(to: UInt8.self),
                                              ciphertext.assumingMemoryBound(to: UInt8.self),
                                              mac.assumingMemoryBound(to: UInt8.self), UInt64(count),
                                              nonce.assumingMemoryBound(to: UInt8.self),
                                              key.assumingMemoryBound(to: UInt8.self)) == 0
    }

    /// Decrypts `count` bytes at `data` in place, checking `mac`. False when it does not authenticate
    /// (the data is then left unspecified).
    public static func openDetachedInPlace(_ data: UnsafeMutableRawPointer, count: Int,
                                           mac: UnsafeRawPointer,
                                           nonce: UnsafeRawPointer, key: UnsafeRawPointer) -> Bool {
        Sodium.ensureInitialized()
        let d = data.assumingMemoryBound(to: UInt8.self)
        return crypto_secretbox_open_detached(d, d, mac.assumingMemoryBound(to: UInt8.self), UInt64(count),
                                              nonce.assumingMemoryBound(to: UInt8.self),
                                              key.assumingMemoryBound(to: UInt8.self)) == 0
    }
}

/// Anonymous public-key encryption to an X25519 key (`crypto_box_seal`).
public enum SealedBox {
    public static let overheadBytes = 48

    public static func seal(_ message: [UInt8], to recipientCurvePublicKey: [UInt8]) throws -> [UInt8] {
        Sodium.ensureInitialized()
        try requireLength(recipientCurvePublicKey, 32, "X25519 public key")
        var out = [UInt8](repeating: 0, count: message.count + overheadBytes)
        let rc = withBytes(message) { m in
            crypto_box_seal(&out, m, UInt64(message.count), recipientCurvePublicKey)
        }
        guard rc == 0 else { throw SodiumError(.invalidParameters, "crypto_box_seal failed") }
        return out
    }

    public static func open(_ sealed: [UInt8], publicKey: [UInt8], secretKey: SecretBytes) -> [UInt8]? {
        Sodium.ensureInitialized()
        guard sealed.count >= overheadBytes, publicKey.count == 32, secretKey.count == 32 else { return nil }
        var out = [UInt8](repeating: 0, count: sealed.count - overheadBytes)
        let rc = withSecret(secretKey) { sk in
            out.withUnsafeMutableBufferPointer { o in
                var dummy: UInt8 = 0
                return crypto_box_seal_open(o.baseAddress ?? withUnsafeMutablePointer(to: &dummy) { $0 },
                                            sealed, UInt64(sealed.count), publicKey, sk)
            }
        }
        return rc == 0 ? out : nil
    }
}

/// X25519 (`crypto_scalarmult`).
public enum X25519 {
    public static func keyPair() -> (publicKey: [UInt8], secretKey: SecretBytes) {
        var sk = Sodium.randomBytes(32)
        let pk = publicKey(secretKey: sk)
        return (pk, SecretBytes(consuming: &sk))
    }

    public static func publicKey(secretKey: [UInt8]) -> [UInt8] {
        Sodium.ensureInitialized()
        precondition(secretKey.count == 32)
        var pk = [UInt8](repeating: 0, count: 32)
        _ = crypto_scalarmult_base(&pk, secretKey)
        return pk
    }

    /// The shared secret of a secret scalar and a peer's public point. Throws for low-order points
    /// (libsodium rejects an all-zero result), which a peer could send on purpose.
    public static func sharedSecret(secretKey: SecretBytes, publicKey: [UInt8]) throws -> SecretBytes {
        Sodium.ensureInitialized()
        try requireLength(publicKey, 32, "X25519 public key")
        var out = [UInt8](repeating: 0, count: 32)
        let rc = withSecret(secretKey) { crypto_scalarmult(&out, $0, publicKey) }
        guard rc == 0 else { throw SodiumError(.keyConversionFailed, "X25519 produced a weak shared secret") }
        return SecretBytes(consuming: &out)
    }
}

/// Hashes and MACs.
public enum Hash {
    /// SHA-256 (`crypto_hash_sha256`).
    public static func sha256(_ parts: [UInt8]...) -> [UInt8] {
        Sodium.ensureInitialized()
        var state = crypto_hash_sha256_state()
        crypto_hash_sha256_init(&state)
        for p in parts { withBytes(p) { _ = crypto_hash_sha256_update(&state, $0, UInt64(p.count)) } }
        var out = [UInt8](repeating: 0, count: 32)
        crypto_hash_sha256_final(&state, &out)
        return out
    }

    /// HMAC-SHA-512-256 (`crypto_auth`), as used by the Secret Handshake.
    public static func hmacSHA512_256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        Sodium.ensureInitialized()
        precondition(key.count == 32, "crypto_auth key must be 32 bytes")
        var out = [UInt8](repeating: 0, count: 32)
        withBytes(message) { _ = crypto_auth(&out, $0, UInt64(message.count), key) }
        return out
    }

    /// Constant-time check of an HMAC-SHA-512-256 tag.
    public static func verifyHMACSHA512_256(tag: [UInt8], key: [UInt8], message: [UInt8]) -> Bool {
        Sodium.ensureInitialized()
        guard tag.count == 32, key.count == 32 else { return false }
        return withBytes(message) { crypto_auth_verify(tag, $0, UInt64(message.count), key) } == 0
    }

    /// BLAKE2b (`crypto_generichash`), optionally keyed. `outputLength` 16...64.
    public static func blake2b(_ message: [UInt8], outputLength: Int = 32, key: [UInt8]? = nil) -> [UInt8] {
        Sodium.ensureInitialized()
        precondition((16...64).contains(outputLength))
        var out = [UInt8](repeating: 0, count: outputLength)
        withBytes(message) { m in
            if let key {
                _ = crypto_generichash(&out, outputLength, m, UInt64(message.count), key, key.count)
            } else {
                _ = crypto_generichash(&out, outputLength, m, UInt64(message.count), nil, 0)
            }
        }
        return out
    }
}

/// XChaCha20-Poly1305-IETF AEAD (`crypto_aead_xchacha20poly1305_ietf`).
public enum XChaCha20Poly1305 {
    public static let keyBytes = 32
    public static let nonceBytes = 24
    public static let tagBytes = 16

    public static func seal(_ message: [UInt8], additionalData: [UInt8], nonce: [UInt8], key: SecretBytes) throws -> [UInt8] {
        Sodium.ensureInitialized()
        try requireLength(nonce, nonceBytes, "XChaCha20 nonce")
        guard key.count == keyBytes else { throw SodiumError(.invalidLength, "XChaCha20 key must be 32 bytes") }
        var out = [UInt8](repeating: 0, count: message.count + tagBytes)
        var outLen: UInt64 = 0
        withSecret(key) { k in
            withBytes(message) { m in
                withBytes(additionalData) { ad in
                    _ = crypto_aead_xchacha20poly1305_ietf_encrypt(&out, &outLen, m, UInt64(message.count),
                                                                   ad, UInt64(additionalData.count), nil, nonce, k)
                }
            }
        }
        return out
    }

    public static func open(_ box: [UInt8], additionalData: [UInt8], nonce: [UInt8], key: SecretBytes) -> [UInt8]? {
        Sodium.ensureInitialized()
        guard box.count >= tagBytes, nonce.count == nonceBytes, key.count == keyBytes else { return nil }
        var out = [UInt8](repeating: 0, count: box.count - tagBytes)
        var outLen: UInt64 = 0
        let rc = withSecret(key) { k in
            withBytes(additionalData) { ad in
                out.withUnsafeMutableBufferPointer { o in
                    var dummy: UInt8 = 0
                    return crypto_aead_xchacha20poly1305_ietf_decrypt(
                        o.baseAddress ?? withUnsafeMutablePointer(to: &dummy) { $0 }, &outLen, nil,
                        box, UInt64(box.count), ad, UInt64(additionalData.count), nonce, k)
                }
            }
        }
        return rc == 0 ? out : nil
    }
}

/// Argon2id password hashing (`crypto_pwhash`).
public enum PasswordHash {
    public static let saltBytes = 16
    public static var opsLimitInteractive: UInt64 { UInt64(crypto_pwhash_opslimit_interactive()) }
    public static var memLimitInteractive: Int { crypto_pwhash_memlimit_interactive() }
    public static var opsLimitModerate: UInt64 { UInt64(crypto_pwhash_opslimit_moderate()) }
    public static var memLimitModerate: Int { crypto_pwhash_memlimit_moderate() }

    public static var opsLimitSensitive: UInt64 { UInt64(crypto_pwhash_opslimit_sensitive()) }
    public static var memLimitSensitive: Int { crypto_pwhash_memlimit_sensitive() }

    /// Derives `length` key bytes from a passphrase with Argon2id v1.3.
    public static func deriveKey(length: Int, passphrase: [UInt8], salt: [UInt8],
                                 opsLimit: UInt64, memLimit: Int) throws -> SecretBytes {
        try passphrase.withUnsafeBytes {
            try deriveKey(length: length, passphrase: $0, salt: salt, opsLimit: opsLimit, memLimit: memLimit)
        }
    }

    /// Derives `length` key bytes from a passphrase held in guarded memory.
    public static func deriveKey(length: Int, passphrase: SecureBytes, salt: [UInt8],
                                 opsLimit: UInt64, memLimit: Int) throws -> SecretBytes {
        try passphrase.withUnsafeBytes {
            try deriveKey(length: length, passphrase: $0, salt: salt, opsLimit: opsLimit, memLimit: memLimit)
        }
    }

    static func deriveKey(length: Int, passphrase: UnsafeRawBufferPointer, salt: [UInt8],
                          opsLimit: UInt64, memLimit: Int) throws -> SecretBytes {
        Sodium.ensureInitialized()
        try requireLength(salt, saltBytes, "Argon2id salt")
        guard opsLimit >= UInt64(crypto_pwhash_opslimit_min()), opsLimit <= UInt64(crypto_pwhash_opslimit_max()),
              memLimit >= crypto_pwhash_memlimit_min(), memLimit <= 1 << 32 else {
            throw SodiumError(.invalidParameters, "Argon2id limits out of range")
        }
        var out = [UInt8](repeating: 0, count: length)
        var dummy: CChar = 0
        let rc = withUnsafeMutablePointer(to: &dummy) { d -> Int32 in
            let p = passphrase.baseAddress?.assumingMemoryBound(to: CChar.self) ?? UnsafePointer(d)
            return crypto_pwhash(&out, UInt64(length), p, UInt64(passphrase.count), salt, opsLimit, memLimit,
                                 crypto_pwhash_ALG_ARGON2ID13)
        }
        guard rc == 0 else { throw SodiumError(.outOfMemory, "Argon2id could not allocate its memory") }
        return SecretBytes(consuming: &out)
    }
}
