/// A byte string as a dictionary or set key (a public key, a message id, a book key): equal
/// exactly when the bytes are, like `[UInt8]`, but hashed in one `Hasher.combine(bytes:)`.
///
/// `[UInt8]`'s own `hash(into:)` feeds the hasher one byte at a time, each a call into the
/// runtime (`Hasher._combine(UInt8)`): ~20 instructions a byte, ~1,000 for the delivery book's
/// 48-byte keys, and the hot tables are asked several times per message (messages.md 11.6,
/// session 13). Any length is taken; nothing is assumed about what a peer sent.
public struct ByteKey: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    @inlinable
    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    @inlinable
    public static func == (a: ByteKey, b: ByteKey) -> Bool { a.bytes == b.bytes }

    @inlinable
    public func hash(into hasher: inout Hasher) {
        // The length first, as `[UInt8]` does, so that keys of different lengths stay apart even
        // where one is a prefix of the other.
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    public var description: String { hexString(bytes) }
}
