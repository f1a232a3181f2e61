import CSodium

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Long-lived secret key material in libsodium's guarded heap (`sodium_malloc`): its own pages,
/// locked out of swap (`mlock`, best effort) and left out of core dumps, with inaccessible guard
/// pages on both sides and a canary checked on release, made read-only once filled
/// (`sodium_mprotect_readonly`), and wiped with `sodium_memzero` before `sodium_free` when the last
/// reference goes away.
///
/// Each guarded value costs a few pages and several system calls (about a fifth of a handshake's
/// time when a link's four box-stream keys paid it: `tandem-bench handshakes` fell from 0.57 to 0.46
/// of its floor). So guarded memory is for keys that live long (the identity's secret key, a
/// passphrase); per-link keys use `SecureBytes(wiped:)`: the same type and the same wipe on
/// release, on the ordinary heap. Short-lived handshake intermediates use `SecretBytes`.
public final class SecureBytes: @unchecked Sendable {
    // Written only in init (before the pages are made read-only); read through `withUnsafeBytes`.
    private let base: UnsafeMutableRawPointer
    public let count: Int
    /// In libsodium's guarded heap (else malloc'd, wiped on release all the same).
    public let isGuarded: Bool

    /// A copy of `bytes` on the ordinary heap, wiped with `sodium_memzero` on release: for per-link
    /// keys, where a guarded allocation per key would cost more than the handshake's crypto.
    public init(wiped bytes: [UInt8]) {
        Sodium.ensureInitialized()
        let n = Swift.max(bytes.count, 1)
        let p = UnsafeMutableRawPointer.allocate(byteCount: n, alignment: 16)
        sodium_memzero(p, n)
        bytes.withUnsafeBytes { src in
            if let s = src.baseAddress { p.copyMemory(from: s, byteCount: src.count) }
        }
        base = p
        count = bytes.count
        isGuarded = false
    }

    /// Moves `bytes` to a heap copy wiped on release, and wipes the caller's array.
    public convenience init(wipedConsuming bytes: inout [UInt8]) {
        self.init(wiped: bytes)
        Sodium.wipe(&bytes)
    }

    /// `count` bytes, filled by `initialize` (given writable memory), then made read-only.
    /// If `initialize` throws, the memory is wiped and freed and the error is rethrown.
    public init(count: Int, initialize: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
        precondition(count >= 0, "SecureBytes count must not be negative")
        Sodium.ensureInitialized()
        // sodium_malloc returns nil only when the system cannot map a few pages: like any other
        // allocation failure, that is not something to recover from.
        guard let p = sodium_malloc(Swift.max(count, 1)) else { fatalError("sodium_malloc(\(count)) failed: out of memory") }
        sodium_memzero(p, Swift.max(count, 1))
        // Filled before the stored properties are set: a throw here does not run deinit.
        do {
            try initialize(UnsafeMutableRawBufferPointer(start: p, count: count))
        } catch {
            sodium_memzero(p, Swift.max(count, 1))
            sodium_free(p)
            throw error
        }
        _ = sodium_mprotect_readonly(p)
        base = p
        self.count = count
        isGuarded = true
    }

    /// A guarded copy of `bytes` (the caller's array is not wiped: see `init(consuming:)`).
    public convenience init(_ bytes: [UInt8]) {
        self.init(count: bytes.count) { dst in
            bytes.withUnsafeBytes { src in
                if let s = src.baseAddress, let d = dst.baseAddress { d.copyMemory(from: s, byteCount: src.count) }
            }
        }
    }

    /// Moves `bytes` into guarded memory and wipes the caller's array.
    public convenience init(consuming bytes: inout [UInt8]) {
        self.init(bytes)
        Sodium.wipe(&bytes)
    }

    /// Moves a `SecretBytes` into guarded memory (the `SecretBytes` wipes itself when released).
    public convenience init(_ secret: SecretBytes) {
        self.init(count: secret.count) { dst in
            secret.withUnsafeBytes { src in
                if let s = src.baseAddress, let d = dst.baseAddress { d.copyMemory(from: s, byteCount: src.count) }
            }
        }
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// A copy of the secret on the ordinary heap; the caller becomes responsible for wiping it.
    public var exposedCopy: [UInt8] {
        withUnsafeBytes { Array($0) }
    }

    deinit {
        if isGuarded { _ = sodium_mprotect_readwrite(base) }
        sodium_memzero(base, Swift.max(count, 1))
        if let observer = Self.observer.value {
            observer(UnsafeRawBufferPointer(start: base, count: count))
        }
        if isGuarded { sodium_free(base) } else { base.deallocate() }
    }

    // MARK: test hook

    /// Called on release with the buffer after it was wiped and before it is freed (tests check
    /// that it reads zeros). Nil outside tests.
    private static let observer = LockedObserver()

    /// Installs (or with nil removes) the release observer. For tests only.
    public static func _setReleaseObserver(_ observer: (@Sendable (UnsafeRawBufferPointer) -> Void)?) {
        Self.observer.value = observer
    }
}

/// The release observer behind a mutex (Synchronization's Mutex needs macOS 15).
private final class LockedObserver: @unchecked Sendable {
    typealias Observer = @Sendable (UnsafeRawBufferPointer) -> Void
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var stored: Observer?

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    var value: Observer? {
        get {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return stored
        }
        set {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            stored = newValue
        }
    }
}

@inline(__always)
func withSecret<R>(_ s: SecureBytes, _ body: (UnsafePointer<UInt8>) throws -> R) rethrows -> R {
    try s.withUnsafeBytes { try body($0.bindMemory(to: UInt8.self).baseAddress!) }
}
