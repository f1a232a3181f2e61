import CSodium

/// XChaCha20-Poly1305 secret stream (`crypto_secretstream_xchacha20poly1305`): a sequence of
/// authenticated chunks that cannot be reordered, truncated or dropped unnoticed. Used for
/// large encrypted files (vault backups).
public enum SecretStream {
    public static let keyBytes = 32
    public static let headerBytes = 24
    public static let overheadBytes = 17

    public enum Tag: UInt8, Sendable {
        case message = 0
        case push = 1
        case rekey = 2
        case final = 3
    }

    public static func generateKey() -> SecretBytes {
        Sodium.ensureInitialized()
        var k = [UInt8](repeating: 0, count: keyBytes)
        crypto_secretstream_xchacha20poly1305_keygen(&k)
        return SecretBytes(consuming: &k)
    }

    /// The encrypting end.
    public struct Pusher {
        private var state = crypto_secretstream_xchacha20poly1305_state()
        /// Send this header before the first chunk.
        public let header: [UInt8]

        public init(key: SecretBytes) throws {
            Sodium.ensureInitialized()
            guard key.count == keyBytes else { throw SodiumError(.invalidLength, "secretstream key must be 32 bytes") }
            var h = [UInt8](repeating: 0, count: headerBytes)
            var st = crypto_secretstream_xchacha20poly1305_state()
            let rc = key.withUnsafeBytes { k in
                crypto_secretstream_xchacha20poly1305_init_push(&st, &h, k.bindMemory(to: UInt8.self).baseAddress!)
            }
            state = st
            guard rc == 0 else { throw SodiumError(.invalidParameters, "secretstream init_push failed") }
            header = h
        }

        public mutating func push(_ message: [UInt8], tag: Tag = .message) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: message.count + overheadBytes)
            withBytes(message) { m in
                _ = crypto_secretstream_xchacha20poly1305_push(&state, &out, nil, m, UInt64(message.count),
                                                                nil, 0, tag.rawValue)
            }
            return out
        }
    }

    /// The decrypting end.
    public struct Puller {
        private var state = crypto_secretstream_xchacha20poly1305_state()

        public init(key: SecretBytes, header: [UInt8]) throws {
            Sodium.ensureInitialized()
            guard key.count == keyBytes, header.count == headerBytes else {
                throw SodiumError(.invalidLength, "secretstream key or header has the wrong length")
            }
            var st = crypto_secretstream_xchacha20poly1305_state()
            let rc = key.withUnsafeBytes { k in
                crypto_secretstream_xchacha20poly1305_init_pull(&st, header, k.bindMemory(to: UInt8.self).baseAddress!)
            }
            state = st
            guard rc == 0 else { throw SodiumError(.decryptionFailed, "secretstream header is invalid") }
        }

        /// The plaintext and tag of the next chunk; nil if it does not authenticate.
        public mutating func pull(_ chunk: [UInt8]) -> (message: [UInt8], tag: Tag)? {
            guard chunk.count >= overheadBytes else { return nil }
            var out = [UInt8](repeating: 0, count: chunk.count - overheadBytes)
            var tag: UInt8 = 0
            let rc = out.withUnsafeMutableBufferPointer { o in
                var dummy: UInt8 = 0
                return crypto_secretstream_xchacha20poly1305_pull(
                    &state, o.baseAddress ?? withUnsafeMutablePointer(to: &dummy) { $0 }, nil, &tag,
                    chunk, UInt64(chunk.count), nil, 0)
            }
            guard rc == 0, let t = Tag(rawValue: tag) else { return nil }
            return (out, t)
        }
    }
}
