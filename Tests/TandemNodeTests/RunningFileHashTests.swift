import Foundation
import Sodium
import TandemProtocol
import XCTest
@testable import NodeMessages

#if canImport(Glibc)
import Glibc
#endif

/// The whole-file hash a receiver carries along while it writes chunks (messages.md 7.3): whatever
/// order the chunks are written in, and whether the writer saw all of them, some (a restart) or
/// none, it equals the BLAKE2b-256 of the file; read back after a restart, a file that differs fails.
final class RunningFileHashTests: XCTestCase {
    let chunkBytes = 1000

    /// A partial file written chunk by chunk in `order` (each chunk also shown to `hash` when given).
    func write(_ content: [UInt8], order: [Int], hash: RunningFileHash?) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-running-hash-\(hexString(Sodium.randomBytes(6)))").path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        for index in order {
            let chunk = Array(content[(index * chunkBytes)..<min(content.count, (index + 1) * chunkBytes)])
            XCTAssertEqual(chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress!, chunk.count, off_t(index * chunkBytes)) }, chunk.count)
            try hash?.written(index: index, chunk, fd: fd)
        }
        return path
    }

    func testAnyOrderGivesTheFilesHash() throws {
        let content = Sodium.randomBytes(7 * chunkBytes + 321)  // 8 chunks, the last short
        let expected = Hash.blake2b(content)
        let orders: [[Int]] = [Array(0..<8), Array((0..<8).reversed()), [1, 0, 3, 2, 5, 4, 7, 6], [7, 0, 1, 2, 3, 4, 5, 6], [2, 4, 6, 0, 1, 3, 5, 7]]
        for order in orders {
            let hash = RunningFileHash(chunkBytes: chunkBytes)
            let path = try write(content, order: order, hash: hash)
            defer { unlink(path) }
            if order == Array(0..<8) { XCTAssertEqual(hash.next, 8, "in order: every chunk hashed as it was written") }
            XCTAssertEqual(try hash.finish(path: path), expected, "order \(order)")
        }
    }

    func testAfterARestartTheRestIsReadBack() throws {
        let content = Sodium.randomBytes(5 * chunkBytes)
        // Chunks 0...2 written by a process that was killed; a new one writes 3 and 4.
        let path = try write(content, order: [0, 1, 2], hash: nil)
        defer { unlink(path) }
        let hash = RunningFileHash(chunkBytes: chunkBytes)
        let fd = open(path, O_RDWR | O_CLOEXEC)
        defer { close(fd) }
        for index in [4, 3] {
            let chunk = Array(content[(index * chunkBytes)..<((index + 1) * chunkBytes)])
            _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress!, chunk.count, off_t(index * chunkBytes)) }
            try hash.written(index: index, chunk, fd: fd)
        }
        XCTAssertEqual(hash.next, 0)
        XCTAssertEqual(try hash.finish(path: path), Hash.blake2b(content))
        XCTAssertThrowsError(try hash.finish(path: path), "a hash is finished once")
    }

    func testTheHashIsOfWhatWasWrittenAndAChangedFileReadBackFails() throws {
        let content = Sodium.randomBytes(4 * chunkBytes)
        let hash = RunningFileHash(chunkBytes: chunkBytes)
        let path = try write(content, order: [0, 1, 2, 3], hash: hash)
        defer { unlink(path) }
        // In one process the hash is of the bytes written (what the page cache holds). A chunk lost
        // on disk (a disk that lied about a sync) shows only after a restart, which reads every
        // chunk back: then the changed file fails.
        let fd = open(path, O_RDWR | O_CLOEXEC)
        var zero = [UInt8](repeating: 0, count: chunkBytes)
        _ = zero.withUnsafeMutableBytes { pwrite(fd, $0.baseAddress!, chunkBytes, 0) }
        close(fd)
        XCTAssertEqual(try hash.finish(path: path), Hash.blake2b(content))
        XCTAssertNotEqual(try RunningFileHash(chunkBytes: chunkBytes).finish(path: path), Hash.blake2b(content),
                          "read back after a restart, the changed file fails file_hash")
    }

    func testALeafHashOfABufferEqualsThatOfItsBytes() {
        let chunk = Sodium.randomBytes(ChatLimits.chunkBytes)
        let viaBuffer = chunk.withUnsafeBytes { ChunkTree.leafHash($0) }
        XCTAssertEqual(viaBuffer, ChunkTree.leafHash(chunk))
        XCTAssertEqual(ChunkTree.leafHash(chunk[10..<500]), ChunkTree.leafHash(Array(chunk[10..<500])))
        XCTAssertEqual(ChunkTree.leafHash(chunk), Hash.blake2b([0x00] + chunk))
    }

    func testWrittenChunksAreReadBackWithinTheBootOnly() throws {
        let partial = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-written-\(hexString(Sodium.randomBytes(6))).part").path
        defer { WrittenChunks.remove(partial: partial) }
        XCTAssertTrue(WrittenChunks.path(partial).hasSuffix(".written") && !WrittenChunks.path(partial).contains(".part"))
        XCTAssertNil(WrittenChunks.load(partial: partial, bytes: 2), "no sidecar: nothing held")
        guard let boot = WrittenChunks.bootID else { throw XCTSkip("no boot id on this system") }
        var w = try WrittenChunks(partial: partial)
        for i in [0, 3, 9] { try w.written(i) }
        w.close()
        XCTAssertEqual(WrittenChunks.load(partial: partial, bytes: 2), [0b0000_1001, 0b0000_0010])
        XCTAssertEqual(WrittenChunks.load(partial: partial, bytes: 1), [0b0000_1001], "cut to the file's bitmap")
        XCTAssertEqual(WrittenChunks.load(partial: partial, bytes: 3), [0b0000_1001, 0b0000_0010, 0])
        // Opened again (a restarted node), it goes on from what it holds.
        var again = try WrittenChunks(partial: partial)
        try again.written(1)
        again.close()
        XCTAssertEqual(WrittenChunks.load(partial: partial, bytes: 2), [0b0000_1011, 0b0000_0010])
        // Written during another boot (a power cut may have lost unsynced writes): not trusted.
        var other = boot
        other[0] = other[0] == UInt8(ascii: "a") ? UInt8(ascii: "b") : UInt8(ascii: "a")
        XCTAssertTrue(FileManager.default.createFile(atPath: WrittenChunks.path(partial), contents: Data(other + [0xff, 0xff])))
        XCTAssertNil(WrittenChunks.load(partial: partial, bytes: 2))
        XCTAssertTrue(FileManager.default.createFile(atPath: WrittenChunks.path(partial), contents: Data(boot.prefix(20))))
        XCTAssertNil(WrittenChunks.load(partial: partial, bytes: 2), "a short sidecar holds nothing")
    }
}
