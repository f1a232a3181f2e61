import Foundation
import Sodium
@_spi(Fuzzing) import TandemMedia
import TandemNode
import NodeBackup
import TandemProtocol
import TandemVault

#if canImport(Glibc)
import Glibc
#endif

/// Files the vault reads that someone else may have written: a keys file in a copied data
/// directory, and photos being imported (their JPEG segments, PNG chunks, HEIF boxes and Exif,
/// parsed by TandemMedia's own code before any decoder sees them). The first byte picks the reader;
/// the rest is the file. Each must throw or succeed, never trap or read out of bounds.
///
/// A file that starts with "TKIT" is a recovery kit's contents as a restorer finds them once the
/// seal opened (backup.md 7): protobuf, then `RecoveryKit.validate` with the owner set to the key
/// of the seed inside, so the friends' records, relays and ledger entries are all reached.
///
/// A file that starts like an ISOBMFF `ftyp` box (its bytes 4…7 are "ftyp") goes to the HEIF
/// metadata rewrite, whatever the first byte: routing by content rather than by a fourth value of
/// the first byte keeps the meaning of every seed committed before HEIF was added. The HEIF path
/// runs the in-place rewrite only, in memory: not libheif, which a fuzzer would exercise instead
/// of this code (and the re-encode it would start takes seconds).
extension FuzzTarget {
    static let vault = FuzzTarget(name: "vault", summary: "vault keys file, JPEG/PNG/HEIF metadata rewrite, Exif dates, recovery kit contents",
                                  maximumLength: 65_536, shortRunShare: 2, run: { input in
        let which = input.pick(3)
        let body = input.take(input.remaining)
        let scratch = VaultFuzzScratch.shared
        if body.starts(with: Array("TKIT".utf8)) {
            guard let contents = try? Tandem_V1_RecoveryKitContents(serializedBytes: Array(body.dropFirst(4))) else { return }
            let owner = contents.identitySeed.count == SigningKeyPair.seedBytes
                ? (try? SigningKeyPair(seed: Array(contents.identitySeed)))?.publicKey : nil
            if let opened = try? RecoveryKit.validate(contents, owner: owner) {
                guard opened.identity.publicKey == owner, opened.friends.count <= contents.friendContacts.count,
                      opened.ledger.count <= contents.ledgerEntries.count else {
                    fatalError("a validated kit holds what its contents did not")
                }
            }
            return
        }
        if body.count >= 8, body[4..<8].elementsEqual("ftyp".utf8) {
            // A rewrite keeps the length, and a second one changes nothing (it touched no structure).
            if let out = try? PhotoProcessor.rewriteHEIFMetadata(body) {
                guard out.count == body.count else { fatalError("the HEIF rewrite changed the length: \(body.count) → \(out.count)") }
                guard (try? PhotoProcessor.rewriteHEIFMetadata(out)) == out else { fatalError("a second HEIF rewrite changed the file") }
            }
            _ = try? PhotoProcessor.checkHEIFDecodeBound(body)   // the declared sizes (ipma, ispe): never a trap
            return
        }
        switch which {
        case 0:
            let magic = Array("TDMK".utf8) + [1]
            scratch.write(body.count > 5 && body[0] & 1 == 0 ? magic + body.dropFirst(5) : body, to: scratch.keys)
            _ = try? VaultKeyFile.load(from: scratch.root)
        case 1:
            let soi: [UInt8] = [0xFF, 0xD8, 0xFF]
            scratch.write(soi + body, to: scratch.photo)
            _ = try? PhotoProcessor.captureDate(of: scratch.photo)
            _ = try? PhotoProcessor.sanitizedCopy(of: scratch.photo, to: scratch.output)
            try? FileManager.default.removeItem(at: scratch.output)
        default:
            let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
            scratch.write(signature + body, to: scratch.photo)
            _ = try? PhotoProcessor.captureDate(of: scratch.photo)
            _ = try? PhotoProcessor.sanitizedCopy(of: scratch.photo, to: scratch.output)
            try? FileManager.default.removeItem(at: scratch.output)
        }
    })
}

/// One scratch directory per process for the files the vault target writes.
final class VaultFuzzScratch: Sendable {
    static let shared = VaultFuzzScratch()
    let root: URL
    var keys: URL { root.appendingPathComponent(VaultKeyFile.fileName) }
    var photo: URL { root.appendingPathComponent("photo") }
    var output: URL { root.appendingPathComponent("out") }

    private init() {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        root = URL(fileURLWithPath: base).appendingPathComponent("tandem-fuzz-vault-\(getpid())")
        try? FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(at: VaultFuzzScratch.shared.root) }
    }

    func write(_ bytes: [UInt8], to url: URL) {
        _ = FileManager.default.createFile(atPath: url.path, contents: Data(bytes))
    }
}
