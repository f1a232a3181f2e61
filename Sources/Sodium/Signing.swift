import CSodium

/// An Ed25519 key pair (libsodium `crypto_sign`).
public struct SigningKeyPair: Sendable {
    public static let publicKeyBytes = 32
    public static let secretKeyBytes = 64
    public static let seedBytes = 32
    public static let signatureBytes = 64

    public let publicKey: [UInt8]
    /// libsodium's 64-byte secret key (seed ‖ public key), in guarded memory (`SecureBytes`).
    public let secretKey: SecureBytes

    /// A fresh random key pair.
    public static func generate() -> SigningKeyPair {
        var seed = Sodium.randomBytes(seedBytes)
        defer { Sodium.wipe(&seed) }
        // A 32-byte seed cannot be rejected.
        return try! SigningKeyPair(seed: seed)
    }

    /// The key pair derived deterministically from a 32-byte seed.
    public init(seed: [UInt8]) throws {
        Sodium.ensureInitialized()
        try requireLength(seed, Self.seedBytes, "Ed25519 seed")
        var pk = [UInt8](repeating: 0, count: Self.publicKeyBytes)
        var rc: Int32 = -1
        // Derived straight into guarded memory: no copy of the secret key on the ordinary heap.
        let sk = SecureBytes(count: Self.secretKeyBytes) { out in
            rc = seed.withUnsafeBufferPointer { s in
                crypto_sign_seed_keypair(&pk, out.bindMemory(to: UInt8.self).baseAddress!, s.baseAddress!)
            }
        }
        guard rc == 0 else { throw SodiumError(.invalidParameters, "crypto_sign_seed_keypair failed") }
        publicKey = pk
        secretKey = sk
    }

    /// The 32-byte seed this key pair was made from (a secret: wipe it after use).
    public func seed() -> [UInt8] {
        var seed = [UInt8](repeating: 0, count: Self.seedBytes)
        withSecret(secretKey) { sk in _ = crypto_sign_ed25519_sk_to_seed(&seed, sk) }
        return seed
    }

    /// A detached Ed25519 signature over `message`.
    public func sign(_ message: [UInt8]) -> [UInt8] {
        message.withUnsafeBytes { sign(UnsafeRawBufferPointer($0)) }
    }

    /// A detached Ed25519 signature over the bytes in `message`.
    public func sign(_ message: UnsafeRawBufferPointer) -> [UInt8] {
        var sig = [UInt8](repeating: 0, count: Self.signatureBytes)
        sign(message, into: &sig)
        return sig
    }

    /// Writes a detached signature over `message` into `signature` (64 bytes).
    public func sign(_ message: UnsafeRawBufferPointer, into signature: inout [UInt8]) {
        precondition(signature.count == Self.signatureBytes)
        let m = message.bindMemory(to: UInt8.self)
        var dummy: UInt8 = 0
        withSecret(secretKey) { sk in
            signature.withUnsafeMutableBufferPointer { out in
                _ = crypto_sign_detached(out.baseAddress!, nil, m.baseAddress ?? withUnsafePointer(to: &dummy) { $0 },
                                         UInt64(m.count), sk)
            }
        }
    }

    /// The X25519 secret key corresponding to this Ed25519 key pair: one SHA-512, without the
    /// public-key conversion (and its subgroup check) that `curve25519()` also does.
    public func curve25519SecretKey() throws -> SecretBytes {
        var sk = [UInt8](repeating: 0, count: 32)
        let rc = withSecret(secretKey) { crypto_sign_ed25519_sk_to_curve25519(&sk, $0) }
        guard rc == 0 else { throw SodiumError(.keyConversionFailed, "Ed25519 secret key cannot be converted") }
        return SecretBytes(consuming: &sk)
    }

    /// The X25519 key pair corresponding to this Ed25519 key pair.
    public func curve25519() throws -> (publicKey: [UInt8], secretKey: SecretBytes) {
        let pk = try Ed25519.publicKeyToCurve25519(publicKey)
        var sk = [UInt8](repeating: 0, count: 32)
        let rc = withSecret(secretKey) { crypto_sign_ed25519_sk_to_curve25519(&sk, $0) }
        guard rc == 0 else { throw SodiumError(.keyConversionFailed, "Ed25519 secret key cannot be converted") }
        return (pk, SecretBytes(consuming: &sk))
    }
}

public enum Ed25519 {
    /// Checks a detached signature. Never throws: wrong lengths simply fail.
    public static func verify(signature: [UInt8], message: [UInt8], publicKey: [UInt8]) -> Bool {
        message.withUnsafeBytes { m in
            signature.withUnsafeBytes { s in
                publicKey.withUnsafeBytes { p in verify(signature: s, message: m, publicKey: p) }
            }
        }
    }

    /// Checks a detached signature over raw memory. Never throws: wrong lengths simply fail.
    public static func verify(signature: UnsafeRawBufferPointer, message: UnsafeRawBufferPointer,
                              publicKey: UnsafeRawBufferPointer) -> Bool {
        Sodium.ensureInitialized()
        guard signature.count == SigningKeyPair.signatureBytes,
              publicKey.count == SigningKeyPair.publicKeyBytes else { return false }
        var dummy: UInt8 = 0
        return withUnsafeMutablePointer(to: &dummy) { d in
            let mptr = message.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafePointer(d)
            return crypto_sign_verify_detached(
                signature.baseAddress!.assumingMemoryBound(to: UInt8.self),
                mptr, UInt64(message.count),
                publicKey.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 0
        }
    }

    /// Ed25519 public key → X25519 public key. Fails for keys that are not valid curve points.
    public static func publicKeyToCurve25519(_ publicKey: [UInt8]) throws -> [UInt8] {
        Sodium.ensureInitialized()
        try requireLength(publicKey, 32, "Ed25519 public key")
        var out = [UInt8](repeating: 0, count: 32)
        let rc = publicKey.withUnsafeBufferPointer { crypto_sign_ed25519_pk_to_curve25519(&out, $0.baseAddress!) }
        guard rc == 0 else { throw SodiumError(.keyConversionFailed, "Ed25519 public key is not a valid point") }
        return out
    }
}
