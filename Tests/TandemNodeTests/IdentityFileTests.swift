import Foundation
import Sodium
import TandemProtocol
import XCTest
@testable import TandemNode

final class IdentityFileTests: XCTestCase {
    private func tempDir() -> DataDirectory {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-test-\(UUID().uuidString)")
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return DataDirectory(url: url)
    }

    func testCreateLoadAndModes() throws {
        let dir = tempDir()
        let pair = try IdentityFile.create(in: dir)
        let attrs = try FileManager.default.attributesOfItem(atPath: dir.identityFile.path)
        XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let dirAttrs = try FileManager.default.attributesOfItem(atPath: dir.path)
        XCTAssertEqual((dirAttrs[.posixPermissions] as? NSNumber)?.intValue, 0o700)
        XCTAssertEqual(try IdentityFile.load(from: dir).publicKey, pair.publicKey)
        XCTAssertEqual(try IdentityFile.publicKey(in: dir), pair.publicKey)
        XCTAssertThrowsError(try IdentityFile.create(in: dir))
        XCTAssertEqual(try IdentityFile.load(from: dir).publicKey, pair.publicKey, "a refused init keeps the old key")
        chmod(dir.identityFile.path, 0o640)
        XCTAssertThrowsError(try IdentityFile.load(from: dir)) { XCTAssertTrue("\($0)".contains("chmod 600")) }
    }

    func testPassphraseSealing() throws {
        let dir = tempDir()
        let pair = try IdentityFile.create(in: dir, passphrase: Array("secret".utf8))
        XCTAssertEqual(IdentityFile.isEncrypted(in: dir), true)
        XCTAssertEqual(try IdentityFile.load(from: dir, passphrase: Array("secret".utf8)).publicKey, pair.publicKey)
        XCTAssertThrowsError(try IdentityFile.load(from: dir, passphrase: Array("Secret".utf8))) {
            XCTAssertEqual(($0 as? TandemError)?.exitCode, TandemError.authenticationExitCode)
        }
        XCTAssertThrowsError(try IdentityFile.load(from: dir))
        let text = try String(contentsOf: dir.identityFile, encoding: .utf8)
        XCTAssertFalse(text.contains(hexString(pair.seed())), "the seed never appears in clear")
    }

    func testDamagedFilesAreReportedNotCrashed() throws {
        let dir = tempDir()
        try IdentityFile.create(in: dir)
        for junk in ["", "{}", "not json", #"{"format":"tandem-identity-v1","public_key":"zz"}"#] {
            try IdentityFile.writePrivately(Data(junk.utf8), to: dir.identityFile)
            XCTAssertThrowsError(try IdentityFile.load(from: dir), junk)
        }
        let missing = tempDir()
        XCTAssertThrowsError(try IdentityFile.load(from: missing)) {
            XCTAssertEqual(($0 as? TandemError)?.exitCode, TandemError.notInitializedExitCode)
        }
    }

    func testHostPortParsing() throws {
        XCTAssertTrue(try NodeConfiguration.parseHostPort("127.0.0.1:80") == ("127.0.0.1", 80))
        XCTAssertTrue(try NodeConfiguration.parseHostPort(":81") == ("0.0.0.0", 81))
        XCTAssertTrue(try NodeConfiguration.parseHostPort("82") == ("0.0.0.0", 82))
        XCTAssertTrue(try NodeConfiguration.parseHostPort("[::1]:83") == ("::1", 83))
        for bad in ["host:", "host:x", "1.2.3.4:65536", "[::1]83", "[::1"] {
            XCTAssertThrowsError(try NodeConfiguration.parseHostPort(bad), bad)
        }
    }
}
