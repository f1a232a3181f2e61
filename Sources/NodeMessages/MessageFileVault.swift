import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// A received file straight into the vault (Protocol/messages.md 7.3, `--to-vault`): asked for when
/// accepting (`message accept ID --to-vault`) or after (`message save ID --to-vault`), only while
/// the vault is open. The finished file goes through the vault's own import (through
/// `ReceivedFileVault`, which the node's wiring gives us; this module never sees the vault's
/// code), the item is recorded (`fileVaultImport`), and then the clear copy in the downloads
/// folder is removed.
extension MessageFiles {
    /// A finished file to import.
    struct VaultJob: Sendable {
        let fileID: FileID
        let path: String
        let name: String
    }

    nonisolated static let notOpen = "the vault is locked: unlock it (tandem vault unlock) first, then ask again"

    /// The vault, open; refused otherwise.
    nonisolated func openVault() throws -> any ReceivedFileVault {
        guard let vault else { throw NodeError.refused("this node has no vault: create one with `tandem vault init`") }
        guard vault.isOpen else { throw NodeError.refused(Self.notOpen) }
        return vault
    }

    /// `message.file_to_vault` {id}: a received file goes into the vault now; one still coming (or
    /// waiting to be accepted, which this accepts) goes there when it is complete.
    func fileToVault(_ params: JSONValue) async throws -> JSONValue {
        _ = try openVault()
        let (t, job) = try await NodeCore.perform { () throws -> (StoredFileTransfer, VaultJob?) in
            defer { self.events.published() }
            return try self.store.step { step -> (StoredFileTransfer, VaultJob?) in
                let t = try self.transfer(params, step)
                guard let id = FileID(bytes: Array(t.fileId)) else { throw MessageService.usage("not a file id") }
                guard t.direction == .incoming else { throw NodeError.refused("that file is one you sent; it is where you sent it from") }
                if let done = try step.fileVaultImport(id.bytes), let item = done.itemId {
                    throw NodeError.nothingToActOn("that file is in the vault already (item \(item))")
                }
                self.loadIfNeeded(step)
                switch t.state {
                case .failed:
                    throw NodeError.nothingToActOn("that file transfer failed (\(t.failure ?? "?")); nothing to keep")
                case .offered:
                    try step.requestFileVaultImport(id.bytes, nowMs: self.now())
                    try self.accept(id, step)
                    return (t, nil)
                case .receiving, .verifying:
                    try step.requestFileVaultImport(id.bytes, nowMs: self.now())
                    return (t, nil)
                case .complete:
                    guard let path = t.path, FileManager.default.fileExists(atPath: path) else {
                        throw NodeError.nothingToActOn("the received file is no longer in the downloads folder")
                    }
                    try step.requestFileVaultImport(id.bytes, nowMs: self.now())
                    return (t, VaultJob(fileID: id, path: path, name: t.name))
                }
            }
        }
        var out = Self.describe(t).objectValue ?? [:]
        if let job {
            out["vault_item"] = .string(try await importToVault(job))
            out["path"] = nil
        } else {
            out["vault"] = "when complete"
        }
        return .object(out)
    }

    /// Imports one finished file and removes its clear copy; the outcome is an event either way.
    @discardableResult
    nonisolated func importToVault(_ job: VaultJob) async throws -> String {
        let claimed = await NodeCore.run { self.vaulting.insert(job.fileID).inserted }
        guard claimed else { throw NodeError.nothingToActOn("that file is being imported into the vault now") }
        defer { NodeCore.submit { _ = self.vaulting.remove(job.fileID) } }
        do {
            let vault = try openVault()
            let item = try await vault.importReceivedFile(path: job.path, name: job.name)
            try await NodeCore.perform {
                defer { self.events.published() }
                try self.store.step { step in
                    try step.recordFileVaultImport(job.fileID.bytes, itemId: item, nowMs: self.now())
                    self.events.emit("message.file_vaulted", ["file_id": .string(job.fileID.description), "name": .string(job.name),
                                                              "item": .string(item)], in: step)
                }
            }
            // Recorded first: a crash here leaves the clear copy, never a file in neither place.
            do {
                try FileManager.default.removeItem(atPath: job.path)
            } catch {
                logger.error("imported into the vault, but the downloaded copy could not be removed",
                             metadata: ["file": "\(job.fileID)", "error": "\(error)"])
            }
            return item
        } catch {
            let reason = (error as? NodeError)?.description ?? "\(error)"
            await NodeCore.run {
                defer { self.events.published() }
                self.events.emit("message.file_vault_failed", ["file_id": .string(job.fileID.description), "name": .string(job.name),
                                                               "path": .string(job.path), "reason": .string(reason)])
            }
            throw error
        }
    }
}
