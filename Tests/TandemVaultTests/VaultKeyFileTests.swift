import Foundation
import Sodium
import XCTest
@testable import TandemVault

final class VaultKeyFileTests: XCTestCase {
    var dir: URL!
    override func setUpWithError() throws { dir = try makeTempDirectory(self) }

    let pin = Array("1234".utf8)
    let decoyPIN = Array("9999".utf8)

    func testPINsOpenTheirSlotsAndNothingElse() throws {
        let (file, repo) = try VaultKeyFile.initializeVault(in: dir, pin: pin, parameters: .testing)
        XCTAssertEqual(allFiles(under: dir).filter { $0.path.contains("/index/") }.count, 2, "both vaults exist from the start")
        XCTAssertNil(try file.unlock(pin: Array("0000".utf8)))
        XCTAssertNil(try file.unlock(pin: decoyPIN), "no decoy yet")
        let opened = try XCTUnwrap(try file.unlock(pin: pin))
        XCTAssertEqual(opened.slot, .a)
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: opened.masterKey).indexFileURL(), repo.indexFileURL())

        let sizeWithout = try Data(contentsOf: VaultKeyFile.url(in: dir)).count
        assertVaultError(.invalidArgument) { try file.setDecoy(pin: self.pin, masterKey: opened.masterKey) }
        try file.setDecoy(pin: decoyPIN, masterKey: opened.masterKey)
        XCTAssertEqual(try Data(contentsOf: VaultKeyFile.url(in: dir)).count, sizeWithout)
        XCTAssertEqual(sizeWithout, VaultKeyFile.fileSize)

        let loaded = try VaultKeyFile.load(from: dir)
        let decoy = try XCTUnwrap(try loaded.unlock(pin: decoyPIN))
        XCTAssertEqual(decoy.slot, .b)
        let decoyRepo = try VaultRepository.open(at: dir, masterKey: decoy.masterKey)
        XCTAssertNotEqual(decoyRepo.indexFileURL(), repo.indexFileURL())
        XCTAssertEqual(try loaded.unlock(pin: pin)?.slot, .a)
        // The decoy's key cannot set a decoy or a recovery wrapping (it is not the real key).
        assertVaultError(.wrongSecret) { try loaded.setDecoy(pin: Array("5555".utf8), masterKey: decoy.masterKey) }
        assertVaultError(.wrongSecret) { try loaded.wrapForRecovery(code: randomBytes(16), masterKey: decoy.masterKey) }
        XCTAssertThrowsError(try VaultKeyFile.create(in: dir, pin: pin, parameters: .testing))
    }

    func testChangingThePINKeepsItemsReadable() throws {
        let (file, repo) = try VaultKeyFile.initializeVault(in: dir, pin: pin, parameters: .testing)
        let item = try repo.importData([1, 2, 3], name: "x", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        let master = try XCTUnwrap(try file.unlock(pin: pin)).masterKey
        try file.setDecoy(pin: decoyPIN, masterKey: master)
        assertVaultError(.wrongSecret) { try file.changePIN(old: Array("1111".utf8), new: Array("4321".utf8)) }
        assertVaultError(.invalidArgument) { try file.changePIN(old: self.pin, new: self.decoyPIN) }
        try file.changePIN(old: pin, new: Array("4321".utf8))
        let loaded = try VaultKeyFile.load(from: dir)
        XCTAssertNil(try loaded.unlock(pin: pin))
        let opened = try XCTUnwrap(try loaded.unlock(pin: Array("4321".utf8)))
        XCTAssertEqual(opened.slot, .a)
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: opened.masterKey).read(item.id), [1, 2, 3])
        XCTAssertEqual(try loaded.unlock(pin: decoyPIN)?.slot, .b)
    }

    func testRecoveryCodeOpensTheRealVault() throws {
        let (file, _) = try VaultKeyFile.initializeVault(in: dir, pin: pin, parameters: .testing)
        let code = randomBytes(16)
        let master = try XCTUnwrap(try file.unlock(pin: pin)).masterKey
        XCTAssertNil(try file.unlock(recoveryCode: code))
        let size = try Data(contentsOf: file.url).count
        assertVaultError(.invalidArgument) { try file.wrapForRecovery(code: randomBytes(15), masterKey: master) }
        try file.wrapForRecovery(code: code, masterKey: master)
        XCTAssertEqual(try Data(contentsOf: file.url).count, size)
        let loaded = try VaultKeyFile.load(from: dir)
        XCTAssertTrue(loaded.hasRecovery)
        XCTAssertEqual(try loaded.unlock(recoveryCode: code)?.exposedCopy, master.exposedCopy)
        XCTAssertNil(try loaded.unlock(recoveryCode: randomBytes(16)))
        // A PIN change does not touch the recovery wrapping.
        try loaded.changePIN(old: pin, new: Array("7777".utf8))
        XCTAssertEqual(try VaultKeyFile.load(from: dir).unlock(recoveryCode: code)?.exposedCopy, master.exposedCopy)
    }

    func testACorruptKeysFileIsAClearError() throws {
        _ = try VaultKeyFile.create(in: dir, pin: pin, parameters: .testing)
        let url = VaultKeyFile.url(in: dir)
        let good = try Data(contentsOf: url)
        func expectCorrupt(_ data: Data, _ line: UInt = #line) throws {
            try data.write(to: url)
            assertVaultError(.corrupt, line: line) { try VaultKeyFile.load(from: self.dir) }
        }
        try expectCorrupt(good.prefix(100))
        try expectCorrupt(good + Data([0]))
        try expectCorrupt(Data())
        var badMagic = good; badMagic[0] ^= 1; try expectCorrupt(badMagic)
        var badVersion = good; badVersion[4] = 9; try expectCorrupt(badVersion)
        var hugeMemory = good; hugeMemory[13] = 0xff; try expectCorrupt(hugeMemory)
        var zeroOps = good; for i in 5..<13 { zeroOps[i] = 0 }; try expectCorrupt(zeroOps)
        var badFlags = good; badFlags[21] = 4; try expectCorrupt(badFlags)
        // A flipped byte inside a slot loads (its structure is fine) but opens nothing.
        var badSlot = good; badSlot[60] ^= 1
        try badSlot.write(to: url)
        XCTAssertNil(try VaultKeyFile.load(from: dir).unlock(pin: pin))
        try FileManager.default.removeItem(at: url)
        assertVaultError(.notFound) { try VaultKeyFile.load(from: self.dir) }
    }

    /// Measures the default parameters (run with TANDEM_MEASURE_ARGON2=1, in release).
    func testMeasureDefaultParameters() throws {
        try XCTSkipUnless(ProcessInfo.processInfo.environment["TANDEM_MEASURE_ARGON2"] != nil, "set TANDEM_MEASURE_ARGON2=1")
        let p = VaultKeyParameters.default
        var times: [Double] = []
        for _ in 0..<3 {
            let start = DispatchTime.now()
            _ = try PasswordHash.deriveKey(length: 32, passphrase: pin, salt: randomBytes(16), opsLimit: p.opsLimit, memLimit: p.memLimitBytes)
            times.append(Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9)
        }
        print("Argon2id ops \(p.opsLimit) mem \(p.memLimitBytes >> 20) MiB: \(times.map { String(format: "%.3f s", $0) })")
    }
}
