import Foundation
import Sodium

/// Argon2id cost of one PIN (or recovery code) guess, stored in the keys file.
public struct VaultKeyParameters: Sendable, Equatable {
    public var opsLimit: UInt64
    public var memLimitBytes: Int

    public init(opsLimit: UInt64, memLimitBytes: Int) {
        self.opsLimit = opsLimit
        self.memLimitBytes = memLimitBytes
    }

    /// 4 passes over 256 MiB. Measured on the 2-core development machine (release build, one
    /// derivation at a time, `vault-measure argon 4 256`, a throwaway executable calling
    /// `PasswordHash.deriveKey`): 0.78–0.79 s per derivation (3 passes: 0.55–0.66 s, too close to
    /// the 0.5 s floor; 2 passes: 0.42–0.50 s). A PIN has only 10^4 to 10^8 values, so every guess
    /// must cost real time and memory: an offline attacker holding the keys file pays this per guess
    /// and per slot. `unlock` derives both slots' keys on two threads, so a user waits about one
    /// derivation: 0.9–1.1 s measured for a whole `unlock`, 512 MiB at the peak.
    public static let `default` = VaultKeyParameters(opsLimit: 4, memLimitBytes: 256 << 20)
    /// Cheap parameters for unit tests only (8 KiB, one pass): never for a real vault.
    public static let testing = VaultKeyParameters(opsLimit: 1, memLimitBytes: 8 << 10)

    /// What a keys file may ask for: enough to refuse a damaged file asking for terabytes or hours.
    static let opsRange: ClosedRange<UInt64> = 1...16
    static let memRange: ClosedRange<Int> = (8 << 10)...(1 << 30)

    var isValid: Bool { Self.opsRange.contains(opsLimit) && Self.memRange.contains(memLimitBytes) }
}

/// Which wrapped master key a PIN opened. The caller opens the vault of that key and never shows
/// which slot it was: a decoy vault must look like the real one.
public enum VaultKeySlot: Sendable, Equatable {
    case a, b
}

/// The keys file, `<dir>/keys`: the vault master keys wrapped by PINs and by the recovery code.
///
/// Layout (358 bytes, always: with or without a decoy or a recovery code):
///
///     "TDMK" ‖ version (u8 = 1) ‖ opslimit (u64) ‖ memlimit bytes (u64) ‖ flags (u8: bit 0 = recovery set)
///     slot A   = salt (16) ‖ nonce (24) ‖ wrapped master key (32 + 16)   under Argon2id(PIN, salt)
///     slot B   = same layout                                             under Argon2id(decoy PIN, salt), or a random key
///     recovery = same layout, slot A's master key                        under Argon2id(recovery code, salt), or random bytes
///     link     = nonce (24) ‖ slot B's master key (32 + 16)              under a subkey of slot A's master key
///
/// Wrapping is XChaCha20-Poly1305 with additional data = the 22-byte header without the flags ‖
/// the slot's letter. Slot B always holds a real master key with a vault behind it: until a decoy
/// is set it is wrapped under a random key nobody keeps, so the file looks the same with or without
/// a decoy. The link lets the owner of slot A set the decoy PIN later (B's key is otherwise lost).
/// `unlock` always derives both slots' keys, so its time says nothing about which slot matched.
public final class VaultKeyFile: @unchecked Sendable {
    public static let fileName = "keys"
    static let magic = Array("TDMK".utf8)
    static let version: UInt8 = 1
    static let headerBytes = 4 + 1 + 8 + 8
    static let saltBytes = PasswordHash.saltBytes
    static let nonceBytes = XChaCha20Poly1305.nonceBytes
    static let wrappedBytes = 32 + XChaCha20Poly1305.tagBytes
    static let slotBytes = saltBytes + nonceBytes + wrappedBytes
    static let linkBytes = nonceBytes + wrappedBytes
    /// The whole file.
    public static let fileSize = headerBytes + 1 + 3 * slotBytes + linkBytes
    /// A recovery code has at least 128 bits.
    public static let minimumRecoveryCodeBytes = 16

    struct Slot: Equatable {
        var salt: [UInt8]
        var nonce: [UInt8]
        var wrapped: [UInt8]

        static func random() -> Slot {
            Slot(salt: Sodium.randomBytes(saltBytes), nonce: Sodium.randomBytes(nonceBytes), wrapped: Sodium.randomBytes(wrappedBytes))
        }
    }

    public let url: URL
    public let parameters: VaultKeyParameters
    var slotA: Slot
    var slotB: Slot
    var recovery: Slot
    /// Slot B's master key under a subkey of slot A's (salt unused: random).
    var link: Slot
    public private(set) var hasRecovery: Bool

    private init(url: URL, parameters: VaultKeyParameters, slotA: Slot, slotB: Slot, recovery: Slot, link: Slot, hasRecovery: Bool) {
        self.url = url
        self.parameters = parameters
        self.slotA = slotA
        self.slotB = slotB
        self.recovery = recovery
        self.link = link
        self.hasRecovery = hasRecovery
    }

    public static func url(in directory: URL) -> URL { directory.appendingPathComponent(fileName) }
    public static func exists(in directory: URL) -> Bool { FileIO.exists(url(in: directory)) }

    // MARK: creating and loading

    /// A new keys file in `directory` with two fresh master keys: slot A under `pin`, slot B (the
    /// spare, for a decoy later) under a random key that is forgotten. Fails if a keys file exists.
    /// The caller creates both vaults (see `initializeVault`), so both index files exist from the start.
    public static func create(in directory: URL, pin: [UInt8], parameters: VaultKeyParameters = .default) throws
        -> (keyFile: VaultKeyFile, masterKey: SecretBytes, spareKey: SecretBytes) {
        guard parameters.isValid else { throw VaultError(.invalidArgument, "Argon2id parameters out of range") }
        try validatePIN(pin)
        let target = url(in: directory)
        guard !FileIO.exists(target) else { throw VaultError(.alreadyExists, "a keys file exists in \(directory.path)") }
        let masterA = VaultKeys.randomMasterKey()
        let masterB = VaultKeys.randomMasterKey()
        let file = VaultKeyFile(url: target, parameters: parameters, slotA: .random(), slotB: .random(),
                                recovery: .random(), link: .random(), hasRecovery: false)
        file.slotA = try file.wrap(masterA, under: pin, label: "A")
        file.slotB = try file.wrap(masterB, key: VaultKeys.randomMasterKey(), label: "B")
        file.link = try file.wrap(masterB, key: linkKey(masterA), label: "L")
        try FileIO.createDirectory(directory)
        try file.save()
        return (file, masterA, masterB)
    }

    /// Creates the keys file and both vaults (the one the PIN opens and the spare), and returns the
    /// keys file and the PIN's vault.
    public static func initializeVault(in directory: URL, pin: [UInt8], parameters: VaultKeyParameters = .default) throws
        -> (keyFile: VaultKeyFile, repository: VaultRepository) {
        let (file, masterA, masterB) = try create(in: directory, pin: pin, parameters: parameters)
        let repository = try VaultRepository.create(at: directory, masterKey: masterA)
        _ = try VaultRepository.create(at: directory, masterKey: masterB)
        return (file, repository)
    }

    /// Loads and validates `<dir>/keys`: `.notFound` if absent, `.corrupt` if damaged.
    public static func load(from directory: URL) throws -> VaultKeyFile {
        let target = url(in: directory)
        let bytes = try FileIO.readAll(target, limit: fileSize, what: "keys file")
        var r = BinaryReader(bytes, what: "keys file \(target.path)")
        guard bytes.count == fileSize else { throw r.fail("\(bytes.count) bytes, expected \(fileSize)") }
        guard try r.raw(4) == magic else { throw r.fail("not a vault keys file (bad magic)") }
        let version = try r.u8()
        guard version == Self.version else { throw r.fail("unsupported version \(version)") }
        let ops = try r.u64()
        let mem = try r.u64()
        guard mem <= UInt64(Int.max) else { throw r.fail("memory limit out of range") }
        let parameters = VaultKeyParameters(opsLimit: ops, memLimitBytes: Int(mem))
        guard parameters.isValid else { throw r.fail("Argon2id parameters out of range (ops \(ops), memory \(mem))") }
        let flags = try r.u8()
        guard flags & ~1 == 0 else { throw r.fail("unknown flags \(flags)") }
        func slot() throws -> Slot {
            Slot(salt: try r.raw(saltBytes), nonce: try r.raw(nonceBytes), wrapped: try r.raw(wrappedBytes))
        }
        let a = try slot(), b = try slot(), rec = try slot()
        let link = Slot(salt: [], nonce: try r.raw(nonceBytes), wrapped: try r.raw(wrappedBytes))
        try r.expectEnd()
        return VaultKeyFile(url: target, parameters: parameters, slotA: a, slotB: b, recovery: rec, link: link, hasRecovery: flags & 1 == 1)
    }

    // MARK: unlocking

    /// The master key `pin` opens and its slot, or nil. Both slots' keys are always derived (the
    /// same work whatever matches), so neither the answer's timing nor the file tells a decoy exists.
    public func unlock(pin: [UInt8]) throws -> (masterKey: SecretBytes, slot: VaultKeySlot)? {
        let (keyA, keyB) = try deriveBoth(pin, saltA: slotA.salt, saltB: slotB.salt)
        let openedA = unwrap(slotA, key: keyA, label: "A")
        let openedB = unwrap(slotB, key: keyB, label: "B")
        if let openedA { return (openedA, .a) }
        if let openedB { return (openedB, .b) }
        return nil
    }

    public func unlock(pin: String) throws -> (masterKey: SecretBytes, slot: VaultKeySlot)? {
        try unlock(pin: Array(pin.utf8))
    }

    /// Slot A's master key from the recovery code, or nil (wrong code, or none set).
    public func unlock(recoveryCode: [UInt8]) throws -> SecretBytes? {
        let key = try derive(recoveryCode, salt: recovery.salt)
        guard hasRecovery else { return nil }
        return unwrap(recovery, key: key, label: "R")
    }

    /// Slot B's master key, opened through the link with slot A's `masterKey`; nil when
    /// `masterKey` is not slot A's (so it also tells whether a key is the real vault's). A restore
    /// knows slot A's key from the recovery code and needs B's to place and re-seal the spare vault.
    public func spareKey(masterKey: SecretBytes) throws -> SecretBytes? {
        unwrap(link, key: try Self.linkKey(masterKey), label: "L")
    }

    // MARK: changing

    /// Re-wraps slot A's master key under `new` (content is not re-encrypted). `.wrongSecret` if
    /// `old` does not open slot A; `.invalidArgument` if `new` is the decoy PIN.
    public func changePIN(old: [UInt8], new: [UInt8]) throws {
        try Self.validatePIN(new)
        guard let master = unwrap(slotA, key: try derive(old, salt: slotA.salt), label: "A") else {
            throw VaultError(.wrongSecret, "the current PIN is wrong")
        }
        guard unwrap(slotB, key: try derive(new, salt: slotB.salt), label: "B") == nil else {
            throw VaultError(.invalidArgument, "the new PIN must differ from the decoy PIN")
        }
        let previous = slotA
        slotA = try wrap(master, under: new, label: "A")
        do { try save() } catch { slotA = previous; throw error }
    }

    /// Sets (or changes) the decoy PIN: slot B's master key, recovered through the link with slot
    /// A's `masterKey`, is wrapped under `pin`. `.wrongSecret` if `masterKey` is not slot A's;
    /// `.invalidArgument` if `pin` opens slot A (the decoy must differ from the real PIN).
    public func setDecoy(pin: [UInt8], masterKey: SecretBytes) throws {
        try Self.validatePIN(pin)
        guard let spare = unwrap(link, key: try Self.linkKey(masterKey), label: "L") else {
            throw VaultError(.wrongSecret, "only the real vault's key can set the decoy PIN")
        }
        guard unwrap(slotA, key: try derive(pin, salt: slotA.salt), label: "A") == nil else {
            throw VaultError(.invalidArgument, "the decoy PIN must differ from the PIN")
        }
        let previous = slotB
        slotB = try wrap(spare, under: pin, label: "B")
        do { try save() } catch { slotB = previous; throw error }
    }

    /// Wraps slot A's `masterKey` under a recovery code (at least 16 bytes), replacing any earlier one.
    public func wrapForRecovery(code: [UInt8], masterKey: SecretBytes) throws {
        guard code.count >= Self.minimumRecoveryCodeBytes else {
            throw VaultError(.invalidArgument, "a recovery code has at least \(Self.minimumRecoveryCodeBytes) bytes")
        }
        guard unwrap(link, key: try Self.linkKey(masterKey), label: "L") != nil else {
            throw VaultError(.wrongSecret, "only the real vault's key can be wrapped for recovery")
        }
        let previous = (recovery, hasRecovery)
        recovery = try wrap(masterKey, under: code, label: "R")
        hasRecovery = true
        do { try save() } catch { (recovery, hasRecovery) = previous; throw error }
    }

    // MARK: internals

    static func validatePIN(_ pin: [UInt8]) throws {
        guard !pin.isEmpty, pin.count <= 1024 else { throw VaultError(.invalidArgument, "a PIN must be 1...1024 bytes") }
    }

    var header: [UInt8] {
        var w = BinaryWriter()
        w.raw(Self.magic)
        w.u8(Self.version)
        w.u64(parameters.opsLimit)
        w.u64(UInt64(parameters.memLimitBytes))
        return w.bytes
    }

    func additionalData(_ label: String) -> [UInt8] { header + Array(label.utf8) }

    func derive(_ secret: [UInt8], salt: [UInt8]) throws -> SecretBytes {
        do {
            return try PasswordHash.deriveKey(length: 32, passphrase: secret, salt: salt,
                                              opsLimit: parameters.opsLimit, memLimit: parameters.memLimitBytes)
        } catch {
            throw VaultError.io("Argon2id failed: \(error)")
        }
    }

    /// Both slots' keys, derived on two threads at once (same total work, half the wait).
    func deriveBoth(_ secret: [UInt8], saltA: [UInt8], saltB: [UInt8]) throws -> (SecretBytes, SecretBytes) {
        let results = DerivationResults()
        let salts = [saltA, saltB]
        DispatchQueue.concurrentPerform(iterations: 2) { i in
            let result = Result { try self.derive(secret, salt: salts[i]) }
            results.set(i, result)
        }
        return (try results.get(0), try results.get(1))
    }

    static func linkKey(_ masterKey: SecretBytes) throws -> SecretBytes {
        guard masterKey.count == 32 else { throw VaultError(.invalidArgument, "a master key is 32 bytes") }
        return try KeyDerivation.deriveSubkey(length: 32, id: 1, context: "tdmvkeys", masterKey: masterKey)
    }

    func wrap(_ master: SecretBytes, under secret: [UInt8], label: String) throws -> Slot {
        let salt = Sodium.randomBytes(Self.saltBytes)
        var slot = try wrap(master, key: try derive(secret, salt: salt), label: label)
        slot.salt = salt
        return slot
    }

    func wrap(_ master: SecretBytes, key: SecretBytes, label: String) throws -> Slot {
        let nonce = Sodium.randomBytes(Self.nonceBytes)
        var plain = master.exposedCopy
        defer { Sodium.wipe(&plain) }
        let wrapped = try XChaCha20Poly1305.seal(plain, additionalData: additionalData(label), nonce: nonce, key: key)
        return Slot(salt: Sodium.randomBytes(Self.saltBytes), nonce: nonce, wrapped: wrapped)
    }

    func unwrap(_ slot: Slot, key: SecretBytes, label: String) -> SecretBytes? {
        guard var plain = XChaCha20Poly1305.open(slot.wrapped, additionalData: additionalData(label), nonce: slot.nonce, key: key),
              plain.count == 32 else { return nil }
        return SecretBytes(consuming: &plain)
    }

    func save() throws {
        var w = BinaryWriter()
        w.raw(header)
        w.u8(hasRecovery ? 1 : 0)
        for s in [slotA, slotB, recovery] { w.raw(s.salt); w.raw(s.nonce); w.raw(s.wrapped) }
        w.raw(link.nonce)
        w.raw(link.wrapped)
        precondition(w.bytes.count == Self.fileSize)
        try FileIO.writeAtomically(w.bytes, to: url)
    }
}

/// The two results of `deriveBoth`, each written by one thread before `concurrentPerform` returns.
private final class DerivationResults: @unchecked Sendable {
    private let lock = NSLock()
    private var results: [Result<SecretBytes, Error>?] = [nil, nil]

    func set(_ i: Int, _ r: Result<SecretBytes, Error>) {
        lock.lock(); defer { lock.unlock() }
        results[i] = r
    }

    func get(_ i: Int) throws -> SecretBytes {
        lock.lock(); defer { lock.unlock() }
        guard let r = results[i] else { throw VaultError.io("Argon2id did not run") }
        return try r.get()
    }
}
