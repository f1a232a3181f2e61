import XCTest
@testable import NodeWeb

final class WebMultipartTests: XCTestCase {
    func form(_ boundary: String, _ parts: [(String, String?, [UInt8])]) -> [UInt8] {
        var out: [UInt8] = []
        for (name, filename, body) in parts {
            var head = "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\""
            if let filename { head += "; filename=\"\(filename)\"\r\nContent-Type: application/octet-stream" }
            head += "\r\n\r\n"
            out += Array(head.utf8) + body + Array("\r\n".utf8)
        }
        return out + Array("--\(boundary)--\r\n".utf8)
    }

    func testBoundaryFromTheContentType() {
        XCTAssertEqual(WebMultipart.boundary("multipart/form-data; boundary=----abc123"), "----abc123")
        XCTAssertEqual(WebMultipart.boundary("Multipart/Form-Data; charset=utf-8; boundary=\"q r\""), "q r")
        for bad in [nil, "", "application/x-www-form-urlencoded", "multipart/form-data", "multipart/form-data; boundary=",
                    "multipart/form-data; boundary=" + String(repeating: "x", count: 71), "multipart/mixed; boundary=a"] {
            XCTAssertNil(WebMultipart.boundary(bad), bad ?? "nil")
        }
    }

    func testPartsWithFilesAndFields() throws {
        let photo: [UInt8] = [0xFF, 0xD8, 0xFF, 0x0D, 0x0A, 0x2D, 0x2D, 0x00, 0x01]  // CR LF "--" inside a body
        let body = form("XyZ", [("csrf", nil, Array("tok".utf8)), ("album", nil, Array("Trips".utf8)),
                                 ("file", "../../etc/cat.jpg", photo), ("file", "", [])])
        let parts = try WebMultipart.parse(body, boundary: "XyZ")
        XCTAssertEqual(parts.map(\.name), ["csrf", "album", "file", "file"])
        XCTAssertEqual(parts[0].body, Array("tok".utf8))
        XCTAssertNil(parts[0].filename)
        XCTAssertEqual(parts[2].filename, "cat.jpg", "only a name, never a path")
        XCTAssertEqual(parts[2].body, photo)
        XCTAssertEqual(parts[3].filename, "")
        XCTAssertEqual(parts[3].body, [])
    }

    func testMalformedFormsAreRefused() {
        let good = form("b", [("a", nil, Array("1".utf8))])
        XCTAssertNoThrow(try WebMultipart.parse(good, boundary: "b"))
        // Every proper prefix is refused (a cut upload is never half imported).
        for n in 0..<(good.count - 4) {
            XCTAssertThrowsError(try WebMultipart.parse(Array(good.prefix(n)), boundary: "b"), "prefix \(n)")
        }
        XCTAssertThrowsError(try WebMultipart.parse(Array("--b\r\nX-Other: 1\r\n\r\nv\r\n--b--".utf8), boundary: "b"))
        XCTAssertThrowsError(try WebMultipart.parse(Array("--b\r\nContent-Disposition: form-data\r\n\r\nv\r\n--b--".utf8), boundary: "b"))
        let many = form("b", (0...WebMultipart.maximumParts).map { ("f\($0)", nil, [UInt8]()) })
        XCTAssertThrowsError(try WebMultipart.parse(many, boundary: "b"))
        let longHeader = Array("--b\r\nContent-Disposition: form-data; name=\"\(String(repeating: "n", count: 5000))\"\r\n\r\nv\r\n--b--".utf8)
        XCTAssertThrowsError(try WebMultipart.parse(longHeader, boundary: "b"))
    }

    func testRandomBytesNeverTrap() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let n = Int.random(in: 0..<80, using: &rng)
            var bytes = Array("--b\r\n".utf8) + (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if Bool.random(using: &rng) { bytes += Array("\r\n--b--".utf8) }
            _ = try? WebMultipart.parse(bytes, boundary: "b")
        }
    }
}

final class WebVaultPageTests: XCTestCase {
    func testItemReferencesInURLs() {
        XCTAssertTrue(WebVaultPage.isItemRef("3fa2c9"))
        XCTAssertTrue(WebVaultPage.isItemRef("a-b_c"))
        for bad in ["", "../x", "a/b", "a b", "é", "%2e", String(repeating: "a", count: 129)] {
            XCTAssertFalse(WebVaultPage.isItemRef(bad), bad)
        }
    }

    func testImagesShownInlineOnlyByTheirBytes() {
        XCTAssertEqual(WebVaultPage.imageType([0xFF, 0xD8, 0xFF, 0xE0]), "image/jpeg")
        XCTAssertEqual(WebVaultPage.imageType([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0]), "image/png")
        XCTAssertNil(WebVaultPage.imageType(Array("<html><script>".utf8)))
        XCTAssertNil(WebVaultPage.imageType([]))
    }

    func testDownloadNamesAreSafeInAHeader() {
        let d = WebVaultPage.contentDisposition("a\"b\r\nSet-Cookie: x.jpg")
        XCTAssertFalse(d.contains("\r") || d.contains("\n"))
        XCTAssertTrue(d.hasPrefix("attachment; filename=\"a_b__Set-Cookie: x.jpg\"; filename*=UTF-8''"))
        XCTAssertTrue(WebVaultPage.contentDisposition("été.png").hasSuffix("filename*=UTF-8''%C3%A9t%C3%A9.png"))
    }

    func testWordsForPeople() {
        XCTAssertEqual(WebVaultPage.size(812), "812 B")
        XCTAssertEqual(WebVaultPage.size(1_400_000), "1.4 MB")
        XCTAssertEqual(WebVaultPage.size(1 << 30), "1 GiB")  // a quota given in GiB reads back in GiB
        XCTAssertEqual(WebVaultPage.size(3 << 19), "1.5 MiB")
        XCTAssertEqual(WebVaultPage.spoken(ms: 29_001), "30 s")
        XCTAssertEqual(WebVaultPage.spoken(ms: 120_000), "2 min")
        let now = Date()
        XCTAssertTrue(WebVaultPage.localTime(ms: Int64(now.timeIntervalSince1970 * 1000), now: now).hasPrefix("today "))
    }

    func testTheVaultTemplateRenders() {
        let pages = WebPages()
        let locked: [String: Any] = ["initialized": true, "locked": true, "lockedOut": true, "retryMs": 30_000, "retryText": "30 s",
                                     "failuresText": "3 wrong tries in a row", "keys": [["key": "1"]], "csrf": "C", "holders": [] as [Any]]
        let html = pages.library.render(locked, withTemplate: "vault") ?? ""
        XCTAssertTrue(html.contains("id=\"pinpad\""))
        XCTAssertTrue(html.contains("try again in <span class=\"wait\">30 s</span>"))
        XCTAssertFalse(html.contains("vault-grid"))
        let open: [String: Any] = ["initialized": true, "open": true, "hasItems": true, "csrf": "C",
                                   "items": [["id": "abc", "name": "<cat>.jpg", "thumb": true, "size": "1 kB"]]]
        let grid = pages.library.render(open, withTemplate: "vault") ?? ""
        XCTAssertTrue(grid.contains("src=\"/vault/thumb/abc\""))
        XCTAssertTrue(grid.contains("alt=\"&lt;cat&gt;.jpg\""))
        XCTAssertFalse(grid.contains("id=\"pinpad\""))
    }
}
