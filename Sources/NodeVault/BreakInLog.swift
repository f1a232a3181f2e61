import Foundation
import Sodium
import TandemStore

/// The break-in log's entries as the node's store keeps them (Protocol/vault.md "The PIN guard"):
/// each sealed with XChaCha20-Poly1305 under a key derived from the node's identity secret key, so
/// reading the log needs the identity key (not the PIN, and not only a copy of node.sqlite).
/// An entry holds when, and which wrong PIN in a row it was: nothing of the PIN tried.
///
/// Format (byte 0): 1 = sealed: nonce (24) ‖ AEAD(atMs 8 bytes big-endian ‖ attempt 4 bytes
/// big-endian), additional data `domain`; 0 = clear, the same 12 bytes (only what migration v8
/// left of an old entry; sealed at the next write).
enum BreakInLog {
    static let domain = Array("tandem-vault-break-in-log-v1".utf8)
    static let plainBytes = 12

    /// The log's key: BLAKE2b-256 keyed with the identity's 64-byte secret key, of the domain string.
    static func key(identitySecretKey: SecureBytes) -> SecretBytes {
        Sodium.ensureInitialized()
        var out = identitySecretKey.withUnsafeBytes { key -> [UInt8] in
            var h = Blake2b(outputLength: 32, key: UnsafeRawBufferPointer(rebasing: key.prefix(Blake2b.maximumKeyBytes)))
            h.update(domain)
            return h.finalize()
        }
        return SecretBytes(consuming: &out)
    }

    static func plain(_ b: PinGuard.BreakIn) -> [UInt8] {
        withUnsafeBytes(of: UInt64(bitPattern: b.atMs).bigEndian) { Array($0) }
            + withUnsafeBytes(of: UInt32(clamping: b.attempt).bigEndian) { Array($0) }
    }

    static func seal(_ b: PinGuard.BreakIn, key: SecretBytes) throws -> Data {
        let nonce = Sodium.randomBytes(XChaCha20Poly1305.nonceBytes)
        return Data([1] + nonce + (try XChaCha20Poly1305.seal(plain(b), additionalData: domain, nonce: nonce, key: key)))
    }

    /// The entry, or nil: not one (damaged), or sealed and `key` does not open it.
    static func open(_ entry: Data, key: SecretBytes?) -> PinGuard.BreakIn? {
        let bytes = [UInt8](entry.prefix(VaultBreakInRecord.maximumEntryBytes))
        guard let kind = bytes.first else { return nil }
        let body = Array(bytes.dropFirst())
        let plain: [UInt8]
        switch kind {
        case 0:
            plain = body
        case 1:
            guard let key, body.count > XChaCha20Poly1305.nonceBytes,
                  let opened = XChaCha20Poly1305.open(Array(body.dropFirst(XChaCha20Poly1305.nonceBytes)), additionalData: domain,
                                                      nonce: Array(body.prefix(XChaCha20Poly1305.nonceBytes)), key: key)
            else { return nil }
            plain = opened
        default:
            return nil
        }
        guard plain.count == plainBytes else { return nil }
        let atMs = plain[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let attempt = plain[8..<12].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        return PinGuard.BreakIn(atMs: Int64(bitPattern: atMs), attempt: Int(attempt))
    }
}
