import Foundation
import Logging
import TandemMedia
import TandemProtocol
import TandemVault
import TandemNodeCore

/// What the vault stores for one imported file: photos (JPEG, PNG, HEIC) get a 300 × 300
/// thumbnail, their capture date, and a copy without GPS or device data that is stored instead of
/// the original: a lossless rewrite of their metadata (for a HEIC, its Exif and XMP items
/// overwritten in place), or for a HEIC whose container that rewrite refuses, a re-encode (slow:
/// tens of seconds per photo; the log says why). A photo that can be neither rewritten nor
/// re-encoded is still stored (type photo, as it is, metadata included: the vault keeps what it
/// was given rather than drop a file; the import goes on; the log says which item and why).
/// Protocol/vault.md, "Photos".
struct PhotoPreparation {
    var readFrom: URL
    var type: VaultItemType
    var createdAtMs: Int64?
    var thumbnail: [UInt8]?
    /// The stripped copy (ImportScratch.swift: in memory), released once imported.
    var scratch: ImportScratch.Copy?

    func cleanUp() {
        scratch?.release()
    }

    /// `name`: the name the item is stored under (its type is sniffed from it and the content).
    /// `keepMetadata` (`tandem vault import --keep-metadata`): the original bytes are stored, with
    /// their thumbnail and capture date, and no stripped copy is made.
    static func prepare(_ url: URL, name: String, modifiedMs: Int64?, keepMetadata: Bool = false, scratch directory: URL,
                        logger: Logger) -> PhotoPreparation {
        let prefix = VaultService.prefix(of: url)
        let type = VaultService.itemType(name: name, prefix: prefix)
        var result = PhotoPreparation(readFrom: url, type: type, createdAtMs: modifiedMs, thumbnail: nil, scratch: nil)
        guard let format = PhotoProcessor.sniff(prefix) else { return result }
        result.type = .photo
        do {
            result.thumbnail = try PhotoProcessor.thumbnail(of: url)
        } catch {
            logger.info("no thumbnail for an imported photo", metadata: ["error": "\(error)"])
        }
        if let taken = try? PhotoProcessor.captureDate(of: url) { result.createdAtMs = taken }  // no capture date: the file time stays
        if keepMetadata { return result }
        // The copy lives in memory (or, without memfd, in the vault's tmp/), for moments: a crash
        // leaves nothing readable (ImportScratch).
        let copy = ImportScratch.make(vault: directory)
        do {
            let report = try PhotoProcessor.sanitizedCopy(of: url, to: copy.url)
            if let reason = report.reencodedBecause {
                logger.info("photo re-encoded: its metadata could not be rewritten in place", metadata: ["format": "\(format)", "reason": "\(reason)"])
            }
            result.readFrom = copy.url
            result.scratch = copy
        } catch {
            copy.release()  // a partial copy, if any
            logger.warning("photo metadata could not be rewritten; stored as it is", metadata: ["format": "\(format)", "error": "\(error)"])
        }
        return result
    }
}
