import Foundation
import Logging
import Sodium
import TandemMedia
import TandemProtocol
import TandemVault

/// What the vault stores for one imported file: photos (JPEG, PNG, HEIC) get a 300 × 300
/// thumbnail, their capture date, and — JPEG and PNG — a copy without GPS or device data (a
/// lossless rewrite of their metadata) that is stored instead of the original. A HEIC is stored as
/// it is: re-encoding it costs tens of seconds and hundreds of MB per photo (Protocol/vault.md).
/// A photo the decoder refuses is still stored (type photo, no thumbnail, as it is; the
/// import goes on; the log says which item).
struct PhotoPreparation {
    var readFrom: URL
    var type: VaultItemType
    var createdAtMs: Int64?
    var thumbnail: [UInt8]?
    /// The scratch copy to delete once imported.
    var scratch: URL?

    func cleanUp() {
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    static func prepare(_ url: URL, modifiedMs: Int64?, scratch directory: URL, logger: Logger) -> PhotoPreparation {
        let prefix = VaultService.prefix(of: url)
        let type = VaultService.itemType(name: url.lastPathComponent, prefix: prefix)
        var result = PhotoPreparation(readFrom: url, type: type, createdAtMs: modifiedMs, thumbnail: nil, scratch: nil)
        guard let format = PhotoProcessor.sniff(prefix) else { return result }
        result.type = .photo
        do {
            result.thumbnail = try PhotoProcessor.thumbnail(of: url)
        } catch {
            logger.info("no thumbnail for an imported photo", metadata: ["error": "\(error)"])
        }
        if let taken = try? PhotoProcessor.captureDate(of: url) { result.createdAtMs = taken }
        guard format != .heic else { return result }
        // The copy lives in the vault's own directory (0700), under a random name, for moments.
        let scratchDir = directory.appendingPathComponent("tmp", isDirectory: true)
        try? FileManager.default.createDirectory(at: scratchDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let copy = scratchDir.appendingPathComponent("import-" + hexString(Sodium.randomBytes(8)))
        do {
            _ = try PhotoProcessor.sanitizedCopy(of: url, to: copy)
            result.readFrom = copy
            result.scratch = copy
        } catch {
            try? FileManager.default.removeItem(at: copy)
            logger.info("photo metadata could not be rewritten; stored as it is", metadata: ["error": "\(error)"])
        }
        return result
    }
}
