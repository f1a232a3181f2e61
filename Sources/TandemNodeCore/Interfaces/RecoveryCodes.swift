import Foundation
import Sodium
import TandemProtocol
import TandemVault

/// Where a node keeps its recovery code (README "The vault"; Protocol/vault.md "Recovery code").
///
/// Before the node has a vault, the code sits in `<data-dir>/recovery-code` (0600), like the
/// identity it recovers. From `vault init` on it also wraps the vault's master key, so it must not
/// lie in clear next to the vault any more: it is sealed under a subkey of the vault's master key
/// in `<vault>/recovery` and the clear file is removed; showing it then needs the PIN. The file
/// holds two sealed codes in random order, one per vault of the keys file (the decoy's is a code
/// that recovers nothing), so it says nothing about a decoy either.
package enum RecoveryCodes {
    package static let clearFileName = "recovery-code"
    package static let sealedFileName = "recovery"
    package static let boxBytes = 24 + RecoveryCode.canonicalLength + 16

    package static func clearURL(vault: URL) -> URL { vault.deletingLastPathComponent().appendingPathComponent(clearFileName) }
    package static func sealedURL(vault: URL) -> URL { vault.appendingPathComponent(sealedFileName) }

    /// The clear code, made (durably, 0600) the first time it is asked for.
    package static func clearCode(vault: URL) throws -> RecoveryCode {
        let url = clearURL(vault: vault)
        if let data = FileManager.default.contents(atPath: url.path) {
            let text = String(decoding: data.prefix(256), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            do {
                return try RecoveryCode(parsing: text)
            } catch {
                throw NodeError.failed("\(url.path) does not hold a recovery code: \(error)")
            }
        }
        let code = RecoveryCode(bytes: Sodium.randomBytes(RecoveryCode.byteCount))
        try writePrivate(Array((code.canonical + "\n").utf8), to: url)
        return code
    }

    package static func key(_ master: SecretBytes) throws -> [UInt8] {
        try KeyDerivation.deriveSubkey(id: 1, context: "tdmrecov", masterKey: master).withUnsafeBytes { Array($0) }
    }

    /// Seals each vault's code under its master key, both in one file, in random order.
    package static func seal(_ codes: [(code: RecoveryCode, master: SecretBytes)], vault: URL) throws {
        var boxes: [[UInt8]] = []
        for (code, master) in codes {
            let nonce = Sodium.randomBytes(24)
            boxes.append(nonce + (try SecretBox.seal(Array(code.canonical.utf8), nonce: nonce, key: key(master))))
        }
        if Sodium.randomUInt64() & 1 == 1 { boxes.reverse() }
        try writePrivate(boxes.flatMap { $0 }, to: sealedURL(vault: vault))
    }

    /// The code sealed for the vault of `master`, or nil (no file, or none of its boxes opens).
    package static func open(vault: URL, master: SecretBytes) throws -> RecoveryCode? {
        guard let data = FileManager.default.contents(atPath: sealedURL(vault: vault).path) else { return nil }
        let bytes = [UInt8](data.prefix(4 * boxBytes))
        let k = try key(master)
        var offset = 0
        while offset + boxBytes <= bytes.count {
            let nonce = Array(bytes[offset..<(offset + 24)])
            if let plain = SecretBox.open(Array(bytes[(offset + 24)..<(offset + boxBytes)]), nonce: nonce, key: k) {
                return try? RecoveryCode(parsing: String(decoding: plain, as: UTF8.self))  // not a code: treated as none
            }
            offset += boxBytes
        }
        return nil
    }

    package static func writePrivate(_ bytes: [UInt8], to url: URL) throws {
        do {
            try DurableFile.write(bytes, to: url)
        } catch {
            throw NodeError.failed("cannot write \(url.path): \(error)")
        }
    }
}
