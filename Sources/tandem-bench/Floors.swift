import CSodium
import Foundation
import Sodium

/// Same-process baselines: the raw libsodium work a benchmark cannot go below, timed on one core.
///
/// Floors are sampled in slices alternating with the link's slices (see `Samples`).
enum Floors {
    /// A rate two ways: per second of wall-clock time, and per second of this thread's CPU time
    /// (the second does not depend on how much of a core other processes leave us).
    struct Rate {
        var wall: Double
        var cpu: Double
    }

    /// Rate of `body` (which performs `opsPerCall` operations) over `seconds`.
    static func rate(seconds: Double, opsPerCall: Int = 1, _ body: () -> Void) -> Rate {
        // Warm up (page faults, caches, libsodium's CPU feature selection).
        for _ in 0..<3 { body() }
        let nanos = UInt64(seconds * 1e9)
        let start = monotonicNanos(), cpuStart = threadCPUNanos()
        var calls = 0
        var now = start
        // Bounded in time and in count.
        while now - start < nanos, calls < 10_000_000 {
            body()
            calls += 1
            now = monotonicNanos()
        }
        let ops = Double(calls * opsPerCall)
        return Rate(wall: ops / (Double(now - start) / 1e9),
                    cpu: ops / (Double(max(1, threadCPUNanos() - cpuStart)) / 1e9))
    }

    // MARK: handshake

    /// The libsodium calls of one Secret Handshake, both sides, as `SecretHandshake.swift` makes them.
    static let handshakeOperations: [String: Int] = [
        "randombytes_buf(32)": 2,
        "crypto_scalarmult_base": 2,
        "crypto_scalarmult": 6,
        "crypto_sign_detached": 2,
        "crypto_sign_verify_detached": 2,
        "crypto_sign_ed25519_pk_to_curve25519": 2,
        "crypto_sign_ed25519_sk_to_curve25519": 2,
        "crypto_secretbox_easy": 2,
        "crypto_secretbox_open_easy": 2,
        "crypto_hash_sha256": 12,
        "crypto_auth": 3,
        "crypto_auth_verify": 2,
    ]

    /// Real inputs for the handshake's operations, so every verify and open succeeds (a failing
    /// one can return early and would make the floor too fast).
    final class HandshakeInputs {
        let client = SigningKeyPair.generate()
        let server = SigningKeyPair.generate()
        var clientSK: [UInt8]
        var serverSK: [UInt8]
        let clientMessage: [UInt8]   // K ‖ B ‖ sha256(ab), 96 bytes
        let serverMessage: [UInt8]   // K ‖ hello ‖ sha256(ab), 160 bytes
        var clientSignature = [UInt8](repeating: 0, count: 64)
        var serverSignature = [UInt8](repeating: 0, count: 64)
        let key = Sodium.randomBytes(32)
        let nonce = [UInt8](repeating: 0, count: 24)
        var helloBox: [UInt8]
        var acceptBox: [UInt8]
        var scratch = [UInt8](repeating: 0, count: 256)
        var point = [UInt8](repeating: 0, count: 32)
        var scalar = Sodium.randomBytes(32)
        var tag = [UInt8](repeating: 0, count: 32)
        let ephemeral = Sodium.randomBytes(32)

        init() {
            clientSK = client.secretKey.exposedCopy
            serverSK = server.secretKey.exposedCopy
            clientMessage = Sodium.randomBytes(96)
            serverMessage = Sodium.randomBytes(160)
            crypto_sign_detached(&clientSignature, nil, clientMessage, 96, clientSK)
            crypto_sign_detached(&serverSignature, nil, serverMessage, 160, serverSK)
            helloBox = [UInt8](repeating: 0, count: 96 + 16)
            acceptBox = [UInt8](repeating: 0, count: 64 + 16)
            let hello = Sodium.randomBytes(96), accept = Sodium.randomBytes(64)
            crypto_secretbox_easy(&helloBox, hello, 96, nonce, key)
            crypto_secretbox_easy(&acceptBox, accept, 64, nonce, key)
            crypto_scalarmult_base(&point, scalar)
            crypto_auth(&tag, ephemeral, 32, key)
        }

        /// One handshake's worth of libsodium calls (both sides). Traps if a check fails.
        func run() {
            var ok = true
            for _ in 0..<2 {
                randombytes_buf(&scalar, 32)
                crypto_scalarmult_base(&point, scalar)
            }
            var shared = [UInt8](repeating: 0, count: 32)
            for _ in 0..<6 { ok = ok && crypto_scalarmult(&shared, scalar, point) == 0 }
            crypto_sign_detached(&clientSignature, nil, clientMessage, 96, clientSK)
            crypto_sign_detached(&serverSignature, nil, serverMessage, 160, serverSK)
            ok = ok && crypto_sign_verify_detached(clientSignature, clientMessage, 96, client.publicKey) == 0
            ok = ok && crypto_sign_verify_detached(serverSignature, serverMessage, 160, server.publicKey) == 0
            var curve = [UInt8](repeating: 0, count: 32)
            // The peer's long-term key on each side (client: server's key; server: client's key).
            ok = ok && crypto_sign_ed25519_pk_to_curve25519(&curve, server.publicKey) == 0
            ok = ok && crypto_sign_ed25519_pk_to_curve25519(&curve, client.publicKey) == 0
            crypto_sign_ed25519_sk_to_curve25519(&curve, clientSK)
            crypto_sign_ed25519_sk_to_curve25519(&curve, serverSK)
            crypto_secretbox_easy(&scratch, clientMessage, 96, nonce, key)
            crypto_secretbox_easy(&scratch, clientMessage, 64, nonce, key)
            ok = ok && crypto_secretbox_open_easy(&scratch, helloBox, UInt64(helloBox.count), nonce, key) == 0
            ok = ok && crypto_secretbox_open_easy(&scratch, acceptBox, UInt64(acceptBox.count), nonce, key) == 0
            // sha256 over 32 (×4: hash(ab) ×2, hash(secret) ×2), 96 (box key ×2), 128 (secret ×2), 64 (session keys ×4).
            let sizes = [32, 32, 32, 32, 96, 96, 128, 128, 64, 64, 64, 64]
            for n in sizes { crypto_hash_sha256(&shared, serverMessage, UInt64(n)) }
            for _ in 0..<3 { crypto_auth(&shared, ephemeral, 32, key) }
            for _ in 0..<2 { ok = ok && crypto_auth_verify(tag, ephemeral, 32, key) == 0 }
            precondition(ok, "a floor operation failed")
        }
    }

    /// Handshakes per second if one core did nothing but both sides' libsodium calls.
    static func handshakes() -> (Double) -> Rate {
        let inputs = HandshakeInputs()
        return { seconds in rate(seconds: seconds) { inputs.run() } }
    }

    // MARK: frames

    /// crypto_sign_verify_detached per second on a message of `messageLength` bytes.
    static func ed25519Verify(messageLength: Int) -> (Double) -> Rate {
        let pair = SigningKeyPair.generate()
        let message = Sodium.randomBytes(messageLength)
        let signature = pair.sign(message)
        let pk = pair.publicKey
        return { seconds in
            rate(seconds: seconds, opsPerCall: 8) {
                var ok: Int32 = 0
                for _ in 0..<8 { ok |= crypto_sign_verify_detached(signature, message, UInt64(messageLength), pk) }
                precondition(ok == 0)
            }
        }
    }

    /// crypto_sign_detached per second on a message of `messageLength` bytes (informational).
    static func ed25519Sign(messageLength: Int, seconds: Double) -> Rate {
        let pair = SigningKeyPair.generate()
        let sk = pair.secretKey.exposedCopy
        let message = Sodium.randomBytes(messageLength)
        var signature = [UInt8](repeating: 0, count: 64)
        return rate(seconds: seconds, opsPerCall: 8) {
            for _ in 0..<8 { crypto_sign_detached(&signature, nil, message, UInt64(messageLength), sk) }
        }
    }

    // MARK: bulk

    /// Bytes per second of crypto_secretbox on `blockLength`-byte blocks: (seal, open).
    static func secretbox(blockLength: Int, seconds: Double) -> (seal: Rate, open: Rate) {
        let key = Sodium.randomBytes(32)
        let nonce = Sodium.randomBytes(24)
        var block = Sodium.randomBytes(blockLength)
        var mac = [UInt8](repeating: 0, count: 16)
        let seal = rate(seconds: seconds / 2, opsPerCall: 16 * blockLength) {
            for _ in 0..<16 { crypto_secretbox_detached(&block, &mac, block, UInt64(blockLength), nonce, key) }
        }
        // A sealed block to open, over and over (opening in place would change it: open a copy).
        var sealed = Sodium.randomBytes(blockLength)
        crypto_secretbox_detached(&sealed, &mac, sealed, UInt64(blockLength), nonce, key)
        let open = rate(seconds: seconds / 2, opsPerCall: 16 * blockLength) {
            var ok: Int32 = 0
            for _ in 0..<16 { ok |= crypto_secretbox_open_detached(&block, sealed, mac, UInt64(blockLength), nonce, key) }
            precondition(ok == 0)
        }
        return (seal, open)
    }
}

/// CPU time of the calling thread in nanoseconds.
func threadCPUNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// CLOCK_MONOTONIC in nanoseconds.
func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
