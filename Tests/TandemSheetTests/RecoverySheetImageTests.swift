import Foundation
import TandemMedia
import TandemSheet
import XCTest

/// The printed recovery sheet: its QR codes read back (zbar, as `TandemMedia.QRDecoder` reads tag
/// keys) to exactly the recovery code and the holders' share codes.
final class RecoverySheetImageTests: XCTestCase {
    let code = "tdmr1pkzjdxy4uhrg343u0xf20sz59vk5ll4z"
    let holders = [
        RecoverySheetPage.Holder(name: "Bob", id: "tdm1x68s6d59yyv0mvj2fjh8ms42l8r77ukdrplj2chas2p77a0ymelspm7jd0",
                                 froms: ["tandem:tdm1x68s6d59yyv0mvj2fjh8ms42l8r77ukdrplj2chas2p77a0ymelspm7jd0?relay=tdm1x68s6d59yyv0mvj2fjh8ms42l8r77ukdrplj2chas2p77a0ymelspm7jd0@relay.example.org:7820",
                                         "tdm1x68s6d59yyv0mvj2fjh8ms42l8r77ukdrplj2chas2p77a0ymelspm7jd0@192.0.2.7:7810"]),
        RecoverySheetPage.Holder(name: "Carol (ünïcode)", id: "tdm1carol",
                                 froms: ["tdm1carol@198.51.100.2:7810"]),
        RecoverySheetPage.Holder(name: "", id: "tdm1dave", froms: []),
    ]

    func page() -> RecoverySheetPage {
        RecoverySheetPage(title: "TANDEM RECOVERY SHEET — Alice", date: "today 07:12", nodeID: "tdm1alice", code: code, holders: holders)
    }

    func testThePNGsCodesReadBackToTheRecoveryCodeAndTheShareCodes() throws {
        let png = try page().png()
        XCTAssertEqual(Array(png.prefix(8)), [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sheet-\(UUID().uuidString).png")
        defer { try? FileManager.default.removeItem(at: url) }
        try Data(png).write(to: url)
        let read = try QRDecoder.payloads(inImageAt: url.path).map { String(decoding: $0, as: UTF8.self) }
        XCTAssertEqual(Set(read), [code, holders[0].froms[0], holders[1].froms[0]])
        XCTAssertEqual(read.count, 3, "one code per holder that has a way to reach it, and the recovery code")
    }

    func testASheetWithNoHolderStillCarriesTheCode() throws {
        let png = try RecoverySheetPage(title: "T", date: "d", nodeID: "tdm1alice", code: code, holders: []).png()
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sheet-\(UUID().uuidString).png")
        defer { try? FileManager.default.removeItem(at: url) }
        try Data(png).write(to: url)
        XCTAssertEqual(try QRDecoder.payloads(inImageAt: url.path).map { String(decoding: $0, as: UTF8.self) }, [code])
    }

    func testThePDFIsWellFormedAndCarriesTheText() throws {
        let pdf = try page().pdf()
        let text = String(decoding: pdf, as: UTF8.self)
        XCTAssertTrue(text.hasPrefix("%PDF-1.4\n") && text.hasSuffix("%%EOF\n"))
        XCTAssertTrue(text.contains("(\(code)) Tj"))
        XCTAssertTrue(text.contains("tandem restore --from 'tdm1carol@198.51.100.2:7810'"))
        XCTAssertTrue(text.contains("Carol (?n?code)") == false && text.contains("Carol \\(?n?code\\)"), "escaped, ASCII only")
        // The cross-reference table points at each object.
        let bytes = pdf
        guard let startxref = text.range(of: "startxref\n", options: .backwards) else { return XCTFail("no startxref") }
        let xrefOffset = Int(text[startxref.upperBound...].prefix { $0.isNumber })!
        XCTAssertEqual(String(decoding: bytes[xrefOffset..<(xrefOffset + 4)], as: UTF8.self), "xref")
        let entries = text[text.range(of: "xref\n")!.upperBound...].split(separator: "\n").dropFirst(2).prefix { $0.hasSuffix(" n ") }
        XCTAssertFalse(entries.isEmpty)
        for (i, e) in entries.enumerated() {
            let offset = Int(e.prefix(10))!
            XCTAssertEqual(String(decoding: bytes[offset..<min(bytes.count, offset + 8)], as: UTF8.self).hasPrefix("\(i + 1) 0 obj"), true, String(e))
        }
    }

    func testManyHoldersTakeMorePages() throws {
        let many = (0..<30).map { RecoverySheetPage.Holder(name: "friend \($0)", id: "tdm1f\($0)", froms: ["tdm1f\($0)@192.0.2.\($0):7810"]) }
        let text = String(decoding: try RecoverySheetPage(title: "T", date: "d", nodeID: "n", code: code, holders: many).pdf(), as: UTF8.self)
        let count = text.range(of: "/Count ").map { Int(text[$0.upperBound...].prefix { $0.isNumber }) ?? 0 } ?? 0
        XCTAssertGreaterThanOrEqual(count, 3, "30 holders with codes need several pages")
        XCTAssertEqual(text.components(separatedBy: "/Type /Page ").count - 1, count)
    }

    func testQRCodeRefusesWhatItCannotHold() {
        XCTAssertThrowsError(try QRCode(""))
        XCTAssertThrowsError(try QRCode(String(repeating: "x", count: QRCode.maximumBytes + 1)))
        XCTAssertNoThrow(try QRCode(String(repeating: "x", count: QRCode.maximumBytes)))
    }
}
