import Sodium

/// The subkeys of one vault, derived from its 32-byte master key with `crypto_kdf` in the context
/// "tdmvault". Separate keys keep each use independent: the blob key encrypts, the id key names
/// chunks (so ids reveal nothing to whoever lacks it, and equal files in two vaults get unrelated
/// ids), the chunker key seeds the gear table (so chunk boundaries, which an observer sees as blob
/// sizes, do not fingerprint known content), and the index key encrypts and locates the index.
public struct VaultKeys: Sendable {
    public static let context = "tdmvault"
    /// Subkey numbers (part of the format: changing one makes every vault unreadable).
    enum SubkeyID: UInt64 {
        case data = 1
        case id = 2
        case chunker = 3
        case index = 4
    }

    public let dataKey: SecretBytes
    public let idKey: SecretBytes
    public let chunkerKey: SecretBytes
    public let indexKey: SecretBytes

    public init(masterKey: SecretBytes) throws {
        guard masterKey.count == 32 else {
            throw VaultError(.invalidArgument, "a vault master key is 32 bytes, got \(masterKey.count)")
        }
        func derive(_ id: SubkeyID) throws -> SecretBytes {
            do {
                return try KeyDerivation.deriveSubkey(length: 32, id: id.rawValue, context: Self.context, masterKey: masterKey)
            } catch {
                throw VaultError(.invalidArgument, "cannot derive vault subkey: \(error)")
            }
        }
        dataKey = try derive(.data)
        idKey = try derive(.id)
        chunkerKey = try derive(.chunker)
        indexKey = try derive(.index)
    }

    /// A random master key (for a new vault).
    public static func randomMasterKey() -> SecretBytes {
        var bytes = Sodium.randomBytes(32)
        return SecretBytes(consuming: &bytes)
    }

    /// The keyed BLAKE2b-256 id of a chunk's plaintext.
    func chunkID(_ plaintext: UnsafeRawBufferPointer) -> ChunkID {
        let digest = Blake2b.keyedHash(plaintext, key: idKey)
        // A 32-byte digest always makes an id.
        return ChunkID(digest)!
    }
}
