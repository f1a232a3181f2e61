import Foundation
import Sodium
import TandemThreads

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

/// Which of the keys file's two records a secret opened: its position in the file, which says
/// nothing about which vault is the real one (version 2 writes the two records in random order).
/// Version 1 files: `.a` is the first slot (the vault the first PIN made), `.b` the second.
public enum VaultKeySlot: Sendable, Equatable {
    case a, b

    var position: Int { self == .a ? 0 : 1 }
    init(position: Int) { self = position == 0 ? .a : .b }
}

/// The keys file, `<dir>/keys`: the master keys of the directory's two vaults wrapped by their
/// PINs (or passphrases), by their recovery codes, and one by the other (the link).
///
/// Version 2 (518 bytes, always):
///
///     "TDMK" ‖ version (u8 = 2) ‖ opslimit (u64) ‖ memlimit bytes (u64) ‖ flags (u8 = 0)
///     2 × record, in random order:
///         PIN slot      = salt (16) ‖ nonce (24) ‖ master key wrapped (32 + 16)   under pinKey(PIN, salt)
///         recovery slot = salt (16) ‖ nonce (24) ‖ master key wrapped (32 + 16)   under Argon2id(recovery code, salt)
///         link          = nonce (24) ‖ a 32-byte key wrapped (32 + 16)            under a subkey of the record's master key
///
///     pinKey(PIN, salt) = BLAKE2b-256(key = pepper, "tdmk pin v2" ‖ Argon2id(PIN, salt))
///
/// The pepper is derived from the node's identity secret key, which lives outside `vault/`: a copy
/// of `vault/` (or of what a friend holds) does not open with the right PIN. Both records have the
/// same layout and the same additional data (header ‖ "P", "R" or "L"), so the file does not say
/// which is the real vault, nor whether a decoy PIN is set: the spare record's PIN slot is wrapped
/// under a random key nobody keeps until a decoy PIN is set. Each record's recovery slot opens with
/// its own vault's recovery code. The first vault's link holds the spare's master key (so the owner
/// can set the decoy PIN later, and a restore can place the spare); the spare's link holds a random
/// key that opens no vault. Unlocking always derives both records' keys: the same work whatever matches.
///
/// Version 1 (358 bytes; the first slot is the real vault, no pepper) is read and unlocked as it
/// was; `upgraded(...)` turns it into version 2 once the real PIN opens it.
public final class VaultKeyFile: @unchecked Sendable {
    public static let fileName = "keys"
    static let magic = Array("TDMK".utf8)
    static let version: UInt8 = 2
    static let legacyVersion: UInt8 = 1
    static let headerBytes = 4 + 1 + 8 + 8
    static let saltBytes = PasswordHash.saltBytes
    static let nonceBytes = XChaCha20Poly1305.nonceBytes
    static let wrappedBytes = 32 + XChaCha20Poly1305.tagBytes
    static let slotBytes = saltBytes + nonceBytes + wrappedBytes
    static let linkBytes = nonceBytes + wrappedBytes
    static let recordBytes = 2 * slotBytes + linkBytes
    /// The whole file (version 2).
    public static let fileSize = headerBytes + 1 + 2 * recordBytes
    /// A version 1 file.
    public static let legacyFileSize = headerBytes + 1 + 3 * slotBytes + linkBytes
    /// Whether `n` bytes can be a keys file of some version (a recovery kit may carry either).
    public static func isKeysFileSize(_ n: Int) -> Bool { n == fileSize || n == legacyFileSize }
    /// A recovery code has at least 128 bits.
    public static let minimumRecoveryCodeBytes = 16
    static let pinLabel = Array("tdmk pin v2".utf8)

    struct Slot: Equatable {
        var salt: [UInt8]
        var nonce: [UInt8]
        var wrapped: [UInt8]

        static func random() -> Slot {
            Slot(salt: Sodium.randomBytes(saltBytes), nonce: Sodium.randomBytes(nonceBytes), wrapped: Sodium.randomBytes(wrappedBytes))
        }
    }

    /// One vault's slots. Version 1: record 0 = slot A, recovery, link; record 1 = slot B and random bytes.
    struct Record: Equatable {
        var pin: Slot
        var recovery: Slot
        var link: Slot

        static func random() -> Record { Record(pin: .random(), recovery: .random(), link: .random()) }
    }

    public let url: URL
    public let parameters: VaultKeyParameters
    /// 2, or 1 for a file not upgraded yet.
    public let formatVersion: UInt8
    var records: [Record]
    /// Version 2: always true (each record's recovery slot is wrapped under a code). Version 1: flag bit 0.
    public private(set) var hasRecovery: Bool
    /// The secret mixed into every PIN slot's key (version 2); all zeros for a node without an identity.
    let pepper: SecretBytes

    private init(url: URL, parameters: VaultKeyParameters, version: UInt8, records: [Record], hasRecovery: Bool, pepper: SecretBytes?) {
        self.url = url
        self.parameters = parameters
        self.formatVersion = version
        self.records = records
        self.hasRecovery = hasRecovery
        self.pepper = pepper ?? Self.noPepper
    }

    /// The pepper of a node without an identity secret (harnesses, unit tests): 32 zero bytes.
    static let noPepper = SecretBytes([UInt8](repeating: 0, count: 32))

    /// The PIN pepper of a node: BLAKE2b-256 keyed with its identity's 64-byte secret key, of a
    /// domain string (Protocol/vault.md "Keys file"). Held outside `vault/`, so a copy of the vault
    /// folder alone cannot be guessed at offline.
    public static func pepper(identitySecretKey: SecureBytes) -> SecretBytes {
        Sodium.ensureInitialized()
        var out = identitySecretKey.withUnsafeBytes { key -> [UInt8] in
            var h = Blake2b(outputLength: 32, key: UnsafeRawBufferPointer(rebasing: key.prefix(Blake2b.maximumKeyBytes)))
            h.update(Array("tandem-vault-pin-pepper-v1".utf8))
            return h.finalize()
        }
        return SecretBytes(consuming: &out)
    }

    public static func url(in directory: URL) -> URL { directory.appendingPathComponent(fileName) }
    public static func exists(in directory: URL) -> Bool { FileIO.exists(url(in: directory)) }

    // MARK: creating and loading

    /// A new keys file in `directory` with two fresh master keys: one under `pin`, the spare (for a
    /// decoy later) under a random key that is forgotten; each under its recovery code (random ones
    /// when `recoveryCodes` is nil: then nobody can recover, see `wrapForRecovery`). Fails if a keys
    /// file exists. Written once, whole: the caller writes both vaults' indexes first (see
    /// `initializeVault`) or lets `write: false` keep the file in memory until `save()`.
    public static func create(in directory: URL, pin: [UInt8], parameters: VaultKeyParameters = .default,
                              pepper: SecretBytes? = nil, recoveryCodes: (own: [UInt8], spare: [UInt8])? = nil,
                              write: Bool = true) throws
        -> (keyFile: VaultKeyFile, masterKey: SecretBytes, spareKey: SecretBytes) {
        guard parameters.isValid else { throw VaultError(.invalidArgument, "Argon2id parameters out of range") }
        try validatePIN(pin)
        let codes = recoveryCodes ?? (Sodium.randomBytes(16), Sodium.randomBytes(16))
        for c in [codes.own, codes.spare] where c.count < minimumRecoveryCodeBytes {
            throw VaultError(.invalidArgument, "a recovery code has at least \(minimumRecoveryCodeBytes) bytes")
        }
        let target = url(in: directory)
        guard !FileIO.exists(target) else { throw VaultError(.alreadyExists, "a keys file exists in \(directory.path)") }
        let master = VaultKeys.randomMasterKey()
        let spare = VaultKeys.randomMasterKey()
        let file = VaultKeyFile(url: target, parameters: parameters, version: version, records: [.random(), .random()],
                                hasRecovery: true, pepper: pepper)
        let own = Record(pin: try file.wrapPIN(master, pin),
                         recovery: try file.wrap(master, under: codes.own, label: "R"),
                         link: try file.wrap(spare, key: try linkKey(master), label: "L"))
        let other = Record(pin: try file.wrap(spare, key: VaultKeys.randomMasterKey(), label: "P"),
                           recovery: try file.wrap(spare, under: codes.spare, label: "R"),
                           link: try file.wrap(VaultKeys.randomMasterKey(), key: try linkKey(spare), label: "L"))
        file.records = Sodium.randomUInt64() & 1 == 0 ? [own, other] : [other, own]
        if write {
            try FileIO.createDirectory(directory)
            try file.save()
        }
        return (file, master, spare)
    }

    /// Creates both vaults (the one the PIN opens and the spare) and then the keys file, and returns
    /// the keys file and the PIN's vault.
    public static func initializeVault(in directory: URL, pin: [UInt8], parameters: VaultKeyParameters = .default,
                                       pepper: SecretBytes? = nil) throws
        -> (keyFile: VaultKeyFile, repository: VaultRepository) {
        guard !exists(in: directory) else { throw VaultError(.alreadyExists, "a keys file exists in \(directory.path)") }
        let (file, master, spare) = try create(in: directory, pin: pin, parameters: parameters, pepper: pepper, write: false)
        let repository = try VaultRepository.create(at: directory, masterKey: master)
        _ = try VaultRepository.create(at: directory, masterKey: spare)
        try file.save()
        return (file, repository)
    }

    /// Loads and validates `<dir>/keys`: `.notFound` if absent, `.corrupt` if damaged. `pepper`
    /// is the node's (`pepper(identitySecretKey:)`); nil: the no-identity pepper.
    public static func load(from directory: URL, pepper: SecretBytes? = nil) throws -> VaultKeyFile {
        let target = url(in: directory)
        let bytes = try FileIO.readAll(target, limit: fileSize, what: "keys file")
        var r = BinaryReader(bytes, what: "keys file \(target.path)")
        guard bytes.count >= headerBytes + 1 else { throw r.fail("\(bytes.count) bytes: truncated") }
        guard try r.raw(4) == magic else { throw r.fail("not a vault keys file (bad magic)") }
        let version = try r.u8()
        guard version == Self.version || version == legacyVersion else { throw r.fail("unsupported version \(version)") }
        let expected = version == Self.version ? fileSize : legacyFileSize
        guard bytes.count == expected else { throw r.fail("\(bytes.count) bytes, expected \(expected)") }
        let ops = try r.u64()
        let mem = try r.u64()
        guard mem <= UInt64(Int.max) else { throw r.fail("memory limit out of range") }
        let parameters = VaultKeyParameters(opsLimit: ops, memLimitBytes: Int(mem))
        guard parameters.isValid else { throw r.fail("Argon2id parameters out of range (ops \(ops), memory \(mem))") }
        let flags = try r.u8()
        func slot() throws -> Slot {
            Slot(salt: try r.raw(saltBytes), nonce: try r.raw(nonceBytes), wrapped: try r.raw(wrappedBytes))
        }
        func link() throws -> Slot { Slot(salt: [], nonce: try r.raw(nonceBytes), wrapped: try r.raw(wrappedBytes)) }
        let records: [Record]
        let hasRecovery: Bool
        if version == Self.version {
            guard flags == 0 else { throw r.fail("unknown flags \(flags)") }
            var rs: [Record] = []
            for _ in 0..<2 { rs.append(Record(pin: try slot(), recovery: try slot(), link: try link())) }
            records = rs
            hasRecovery = true
        } else {
            guard flags & ~1 == 0 else { throw r.fail("unknown flags \(flags)") }
            let a = try slot(), b = try slot(), rec = try slot(), l = try link()
            records = [Record(pin: a, recovery: rec, link: l), Record(pin: b, recovery: .random(), link: .random())]
            hasRecovery = flags & 1 == 1
        }
        try r.expectEnd()
        return VaultKeyFile(url: target, parameters: parameters, version: version, records: records, hasRecovery: hasRecovery,
                            pepper: pepper)
    }

    var isLegacy: Bool { formatVersion == Self.legacyVersion }

    // MARK: unlocking

    /// The master key `pin` opens and its record's position, or nil. Both records' keys are always
    /// derived (the same work whatever matches), so neither the answer's timing nor the file tells
    /// a decoy exists.
    public func unlock(pin: [UInt8]) throws -> (masterKey: SecretBytes, slot: VaultKeySlot)? {
        let (k0, k1) = try deriveBoth(pin, saltA: records[0].pin.salt, saltB: records[1].pin.salt)
        let keys = isLegacy ? [k0, k1] : [try pinKey(k0), try pinKey(k1)]
        for i in 0..<2 {
            if let opened = unwrap(records[i].pin, key: keys[i], label: pinLabel(i)) { return (opened, VaultKeySlot(position: i)) }
        }
        return nil
    }

    public func unlock(pin: String) throws -> (masterKey: SecretBytes, slot: VaultKeySlot)? {
        try unlock(pin: Array(pin.utf8))
    }

    /// The master key a recovery code opens, or nil (wrong code, or none set). Version 2: either
    /// vault's code opens its own vault; version 1: only the first vault has one.
    public func unlock(recoveryCode: [UInt8]) throws -> SecretBytes? {
        if isLegacy {
            let key = try derive(recoveryCode, salt: records[0].recovery.salt)
            guard hasRecovery else { return nil }
            return unwrap(records[0].recovery, key: key, label: "R")
        }
        let (k0, k1) = try deriveBoth(recoveryCode, saltA: records[0].recovery.salt, saltB: records[1].recovery.salt)
        return unwrap(records[0].recovery, key: k0, label: "R") ?? unwrap(records[1].recovery, key: k1, label: "R")
    }

    /// The spare vault's master key, opened through the link with the first vault's `masterKey`;
    /// nil for any other key (the spare's own link holds a key that opens no record, so this also
    /// tells whether a key is the real vault's). A restore knows the real vault's key from the
    /// recovery code and needs the spare's to place it; `setDecoy` needs it to wrap it under a PIN.
    public func spareKey(masterKey: SecretBytes) throws -> SecretBytes? {
        try spare(of: masterKey)?.key
    }

    /// The spare's key and record position for the vault of `masterKey`: its link opens, and the key
    /// inside opens the other record's link (so it is that record's master key).
    func spare(of masterKey: SecretBytes) throws -> (key: SecretBytes, position: Int)? {
        if isLegacy {
            return unwrap(records[0].link, key: try Self.linkKey(masterKey), label: "L").map { ($0, 1) }
        }
        guard let own = try position(of: masterKey) else { return nil }
        let other = 1 - own
        guard let inner = unwrap(records[own].link, key: try Self.linkKey(masterKey), label: "L"),
              unwrap(records[other].link, key: try Self.linkKey(inner), label: "L") != nil else { return nil }
        return (inner, other)
    }

    /// The record of `masterKey`: the one whose link its subkey opens (version 2).
    func position(of masterKey: SecretBytes) throws -> Int? {
        let k = try Self.linkKey(masterKey)
        return (0..<2).first { unwrap(records[$0].link, key: k, label: "L") != nil }
    }

    // MARK: changing

    /// What `changePIN` refuses.
    public enum ChangeRefusal: Error, Equatable, Sendable {
        /// `old` opens no record.
        case wrongPIN
        /// `new` opens the other record: refused, and to be counted like a wrong PIN by the caller
        /// (this is no way to test PINs for free).
        case taken
        /// A version 1 file (upgraded at the next unlock with the first PIN).
        case legacy
    }

    /// Re-wraps the master key `old` opens (either record) under `new`; content is not re-encrypted
    /// and the other record is untouched.
    public func changePIN(old: [UInt8], new: [UInt8]) throws {
        try Self.validatePIN(new)
        guard !isLegacy else { throw ChangeRefusal.legacy }
        guard let (master, slot) = try unlock(pin: old) else { throw ChangeRefusal.wrongPIN }
        let own = slot.position
        let other = 1 - own
        let taken = try derive(new, salt: records[other].pin.salt)
        guard unwrap(records[other].pin, key: try pinKey(taken), label: "P") == nil else { throw ChangeRefusal.taken }
        let previous = records
        records[own].pin = try wrapPIN(master, new)
        do { try save() } catch { records = previous; throw error }
    }

    /// Sets (or changes) the decoy PIN: the spare's master key, recovered through the link with the
    /// real vault's `masterKey`, is wrapped under `pin` in the spare's record. `.wrongSecret` if
    /// `masterKey` has no spare behind its link (it is the decoy's); `.invalidArgument` if `pin`
    /// opens the real vault (the decoy must differ from the real PIN).
    public func setDecoy(pin: [UInt8], masterKey: SecretBytes) throws {
        try Self.validatePIN(pin)
        guard !isLegacy else { throw ChangeRefusal.legacy }
        guard let (spare, other) = try spare(of: masterKey) else {
            throw VaultError(.wrongSecret, "only the vault that made the keys file can set the decoy PIN")
        }
        let own = 1 - other
        let k = try derive(pin, salt: records[own].pin.salt)
        guard unwrap(records[own].pin, key: try pinKey(k), label: "P") == nil else {
            throw VaultError(.invalidArgument, "the decoy PIN must differ from the PIN")
        }
        let previous = records
        records[other].pin = try wrapPIN(spare, pin)
        do { try save() } catch { records = previous; throw error }
    }

    /// Wraps the vault of `masterKey` under a recovery code (at least 16 bytes), replacing its
    /// earlier one. Version 1: only the first vault's key.
    public func wrapForRecovery(code: [UInt8], masterKey: SecretBytes) throws {
        guard code.count >= Self.minimumRecoveryCodeBytes else {
            throw VaultError(.invalidArgument, "a recovery code has at least \(Self.minimumRecoveryCodeBytes) bytes")
        }
        let position: Int
        if isLegacy {
            guard try spare(of: masterKey) != nil else {
                throw VaultError(.wrongSecret, "only the real vault's key can be wrapped for recovery")
            }
            position = 0
        } else {
            guard let p = try self.position(of: masterKey) else { throw VaultError(.wrongSecret, "this key opens no record of the keys file") }
            position = p
        }
        let previous = (records, hasRecovery)
        records[position].recovery = try wrap(masterKey, under: code, label: "R")
        hasRecovery = true
        do { try save() } catch { (records, hasRecovery) = previous; throw error }
    }

    /// Makes the recovery slot of the vault of `masterKey` open with `code`, re-wrapping it (and
    /// saving) only when it does not already: so the code a vault shows always opens it, also
    /// after a restore that sealed a new code for the spare. True when it re-wrapped. Version 1
    /// files are left alone (false).
    public func ensureRecovery(code: [UInt8], masterKey: SecretBytes) throws -> Bool {
        guard !isLegacy, let position = try self.position(of: masterKey) else { return false }
        if unwrap(records[position].recovery, key: try derive(code, salt: records[position].recovery.salt), label: "R") != nil {
            return false
        }
        try wrapForRecovery(code: code, masterKey: masterKey)
        return true
    }

    /// A version 2 file for a version 1 file the first PIN opened (`masterKey`: slot A's), written
    /// atomically over it: both records in random order, `pin` peppered, each vault under its code
    /// (`codes`: the real vault's and the spare's, as sealed in `<vault>/recovery`). A decoy PIN set
    /// in version 1 cannot be carried over (it is not known here): the spare keeps its content and
    /// the owner sets the decoy PIN again. nil when `masterKey` is not slot A's.
    public func upgraded(pin: [UInt8], masterKey: SecretBytes, codes: (own: [UInt8], spare: [UInt8])) throws -> VaultKeyFile? {
        guard isLegacy, let (spare, _) = try spare(of: masterKey) else { return nil }
        let file = VaultKeyFile(url: url, parameters: parameters, version: Self.version, records: [.random(), .random()],
                                hasRecovery: true, pepper: pepper)
        let own = Record(pin: try file.wrapPIN(masterKey, pin),
                         recovery: try file.wrap(masterKey, under: codes.own, label: "R"),
                         link: try file.wrap(spare, key: try Self.linkKey(masterKey), label: "L"))
        let other = Record(pin: try file.wrap(spare, key: VaultKeys.randomMasterKey(), label: "P"),
                           recovery: try file.wrap(spare, under: codes.spare, label: "R"),
                           link: try file.wrap(VaultKeys.randomMasterKey(), key: try Self.linkKey(spare), label: "L"))
        file.records = Sodium.randomUInt64() & 1 == 0 ? [own, other] : [other, own]
        try file.save()
        return file
    }

    /// CPU seconds of one Argon2id derivation with these parameters, measured now on the calling
    /// thread (libsodium derives on the caller's thread, one lane): what a guess costs a guesser per
    /// core, whatever else this machine is busy with (a guess costs one per record it is tried against).
    public static func measureDerivation(_ parameters: VaultKeyParameters) throws -> Double {
        func threadCPU() -> Double {
            var t = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
            return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
        }
        let start = threadCPU()
        _ = try PasswordHash.deriveKey(length: 32, passphrase: Array("0000".utf8), salt: Sodium.randomBytes(saltBytes),
                                       opsLimit: parameters.opsLimit, memLimit: parameters.memLimitBytes)
        return max(0, threadCPU() - start)
    }

    // MARK: internals

    static func validatePIN(_ pin: [UInt8]) throws {
        guard !pin.isEmpty, pin.count <= 1024 else { throw VaultError(.invalidArgument, "a PIN must be 1...1024 bytes") }
    }

    func pinLabel(_ position: Int) -> String { isLegacy ? (position == 0 ? "A" : "B") : "P" }

    var header: [UInt8] {
        var w = BinaryWriter()
        w.raw(Self.magic)
        w.u8(formatVersion)
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

    /// A PIN slot's key from the Argon2id output: keyed by the pepper (version 2).
    func pinKey(_ stretched: SecretBytes) throws -> SecretBytes {
        var out = stretched.withUnsafeBytes { s in Blake2b.keyedHash(Self.pinLabel + Array(s), key: pepper) }
        return SecretBytes(consuming: &out)
    }

    /// Both keys, derived on two threads at once (same total work, half the wait): the caller
    /// derives one, a thread of `WorkerPool.shared` the other (the caller both, if the pool is busy).
    func deriveBoth(_ secret: [UInt8], saltA: [UInt8], saltB: [UInt8]) throws -> (SecretBytes, SecretBytes) {
        let keys = try WorkerPool.shared.map([saltA, saltB], width: 2) { salt in
            try self.derive(secret, salt: salt)
        }
        return (keys[0], keys[1])
    }

    static func linkKey(_ masterKey: SecretBytes) throws -> SecretBytes {
        guard masterKey.count == 32 else { throw VaultError(.invalidArgument, "a master key is 32 bytes") }
        return try KeyDerivation.deriveSubkey(length: 32, id: 1, context: "tdmvkeys", masterKey: masterKey)
    }

    func wrapPIN(_ master: SecretBytes, _ pin: [UInt8]) throws -> Slot {
        try Self.validatePIN(pin)
        let salt = Sodium.randomBytes(Self.saltBytes)
        var slot = try wrap(master, key: try pinKey(try derive(pin, salt: salt)), label: "P")
        slot.salt = salt
        return slot
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

    /// Writes the file whole, atomically (version 1 files as version 1: only `upgraded` changes the version).
    public func save() throws {
        var w = BinaryWriter()
        w.raw(header)
        if isLegacy {
            w.u8(hasRecovery ? 1 : 0)
            for s in [records[0].pin, records[1].pin, records[0].recovery] { w.raw(s.salt); w.raw(s.nonce); w.raw(s.wrapped) }
            w.raw(records[0].link.nonce)
            w.raw(records[0].link.wrapped)
            precondition(w.bytes.count == Self.legacyFileSize)
        } else {
            w.u8(0)
            for r in records {
                for s in [r.pin, r.recovery] { w.raw(s.salt); w.raw(s.nonce); w.raw(s.wrapped) }
                w.raw(r.link.nonce)
                w.raw(r.link.wrapped)
            }
            precondition(w.bytes.count == Self.fileSize)
        }
        try FileIO.writeAtomically(w.bytes, to: url)
    }
}
