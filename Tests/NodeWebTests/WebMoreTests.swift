import XCTest
@testable import NodeWeb

/// The dashboard's TLS host policy, the `--web` parse with and without TLS, and the bounded
/// multipart reader the upload forms use.
final class WebTLSPolicyTests: XCTestCase {
    func testOffLoopbackNeedsTLS() throws {
        XCTAssertThrowsError(try WebConfiguration.parse("0.0.0.0:7812"))
        XCTAssertThrowsError(try WebConfiguration.parse("192.0.2.7:7812"))
        let tls = WebConfiguration.TLS(selfSignedDirectory: "/tmp/x")
        let c = try XCTUnwrap(WebConfiguration.parse("192.0.2.7:7812", tls: tls))
        XCTAssertEqual(c.host, "192.0.2.7")
        XCTAssertEqual(c.tls, tls)
        XCTAssertNil(try XCTUnwrap(WebConfiguration.parse("127.0.0.1:0")).tls)
    }

    func testOverTLSAddressesAndTheNamedHostAreServedOverHTTPSOnly() {
        let p = WebHostPolicy(port: 7812, tls: true, names: ["tandem.home.example"])
        for ok in ["192.0.2.7:7812", "127.0.0.2:7812", "[2001:db8::1]:7812", "tandem.home.example:7812", "localhost:7812"] {
            XCTAssertTrue(p.allowsHost(ok), ok)
        }
        for bad in ["evil.example:7812", "192.0.2.7:7813", "tandem.home.example", "192.0.2.7"] {
            XCTAssertFalse(p.allowsHost(bad), bad)
        }
        XCTAssertTrue(p.allowsOrigin("https://192.0.2.7:7812", stateChanging: true))
        XCTAssertFalse(p.allowsOrigin("http://192.0.2.7:7812", stateChanging: true))
        XCTAssertFalse(p.allowsOrigin("https://evil.example:7812", stateChanging: true))
        // Without TLS nothing changes: loopback only.
        XCTAssertFalse(WebHostPolicy(port: 7812).allowsHost("192.0.2.7:7812"))
        XCTAssertTrue(WebHostPolicy(port: 443, tls: true).allowsHost("192.0.2.7"))
    }

    func testSelfSignedCertificateIsMadeOnceAndLoads() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("web-tls-\(UInt32.random(in: 0...UInt32.max))").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let tls = WebConfiguration.TLS(selfSignedDirectory: dir)
        let first = try WebTLSMaterial.load(tls, host: "127.0.0.2")
        let again = try WebTLSMaterial.load(tls, host: "127.0.0.2")
        XCTAssertEqual(first.fingerprint, again.fingerprint)
        XCTAssertEqual(first.fingerprint.split(separator: ":").count, 32)
        let key = try FileManager.default.attributesOfItem(atPath: dir + "/key.pem")
        XCTAssertEqual((key[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        // The person's own files.
        let own = WebConfiguration.TLS(certificatePath: dir + "/certificate.pem", keyPath: dir + "/key.pem", selfSignedDirectory: "/nonexistent")
        XCTAssertEqual(try WebTLSMaterial.load(own, host: "192.0.2.7").fingerprint, first.fingerprint)
        let missing = WebConfiguration.TLS(certificatePath: dir + "/nope.pem", keyPath: dir + "/key.pem", selfSignedDirectory: "/nonexistent")
        XCTAssertThrowsError(try WebTLSMaterial.load(missing, host: "192.0.2.7"))
    }
}

final class WebFormTests: XCTestCase {
    func body(_ boundary: String, _ parts: [(String, String?, [UInt8])]) -> [UInt8] {
        var out: [UInt8] = []
        for (name, file, data) in parts {
            var head = "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\""
            if let file { head += "; filename=\"\(file)\"\r\nContent-Type: application/octet-stream" }
            out += Array((head + "\r\n\r\n").utf8) + data + Array("\r\n".utf8)
        }
        return out + Array("--\(boundary)--\r\n".utf8)
    }

    func testFieldsAndFiles() throws {
        let bin: [UInt8] = [0, 13, 10, 45, 45, 255, 13, 10]
        let b = body("XyZ", [("csrf", nil, Array("tok".utf8)), ("qr", "a.png", bin), ("keyfile", "", [])])
        let form = try XCTUnwrap(WebUploadForm.parse(b, contentType: "multipart/form-data; boundary=XyZ"))
        XCTAssertEqual(form.field("csrf"), "tok")
        XCTAssertEqual(form.file("qr")?.body, bin)
        XCTAssertNil(form.file("keyfile"))  // an empty file input
        XCTAssertNil(form.field("qr"))
    }

    func testMalformedBodiesAreRefusedNotTrapped() {
        let good = body("b", [("a", nil, Array("1".utf8))])
        XCTAssertNil(WebUploadForm.parse(good, contentType: "application/x-www-form-urlencoded"))
        XCTAssertNil(WebUploadForm.parse(good, contentType: "multipart/form-data"))
        XCTAssertNil(WebUploadForm.parse(good, contentType: "multipart/form-data; boundary=\(String(repeating: "x", count: 71))"))
        for cut in 0..<good.count - 4 {
            _ = WebUploadForm.parse(Array(good.prefix(cut)), contentType: "multipart/form-data; boundary=b")
        }
        var random = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let junk = (0..<Int.random(in: 0...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            _ = WebUploadForm.parse(Array("--b\r\n".utf8) + junk, contentType: "multipart/form-data; boundary=b")
        }
        let many = body("b", (0..<40).map { ("f\($0)", nil, [UInt8(ascii: "x")]) })
        XCTAssertNil(WebUploadForm.parse(many, contentType: "multipart/form-data; boundary=b"))  // over WebMultipart.maximumParts: refused
        let enough = body("b", (0..<WebMultipart.maximumParts).map { ("f\($0)", nil, [UInt8(ascii: "x")]) })
        XCTAssertEqual(WebUploadForm.parse(enough, contentType: "multipart/form-data; boundary=b")?.parts.count, WebMultipart.maximumParts)
    }
}
