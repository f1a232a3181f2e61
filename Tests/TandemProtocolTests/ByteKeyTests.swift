import TandemProtocol
import XCTest

/// `ByteKey` keys tables as `[UInt8]` did: the same equalities, so the same entries (messages.md 11.6).
final class ByteKeyTests: XCTestCase {
    /// Byte strings that differ in one byte, in length only (a prefix), or not at all.
    let samples: [[UInt8]] = [
        [], [0], [0, 0], [1], [0, 1], [1, 0],
        Array(repeating: 0xA1, count: 16), Array(repeating: 0xA1, count: 15), Array(repeating: 0xA1, count: 17),
        Array(repeating: 0xA1, count: 16) + Array(repeating: 2, count: 32),
        Array(repeating: 0xA1, count: 16) + Array(repeating: 2, count: 31) + [3],
        Array(repeating: 2, count: 32), Array(0...255), Array((0...255).reversed()),
    ]

    func testEqualExactlyWhenTheBytesAre() {
        for a in samples {
            for b in samples {
                XCTAssertEqual(ByteKey(a) == ByteKey(b), a == b, "\(a) vs \(b)")
                // Equal keys hash equally (a copy made from fresh storage too).
                if a == b { XCTAssertEqual(ByteKey(a).hashValue, ByteKey(Array(b)).hashValue) }
            }
        }
    }

    func testTablesHoldTheSameEntriesAsWithByteArrays() {
        // The same inserts, lookups and removals against a table keyed by [UInt8] and one keyed by ByteKey.
        var plain: [[UInt8]: Int] = [:]
        var keyed: [ByteKey: Int] = [:]
        var plainSet = Set<[UInt8]>()
        var keyedSet = Set<ByteKey>()
        var generator = SystemRandomNumberGenerator()
        for i in 0..<2_000 {
            // Short random strings collide often: equal contents must land on the same entry.
            let bytes = (0..<Int.random(in: 0...3, using: &generator)).map { _ in UInt8.random(in: 0...3, using: &generator) }
            switch i % 3 {
            case 0:
                plain[bytes] = i
                keyed[ByteKey(bytes)] = i
                plainSet.insert(bytes)
                keyedSet.insert(ByteKey(bytes))
            case 1:
                XCTAssertEqual(plain.removeValue(forKey: bytes), keyed.removeValue(forKey: ByteKey(bytes)))
                XCTAssertEqual(plainSet.remove(bytes), keyedSet.remove(ByteKey(bytes))?.bytes)
            default:
                XCTAssertEqual(plain[bytes], keyed[ByteKey(bytes)])
                XCTAssertEqual(plainSet.contains(bytes), keyedSet.contains(ByteKey(bytes)))
            }
        }
        XCTAssertEqual(Dictionary(uniqueKeysWithValues: keyed.map { ($0.key.bytes, $0.value) }), plain)
        XCTAssertEqual(Set(keyedSet.map(\.bytes)), plainSet)
    }

    func testDescribedAsHex() {
        XCTAssertEqual(ByteKey([0x00, 0xAB, 0x10]).description, "00ab10")
    }
}
