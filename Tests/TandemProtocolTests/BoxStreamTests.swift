import NIOCore
import Sodium
import XCTest
@testable import TandemProtocol

final class BoxStreamTests: XCTestCase {
    let key = Sodium.randomBytes(32)
    let nonce = Sodium.randomBytes(24)

    private func seal(_ messages: [[UInt8]], goodbye: Bool = false) -> [UInt8] {
        var enc = BoxStreamEncoder(key: key, nonce: nonce)
        var out = ByteBufferAllocator().buffer(capacity: 1024)
        for m in messages { enc.seal(m, into: &out) }
        if goodbye { enc.goodbye(into: &out) }
        return Array(out.readableBytesView)
    }

    /// Feeds `wire` in pieces and collects the plaintext of every box and whether goodbye came.
    private func open(_ wire: [[UInt8]]) throws -> (boxes: [[UInt8]], goodbye: Bool) {
        var dec = BoxStreamDecoder(key: key, nonce: nonce)
        var inbound = ByteBufferAllocator().buffer(capacity: 1024)
        var boxes: [[UInt8]] = []
        var bye = false
        for piece in wire {
            inbound.writeBytes(piece)
            while let m = try dec.read(&inbound) {
                switch m {
                case .data(let b): boxes.append(Array(b.readableBytesView))
                case .goodbye: bye = true
                }
            }
        }
        return (boxes, bye)
    }

    func testSizesAroundTheBoxLimit() throws {
        for size in [0, 1, 4095, 4096, 4097, 8192, 100_000] {
            let msg = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ size) }
            let wire = seal([msg])
            let boxes = max(1, (size + 4095) / 4096)
            XCTAssertEqual(wire.count, size + boxes * BoxStream.headerLength, "size \(size)")
            let (got, bye) = try open([wire])
            XCTAssertEqual(got.count, boxes)
            XCTAssertTrue(got.allSatisfy { $0.count <= BoxStream.maximumBodyLength })
            XCTAssertEqual(Array(got.joined()), msg)
            XCTAssertFalse(bye)
        }
    }

    func testByteByByteAndRandomSplits() throws {
        let msgs: [[UInt8]] = [[], [1], Sodium.randomBytes(5000), Sodium.randomBytes(4096), [7, 7, 7]]
        let wire = seal(msgs, goodbye: true)
        var rng = SplitMix64(seed: 99)
        for maxPiece in [1, 2, 33, 35, 4130, 10_000] {
            let (got, bye) = try open(pieces(wire, maxPiece: maxPiece, rng: &rng))
            XCTAssertEqual(Array(got.joined()), Array(msgs.joined()), "maxPiece \(maxPiece)")
            XCTAssertTrue(bye)
        }
    }

    func testEveryProperPrefixNeedsMoreAndConsumesNoBody() throws {
        let wire = seal([Array(repeating: 9, count: 100)])
        for n in 0..<wire.count {
            var dec = BoxStreamDecoder(key: key, nonce: nonce)
            var b = buffer(Array(wire[0..<n]))
            XCTAssertNil(try dec.read(&b), "prefix \(n)")
            // Only a complete header is consumed; body bytes stay in the buffer until the box is whole.
            XCTAssertEqual(b.readableBytes, n >= BoxStream.headerLength ? n - BoxStream.headerLength : n)
        }
    }

    func testTamperedHeaderAndBodyAreRefused() {
        let wire = seal([Array(repeating: 1, count: 64)])
        for index in [0, 20, 40, wire.count - 1] {
            var bad = wire
            bad[index] ^= 0x01
            XCTAssertThrowsError(try open([bad]), "byte \(index)")
        }
    }

    func testReorderedBoxesAreRefused() {
        let wire = seal([[1, 2, 3], [4, 5, 6]])
        let first = Array(wire[0..<37]), second = Array(wire[37...])
        XCTAssertThrowsError(try open([second + first]))
    }

    func testHeaderAnnouncingMoreThanTheLimitIsRefusedBeforeTheBody() throws {
        // Build a header that authenticates but announces 5000 bytes.
        var plain = [UInt8](repeating: 0, count: 18)
        plain[0] = UInt8(5000 >> 8)
        plain[1] = UInt8(5000 & 0xff)
        plain[2] = 1
        let header = try SecretBox.seal(plain, nonce: nonce, key: key)
        var dec = BoxStreamDecoder(key: key, nonce: nonce)
        var b = buffer(header)
        XCTAssertThrowsError(try dec.read(&b)) {
            XCTAssertTrue("\($0)".contains("5000"))
        }
    }

    func testGoodbyeEndsTheStream() throws {
        let wire = seal([[1]], goodbye: true)
        let (got, bye) = try open([wire])
        XCTAssertEqual(got, [[1]])
        XCTAssertTrue(bye)
        XCTAssertThrowsError(try open([wire + [0]]), "data after goodbye")
        var enc = BoxStreamEncoder(key: key, nonce: nonce)
        var out = ByteBufferAllocator().buffer(capacity: 64)
        enc.goodbye(into: &out)
        enc.goodbye(into: &out)
        XCTAssertEqual(out.readableBytes, BoxStream.headerLength, "goodbye is sent once")
        XCTAssertTrue(enc.saidGoodbye)
    }

    func testEmptyBoxIsNotGoodbye() throws {
        let (got, bye) = try open([seal([[]])])
        XCTAssertEqual(got, [[]])
        XCTAssertFalse(bye)
    }

    func testNonceCarriesAcrossBytes() {
        var n = BoxNonce([UInt8](repeating: 0, count: 22) + [0, 0xff])
        n.increment()
        XCTAssertEqual(Array(n.bytes.suffix(2)), [1, 0])
        var wrap = BoxNonce([UInt8](repeating: 0xff, count: 24))
        wrap.increment()
        XCTAssertEqual(wrap.bytes, [UInt8](repeating: 0, count: 24))
    }
}
