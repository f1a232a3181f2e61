import Foundation
import Sodium
import TandemProtocol
import TandemNodeCore

/// The node's focus secrets, derived from its identity seed (so nothing else needs keeping): one
/// key for the tag hashes, one that seals object templates and unfinished enrolments at rest.
struct FocusSecrets: Sendable {
    private let tagKey: SecretBytes
    private let sealKey: SecretBytes

    init(identity: SigningKeyPair) throws {
        var seed = identity.secretKey.withUnsafeBytes { Array($0.prefix(32)) }
        let master = SecretBytes(consuming: &seed)
        tagKey = try KeyDerivation.deriveSubkey(id: 1, context: "tdmfocus", masterKey: master)
        sealKey = try KeyDerivation.deriveSubkey(id: 2, context: "tdmfocus", masterKey: master)
    }

    /// BLAKE2b-256 keyed with the node's tag key over salt ‖ payload: what a tag key stores.
    func tagHash(salt: [UInt8], payload: [UInt8]) -> [UInt8] {
        Blake2b.keyedHash(salt + payload, key: tagKey)
    }

    /// nonce ‖ XChaCha20-Poly1305(plaintext), bound to `context` (what the bytes are and whose).
    func seal(_ plaintext: [UInt8], context: String) throws -> [UInt8] {
        let nonce = Sodium.randomBytes(24)
        return nonce + (try XChaCha20Poly1305.seal(plaintext, additionalData: Array(context.utf8), nonce: nonce, key: sealKey))
    }

    func open(_ sealed: [UInt8], context: String) -> [UInt8]? {
        guard sealed.count > 24 + 16 else { return nil }
        return XChaCha20Poly1305.open(Array(sealed[24...]), additionalData: Array(context.utf8), nonce: Array(sealed[..<24]), key: sealKey)
    }
}

/// What a key is, as stored (table `focusKeyMaterial`, FocusStoredRows.swift): a tag key keeps only
/// a salted keyed hash of its payload; an object key keeps its template sealed under the node's key,
/// bound to `focus.key.<id>`. Reading a row validates every length: a row that breaks a rule is not
/// a key (the node quarantines it).
enum FocusKeyMaterial: Equatable, Sendable {
    case tag(salt: [UInt8], hash: [UInt8])
    case object(sealed: [UInt8], frames: Int)

    static let saltBytes = 16
    static let hashBytes = 32
    /// A sealed template: vectors and a subsampled model, well under this.
    static let maximumSealedBytes = 4 << 20
    /// A tag's payload: an NFC record, a typed word, a QR code's text.
    static let maximumTagBytes = 4096

    var kind: String {
        switch self {
        case .tag: return "tag"
        case .object: return "object"
        }
    }

    static func newTag(payload: [UInt8], secrets: FocusSecrets) throws(FocusRefusal) -> FocusKeyMaterial {
        try checkTag(payload)
        let salt = Sodium.randomBytes(saltBytes)
        return .tag(salt: salt, hash: secrets.tagHash(salt: salt, payload: payload))
    }

    static func checkTag(_ payload: [UInt8]) throws(FocusRefusal) {
        guard !payload.isEmpty, payload.count <= maximumTagBytes else {
            throw FocusRefusal(.invalid, "a tag is 1 to \(maximumTagBytes) bytes")
        }
    }

    /// Whether `payload` is this tag (constant-time comparison).
    func matchesTag(_ payload: [UInt8], secrets: FocusSecrets) -> Bool {
        guard case .tag(let salt, let hash) = self else { return false }
        return Sodium.constantTimeEqual(secrets.tagHash(salt: salt, payload: payload), hash)
    }
}
