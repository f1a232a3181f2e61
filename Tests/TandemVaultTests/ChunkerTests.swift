import Sodium
import XCTest
@testable import TandemVault

final class ChunkerTests: XCTestCase {
    func chunks(_ data: [UInt8], key k: SecretBytes, splits: [Int]) -> [[UInt8]] {
        var chunker = Chunker(key: k)
        var out: [[UInt8]] = []
        var start = 0
        for end in splits + [data.count] where end >= start {
            data[start..<end].withUnsafeBytes { slice in chunker.feed(slice) { out.append(Array($0)) } }
            start = end
        }
        chunker.finish { out.append(Array($0)) }
        return out
    }

    func testBoundariesDoNotDependOnHowTheStreamIsSplit() {
        let data = randomBytes(3 * 1024 * 1024 + 12345)
        let k = key(7)
        let whole = chunks(data, key: k, splits: [])
        XCTAssertEqual(whole.reduce([], +), data)
        XCTAssertGreaterThan(whole.count, 1, "3 MiB of random data should cut at least once")
        var rng = SplitMix(seed: 1)
        for _ in 0..<5 {
            var splits: [Int] = []
            var at = 0
            while at < data.count {
                at += Int(rng.next() % 300_000)
                splits.append(Swift.min(at, data.count))
            }
            XCTAssertEqual(chunks(data, key: k, splits: splits), whole)
        }
        // Byte by byte.
        var chunker = Chunker(key: k)
        var lengths: [Int] = []
        data.withUnsafeBytes { all in
            for i in 0..<all.count {
                chunker.feed(UnsafeRawBufferPointer(rebasing: all[i..<(i + 1)])) { lengths.append($0.count) }
            }
        }
        chunker.finish { lengths.append($0.count) }
        XCTAssertEqual(lengths, whole.map(\.count))
    }

    func testChunkSizesStayWithinBounds() {
        let data = randomBytes(24 * 1024 * 1024)
        let lengths = Chunker.chunkLengths(of: data, key: key(3))
        XCTAssertEqual(lengths.reduce(0, +), data.count)
        for l in lengths.dropLast() {
            XCTAssertGreaterThanOrEqual(l, Chunker.minimumSize)
            XCTAssertLessThanOrEqual(l, Chunker.maximumSize)
        }
        let mean = Double(data.count) / Double(lengths.count)
        XCTAssertGreaterThan(mean, Double(Chunker.minimumSize))
        XCTAssertLessThan(mean, Double(2 * Chunker.averageSize), "chunk sizes should cluster near the average")
    }

    func testUniformDataIsCutAtTheMaximum() {
        let data = [UInt8](repeating: 0, count: 2 * Chunker.maximumSize + 1000)
        XCTAssertEqual(Chunker.chunkLengths(of: data, key: key(1)), [Chunker.maximumSize, Chunker.maximumSize, 1000])
    }

    func testShortInputIsOneChunkAndEmptyInputNone() {
        XCTAssertEqual(Chunker.chunkLengths(of: [1, 2, 3], key: key(1)), [3])
        XCTAssertEqual(Chunker.chunkLengths(of: [], key: key(1)), [])
    }

    func testTheKeyMovesTheBoundaries() {
        let data = randomBytes(8 * 1024 * 1024)
        XCTAssertNotEqual(Chunker.chunkLengths(of: data, key: key(1)), Chunker.chunkLengths(of: data, key: key(2)))
    }

    func testAnEditMovesOnlyNearbyBoundaries() {
        var data = randomBytes(10 * 1024 * 1024)
        let k = key(5)
        let before = Set(chunks(data, key: k, splits: []))
        data.insert(contentsOf: [1, 2, 3], at: 6 * 1024 * 1024)
        let after = Set(chunks(data, key: k, splits: []))
        XCTAssertGreaterThanOrEqual(before.intersection(after).count, before.count - 2)
    }

    /// Release-build throughput (run with TANDEM_VAULT_BENCH=1 and -c release).
    func testThroughput() throws {
        try XCTSkipUnless(ProcessInfo.processInfo.environment["TANDEM_VAULT_BENCH"] != nil, "set TANDEM_VAULT_BENCH=1")
        let data = randomBytes(256 * 1024 * 1024)
        var chunker = Chunker(key: key(9))
        var n = 0
        let start = DispatchTime.now()
        data.withUnsafeBytes { chunker.feed($0) { _ in n += 1 } }
        chunker.finish { _ in n += 1 }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
        print("chunker: \(n) chunks, \(Double(data.count) / seconds / 1e6) MB/s")
    }
}

final class MediaSnifferTests: XCTestCase {
    func testKnownFormats() {
        let cases: [[UInt8]] = [
            [0xFF, 0xD8, 0xFF, 0xE0], [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], Array("GIF89a".utf8),
            Array("RIFF\u{0}\u{0}\u{0}\u{0}WEBP".utf8), [0, 0, 0, 0x18] + Array("ftypheic".utf8), [0x1A, 0x45, 0xDF, 0xA3],
            [0x50, 0x4B, 0x03, 0x04], [0x1F, 0x8B, 8], [0x28, 0xB5, 0x2F, 0xFD], [0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00],
            Array("BZh9".utf8), [0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C], Array("ID3".utf8), Array("OggS".utf8), Array("fLaC".utf8),
        ]
        for c in cases { XCTAssertTrue(MediaSniffer.isAlreadyCompressed(prefix: c), "\(c)") }
        XCTAssertFalse(MediaSniffer.isAlreadyCompressed(prefix: Array("Hello, world".utf8)))
        XCTAssertFalse(MediaSniffer.isAlreadyCompressed(prefix: []))
        XCTAssertFalse(MediaSniffer.isAlreadyCompressed(prefix: Array("%PDF-1.7".utf8)))
    }
}
