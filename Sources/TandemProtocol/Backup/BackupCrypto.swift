import Sodium

/// A blob's name: the unkeyed BLAKE2b-256 of its bytes (Protocol/backup.md section 1; a pack's
/// name in Protocol/vault.md). Anyone holding the bytes can check it without keys.
public struct BlobName: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    public static let byteCount = 32
    public let bytes: [UInt8]

    /// Nil unless exactly 32 bytes.
    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }

    /// The name of `content`.
    public init(of content: [UInt8]) {
        bytes = Hash.blake2b(content, outputLength: 32)
    }

    public static func < (a: BlobName, b: BlobName) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }
    public var description: String { hexString(bytes) }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        guard let b = hexBytes(text), let n = BlobName(bytes: b) else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "a blob name is 64 hex digits")
        }
        self = n
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

/// Lowercase hex (as names and ids are written) to bytes; nil for anything else.
public func hexBytes(_ text: String) -> [UInt8]? {
    let chars = Array(text.utf8)
    guard chars.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    out.reserveCapacity(chars.count / 2)
    func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        default: return nil
        }
    }
    var i = 0
    while i < chars.count {
        guard let hi = nibble(chars[i]), let lo = nibble(chars[i + 1]) else { return nil }
        out.append(hi << 4 | lo)
        i += 2
    }
    return out
}

/// Proof of storage (backup.md section 6): `blake2b(blob bytes, key = nonce, outlen = 32)`.
/// The blob is fed in pieces by `feed`, so a holder streams it from disk.
public enum BackupProofOfStorage {
    public static let nonceBytes = 32
    public static let macBytes = 32

    /// The keyed MAC of a blob, fed piecewise, and the blob's unkeyed name computed in the same
    /// pass, so a holder learns while answering whether its copy is still intact.
    public struct Hasher: ~Copyable {
        private var keyed: Blake2b
        private var plain: Blake2b

        public init(nonce: [UInt8]) {
            precondition(nonce.count == BackupProofOfStorage.nonceBytes, "a proof nonce is 32 bytes")
            let key = UnsafeMutableRawBufferPointer.allocate(byteCount: BackupProofOfStorage.nonceBytes, alignment: 1)
            defer {
                Sodium.wipe(key)
                key.deallocate()
            }
            key.copyBytes(from: nonce)
            keyed = Blake2b(outputLength: BackupProofOfStorage.macBytes, key: UnsafeRawBufferPointer(key))
            plain = Blake2b(outputLength: 32)
        }

        public mutating func update(_ chunk: UnsafeRawBufferPointer) {
            keyed.update(chunk)
            plain.update(chunk)
        }

        public consuming func finalize() -> (mac: [UInt8], name: BlobName) {
            (keyed.finalize(), BlobName(bytes: plain.finalize())!)
        }
    }

    /// The MAC of a blob held in memory.
    public static func mac(nonce: [UInt8], blob: [UInt8]) -> [UInt8] {
        var h = Hasher(nonce: nonce)
        blob.withUnsafeBytes { h.update($0) }
        return h.finalize().mac
    }
}

/// The recovery kit's derivations and sealing (backup.md section 7).
public enum RecoveryKitSeal {
    public static let keyLabel = Array("tandem/backup/kit-key/v1".utf8)
    public static let locatorLabel = Array("tandem/backup/kit-locator/v1".utf8)
    public static let adLabel = Array("tandem/backup/kit/v1".utf8)
    public static let nonceBytes = 24
    public static let tagBytes = 16
    public static let maximumSealedBytes = 262_144
    public static var maximumPlaintextBytes: Int { maximumSealedBytes - nonceBytes - tagBytes }

    /// `blake2b("tandem/backup/kit-key/v1", key = code, outlen = 32)`.
    public static func kitKey(_ code: RecoveryCode) -> [UInt8] {
        Hash.blake2b(keyLabel, outputLength: 32, key: code.bytes)
    }

    /// `blake2b("tandem/backup/kit-locator/v1", key = code, outlen = 32)`.
    public static func locator(_ code: RecoveryCode) -> KitLocator {
        KitLocator(bytes: Hash.blake2b(locatorLabel, outputLength: 32, key: code.bytes))!
    }

    public struct SealError: Error, Equatable, Sendable {
        public let detail: String
    }

    /// `nonce ‖ xchacha20poly1305(plaintext, key = kit key, ad = label ‖ locator)`.
    public static func seal(_ plaintext: [UInt8], code: RecoveryCode, nonce: [UInt8]) throws -> [UInt8] {
        try seal(plaintext, kitKey: kitKey(code), locator: locator(code), nonce: nonce)
    }

    /// The same from the derived kit key and locator (what a node keeps in `<data-dir>/backup-kit`,
    /// so it can re-seal its kit without the code).
    public static func seal(_ plaintext: [UInt8], kitKey: [UInt8], locator: KitLocator, nonce: [UInt8]) throws -> [UInt8] {
        guard !plaintext.isEmpty, plaintext.count <= maximumPlaintextBytes else {
            throw SealError(detail: "a kit holds 1…\(maximumPlaintextBytes) bytes")
        }
        guard nonce.count == nonceBytes else { throw SealError(detail: "a kit nonce is 24 bytes") }
        guard kitKey.count == 32 else { throw SealError(detail: "a kit key is 32 bytes") }
        var k = kitKey
        let key = SecretBytes(consuming: &k)
        let box = try XChaCha20Poly1305.seal(plaintext, additionalData: adLabel + locator.bytes, nonce: nonce, key: key)
        return nonce + box
    }

    /// The plaintext, or nil when the kit does not open under this code.
    public static func open(_ sealed: [UInt8], code: RecoveryCode) -> [UInt8]? {
        open(sealed, kitKey: kitKey(code), locator: locator(code))
    }

    /// The plaintext, or nil when the kit does not open under this key and locator.
    public static func open(_ sealed: [UInt8], kitKey: [UInt8], locator: KitLocator) -> [UInt8]? {
        guard sealed.count > nonceBytes + tagBytes, sealed.count <= maximumSealedBytes, kitKey.count == 32 else { return nil }
        var k = kitKey
        let key = SecretBytes(consuming: &k)
        return XChaCha20Poly1305.open(Array(sealed[nonceBytes...]), additionalData: adLabel + locator.bytes,
                                      nonce: Array(sealed[..<nonceBytes]), key: key)
    }
}

/// Where holders keep a recovery kit: 32 bytes derived from the recovery code.
public struct KitLocator: Hashable, Sendable, Codable {
    public let bytes: [UInt8]
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }
}
