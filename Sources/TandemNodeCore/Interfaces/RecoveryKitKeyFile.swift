import Foundation
import Logging
import Sodium
import TandemNet
import TandemProtocol
import TandemVault

/// `<data-dir>/backup-kit` (64 bytes, 0600): the recovery kit's key and locator, both derived from
/// the recovery code. The vault writes it (at `vault init` and at an unlock of the real vault); the
/// backup feature reads it to seal the kit (Protocol/backup.md section 7; `RecoveryKit`).
public struct RecoveryKitKeyFile: Equatable, Sendable {
    public static let fileName = "backup-kit"

    public let kitKey: [UInt8]
    public let locator: KitLocator

    public init(code: RecoveryCode) {
        kitKey = RecoveryKitSeal.kitKey(code)
        locator = RecoveryKitSeal.locator(code)
    }

    init?(bytes: [UInt8]) {
        guard bytes.count == 64, let l = KitLocator(bytes: Array(bytes[32...])) else { return nil }
        kitKey = Array(bytes[..<32])
        locator = l
    }

    var bytes: [UInt8] { kitKey + locator.bytes }

    public static func url(_ dataDirectory: URL) -> URL { dataDirectory.appendingPathComponent(RecoveryKitKeyFile.fileName) }

    /// The stored key, or nil when there is none. A damaged file throws.
    public static func load(_ dataDirectory: URL) throws -> RecoveryKitKeyFile? {
        let url = url(dataDirectory)
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        guard let k = RecoveryKitKeyFile(bytes: Array(data.prefix(65))), data.count == 64 else {
            throw NodeError.failed("\(url.path) is damaged (\(data.count) bytes, expected 64): remove it and unlock the vault to make it again")
        }
        return k
    }

    public func save(_ dataDirectory: URL) throws {
        let url = Self.url(dataDirectory)
        do {
            try DurableFile.write(bytes, to: url)
        } catch {
            throw NodeError.failed("cannot write \(url.path): \(error)")
        }
    }

    /// Writes `<data-dir>/backup-kit` for `code` unless it already holds that code's key.
    /// `vaultDirectory` is `<data-dir>/vault` (what the vault service knows).
    public static func remember(code: RecoveryCode, vaultDirectory: URL) throws {
        let dataDirectory = vaultDirectory.deletingLastPathComponent()
        let wanted = RecoveryKitKeyFile(code: code)
        if (try? Self.load(dataDirectory)) == wanted { return }  // missing or unreadable: written again below (errors thrown there)
        try wanted.save(dataDirectory)
    }

    /// At an unlock: makes `<data-dir>/backup-kit` when it is missing and `master` is the real
    /// vault's (the decoy's sealed code wraps nothing, so its key would seal a kit nobody can
    /// find). Never fails the unlock: a kit key that cannot be written now is made at the next one.
    package static func rememberAtUnlock(keyFile: VaultKeyFile, master: SecretBytes, vaultDirectory: URL) {
        let dataDirectory = vaultDirectory.deletingLastPathComponent()
        guard !FileManager.default.fileExists(atPath: Self.url(dataDirectory).path),
              (try? keyFile.spareKey(masterKey: master)) != nil,  // expected: nil for the decoy's master (no spare key)
              let code = try? RecoveryCodes.open(vault: vaultDirectory, master: master) else { return }  // expected: no sealed code in this vault
        do {
            try RecoveryKitKeyFile(code: code).save(dataDirectory)
        } catch {
            // Not fatal to the unlock (made at the next one), but not silent either.
            Logger(label: "tandem.backup").error("cannot write the recovery kit key", metadata: ["error": "\(error)"])
        }
    }

    /// The kit key file, made from the clear code file when that exists (a node without a vault);
    /// nil when the node has neither (the code was never shown: a kit nobody can open is useless).
    package static func fromDataDirectory(_ dataDirectory: URL) throws -> RecoveryKitKeyFile? {
        if let k = try Self.load(dataDirectory) { return k }
        let clear = dataDirectory.appendingPathComponent(RecoveryCodes.clearFileName)
        guard let data = FileManager.default.contents(atPath: clear.path) else { return nil }
        let text = String(decoding: data.prefix(256), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let code = try? RecoveryCode(parsing: text) else { return nil }  // expected: the file holds no code (never shown)
        let k = RecoveryKitKeyFile(code: code)
        try k.save(dataDirectory)
        return k
    }
}
