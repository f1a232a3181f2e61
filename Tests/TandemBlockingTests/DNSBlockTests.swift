import XCTest
@testable import TandemBlocking

final class DNSBlockTests: XCTestCase {
    func query(_ name: String, type: UInt16 = 1, id: UInt16 = 0xBEEF, extra: [UInt8] = []) -> [UInt8] {
        var q: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xFF), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]
        for label in name.split(separator: ".") { q.append(UInt8(label.utf8.count)); q += Array(label.utf8) }
        q += [0, UInt8(type >> 8), UInt8(type & 0xFF), 0, 1]
        return q + extra
    }

    func testAQueryIsReadAndAnsweredByteByByte() throws {
        let q = try DNSQuery(packet: query("M.News.Example"))
        XCTAssertEqual(q.id, 0xBEEF)
        XCTAssertEqual(q.labels, ["m", "news", "example"])
        XCTAssertEqual(q.type, DNSQuery.typeA)
        XCTAssertTrue(q.recursionDesired)
        let answer = q.blockedAnswer()
        // Header: id, QR|AA|RD, RA + NOERROR, one question, one answer.
        XCTAssertEqual(Array(answer[0..<12]), [0xBE, 0xEF, 0x85, 0x80, 0, 1, 0, 1, 0, 0, 0, 0])
        XCTAssertEqual(Array(answer[12..<(12 + q.question.count)]), q.question)
        XCTAssertEqual(Array(answer.suffix(16)), [0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 0, 0, 0, 0])
        // AAAA: ::; another type: NXDOMAIN, no answer record.
        let aaaa = try DNSQuery(packet: query("x.example", type: 28)).blockedAnswer()
        XCTAssertEqual(Array(aaaa.suffix(16)), [UInt8](repeating: 0, count: 16))
        let mx = try DNSQuery(packet: query("x.example", type: 15)).blockedAnswer()
        XCTAssertEqual(mx[3] & 0x0F, 3)
        XCTAssertEqual(Array(mx[6..<8]), [0, 0])
        // An EDNS OPT record in the additional section is allowed (and not echoed).
        let edns = query("x.example", extra: [0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0])
        var withCount = edns
        withCount[11] = 1
        XCTAssertEqual(try DNSQuery(packet: withCount).labels, ["x", "example"])
    }

    func testHostileQueriesAreRefusedWithoutTrapping() {
        let good = query("a.example")
        // Every proper prefix is refused.
        for n in 0..<good.count { XCTAssertThrowsError(try DNSQuery(packet: Array(good.prefix(n))), "prefix \(n)") }
        var response = good; response[2] |= 0x80
        var twoQuestions = good; twoQuestions[5] = 2
        var pointer = good; pointer[12] = 0xC0
        var notQuery = good; notQuery[2] |= 0x28
        for bad in [response, twoQuestions, pointer, notQuery, [UInt8](repeating: 0, count: 600)] {
            XCTAssertThrowsError(try DNSQuery(packet: bad))
        }
        // A name over 255 bytes.
        let long = query(Array(repeating: String(repeating: "a", count: 63), count: 5).joined(separator: "."))
        XCTAssertThrowsError(try DNSQuery(packet: long))
        // Random bytes never trap.
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let n = Int.random(in: 0...80, using: &rng)
            _ = try? DNSQuery(packet: (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) })
        }
    }

    func testZonesBlockTheSiteAndEveryNameUnderIt() {
        let list = DNSBlockList(sites: ["news.example", "https://www.Video.example/watch", "not a domain", "localhost"])
        XCTAssertTrue(list.blocks(["news", "example"]))
        XCTAssertTrue(list.blocks(["m", "news", "example"]))
        XCTAssertTrue(list.blocks(["a", "b", "news", "example"]))
        XCTAssertTrue(list.blocks(["video", "example"]))
        XCTAssertTrue(list.blocks(["cdn", "video", "example"]))
        XCTAssertFalse(list.blocks(["example"]))
        XCTAssertFalse(list.blocks(["othernews", "example"]))
        XCTAssertFalse(list.blocks(["news", "example", "org"]))
        XCTAssertFalse(list.blocks([]))
        XCTAssertFalse(DNSBlockList.empty.blocks(["news", "example"]))
    }
}
