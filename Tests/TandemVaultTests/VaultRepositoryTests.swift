import Foundation
import Sodium
import XCTest
@testable import TandemVault

final class VaultRepositoryTests: XCTestCase {
    var dir: URL!
    override func setUpWithError() throws { dir = try makeTempDirectory(self) }

    func newVault(_ k: UInt8 = 1) throws -> VaultRepository { try VaultRepository.create(at: dir, masterKey: key(k)) }

    func writeFile(_ bytes: [UInt8], name: String = "input.bin") throws -> URL {
        let url = dir.appendingPathComponent(name)
        try Data(bytes).write(to: url)
        return url
    }

    /// Many small files share packs and one index commit; a stop between files drops only what
    /// was staged since the last commit.
    func testBatchImportSharesPacksAndCommitsInOrder() throws {
        let repo = try newVault()
        var sources: [VaultRepository.ImportSource] = []
        var contents: [[UInt8]] = []
        for i in 0..<60 {
            let bytes = randomBytes(20_000 + i)
            contents.append(bytes)
            sources.append(.init(url: try writeFile(bytes, name: "photo\(i).jpg"), name: "photo\(i).jpg", type: .photo,
                                 album: i % 2 == 0 ? "Even" : nil, createdAtMs: Int64(i)))
        }
        var commits: [[String]] = []
        var lastProgress: [Int: Int64] = [:]
        let items = try repo.importFiles(sources, nowMs: 7, progress: { lastProgress[$0] = $1 }) { commits.append($0.map(\.name)) }
        XCTAssertEqual(items.map(\.name), sources.map(\.name))
        XCTAssertEqual(commits.flatMap { $0 }, sources.map(\.name), "committed items arrive in source order")
        XCTAssertEqual(lastProgress[59], Int64(contents[59].count))
        XCTAssertEqual(packFiles(under: dir).count, 1, "60 small files share one pack")
        XCTAssertEqual(Set(items.map(\.id)).count, 60)
        for (item, bytes) in zip(items, contents) { XCTAssertEqual(try repo.read(item.id), bytes) }
        XCTAssertEqual(repo.albums.map(\.name), ["Even"])

        var asked = 0
        XCTAssertThrowsError(try repo.importFiles(sources, nowMs: 8, progress: { _, _ in }, shouldStop: {
            asked += 1
            return asked > 3
        }) { _ in XCTFail("nothing commits before the stop") })
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: key(1)).items.count, 60, "the stopped import left the index as it was")
    }

    func testRoundTripOfEmptyTinyLargeAndCompressibleFiles() throws {
        let repo = try newVault()
        let payloads: [(String, [UInt8])] = [
            ("empty", []), ("one", [42]), ("random", randomBytes(7 * 1024 * 1024 + 300 * 1024)),
            ("text", compressibleBytes(5 * 1024 * 1024 + 17)),
        ]
        for (name, bytes) in payloads {
            var seen: Int64 = 0
            let item = try repo.importFile(at: try writeFile(bytes), name: name, type: .document, album: nil,
                                           createdAtMs: nil, nowMs: 1000) { seen = $0 }
            XCTAssertEqual(seen, Int64(bytes.count))
            XCTAssertEqual(item.size, Int64(bytes.count))
            XCTAssertEqual(try repo.read(item.id), bytes, name)
            let out = dir.appendingPathComponent("out-\(name)")
            var written: Int64 = 0
            try repo.export(item.id, to: out) { written = $0 }
            XCTAssertEqual(try Data(contentsOf: out), Data(bytes), name)
            XCTAssertEqual(written, Int64(bytes.count))
        }
        XCTAssertEqual(try repo.importData([9, 9, 9], name: "mem", type: .photo, album: nil, createdAtMs: 5, nowMs: 6).size, 3)
        // Everything survives reopening.
        let reopened = try VaultRepository.open(at: dir, masterKey: key(1))
        XCTAssertEqual(reopened.items, repo.items)
        for item in reopened.items { XCTAssertEqual(try reopened.read(item.id).count, Int(item.size)) }
        XCTAssertTrue(try reopened.check(readData: true).isHealthy)
        XCTAssertTrue(allFiles(under: dir).allSatisfy { !$0.lastPathComponent.hasPrefix(".tmp") })
    }

    func testCompressibleDataIsStoredSmaller() throws {
        let repo = try newVault()
        let bytes = compressibleBytes(3 * 1024 * 1024)
        _ = try repo.importData(bytes, name: "notes.txt", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        let stats = try repo.stats()
        XCTAssertGreaterThan(stats.compressedChunks, 0)
        XCTAssertLessThan(stats.storedBytes, Int64(bytes.count) / 2)
        XCTAssertEqual(stats.uniqueChunkBytes, Int64(bytes.count))
    }

    func testAlreadyCompressedMediaIsNotCompressed() throws {
        let repo = try newVault()
        let bytes = [0xFF, 0xD8, 0xFF, 0xE0] + compressibleBytes(2 * 1024 * 1024)
        let item = try repo.importData(bytes, name: "photo.jpg", type: .photo, album: nil, createdAtMs: nil, nowMs: 1)
        let stats = try repo.stats()
        XCTAssertEqual(stats.compressedChunks, 0)
        XCTAssertGreaterThan(stats.storedBytes, Int64(bytes.count))
        XCTAssertEqual(try repo.read(item.id), bytes)
    }

    func testRandomDataIsNotCompressed() throws {
        let repo = try newVault()
        _ = try repo.importData(randomBytes(1024 * 1024), name: "r", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        XCTAssertEqual(try repo.stats().compressedChunks, 0)
    }

    func testIdenticalContentIsStoredOnce() throws {
        let repo = try newVault()
        let bytes = randomBytes(3 * 1024 * 1024)
        let a = try repo.importData(bytes, name: "a", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        let before = try repo.stats()
        let packFilesBefore = packFiles(under: dir).count
        let b = try repo.importFile(at: try writeFile(bytes), name: "b", type: .document, album: nil, createdAtMs: nil, nowMs: 2) { _ in }
        let after = try repo.stats()
        XCTAssertEqual(a.chunks, b.chunks)
        XCTAssertEqual(after.storedBytes, before.storedBytes)
        XCTAssertEqual(after.packs, before.packs)
        XCTAssertEqual(packFiles(under: dir).count, packFilesBefore)
        XCTAssertEqual(after.plaintextBytes, 2 * before.plaintextBytes)
        XCTAssertEqual(after.uniqueChunkBytes, before.uniqueChunkBytes)
    }

    func testAFlippedByteInAPackIsCaughtAndNamed() throws {
        let repo = try newVault()
        let item = try repo.importData(randomBytes(600 * 1024), name: "x", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        let blob = Hex.encode(item.chunks[0])
        let pack = try XCTUnwrap(packFiles(under: dir).first)
        try flipByte(in: pack, at: 1000)
        assertVaultError(.corrupt, containing: blob) { try repo.read(item.id) }
        assertVaultError(.corrupt, containing: blob) { try repo.export(item.id, to: self.dir.appendingPathComponent("out")) { _ in } }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.appendingPathComponent("out").path), "no partial export")
        let report = try repo.check(readData: true)
        XCTAssertTrue(report.problems.contains { $0.contains(blob) }, "\(report.problems)")
        XCTAssertTrue(report.problems.contains { $0.contains(pack.lastPathComponent) && $0.contains("hash") }, "\(report.problems)")
        // Without reading data the header is still right.
        XCTAssertTrue(try repo.check(readData: false).isHealthy)
    }

    func testATruncatedOrMissingPackIsAnErrorNotATrap() throws {
        let repo = try newVault()
        let item = try repo.importData(randomBytes(700 * 1024), name: "x", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        let pack = try XCTUnwrap(packFiles(under: dir).first)
        let handle = try FileHandle(forWritingTo: pack)
        try handle.truncate(atOffset: 4096)
        try handle.close()
        assertVaultError(.corrupt) { try repo.read(item.id) }
        let report = try repo.check(readData: false)
        XCTAssertEqual(report.problems.count, 1)
        XCTAssertTrue(report.problems[0].contains(pack.lastPathComponent))
        try FileManager.default.removeItem(at: pack)
        assertVaultError(.corrupt) { try repo.read(item.id) }
        XCTAssertTrue(try repo.check(readData: true).problems[0].contains("missing"))
    }

    func testACorruptIndexIsAClearError() throws {
        let repo = try newVault()
        _ = try repo.importData([1, 2, 3], name: "x", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        let url = repo.indexFileURL()
        let good = try Data(contentsOf: url)
        // The padding after the body is not authenticated and not read: a flip there is harmless.
        try flipByte(in: url, at: good.count - 1)
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: key(1)).items.count, 1)
        try flipByte(in: url, at: IndexFile.prefixBytes + 8)
        assertVaultError(.corrupt) { try VaultRepository.open(at: self.dir, masterKey: key(1)) }
        try flipByte(in: url, at: IndexFile.prefixBytes + 8)
        try flipByte(in: url, at: 30)
        assertVaultError(.corrupt) { try VaultRepository.open(at: self.dir, masterKey: key(1)) }
        try good.prefix(IndexFile.prefixBytes + 20).write(to: url)
        assertVaultError(.corrupt) { try VaultRepository.open(at: self.dir, masterKey: key(1)) }
        try good.prefix(30).write(to: url)
        assertVaultError(.corrupt) { try VaultRepository.open(at: self.dir, masterKey: key(1)) }
        try Data().write(to: url)
        assertVaultError(.corrupt) { try VaultRepository.open(at: self.dir, masterKey: key(1)) }
        assertVaultError(.notFound) { try VaultRepository.open(at: self.dir, masterKey: key(2)) }
        assertVaultError(.alreadyExists) { try VaultRepository.create(at: self.dir, masterKey: key(1)) }
    }

    /// Every truncation and many byte changes of a valid index plaintext either parse to a valid
    /// index or throw: never a trap.
    func testDamagedIndexPlaintextNeverTraps() throws {
        let repo = try newVault()
        try repo.createAlbum("Trips", nowMs: 1)
        let a = try repo.importData(compressibleBytes(700 * 1024), name: "a", type: .photo, album: "Trips", createdAtMs: 3,
                                    nowMs: 4, thumbnail: [0xFF, 0xD8, 0xFF, 1, 2])
        _ = try repo.importData([5], name: "b", type: .video, album: nil, createdAtMs: nil, nowMs: 5)
        try repo.setCover(album: "Trips", item: a.id)
        let plain = repo.index.serialize()
        XCTAssertEqual(try VaultIndex.deserialize(plain, what: "index"), repo.index)
        for n in 0..<plain.count {
            XCTAssertThrowsError(try VaultIndex.deserialize(Array(plain.prefix(n)), what: "index"))
        }
        var rng = SplitMix(seed: 9)
        for _ in 0..<3000 {
            var damaged = plain
            let i = Int(rng.next() % UInt64(plain.count))
            damaged[i] = UInt8(truncatingIfNeeded: rng.next())
            _ = try? VaultIndex.deserialize(damaged, what: "index")
        }
    }

    func testTwoVaultsInOneDirectoryAreIsolated() throws {
        let real = try newVault(1)
        let decoy = try newVault(2)
        XCTAssertNotEqual(real.indexFileURL(), decoy.indexFileURL())
        let r = try real.importData(randomBytes(900 * 1024), name: "real", type: .photo, album: nil, createdAtMs: nil, nowMs: 1)
        let d = try decoy.importData(randomBytes(900 * 1024), name: "decoy", type: .photo, album: nil, createdAtMs: nil, nowMs: 1)
        XCTAssertEqual(real.items.map(\.name), ["real"])
        XCTAssertEqual(decoy.items.map(\.name), ["decoy"])
        XCTAssertTrue(Set(real.packNames).isDisjoint(with: decoy.packNames))
        assertVaultError(.notFound) { try decoy.read(r.id) }
        try decoy.remove([d.id])
        let pruned = try decoy.prune()
        XCTAssertEqual(pruned.packsRemoved, 1)
        XCTAssertGreaterThan(pruned.bytesFreed, 0)
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: key(1)).read(r.id).count, 900 * 1024)
        XCTAssertTrue(try real.check(readData: true).isHealthy)
        XCTAssertEqual(packFiles(under: dir).count, 1)
    }

    func testNoNameAlbumOrExtensionIsWrittenInClear() throws {
        let repo = try newVault()
        let photo = [0xFF, 0xD8, 0xFF, 0xE0] + Array("JFIF holiday pixels".utf8) + randomBytes(2000)
        let item = try repo.importFile(at: try writeFile(photo, name: "staging-input"), name: "secret-holiday.jpg", type: .photo,
                                       album: "Paris", createdAtMs: 1_700_000_000_000, nowMs: 1_700_000_100_000) { _ in }
        try repo.setThumbnail(item.id, jpeg: [0xFF, 0xD8, 0xFF, 0xDB] + randomBytes(500))
        try repo.update(item.id) { $0.favorite = true }
        try FileManager.default.removeItem(at: dir.appendingPathComponent("staging-input"))
        for needle in ["secret-holiday", "Paris", ".jpg", item.id] {
            for file in allFiles(under: dir) {
                XCTAssertFalse(file.path.contains(needle), "\(file.path)")
                let bytes = [UInt8](try Data(contentsOf: file))
                XCTAssertFalse(bytes.contains(subsequence: Array(needle.utf8)), "\(needle) in \(file.path)")
            }
        }
    }

    func testRemoveThenPruneFreesSpaceAndKeepsTheRest() throws {
        let repo = try newVault()
        let keep = try repo.importData(randomBytes(5 * 1024 * 1024), name: "keep", type: .video, album: nil, createdAtMs: nil,
                                       nowMs: 1, thumbnail: [0xFF, 0xD8, 0xFF, 7])
        let gone = try repo.importData(randomBytes(2 * 1024 * 1024), name: "gone", type: .video, album: nil, createdAtMs: nil, nowMs: 2)
        XCTAssertEqual(try repo.prune().packsRemoved, 0, "nothing to prune yet")
        try repo.remove([gone.id])
        let before = try repo.stats()
        let (removed, freed) = try repo.prune()
        XCTAssertEqual(removed, 1)
        let after = try repo.stats()
        XCTAssertEqual(freed, before.storedBytes - after.storedBytes)
        XCTAssertGreaterThan(freed, Int64(2 * 1024 * 1024))
        // Replacing the thumbnail leaves the old one dead inside a pack with live chunks: repacked.
        try repo.setThumbnail(keep.id, jpeg: [0xFF, 0xD8, 0xFF, 8])
        let (repacked, _) = try repo.prune()
        XCTAssertGreaterThanOrEqual(repacked, 1)
        XCTAssertEqual(try repo.thumbnail(keep.id), [0xFF, 0xD8, 0xFF, 8])
        XCTAssertEqual(try repo.read(keep.id).count, 5 * 1024 * 1024)
        XCTAssertTrue(try repo.check(readData: true).isHealthy)
        XCTAssertEqual(Set(packFiles(under: dir).map(\.lastPathComponent)), Set(repo.packNames))
        assertVaultError(.notFound) { try repo.remove(["000000000000"]) }
    }

    func testAlbumsAndUpdates() throws {
        let repo = try newVault()
        let a = try repo.importData([1], name: "a.txt", type: .document, album: "Work", createdAtMs: nil, nowMs: 10)
        XCTAssertEqual(repo.albums.map(\.name), ["Work"], "import creates a missing album")
        try repo.createAlbum("Home", nowMs: 11)
        assertVaultError(.alreadyExists) { try repo.createAlbum("Home", nowMs: 12) }
        try repo.update(a.id) { $0.album = "Home"; $0.favorite = true; $0.name = "renamed.txt" }
        XCTAssertEqual(repo.item(a.id)?.album, "Home")
        XCTAssertEqual(repo.item(a.id)?.name, "renamed.txt")
        assertVaultError(.notFound) { try repo.update(a.id) { $0.album = "Nowhere" } }
        assertVaultError(.invalidArgument) { try repo.update(a.id) { $0.size = 99 } }
        assertVaultError(.invalidName) { try repo.update(a.id) { $0.name = "bad/name" } }
        try repo.setCover(album: "Home", item: a.id)
        try repo.renameAlbum("Home", to: "House")
        XCTAssertEqual(repo.item(a.id)?.album, "House")
        XCTAssertEqual(repo.albums.first { $0.name == "House" }?.cover, a.id)
        try repo.deleteAlbum("House")
        XCTAssertNil(repo.item(a.id)?.album)
        assertVaultError(.notFound) { try repo.deleteAlbum("House") }
        let reopened = try VaultRepository.open(at: dir, masterKey: key(1))
        XCTAssertEqual(reopened.albums, repo.albums)
        XCTAssertEqual(reopened.items, repo.items)
        XCTAssertEqual(reopened.item(a.id)?.favorite, true)
    }

    func testNamesAreValidated() throws {
        let repo = try newVault()
        for bad in ["", String(repeating: "x", count: 256), "a\u{0}b", "tab\there", "line\n", "a/b", "..", "\u{7f}"] {
            assertVaultError(.invalidName) { try repo.importData([1], name: bad, type: .document, album: nil, createdAtMs: nil, nowMs: 1) }
        }
        assertVaultError(.invalidName) { try repo.createAlbum("bad\u{1b}[31m", nowMs: 1) }
        XCTAssertNoThrow(try repo.importData([1], name: String(repeating: "é", count: 127), type: .document, album: "Été/2024",
                                             createdAtMs: nil, nowMs: 1))
        XCTAssertEqual(repo.items.count, 1)
    }

    func testNewNamesRefuseInvisibleFormattingCharacters() throws {
        let repo = try newVault()
        // Bidi overrides and isolates, zero width space, BOM, soft hyphen, word joiner.
        let sneaky = ["photo\u{202E}gpj.exe", "a\u{202A}b", "a\u{202B}b", "a\u{202C}b", "a\u{202D}b", "x\u{2066}y", "x\u{2067}y",
                      "x\u{2068}y", "x\u{2069}y", "zero\u{200B}width", "\u{FEFF}bom", "soft\u{AD}hyphen", "join\u{2060}er"]
        for bad in sneaky {
            assertVaultError(.invalidName) { try repo.importData([1], name: bad, type: .document, album: nil, createdAtMs: nil, nowMs: 1) }
            assertVaultError(.invalidName) { try repo.createAlbum(bad, nowMs: 1) }
        }
        do {
            try VaultNames.validateItemName("photo\u{202E}gpj.exe")
            XCTFail("accepted a right-to-left override")
        } catch let error as VaultError {
            XCTAssertEqual(error.detail, "item name contains an invisible formatting character (U+202E), which can make a name read as another")
        }
        // The zero width joiner holds emoji sequences together: allowed.
        let family = "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}.jpg"
        let item = try repo.importData([1], name: family, type: .photo, album: nil, createdAtMs: nil, nowMs: 1)
        try repo.createAlbum("Us", nowMs: 1)
        assertVaultError(.invalidName) { try repo.renameAlbum("Us", to: "U\u{202E}s") }
        assertVaultError(.invalidName) { try repo.update(item.id) { $0.name = "re\u{2066}named" } }
        try repo.update(item.id) { $0.favorite = true }
        XCTAssertEqual(repo.item(item.id)?.name, family)
        // A name already stored (a vault written before this rule) still loads.
        XCTAssertNoThrow(try VaultNames.validateItemName("old\u{200B}name", stored: true))
        XCTAssertNoThrow(try VaultNames.validateAlbumName("old\u{202E}album", stored: true))
    }

    func testImportMemoryStaysBounded() throws {
        let url = dir.appendingPathComponent("big")
        XCTAssertTrue(FileManager.default.createFile(atPath: url.path, contents: nil))
        let handle = try FileHandle(forWritingTo: url)
        for _ in 0..<64 { try handle.write(contentsOf: Data(randomBytes(1024 * 1024))) }
        try handle.close()
        let repo = try newVault()
        let item = try repo.importFile(at: url, name: "big", type: .video, album: nil, createdAtMs: nil, nowMs: 1) { _ in }
        XCTAssertEqual(item.size, 64 * 1024 * 1024)
        let memory = repo.lastImportMemory
        XCTAssertLessThanOrEqual(memory.chunkerBuffer, Chunker.maximumSize)
        XCTAssertLessThanOrEqual(memory.packBuffer, PackWriter.bufferCount * (PackFormat.targetSize + BlobCodec.maximumBlob),
                                 "three pack buffers: one filling, two being written")
        XCTAssertEqual(memory.readBuffer, VaultRepository.readBufferSize)
        XCTAssertGreaterThan(try repo.stats().packs, 8, "a 64 MiB import is spread over many packs")
        let out = dir.appendingPathComponent("big-out")
        try repo.export(item.id, to: out) { _ in }
        XCTAssertEqual(try Data(contentsOf: out), try Data(contentsOf: url))
    }

    func testPacksAreNamedByTheirHashAndListed() throws {
        let repo = try newVault()
        _ = try repo.importData(randomBytes(5 * 1024 * 1024), name: "x", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        XCTAssertEqual(Set(packFiles(under: dir).map(\.lastPathComponent)), Set(repo.packNames))
        for name in repo.packNames {
            let url = try XCTUnwrap(repo.packFileURL(name: name))
            XCTAssertEqual(url.deletingLastPathComponent().lastPathComponent, String(name.prefix(2)))
            let bytes = [UInt8](try Data(contentsOf: url))
            XCTAssertEqual(Hex.encode(Hash.blake2b(bytes)), name)
        }
    }

    func testABlobCopiedUnderAnotherIDDoesNotOpen() throws {
        let keys = try VaultKeys(masterKey: key(1))
        let zstd = Zstd()
        let plain: [UInt8] = Array("hello vault".utf8)
        let id = plain.withUnsafeBytes { keys.chunkID($0) }
        let other = [UInt8]([1]).withUnsafeBytes { keys.chunkID($0) }
        var blob = [UInt8](repeating: 0, count: plain.count + BlobCodec.overhead)
        let (n, _) = plain.withUnsafeBytes { p in
            blob.withUnsafeMutableBytes { BlobCodec.seal(p, id: id, tryCompress: true, key: keys.dataKey, zstd: zstd, into: $0.baseAddress!) }
        }
        XCTAssertEqual(n, blob.count)
        var copy = blob
        XCTAssertEqual(try copy.withUnsafeMutableBytes { try BlobCodec.open($0, id: id, keys: keys, zstd: zstd, what: "b") }, plain)
        copy = blob
        assertVaultError(.corrupt) { try copy.withUnsafeMutableBytes { try BlobCodec.open($0, id: other, keys: keys, zstd: zstd, what: "b") } }
        var short = Array(blob.prefix(20))
        assertVaultError(.corrupt) { try short.withUnsafeMutableBytes { try BlobCodec.open($0, id: id, keys: keys, zstd: zstd, what: "b") } }
    }
}
