import Foundation
import Sodium
import XCTest
@testable import TandemVault

/// `PackWriter` on its worker threads: packs named by the hash of their bytes (hashed beside
/// sealing, on the hashing thread), write failures reported by `waitForWrites`, and its threads
/// joined when it is released.
final class PackWriterTests: XCTestCase {
    /// Threads of this process named `name` (/proc/self/task/*/comm).
    private func threads(named name: String) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").filter { task in
            (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .newlines) == name
        }.count
    }

    /// Fills and finishes `packs` packs of sealed-looking blobs; returns their names and blobs.
    private func writePacks(_ writer: PackWriter, _ store: PackStore, keys: VaultKeys, packs: Int) throws -> [(ChunkID, [(ChunkID, [UInt8])])] {
        var out: [(ChunkID, [(ChunkID, [UInt8])])] = []
        for p in 0..<packs {
            var blobs: [(ChunkID, [UInt8])] = []
            // Uneven blob sizes; the last pack small (an import's end).
            while !writer.isFull && (p < packs - 1 || blobs.count < 3) {
                let blob = randomBytes(BlobCodec.overhead + Int.random(in: 1...(700 << 10)))
                let id = ChunkID(randomBytes(ChunkID.byteCount))!
                let entry = writer.appendSealed(blob, id: id)
                XCTAssertEqual(entry.length, blob.count)
                blobs.append((id, blob))
            }
            let (name, size) = try writer.finish(store: store, keys: keys)
            XCTAssertGreaterThan(size, 0)
            out.append((name, blobs))
        }
        return out
    }

    func testPacksAreNamedByTheirBytesAndReadBack() throws {
        let dir = try makeTempDirectory(self)
        let store = PackStore(directory: dir)
        let keys = try VaultKeys(masterKey: key(3))
        let writer = PackWriter()
        let packs = try writePacks(writer, store, keys: keys, packs: 5)
        try writer.waitForWrites()
        for (name, blobs) in packs {
            XCTAssertEqual(try store.hashFile(name), name, "the name is the BLAKE2b of the whole file")
            let entries = try store.readHeader(pack: name, keys: keys)
            XCTAssertEqual(entries.map(\.id), blobs.map(\.0))
            let size = try FileManager.default.attributesOfItem(atPath: store.url(for: name).path)[.size] as! Int
            for (entry, (_, bytes)) in zip(entries, blobs) {
                XCTAssertEqual(try store.readBlob(pack: name, offset: entry.offset, length: entry.length, packSize: Int64(size)), bytes)
            }
        }
    }

    func testADiscardedPackIsNotWrittenAndTheNextOneIsWhole() throws {
        let dir = try makeTempDirectory(self)
        let store = PackStore(directory: dir)
        let keys = try VaultKeys(masterKey: key(4))
        let writer = PackWriter()
        for _ in 0..<5 { _ = writer.appendSealed(randomBytes(BlobCodec.overhead + 300_000), id: ChunkID(randomBytes(32))!) }
        writer.discard()
        XCTAssertTrue(writer.isEmpty)
        let packs = try writePacks(writer, store, keys: keys, packs: 1)
        try writer.waitForWrites()
        XCTAssertEqual(packFiles(under: dir).count, 1)
        XCTAssertEqual(try store.hashFile(packs[0].0), packs[0].0, "the discarded blobs are not part of the next pack's name")
    }

    func testAFailedWriteIsThrownOnceByWaitForWrites() throws {
        let dir = try makeTempDirectory(self)
        // A file where the packs directory should be: every pack write fails.
        FileManager.default.createFile(atPath: dir.appendingPathComponent("packs").path, contents: Data([1]))
        let store = PackStore(directory: dir)
        let keys = try VaultKeys(masterKey: key(5))
        let writer = PackWriter()
        _ = try writePacks(writer, store, keys: keys, packs: 4)
        XCTAssertThrowsError(try writer.waitForWrites()) { error in
            XCTAssertTrue(error is VaultError, "\(error)")
        }
        XCTAssertNoThrow(try writer.waitForWrites(), "reported once")
    }

    func testAReleasedWriterLeavesNoThread() throws {
        let (writes, hashes) = (try threads(named: "tandem.packs"), try threads(named: "tandem.packhash"))
        do {
            let dir = try makeTempDirectory(self)
            let writer = PackWriter()
            _ = try writePacks(writer, PackStore(directory: dir), keys: try VaultKeys(masterKey: key(6)), packs: 2)
            try writer.waitForWrites()
            XCTAssertEqual(try threads(named: "tandem.packs"), writes + 2)
            XCTAssertEqual(try threads(named: "tandem.packhash"), hashes + 1)
        }
        XCTAssertEqual(try threads(named: "tandem.packs"), writes, "the writer's threads are joined when it is released")
        XCTAssertEqual(try threads(named: "tandem.packhash"), hashes)
    }
}
