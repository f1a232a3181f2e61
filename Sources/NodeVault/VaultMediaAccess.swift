#if canImport(Glibc)
import Glibc
#endif
import Foundation
import TandemProtocol
import TandemVault
import TandemNodeCore

/// The dashboard's way to the vault's bytes (TandemNodeCore `VaultMedia`): only while the vault is
/// open — no PIN is taken here, so every attempt goes through `vault.unlock` and its guard — and
/// each call takes its turn with the vault's other operations (and counts as use for the auto-lock).
extension VaultService: VaultMedia {
    package func thumbnail(of ref: String) async throws -> [UInt8] {
        try await withVault(pin: nil) { vault -> [UInt8] in
            let item = try Self.resolve([ref], in: vault.repository.items)[0]
            guard let jpeg = try vault.repository.thumbnail(item.id) else {
                throw ControlError(code: "not_found", message: "item \(item.id) has no thumbnail", exitCode: ControlError.nothingToActOnExitCode)
            }
            return jpeg
        }
    }

    package func content(of ref: String, maximumBytes: Int64) async throws -> VaultMediaFile {
        try await withVault(pin: nil) { vault -> VaultMediaFile in
            let item = try Self.resolve([ref], in: vault.repository.items)[0]
            guard item.size <= maximumBytes else {
                throw NodeError.refused("item \(item.id) is \(item.size) bytes, more than a download from the dashboard carries (\(maximumBytes)); export it with tandem vault export")
            }
            return VaultMediaFile(name: item.name, type: item.type.rawValue, bytes: try vault.repository.read(item.id))
        }
    }

    package func importUpload(name: String, bytes: [UInt8], album: String?) async throws -> JSONValue {
        try Self.checkName(name, what: "file name")
        if let album { try Self.checkName(album, what: "album name") }
        try requireVault()
        guard isUnlocked else {
            throw ControlError(code: "vault_locked", message: "the vault is locked: open it with its PIN first", exitCode: 1)
        }
        let dir = try vaultDirectory
        // The upload is staged like an import's stripped photo copy: in memory (ImportScratch).
        let copy = try await onLane { () -> ImportScratch.Copy in
            let copy = ImportScratch.make(vault: dir)
            do {
                try Self.write(bytes, to: copy.url)
            } catch {
                copy.release()
                throw error
            }
            return copy
        }
        defer { copy.release() }
        let file = ImportFile(url: copy.url, name: name, size: Int64(bytes.count), modifiedMs: now())
        return try await importCollected([file], album: album, removeOriginals: false, pin: nil, writer: nil)
    }

    /// Writes `bytes` to a new (or memory) file, 0600.
    nonisolated static func write(_ bytes: [UInt8], to url: URL) throws {
        let fd = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw NodeError.failed("cannot stage the upload: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw NodeError.failed("cannot stage the upload: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
    }
}
