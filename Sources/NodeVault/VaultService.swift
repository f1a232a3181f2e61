import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemVault
import TandemNodeCore

/// The node's encrypted vault (`<data-dir>/vault/`): PIN unlock with a lockout schedule that
/// survives restarts, auto-lock after an idle time and when the node stops, and the vault's
/// operations for the control socket (VaultControl.swift).
///
/// Threads: vault work (Argon2id, chunking, packs, the index) runs on the vault's own thread, one
/// operation at a time (an import of a large file never holds up the node core or an event loop);
/// the PIN guard and the settings live in the node's store and are read and written on the core,
/// durably before a PIN attempt is answered.
///
/// Decoy: a decoy PIN opens the other vault of the keys file; the service keeps no note of which
/// slot it opened, and events carry counts, never item ids, so nothing it says tells them apart.
public final class VaultService: Service, Sendable {
    public struct Configuration: Sendable {
        /// Argon2id cost of a new vault's PINs (stored in its keys file).
        public var keyParameters: VaultKeyParameters = .default
        /// Auto-lock when the store has no setting yet.
        public var defaultAutoLockMs: Int64 = 300_000
        /// The key the break-in log is sealed with: `NodeRuntime` derives it from the node's
        /// identity (`breakInLogKey(identity:)`) when it is nil here. Without one (a vault service
        /// built on its own, in tests), wrong PINs are counted but not logged.
        public var breakInLogKey: SecretBytes?
        /// The secret mixed into every PIN slot's key (Protocol/vault.md "Keys file"): `NodeRuntime`
        /// derives it from the node's identity (`pinPepper(identity:)`) when it is nil here. Without
        /// one (a vault service built on its own, in tests), the fixed no-identity pepper.
        public var pinPepper: SecretBytes?
        public init() {}
    }

    /// The PIN pepper, derived from the node's identity secret key (which lives outside `vault/`).
    public static func pinPepper(identity: SigningKeyPair) -> SecretBytes {
        VaultKeyFile.pepper(identitySecretKey: identity.secretKey)
    }

    /// The break-in log's key, derived from the node's identity secret key (BreakInLog.swift).
    public static func breakInLogKey(identity: SigningKeyPair) -> SecretBytes {
        BreakInLog.key(identitySecretKey: identity.secretKey)
    }

    /// An unlocked vault: its repository and keys, touched on the vault thread only.
    final class OpenVault: Sendable {
        let repository: VaultRepository
        let keyFile: VaultKeyFile
        let masterKey: SecretBytes

        init(repository: VaultRepository, keyFile: VaultKeyFile, masterKey: SecretBytes) {
            self.repository = repository
            self.keyFile = keyFile
            self.masterKey = masterKey
        }
    }

    struct State {
        var open: OpenVault?
        /// Monotonic nanoseconds of the last operation's end.
        var lastUsedNs: UInt64 = 0
        var autoLockMs: Int64?
        var stopping = false
        /// One Argon2id derivation measured on this machine (for `vault status`), once per process.
        var guessing: GuessingEstimate?
    }

    /// `<data-dir>/vault`, nil for a node without a data directory.
    let directory: URL?
    let store: NodeStore
    let events: EventBus
    let health: StoreHealth
    let configuration: Configuration
    let logger: Logger
    /// Wall-clock milliseconds (injected in tests).
    let now: @Sendable () -> Int64
    private let lane: NIOThreadPool
    private let laneLoop: EventLoop
    /// Told `vaultChanged` after each operation on the open vault (backups keep themselves current).
    private let signals: NodeSignals?
    private let turn = AsyncTurn()
    private let state = NIOLockedValueBox(State())

    package init(directory: URL?, store: NodeStore, events: EventBus, health: StoreHealth,
         configuration: Configuration = .init(), group: EventLoopGroup, logger: Logger,
         now: @escaping @Sendable () -> Int64 = { Int64(clamping: wallClockMilliseconds()) }, signals: NodeSignals? = nil) {
        self.signals = signals
        self.directory = directory
        self.store = store
        self.events = events
        self.health = health
        self.configuration = configuration
        self.logger = logger
        self.now = now
        lane = NIOThreadPool(numberOfThreads: 1)
        lane.start()
        laneLoop = group.next()
        // Whatever an import killed mid-way left in tmp/ (only where photos cannot be staged in
        // memory) is shredded before any vault operation can exist: here, once per node start (an
        // absent or empty directory, but for a crash), and again at every unlock.
        if let directory {
            ImportScratch.shred(vault: directory, logger: logger)
            // What a `vault init` killed mid-way left (VaultCreation.swift).
            VaultCreation.tidy(vault: directory, logger: logger)
        }
    }

    deinit {
        lane.shutdownGracefully { _ in }
    }

    // MARK: - The service: auto-lock, and lock at shutdown

    /// Locks the vault after its idle time, and when the node stops. Neither waits for an
    /// operation in progress (a long import): the stop must not outlast the service group's bound;
    /// the operation keeps the vault it holds until it ends, at its next file when stopping.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))  // cancelled: the loop ends
                await self.lockIfIdle()
            }
        }
        state.withLockedValue { $0.stopping = true }
        lockNow(reason: "node stopping")
    }

    /// True once the node is stopping: long operations end at their next file.
    var isStopping: Bool { state.withLockedValue { $0.stopping } }

    func lockIfIdle() async {
        let autoLock = await autoLockMs()
        // An operation in progress is use, not idleness.
        guard !turn.isBusy else { return }
        let idle = state.withLockedValue { s -> Bool in
            guard s.open != nil else { return false }
            let idleNs = DispatchTime.now().uptimeNanoseconds &- s.lastUsedNs
            return Int64(clamping: idleNs / 1_000_000) >= autoLock
        }
        if idle { lockNow(reason: "idle") }
    }

    /// Forgets the open vault (its keys are wiped when released).
    func lockNow(reason: String) {
        let was = state.withLockedValue { s -> Bool in
            defer { s.open = nil }
            return s.open != nil
        }
        if was {
            NodeCore.submit { [events] in _ = events.emit("vault.locked", ["reason": .string(reason)]) }
            logger.info("vault locked", metadata: ["reason": "\(reason)"])
        }
    }

    public var isUnlocked: Bool { state.withLockedValue { $0.open != nil } }

    // MARK: - Settings and the PIN guard (in the node's store, on the core)

    nonisolated static let autoLockSetting = "vault.autoLockMs"

    func autoLockMs() async -> Int64 {
        if let cached = state.withLockedValue({ $0.autoLockMs }) { return cached }
        let stored = await NodeCore.run {
            health.read("read the vault's auto-lock", or: nil) { try store.setting(Self.autoLockSetting) }
        }
        let value = stored.flatMap { Int64($0) }.map { min(max(0, $0), Self.maximumAutoLockMs) } ?? configuration.defaultAutoLockMs
        state.withLockedValue { $0.autoLockMs = value }
        return value
    }

    nonisolated static let maximumAutoLockMs: Int64 = 7 * 24 * 3_600_000

    func setAutoLock(ms: Int64) async throws {
        guard (0...Self.maximumAutoLockMs).contains(ms) else {
            throw NodeError.invalidArgument("the auto-lock time must be between 0 and 7 days")
        }
        try await NodeCore.perform { try store.step { step in try step.setSetting(Self.autoLockSetting, String(ms)) } }
        state.withLockedValue { $0.autoLockMs = ms }
    }

    /// On the core: the stored guard, validated (a guard that cannot be read counts as three
    /// failures: a damaged row or a failing disk can never be a way to skip a lockout).
    func loadGuard() -> PinGuard {
        let nowMs = now()
        let stored: StoredPinGuard?
        do {
            stored = try store.vaultPinGuard()
        } catch {
            health.failed("read the vault's PIN guard", error)
            logger.warning("the vault's PIN guard could not be read; counting three wrong PINs")
            var fresh = PinGuard()
            for _ in 0..<3 { fresh.failed(nowMs: nowMs) }
            return fresh
        }
        guard let stored else { return PinGuard() }
        let key = configuration.breakInLogKey
        let log = stored.breakIns.compactMap { BreakInLog.open($0.entry, key: key) }
        if log.count < stored.breakIns.count {
            // Not a way around a wait (the counter is in its own row); the owner sees fewer entries.
            logger.warning("break-in log entries that do not open were left out",
                           metadata: ["entries": "\(stored.breakIns.count - log.count)"])
        }
        return PinGuard(failures: Int(clamping: stored.guardRow.failures), lockedUntilMs: stored.guardRow.lockedUntilMs,
                        breakIns: log, nowMs: nowMs)
    }

    /// On the core: stores the guard (durably: the answer to the attempt waits for it), every log
    /// entry sealed afresh; without a log key, no entries.
    @NodeCore func saveGuard(_ guardState: PinGuard) throws {
        let entries = try configuration.breakInLogKey.map { key in
            try guardState.breakIns.map { VaultBreakInRecord(entry: try BreakInLog.seal($0, key: key)) }
        } ?? []
        let stored = StoredPinGuard(failures: Int64(guardState.failures), lockedUntilMs: guardState.lockedUntilMs, breakIns: entries)
        try store.step { step in try step.saveVaultPinGuard(stored) }
    }

    // MARK: - Running vault work

    /// Runs `body` on the vault's thread.
    func onLane<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await lane.runIfActive(eventLoop: laneLoop, body).get()
    }

    var vaultDirectory: URL {
        get throws {
            guard let directory else {
                throw ControlError(code: "unavailable", message: "this node has no data directory, so no vault", exitCode: 1)
            }
            return directory
        }
    }

    var exists: Bool { directory.map { VaultKeyFile.exists(in: $0) } ?? false }

    /// Runs `body` with the vault open: the open one, or the one `pin` opens (a locked vault
    /// without a PIN is an error the CLI answers by asking for it). One operation at a time; the
    /// idle clock restarts after it, and an auto-lock of 0 locks at once.
    func withVault<T: Sendable>(pin: String?, _ body: @escaping @Sendable (OpenVault) throws -> T) async throws -> T {
        try await withOpenVault(pin: pin) { vault in try await self.onLane { try body(vault) } }
    }

    /// `withVault` for bodies that await (streaming progress).
    func withOpenVault<T: Sendable>(pin: String?, _ body: @escaping @Sendable (OpenVault) async throws -> T) async throws -> T {
        let autoLock = await autoLockMs()
        return try await turn.run {
            let vault: OpenVault
            if let open = self.state.withLockedValue({ $0.open }) {
                vault = open
            } else if let pin {
                vault = try await self.unlockInTurn(pin: pin)
            } else {
                try self.requireVault()
                throw ControlError(code: "vault_locked",
                                   message: "the vault is locked: run `tandem vault unlock` (or pass --pin-stdin)", exitCode: 1)
            }
            defer {
                self.state.withLockedValue { $0.lastUsedNs = DispatchTime.now().uptimeNanoseconds }
                if autoLock == 0 { self.lockNow(reason: "auto-lock 0") }
                // Whatever the body committed (even when it failed part-way): a backup may be behind.
                self.signals?.post(.vaultChanged)
            }
            return try await body(vault)
        }
    }

    func requireVault() throws {
        guard directory != nil else { _ = try vaultDirectory; return }
        guard exists else {
            throw ControlError(code: "no_vault", message: "no vault yet: create one with `tandem vault init`",
                               exitCode: ControlError.notInitializedExitCode)
        }
    }

    // MARK: - Init, unlock, PINs

    /// The keys file's bytes for a PIN or passphrase (VaultSecret).
    nonisolated static func validatePIN(_ pin: String, what: String = "PIN") throws {
        _ = try VaultSecret.bytes(pin, what: what)
    }

    @discardableResult
    func initialize(pin: String) async throws -> RecoveryCode {
        let secret = try VaultSecret.bytes(pin)
        let dir = try vaultDirectory
        let parameters = configuration.keyParameters
        let pepper = configuration.pinPepper
        return try await turn.run {
            guard !self.exists else {
                throw ControlError(code: "conflict", message: "this node already has a vault (unlock it with `tandem vault unlock`)",
                                   exitCode: 1)
            }
            let (opened, code) = try await self.onLane { () -> (OpenVault, RecoveryCode) in
                let created = try VaultCreation.run(vault: dir, secret: secret, parameters: parameters, pepper: pepper,
                                                    after: { VaultCreation.processHook($0) })
                return (OpenVault(repository: created.repository, keyFile: created.keyFile, masterKey: created.masterKey), created.code)
            }
            self.state.withLockedValue {
                $0.open = opened
                $0.lastUsedNs = DispatchTime.now().uptimeNanoseconds
            }
            await self.events.emit("vault.created", [:])
            return code
        }
    }

    /// The node's recovery code: in clear (made on first ask) while there is no vault. With a vault,
    /// the code sealed for the vault `pin` opens, whether a vault is open or not: the PIN is always
    /// checked (through the guard, like an unlock: a wrong one counts), so an open session does not
    /// give the code to whoever sits at it, and the decoy PIN always shows the decoy's code. The
    /// open vault, if any, stays as it is.
    func recoveryCode(pin: String?) async throws -> RecoveryCode {
        let dir = try vaultDirectory
        return try await turn.run { () -> RecoveryCode in
            guard self.exists else { return try await self.onLane { try RecoveryCodes.clearCode(vault: dir) } }
            guard let pin else {
                throw ControlError(code: "pin_required",
                                   message: "showing the recovery code needs the vault PIN (pass --pin-stdin)", exitCode: 1)
            }
            let logger = self.logger
            return try await self.checkPINInTurn(pin) { keyFile, master in
                guard let code = try RecoveryCodes.open(vault: dir, master: master) else {
                    throw NodeError.failed("this vault has no recovery code sealed in it")
                }
                // The code shown must open this vault's recovery slot (a restore seals a new code
                // for the spare); one Argon2id derivation to check, a re-wrap when it does not.
                if try keyFile.ensureRecovery(code: code.bytes, masterKey: master) {
                    logger.notice("the vault's recovery slot was re-wrapped under the code sealed for it")
                }
                return code
            }
        }
    }

    /// Opens the vault a PIN opens, within the caller's turn, and keeps it open.
    func unlockInTurn(pin: String) async throws -> OpenVault {
        let dir = try vaultDirectory
        let logger = self.logger
        let opened = try await checkPINInTurn(pin) { keyFile, master in
            ImportScratch.shred(vault: dir, logger: logger)
            return OpenVault(repository: try VaultRepository.open(at: dir, masterKey: master), keyFile: keyFile, masterKey: master)
        }
        state.withLockedValue {
            $0.open = opened
            $0.lastUsedNs = DispatchTime.now().uptimeNanoseconds
        }
        await events.emit("vault.unlocked", [:])
        return opened
    }

    /// Checks a PIN within the caller's turn and gives `body` (on the vault thread) the keys file
    /// and the master key of the vault it opens: refused without counting while a lockout runs; a
    /// wrong PIN is counted (durably) before the answer. Nothing is kept open.
    func checkPINInTurn<T: Sendable>(_ pin: String,
                                     _ body: @escaping @Sendable (VaultKeyFile, SecretBytes) throws -> T) async throws -> T {
        try requireVault()
        let dir = try vaultDirectory
        let guardNow = await NodeCore.run { self.loadGuard() }
        if let wait = guardNow.wait(nowMs: now()) {
            throw ControlError(code: "locked_out",
                               message: "too many wrong PINs: try again in \(Self.spoken(ms: wait))",
                               exitCode: ControlError.authenticationExitCode)
        }
        // The PIN's shape is checked after the lockout, so a malformed attempt is a wrong one too.
        let pepper = configuration.pinPepper
        let logger = self.logger
        let opened = try await onLane { () -> T? in
            var keyFile = try VaultKeyFile.load(from: dir, pepper: pepper)
            guard let secret = try? VaultSecret.bytes(pin),  // a malformed PIN is a wrong one
                  let (master, _) = try keyFile.unlock(pin: secret) else { return nil }
            if keyFile.formatVersion == 1 {
                do {
                    if let upgraded = try Self.upgrade(keyFile, secret: secret, master: master, vault: dir) {
                        keyFile = upgraded
                        logger.notice("the vault's keys file was upgraded to version 2 (PINs mixed with the node's identity key); a decoy PIN set before must be set again")
                    }
                } catch {
                    // Not fatal to the unlock: the version 1 file still works, and the next unlock tries again.
                    logger.error("cannot upgrade the vault's keys file", metadata: ["error": "\(error)"])
                }
            }
            let result = try body(keyFile, master)
            RecoveryKitKeyFile.rememberAtUnlock(keyFile: keyFile, master: master, vaultDirectory: dir)
            return result
        }
        let after = try await NodeCore.perform { () -> PinGuard in
            var g = self.loadGuard()
            if opened != nil { g.succeeded() } else { g.failed(nowMs: self.now()) }
            try self.saveGuard(g)
            return g
        }
        guard let opened else {
            await events.emit("vault.pin_failed", ["failures": .int(Int64(after.failures))])
            var message = "wrong PIN"
            if let wait = after.wait(nowMs: now()) { message += "; \(after.failures) in a row: try again in \(Self.spoken(ms: wait))" }
            throw ControlError(code: "wrong_pin", message: message, exitCode: ControlError.authenticationExitCode)
        }
        return opened
    }

    /// A version 1 keys file the first PIN opened, rewritten as version 2 (nil: the PIN opened the
    /// second slot, which cannot upgrade the file; it waits for the first PIN). Each vault keeps its
    /// recovery code: the codes sealed in `<vault>/recovery` (a vault without one gets a new code,
    /// sealed with the other).
    nonisolated static func upgrade(_ keyFile: VaultKeyFile, secret: [UInt8], master: SecretBytes, vault dir: URL) throws -> VaultKeyFile? {
        guard let spare = try keyFile.spareKey(masterKey: master) else { return nil }
        let own = try RecoveryCodes.open(vault: dir, master: master)
        let spareCode = try RecoveryCodes.open(vault: dir, master: spare)
        let codes = (own ?? RecoveryCode(bytes: Sodium.randomBytes(RecoveryCode.byteCount)),
                     spareCode ?? RecoveryCode(bytes: Sodium.randomBytes(RecoveryCode.byteCount)))
        if own == nil || spareCode == nil { try RecoveryCodes.seal([(codes.0, master), (codes.1, spare)], vault: dir) }
        return try keyFile.upgraded(pin: secret, masterKey: master, codes: (codes.0.bytes, codes.1.bytes))
    }

    /// Opens the vault this PIN opens (whatever was open is locked first).
    func unlock(pin: String) async throws {
        try await turn.run {
            self.state.withLockedValue { $0.open = nil }
            _ = try await self.unlockInTurn(pin: pin)
        }
    }

    /// "30 s", "2 min", "1 h 5 min".
    nonisolated static func spoken(ms: Int64) -> String {
        let s = (ms + 999) / 1000
        if s < 60 { return "\(s) s" }
        let m = (s + 59) / 60
        if m < 60 { return "\(m) min" }
        return m % 60 == 0 ? "\(m / 60) h" : "\(m / 60) h \(m % 60) min"
    }

    /// Re-wraps the master key the current PIN opens under a new PIN (content is not re-encrypted).
    /// Works with either PIN (the real one or the decoy) and changes only the slot of the vault it
    /// opens. A new PIN that opens the other vault is refused and counted as a wrong PIN (this is
    /// no way to test PINs past the guard).
    func changePIN(old: String, new: String) async throws {
        let newSecret = try VaultSecret.bytes(new, what: "new PIN")
        let pepper = configuration.pinPepper
        try await turn.run {
            // The old PIN goes through the guard like any attempt (and upgrades a version 1 file).
            _ = try await self.unlockInTurn(pin: old)
            let dir = try self.vaultDirectory
            let oldSecret = try VaultSecret.bytes(old)
            let refusal = try await self.onLane { () -> VaultKeyFile.ChangeRefusal? in
                let keyFile = try VaultKeyFile.load(from: dir, pepper: pepper)
                do {
                    try keyFile.changePIN(old: oldSecret, new: newSecret)
                    return nil
                } catch let refusal as VaultKeyFile.ChangeRefusal {
                    return refusal
                }
            }
            switch refusal {
            case nil:
                break
            case .taken?:
                let failures = try await NodeCore.perform { () -> Int in
                    var g = self.loadGuard()
                    g.failed(nowMs: self.now())
                    try self.saveGuard(g)
                    return g.failures
                }
                await self.events.emit("vault.pin_failed", ["failures": .int(Int64(failures))])
                throw NodeError.invalidArgument("that new PIN cannot be used: choose another")
            case .legacy?:
                throw NodeError.failed("the vault's keys file is version 1: unlock it with the first PIN it was made with to upgrade it")
            case .wrongPIN?:
                throw NodeError.failed("the keys file changed while the PIN was being changed: try again")
            }
            await self.events.emit("vault.pin_changed", [:])
        }
    }

    /// Sets the decoy PIN (the real PIN proves the owner).
    func setDecoy(pin: String, decoy: String) async throws {
        let decoySecret = try VaultSecret.bytes(decoy, what: "decoy PIN")
        guard pin != decoy else { throw NodeError.invalidArgument("the decoy PIN must differ from the PIN") }
        try await turn.run {
            let vault = try await self.unlockInTurn(pin: pin)
            try await self.onLane {
                do {
                    try vault.keyFile.setDecoy(pin: decoySecret, masterKey: vault.masterKey)
                } catch let error as VaultError where error.kind == .invalidArgument || error.kind == .wrongSecret {
                    throw NodeError.invalidArgument("\(error)")
                } catch is VaultKeyFile.ChangeRefusal {
                    throw NodeError.failed("the vault's keys file is version 1: unlock it with the first PIN it was made with to upgrade it")
                }
            }
        }
    }

    /// What `vault status` shows: whether a vault exists and is locked, the auto-lock, any lockout.
    func status() async -> JSONValue {
        let autoLock = await autoLockMs()
        let g = await NodeCore.run { self.loadGuard() }
        var o: [String: JSONValue] = [
            "initialized": .bool(exists),
            "locked": .bool(!isUnlocked),
            "auto_lock_ms": .int(autoLock),
            "failed_attempts": .int(Int64(g.failures)),
            "retry_in_ms": g.wait(nowMs: now()).map(JSONValue.int) ?? .null,
        ]
        if let open = state.withLockedValue({ $0.open }) {
            let items = (try? await onLane { (open.repository.items.count, open.repository.items.reduce(Int64(0)) { $0 + $1.size }) })  // the lane stopped (node stopping): counts shown as 0
            o["items"] = .int(Int64(items?.0 ?? 0))
            o["bytes"] = .int(items?.1 ?? 0)
        }
        if let guessing = await guessingEstimate() { o["guessing"] = guessing.json }
        return .object(o)
    }

    /// One Argon2id derivation with the vault's parameters (the keys file's, else a new vault's),
    /// timed on the vault's thread the first time it is asked for; nil when that fails.
    func guessingEstimate() async -> GuessingEstimate? {
        if let known = state.withLockedValue({ $0.guessing }) { return known }
        let dir = directory
        let pepper = configuration.pinPepper
        let fallback = configuration.keyParameters
        do {
            let estimate = try await onLane { () -> GuessingEstimate in
                let parameters = try dir.flatMap { d in
                    VaultKeyFile.exists(in: d) ? try VaultKeyFile.load(from: d, pepper: pepper).parameters : nil
                } ?? fallback
                return GuessingEstimate(secondsPerGuess: try VaultKeyFile.measureDerivation(parameters), parameters: parameters)
            }
            state.withLockedValue { $0.guessing = estimate }
            return estimate
        } catch {
            logger.warning("cannot measure the vault's key derivation", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// The break-in log (needs the vault open, as its owner's business).
    func breakIns(pin: String?) async throws -> [PinGuard.BreakIn] {
        _ = try await withVault(pin: pin) { _ in true }
        return await NodeCore.run { self.loadGuard().breakIns }
    }
}

/// One at a time, in arrival order: the vault's operations take turns (a PIN check cannot run
/// beside another, so guesses cannot be raced past the lockout).
final class AsyncTurn: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())

    /// Whether an operation holds the turn now.
    var isBusy: Bool { state.withLockedValue { $0.busy } }

    func run<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLockedValue { s -> Bool in
                if s.busy {
                    s.waiting.append(c)
                    return false
                }
                s.busy = true
                return true
            }
            if now { c.resume() }
        }
    }

    private func release() {
        let next = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
            if s.waiting.isEmpty {
                s.busy = false
                return nil
            }
            return s.waiting.removeFirst()
        }
        next?.resume()
    }
}
