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
        public init() {}
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
    private let turn = AsyncTurn()
    private let state = NIOLockedValueBox(State())

    package init(directory: URL?, store: NodeStore, events: EventBus, health: StoreHealth,
         configuration: Configuration = .init(), group: EventLoopGroup, logger: Logger,
         now: @escaping @Sendable () -> Int64 = { Int64(clamping: wallClockMilliseconds()) }) {
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
        if let directory { ImportScratch.shred(vault: directory, logger: logger) }
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

    nonisolated static func validatePIN(_ pin: String, what: String = "PIN") throws {
        guard (4...8).contains(pin.utf8.count), pin.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw NodeError.invalidArgument("a \(what) is 4 to 8 digits")
        }
    }

    @discardableResult
    func initialize(pin: String) async throws -> RecoveryCode {
        try Self.validatePIN(pin)
        let dir = try vaultDirectory
        let parameters = configuration.keyParameters
        return try await turn.run {
            guard !self.exists else {
                throw ControlError(code: "conflict", message: "this node already has a vault (unlock it with `tandem vault unlock`)",
                                   exitCode: 1)
            }
            let (opened, code) = try await self.onLane { () -> (OpenVault, RecoveryCode) in
                try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
                // The node's recovery code (made now if it has none) wraps the new vault's key;
                // once it is sealed in the vault, its clear copy goes.
                let code = try RecoveryCodes.clearCode(vault: dir)
                try RecoveryKitKeyFile.remember(code: code, vaultDirectory: dir)
                let (keyFile, master, spare) = try VaultKeyFile.create(in: dir, pin: Array(pin.utf8), parameters: parameters)
                let repository = try VaultRepository.create(at: dir, masterKey: master)
                _ = try VaultRepository.create(at: dir, masterKey: spare)
                try keyFile.wrapForRecovery(code: code.bytes, masterKey: master)
                try RecoveryCodes.seal([(code, master), (RecoveryCode(bytes: Sodium.randomBytes(RecoveryCode.byteCount)), spare)], vault: dir)
                try FileManager.default.removeItem(at: RecoveryCodes.clearURL(vault: dir))
                return (OpenVault(repository: repository, keyFile: keyFile, masterKey: master), code)
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
            let master = try await self.checkPINInTurn(pin) { _, master in master }
            guard let code = try await self.onLane({ try RecoveryCodes.open(vault: dir, master: master) }) else {
                throw NodeError.failed("this vault has no recovery code sealed in it")
            }
            return code
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
        let opened = try await onLane { () -> T? in
            let keyFile = try VaultKeyFile.load(from: dir)
            guard (try? Self.validatePIN(pin)) != nil, let (master, _) = try keyFile.unlock(pin: pin) else { return nil }  // a malformed PIN is a wrong one
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
    func changePIN(old: String, new: String) async throws {
        try Self.validatePIN(new, what: "new PIN")
        try await turn.run {
            // The old PIN goes through the guard like any attempt.
            _ = try await self.unlockInTurn(pin: old)
            let dir = try self.vaultDirectory
            try await self.onLane {
                let keyFile = try VaultKeyFile.load(from: dir)
                do {
                    try keyFile.changePIN(old: Array(old.utf8), new: Array(new.utf8))
                } catch let error as VaultError where error.kind == .invalidArgument || error.kind == .wrongSecret {
                    throw NodeError.invalidArgument("\(error)")
                }
            }
            await self.events.emit("vault.pin_changed", [:])
        }
    }

    /// Sets the decoy PIN (the real PIN proves the owner).
    func setDecoy(pin: String, decoy: String) async throws {
        try Self.validatePIN(decoy, what: "decoy PIN")
        guard pin != decoy else { throw NodeError.invalidArgument("the decoy PIN must differ from the PIN") }
        try await turn.run {
            let vault = try await self.unlockInTurn(pin: pin)
            try await self.onLane {
                do {
                    try vault.keyFile.setDecoy(pin: Array(decoy.utf8), masterKey: vault.masterKey)
                } catch let error as VaultError where error.kind == .invalidArgument || error.kind == .wrongSecret {
                    throw NodeError.invalidArgument("\(error)")
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
        return .object(o)
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
