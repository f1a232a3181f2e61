import Foundation
import Sodium
@testable import TandemNet
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

    private func passphrase(_ text: String) -> SecureBytes { SecureBytes(Array(text.utf8)) }

    private func sealedRecord(_ dir: DataDirectory) throws -> IdentityFile.Plain {
        try JSONDecoder().decode(IdentityFile.Plain.self, from: Data(contentsOf: dir.identityFile))
    }

    private func rewrite(_ dir: DataDirectory, _ change: (inout IdentityFile.Plain) throws -> Void) throws {
        var record = try sealedRecord(dir)
        try change(&record)
        try IdentityFile.writePrivately(try JSONEncoder().encode(record), to: dir.identityFile)
    }

    func testPassphraseSealing() throws {
        let dir = tempDir()
        let pair = try IdentityFile.create(in: dir, passphrase: passphrase("secret"))
        XCTAssertEqual(IdentityFile.isEncrypted(in: dir), true)
        // New keys use Argon2id MODERATE.
        let sealed = try XCTUnwrap(try sealedRecord(dir).encrypted_seed)
        XCTAssertEqual(sealed.opslimit, PasswordHash.opsLimitModerate)
        XCTAssertEqual(sealed.memlimit, PasswordHash.memLimitModerate)
        XCTAssertEqual(sealed.memlimit, 256 << 20)
        XCTAssertEqual(try IdentityFile.load(from: dir, passphrase: passphrase("secret")).publicKey, pair.publicKey)
        XCTAssertThrowsError(try IdentityFile.load(from: dir, passphrase: passphrase("Secret"))) {
            XCTAssertEqual(($0 as? TandemError)?.exitCode, TandemError.authenticationExitCode)
        }
        XCTAssertThrowsError(try IdentityFile.load(from: dir))
        let text = try String(contentsOf: dir.identityFile, encoding: .utf8)
        XCTAssertFalse(text.contains(hexString(pair.seed())), "the seed never appears in clear")
    }

    /// Key files sealed before MODERATE (with INTERACTIVE limits) still open.
    func testInteractiveFilesStillOpen() throws {
        let dir = tempDir()
        let pair = try IdentityFile.create(in: dir)
        var seed = pair.seed()
        defer { Sodium.wipe(&seed) }
        let salt = Sodium.randomBytes(PasswordHash.saltBytes)
        let nonce = Sodium.randomBytes(XChaCha20Poly1305.nonceBytes)
        let key = try PasswordHash.deriveKey(length: 32, passphrase: Array("old".utf8), salt: salt,
                                             opsLimit: PasswordHash.opsLimitInteractive, memLimit: PasswordHash.memLimitInteractive)
        let ct = try XChaCha20Poly1305.seal(seed, additionalData: pair.publicKey, nonce: nonce, key: key)
        try rewrite(dir) {
            $0.seed = nil
            $0.encrypted_seed = IdentityFile.Sealed(kdf: "argon2id13", opslimit: PasswordHash.opsLimitInteractive,
                                                    memlimit: PasswordHash.memLimitInteractive, salt: hexString(salt),
                                                    aead: "xchacha20poly1305-ietf", nonce: hexString(nonce), ciphertext: hexString(ct))
        }
        XCTAssertEqual(try IdentityFile.load(from: dir, passphrase: passphrase("old")).publicKey, pair.publicKey)
        XCTAssertThrowsError(try IdentityFile.load(from: dir, passphrase: passphrase("new"))) {
            XCTAssertEqual(($0 as? TandemError)?.exitCode, TandemError.authenticationExitCode)
        }
    }

    /// A key file cannot make `load` spend minutes or gigabytes (nor accept a trivially cheap
    /// KDF): limits outside INTERACTIVE...SENSITIVE passes and 64 MiB...1 GiB are refused with one
    /// clear error, before any key derivation.
    func testKDFLimitsFromTheFileAreCapped() throws {
        let dir = tempDir()
        try IdentityFile.create(in: dir, passphrase: passphrase("secret"))
        let original = try XCTUnwrap(try sealedRecord(dir).encrypted_seed)
        let cases: [(UInt64, Int)] = [
            (PasswordHash.opsLimitSensitive + 1, original.memlimit),
            (UInt64.max, original.memlimit),
            (PasswordHash.opsLimitInteractive - 1, original.memlimit),
            (1, original.memlimit),
            (original.opslimit, (1 << 30) + 1),
            (original.opslimit, 4 << 30),
            (original.opslimit, Int.max),
            (original.opslimit, PasswordHash.memLimitInteractive - 1),
            (original.opslimit, 8192),
            (original.opslimit, -1),
        ]
        for (ops, mem) in cases {
            try rewrite(dir) { $0.encrypted_seed?.opslimit = ops; $0.encrypted_seed?.memlimit = mem }
            let started = Date()
            XCTAssertThrowsError(try IdentityFile.load(from: dir, passphrase: passphrase("secret")), "\(ops) \(mem)") {
                XCTAssertTrue("\($0)".contains("Argon2id limits outside the accepted range"), "\($0)")
            }
            XCTAssertLessThan(Date().timeIntervalSince(started), 5, "refused before deriving")
        }
        // The limits at both ends of the range are accepted (SENSITIVE, 1 GiB is slow: not run here).
        try rewrite(dir) { $0.encrypted_seed?.opslimit = original.opslimit; $0.encrypted_seed?.memlimit = original.memlimit }
        XCTAssertNoThrow(try IdentityFile.load(from: dir, passphrase: passphrase("secret")))
        XCTAssertTrue(IdentityFile.acceptedOpsLimits.contains(PasswordHash.opsLimitInteractive))
        XCTAssertTrue(IdentityFile.acceptedOpsLimits.contains(PasswordHash.opsLimitSensitive))
        XCTAssertTrue(IdentityFile.acceptedMemLimits.contains(PasswordHash.memLimitInteractive))
        XCTAssertTrue(IdentityFile.acceptedMemLimits.contains(1 << 30))
    }

    /// The temporary file is created O_EXCL|O_NOFOLLOW: a symlink planted under its name is not
    /// written through; a symlink at the target is replaced, not followed; the mode is 0600 and the
    /// data directory 0700 even under umask 000; no temporary file is left behind.
    func testSafeTemporaryFileAndModesWhateverTheUmask() throws {
        let old = umask(0)
        defer { umask(old) }
        let dir = tempDir()
        try IdentityFile.create(in: dir)
        let dirAttrs = try FileManager.default.attributesOfItem(atPath: dir.path)
        XCTAssertEqual((dirAttrs[.posixPermissions] as? NSNumber)?.intValue, 0o700)
        let attrs = try FileManager.default.attributesOfItem(atPath: dir.identityFile.path)
        XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)

        let victim = dir.url.appendingPathComponent("victim")
        try Data("untouched".utf8).write(to: victim)
        let planted = dir.url.appendingPathComponent("planted.tmp").path
        XCTAssertEqual(symlink(victim.path, planted), 0)
        XCTAssertThrowsError(try IdentityFile.writePrivately(Data("evil".utf8), to: dir.identityFile, temporaryPath: planted))
        XCTAssertEqual(try String(contentsOf: victim, encoding: .utf8), "untouched")
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: planted), victim.path, "the planted link is left alone")
        XCTAssertNoThrow(try IdentityFile.load(from: dir), "the key is unchanged")
        unlink(planted)

        try FileManager.default.removeItem(at: dir.identityFile)
        XCTAssertEqual(symlink(victim.path, dir.identityFile.path), 0)
        try IdentityFile.create(in: dir, force: true)
        XCTAssertEqual(try String(contentsOf: victim, encoding: .utf8), "untouched")
        XCTAssertNil(try? FileManager.default.destinationOfSymbolicLink(atPath: dir.identityFile.path), "a regular file now")
        XCTAssertNoThrow(try IdentityFile.load(from: dir))

        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".tmp.") }
        XCTAssertEqual(leftovers, [])
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
