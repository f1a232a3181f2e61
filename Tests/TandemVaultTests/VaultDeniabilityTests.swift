import Foundation
import Sodium
import XCTest
@testable import TandemVault

/// The decoy looks like the real vault to someone holding the directory (Protocol/vault.md "What
/// each party learns"): the same operations on the real vault in one directory and on the decoy in
/// another leave files of the same names' shape and the same sizes; index files are padded to one
/// size class and move together.
final class VaultDeniabilityTests: XCTestCase {
    var dir: URL!
    override func setUpWithError() throws { dir = try makeTempDirectory(self) }

    let pin = Array("1234".utf8)
    let decoyPIN = Array("9999".utf8)

    /// Relative path with hex names blanked (they are random per vault) → size, sorted.
    func shape(_ root: URL) -> [String] {
        allFiles(under: root).map { url -> String in
            let rel = url.path.dropFirst(root.path.count + 1)
            let blanked = rel.split(separator: "/").map { part -> String in
                part.count >= 2 && part.allSatisfy(\.isHexDigit) ? String(repeating: "x", count: part.count) : String(part)
            }.joined(separator: "/")
            let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? -1
            return "\(blanked) \(size)"
        }.sorted()
    }

    func indexSizes(_ root: URL) -> [Int] {
        allFiles(under: root).filter { $0.path.contains("/index/") }.map {
            (try? FileManager.default.attributesOfItem(atPath: $0.path)[.size] as? Int) ?? -1
        }
    }

    /// Index files: the same size as each other after every commit, a size class, never the
    /// 69 bytes of an empty index.
    func assertIndexesAlike(_ root: URL, line: UInt = #line) {
        let sizes = indexSizes(root)
        XCTAssertEqual(sizes.count, 2, line: line)
        XCTAssertEqual(Set(sizes).count, 1, "index sizes \(sizes)", line: line)
        XCTAssertGreaterThanOrEqual(sizes[0], IndexFile.minimumFileSize, line: line)
        XCTAssertEqual(sizes[0] & (sizes[0] - 1), 0, "a power of two", line: line)
    }

    /// The same story on the real vault (directory A, no decoy set) and on the decoy (directory B):
    /// every file's size and name shape match, step by step.
    func testTheSameOperationsOnTheRealVaultAndOnTheDecoyLeaveTheSameShape() throws {
        let a = dir.appendingPathComponent("a"), b = dir.appendingPathComponent("b")
        let (_, realA) = try VaultKeyFile.initializeVault(in: a, pin: pin, parameters: .testing)
        let (fileB, realB) = try VaultKeyFile.initializeVault(in: b, pin: pin, parameters: .testing)
        try fileB.setDecoy(pin: decoyPIN, masterKey: try XCTUnwrap(try fileB.unlock(pin: pin)).masterKey)
        let decoyB = try VaultRepository.open(at: b, masterKey: try XCTUnwrap(try fileB.unlock(pin: decoyPIN)).masterKey)
        // The real vault of B holds something too: the decoy's user must not see it in sizes.
        _ = try realB.importData(randomBytes(300 * 1024), name: "secret", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        try realB.remove(realB.items.map(\.id))
        _ = try realB.prune()

        XCTAssertEqual(shape(a), shape(b), "fresh")
        assertIndexesAlike(a); assertIndexesAlike(b)
        let small = randomBytes(200 * 1024)
        for repo in [realA, decoyB] {
            _ = try repo.importData(small, name: "one.jpg", type: .photo, album: nil, createdAtMs: 5, nowMs: 1)
        }
        XCTAssertEqual(shape(a), shape(b), "after one import")
        assertIndexesAlike(a); assertIndexesAlike(b)
        // Many items grow the index past the first size class, in both.
        for repo in [realA, decoyB] {
            for i in 0..<100 {
                _ = try repo.importData([UInt8(i & 0xff), 1, 2], name: "note \(i) with a long enough name to fill the index",
                                        type: .document, album: nil, createdAtMs: nil, nowMs: 1)
            }
        }
        XCTAssertEqual(shape(a), shape(b), "after a hundred imports")
        assertIndexesAlike(a); assertIndexesAlike(b)
        XCTAssertGreaterThan(indexSizes(a)[0], IndexFile.minimumFileSize, "the test did cross a size class")
        for repo in [realA, decoyB] {
            try repo.remove(repo.items.filter { $0.name.hasPrefix("note") }.map(\.id))
            _ = try repo.prune()
        }
        XCTAssertEqual(shape(a), shape(b), "after removing and pruning")
        assertIndexesAlike(a); assertIndexesAlike(b)
    }

    /// In one directory, a commit to either vault rewrites both index files at the same size.
    func testBothIndexesAreRewrittenTogether() throws {
        let (file, real) = try VaultKeyFile.initializeVault(in: dir, pin: pin, parameters: .testing)
        try file.setDecoy(pin: decoyPIN, masterKey: try XCTUnwrap(try file.unlock(pin: pin)).masterKey)
        let decoy = try VaultRepository.open(at: dir, masterKey: try XCTUnwrap(try file.unlock(pin: decoyPIN)).masterKey)
        let other = real.indexFileURL()
        func inode(_ url: URL) throws -> UInt64 { try XCTUnwrap(FileManager.default.attributesOfItem(atPath: url.path)[.systemFileNumber] as? UInt64) }
        let before = try inode(other)
        for i in 0..<100 {
            _ = try decoy.importData([UInt8(i & 0xff)], name: "decoy note \(i) padded out to a long name", type: .document,
                                     album: nil, createdAtMs: nil, nowMs: 1)
        }
        XCTAssertNotEqual(try inode(other), before, "the real index was rewritten by the decoy's commits")
        assertIndexesAlike(dir)
        XCTAssertGreaterThan(indexSizes(dir)[0], IndexFile.minimumFileSize)
        // The real vault still opens whole (its bytes were kept, padding appended).
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: try XCTUnwrap(try file.unlock(pin: pin)).masterKey).items.count, 0)
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: try XCTUnwrap(try file.unlock(pin: decoyPIN)).masterKey).items.count, 100)
    }

    /// A version 1 index (no padding) still opens, and the next commit writes version 2.
    func testAVersion1IndexStillOpens() throws {
        let repo = try VaultRepository.create(at: dir, masterKey: key(7))
        let keys = try VaultKeys(masterKey: key(7))
        let plain = repo.index.serialize()
        var frame = [UInt8](repeating: 0, count: Zstd.compressBound(plain.count))
        let n = try XCTUnwrap(plain.withUnsafeBytes { p in frame.withUnsafeMutableBytes { Zstd().compress(p, into: $0) } })
        var inner = BinaryWriter()
        inner.u64(UInt64(plain.count))
        inner.raw(Array(frame[0..<n]))
        let nonce = randomBytes(24)
        let v1 = nonce + (try XChaCha20Poly1305.seal(inner.bytes, additionalData: IndexFile.legacyAdditionalData, nonce: nonce, key: keys.indexKey))
        try FileIO.writeAtomically(v1, to: repo.indexFileURL())
        let opened = try VaultRepository.open(at: dir, masterKey: key(7))
        _ = try opened.importData([1], name: "x", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        XCTAssertEqual(indexSizes(dir), [IndexFile.minimumFileSize])
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: key(7)).items.count, 1)
    }
}
