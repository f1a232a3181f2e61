import Foundation
import Logging
import Sodium
import TandemProtocol
import TandemVault
import TandemNodeCore

/// `vault init` on disk (Protocol/vault.md "Creating a vault"): every file is written atomically
/// and durably, and the keys file, written whole and last but for removing the clear recovery
/// code, is the commit point. Killed before it: no keys file, so no vault (what the earlier steps
/// left opens with no key anyone has and is removed at the next start or init). Killed after it:
/// a whole vault whose PIN and recovery code both work (the clear code, sealed in the vault by
/// then, is removed at the next start).
enum VaultCreation {
    /// The steps, in order; `after` is called after each (a test's way to stop there).
    enum Step: Int, CaseIterable, Sendable {
        case directory = 1, clearCode, kitKey, firstIndex, spareIndex, sealedCodes, keysFile, clearCodeRemoved
    }

    /// Debug builds only: `vault init` SIGKILLs its own node right after step N (a test of atomicity).
    static let abortVariable = "TANDEM_VAULT_INIT_ABORT_AFTER"

    struct Created {
        let keyFile: VaultKeyFile
        let repository: VaultRepository
        let masterKey: SecretBytes
        let code: RecoveryCode
    }

    static func run(vault dir: URL, secret: [UInt8], parameters: VaultKeyParameters, pepper: SecretBytes?,
                    after: (Step) throws -> Void) throws -> Created {
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try removeLeftovers(vault: dir)
        try after(.directory)
        // The node's recovery code (made now if it has none) wraps the new vault's key.
        let code = try RecoveryCodes.clearCode(vault: dir)
        try after(.clearCode)
        try RecoveryKitKeyFile.remember(code: code, vaultDirectory: dir)
        try after(.kitKey)
        // The spare's code is real too: it opens the spare's recovery slot, so a decoy's code is
        // as consistent as the real one (vault.md "What each party learns").
        let spareCode = RecoveryCode(bytes: Sodium.randomBytes(RecoveryCode.byteCount))
        let (keyFile, master, spare) = try VaultKeyFile.create(in: dir, pin: secret, parameters: parameters, pepper: pepper,
                                                               recoveryCodes: (code.bytes, spareCode.bytes), write: false)
        let repository = try VaultRepository.create(at: dir, masterKey: master)
        try after(.firstIndex)
        _ = try VaultRepository.create(at: dir, masterKey: spare)
        try after(.spareIndex)
        try RecoveryCodes.seal([(code, master), (spareCode, spare)], vault: dir)
        try after(.sealedCodes)
        try keyFile.save()
        try after(.keysFile)
        // Sealed in the vault now: the clear copy goes.
        try removeClearCode(vault: dir)
        try after(.clearCodeRemoved)
        return Created(keyFile: keyFile, repository: repository, masterKey: master, code: code)
    }

    /// The hook the node passes: in debug builds, `TANDEM_VAULT_INIT_ABORT_AFTER=N` kills the
    /// process with SIGKILL right after step N (nothing is cleaned up, as after a power cut).
    static func processHook(_ step: Step) {
        #if DEBUG
        if let n = ProcessInfo.processInfo.environment[abortVariable].flatMap(Int.init), n == step.rawValue {
            kill(getpid(), SIGKILL)
        }
        #endif
    }

    /// At a node's start: what an init killed mid-way left. Without a keys file (and no restore in
    /// progress, which writes its keys file last too), index files and sealed codes open with no
    /// key anyone has: removed. With one, a clear recovery code beside the vault is sealed in it:
    /// removed.
    static func tidy(vault dir: URL, logger: Logger) {
        do {
            if VaultKeyFile.exists(in: dir) {
                try removeClearCode(vault: dir)
            } else {
                try removeLeftovers(vault: dir)
            }
        } catch {
            logger.warning("cannot tidy what an interrupted vault init left", metadata: ["error": "\(error)"])
        }
    }

    static func removeLeftovers(vault dir: URL) throws {
        let fm = FileManager.default
        guard !VaultKeyFile.exists(in: dir), !fm.fileExists(atPath: dir.appendingPathComponent(".restore").path) else { return }
        let index = dir.appendingPathComponent("index")
        if fm.fileExists(atPath: index.path) {
            for name in try fm.contentsOfDirectory(atPath: index.path) {
                try FileIO.remove(index.appendingPathComponent(name))
            }
        }
        try FileIO.remove(RecoveryCodes.sealedURL(vault: dir))
    }

    static func removeClearCode(vault dir: URL) throws {
        guard VaultKeyFile.exists(in: dir), FileManager.default.fileExists(atPath: RecoveryCodes.sealedURL(vault: dir).path) else { return }
        try FileIO.remove(RecoveryCodes.clearURL(vault: dir))
    }
}
