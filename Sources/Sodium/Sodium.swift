import CSodium

/// A small, safe Swift API over libsodium. Every function checks its input sizes
/// and reports failure through `SodiumError` or an optional result; nothing here
/// aborts on input a peer can influence.
public enum Sodium {
    /// Initialises libsodium once per process. Called implicitly by every entry point
    /// that needs it; safe to call from many threads (libsodium's own guard).
    @inline(__always)
    public static func ensureInitialized() {
        _ = initialized
    }

    private static let initialized: Bool = {
        let rc = sodium_init()
        precondition(rc >= 0, "libsodium failed to initialise")
        return true
    }()

    /// The libsodium version string, e.g. "1.0.18".
    public static var version: String {
        String(cString: sodium_version_string())
    }
}

/// An error from a libsodium call whose failure a caller must handle.
public struct SodiumError: Error, CustomStringConvertible, Equatable, Sendable {
    public enum Kind: Sendable, Equatable {
        case invalidLength
        case verificationFailed
        case decryptionFailed
        case keyConversionFailed
        case outOfMemory
        case invalidParameters
    }

    public let kind: Kind
    public let detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { detail }
}

// MARK: - Random, wiping, comparison

extension Sodium {
    /// `count` bytes from libsodium's CSPRNG.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        ensureInitialized()
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) }
        return out
    }

    /// Fills a buffer with random bytes.
    public static func fillRandom(_ buffer: UnsafeMutableRawBufferPointer) {
        ensureInitialized()
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        randombytes_buf(base, buffer.count)
    }

    /// A uniformly random 64-bit number.
    public static func randomUInt64() -> UInt64 {
        var value: UInt64 = 0
        withUnsafeMutableBytes(of: &value) { fillRandom($0) }
        return value
    }

    /// Overwrites a byte array with zeros in a way the compiler cannot elide.
    public static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { buf in
            if let base = buf.baseAddress { sodium_memzero(base, buf.count) }
        }
    }

    /// Overwrites memory with zeros (sodium_memzero).
    public static func wipe(_ buffer: UnsafeMutableRawBufferPointer) {
        if let base = buffer.baseAddress { sodium_memzero(base, buffer.count) }
    }

    /// Constant-time equality of two byte strings of the same length.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { pa in
            b.withUnsafeBytes { pb in sodium_memcmp(pa.baseAddress!, pb.baseAddress!, a.count) == 0 }
        }
    }
}

/// Secret key material that is wiped with `sodium_memzero` when the last reference goes away.
public final class SecretBytes: @unchecked Sendable {
    // Immutable after init; only read through `withUnsafeBytes`.
    private var storage: [UInt8]

    public init(_ bytes: [UInt8]) {
        storage = bytes
    }

    /// Takes ownership of `bytes` and wipes the caller's copy.
    public init(consuming bytes: inout [UInt8]) {
        storage = bytes
        Sodium.wipe(&bytes)
    }

    public var count: Int { storage.count }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes(body)
    }

    /// A copy of the secret; the caller becomes responsible for wiping it.
    public var exposedCopy: [UInt8] { storage }

    deinit {
        Sodium.wipe(&storage)
    }
}

// MARK: - Helpers for pointer-based calls

@inline(__always)
func withBytes<R>(_ a: [UInt8], _ body: (UnsafePointer<UInt8>) throws -> R) rethrows -> R {
    try a.withUnsafeBufferPointer { buf in
        // An empty array may have a nil base address; libsodium accepts any pointer with length 0.
        if let base = buf.baseAddress { return try body(base) }
        var dummy: UInt8 = 0
        return try withUnsafePointer(to: &dummy) { try body($0) }
    }
}

@inline(__always)
func withSecret<R>(_ s: SecretBytes, _ body: (UnsafePointer<UInt8>) throws -> R) rethrows -> R {
    try s.withUnsafeBytes { try body($0.bindMemory(to: UInt8.self).baseAddress!) }
}

@inline(__always)
func requireLength(_ bytes: [UInt8], _ expected: Int, _ what: String) throws {
    guard bytes.count == expected else {
        throw SodiumError(.invalidLength, "\(what) must be \(expected) bytes, got \(bytes.count)")
    }
}
