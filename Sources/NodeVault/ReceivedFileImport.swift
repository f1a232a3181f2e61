import Foundation
import TandemNet
import TandemVault
import TandemNodeCore

/// A file a friend sent, imported straight into the vault (Protocol/messages.md 7.3, `--to-vault`):
/// the same path as `tandem vault import` of one file (photos prepared: GPS and device data
/// stripped, thumbnail, capture date), only while the vault is open.
extension VaultService: ReceivedFileVault {
    package var isOpen: Bool { isUnlocked }

    package func importReceivedFile(path: String, name: String) async throws -> String {
        guard isUnlocked else {
            throw NodeError.refused("the vault is locked: unlock it (tandem vault unlock) and try again")
        }
        try Self.checkName(name, what: "file name")
        let url = URL(fileURLWithPath: path)
        let attrs = try? FileManager.default.attributesOfItem(atPath: path)
        let modified = (attrs?[.modificationDate] as? Date).map { Int64($0.timeIntervalSince1970 * 1000) }
        let item = try await withOpenVault(pin: nil) { vault -> VaultItem in
            try await self.onLane { () -> VaultItem in
                let prepared = PhotoPreparation.prepare(url, modifiedMs: modified, scratch: vault.repository.directory, logger: self.logger)
                defer { prepared.cleanUp() }
                let source = VaultRepository.ImportSource(url: prepared.readFrom, name: name, type: prepared.type, album: nil,
                                                          createdAtMs: prepared.createdAtMs, thumbnail: prepared.thumbnail)
                do {
                    let items = try vault.repository.importFiles([source], nowMs: self.now(), progress: { _, _ in },
                                                                 shouldStop: { self.isStopping }, committed: { _ in })
                    guard let first = items.first else { throw NodeError.failed("the vault imported nothing") }
                    return first
                } catch let error as VaultError {
                    throw NodeError.failed("the vault import stopped: \(error)")
                }
            }
        }
        await events.emit("vault.imported", ["count": 1, "bytes": .int(item.size)])
        return item.id
    }
}
