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
        let attrs = try? FileManager.default.attributesOfItem(atPath: path)  // unreadable: the import below says why
        let size = (attrs?[.size] as? NSNumber)?.int64Value ?? 0
        let modified = (attrs?[.modificationDate] as? Date).map { Int64($0.timeIntervalSince1970 * 1000) }
        let file = ImportFile(url: URL(fileURLWithPath: path), name: name, size: size, modifiedMs: modified)
        let result = try await importCollected([file], album: nil, removeOriginals: false, pin: nil, writer: nil)
        guard let id = result["items"]?.arrayValue?.first?["id"]?.stringValue else { throw NodeError.failed("the vault imported nothing") }
        return id
    }
}
