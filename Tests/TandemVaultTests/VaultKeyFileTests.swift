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
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: opened.masterKey).indexFileURL(), repo.indexFileURL())

        let sizeWithout = try Data(contentsOf: VaultKeyFile.url(in: dir)).count
        assertVaultError(.invalidArgument) { try file.setDecoy(pin: self.pin, masterKey: opened.masterKey) }
        try file.setDecoy(pin: decoyPIN, masterKey: opened.masterKey)
        XCTAssertEqual(try Data(contentsOf: VaultKeyFile.url(in: dir)).count, sizeWithout)
        XCTAssertEqual(sizeWithout, VaultKeyFile.fileSize)

        let loaded = try VaultKeyFile.load(from: dir)
        let decoy = try XCTUnwrap(try loaded.unlock(pin: decoyPIN))
        XCTAssertNotEqual(decoy.slot, opened.slot, "each PIN opens its own record")
        let decoyRepo = try VaultRepository.open(at: dir, masterKey: decoy.masterKey)
        XCTAssertNotEqual(decoyRepo.indexFileURL(), repo.indexFileURL())
        XCTAssertEqual(try loaded.unlock(pin: pin)?.slot, opened.slot)
        // The decoy's key cannot set a decoy (its link opens, but to no record).
        assertVaultError(.wrongSecret) { try loaded.setDecoy(pin: Array("5555".utf8), masterKey: decoy.masterKey) }
        XCTAssertThrowsError(try VaultKeyFile.create(in: dir, pin: pin, parameters: .testing))
    }

    /// The real vault's record is first or second at random: over 24 files both happen.
    func testTheRealRecordIsNotFirstByFormat() throws {
        var positions = Set<VaultKeySlot>()
        for i in 0..<24 {
            let d = dir.appendingPathComponent("k\(i)")
            let (file, _, _) = try VaultKeyFile.create(in: d, pin: pin, parameters: .testing)
            positions.insert(try XCTUnwrap(try file.unlock(pin: pin)).slot)
        }
        XCTAssertEqual(positions, [.a, .b])
    }

    /// Change-PIN works with either PIN and rewrites only that vault's PIN slot; a new PIN that
    /// opens the other vault is refused.
    func testChangingEitherPINChangesOnlyItsOwnSlot() throws {
        let (file, repo) = try VaultKeyFile.initializeVault(in: dir, pin: pin, parameters: .testing)
        let item = try repo.importData([1, 2, 3], name: "x", type: .document, album: nil, createdAtMs: nil, nowMs: 1)
        let master = try XCTUnwrap(try file.unlock(pin: pin)).masterKey
        try file.setDecoy(pin: decoyPIN, masterKey: master)
        XCTAssertThrowsError(try file.changePIN(old: Array("1111".utf8), new: Array("4321".utf8))) {
            XCTAssertEqual($0 as? VaultKeyFile.ChangeRefusal, .wrongPIN)
        }
        XCTAssertThrowsError(try file.changePIN(old: pin, new: decoyPIN)) { XCTAssertEqual($0 as? VaultKeyFile.ChangeRefusal, .taken) }
        XCTAssertThrowsError(try file.changePIN(old: decoyPIN, new: pin)) { XCTAssertEqual($0 as? VaultKeyFile.ChangeRefusal, .taken) }

        let realSlot = try XCTUnwrap(try file.unlock(pin: pin)).slot
        let before = try Array(Data(contentsOf: file.url))
        try file.changePIN(old: pin, new: Array("4321".utf8))
        let afterReal = try Array(Data(contentsOf: file.url))
        XCTAssertEqual(changedRegions(before, afterReal), [realSlot.position], "only the real vault's PIN slot changed")

        let decoySlot = try XCTUnwrap(try file.unlock(pin: decoyPIN)).slot
        try VaultKeyFile.load(from: dir).changePIN(old: decoyPIN, new: Array("8642".utf8))
        let afterDecoy = try Array(Data(contentsOf: file.url))
        XCTAssertEqual(changedRegions(afterReal, afterDecoy), [decoySlot.position], "only the decoy's PIN slot changed")

        let loaded = try VaultKeyFile.load(from: dir)
        XCTAssertNil(try loaded.unlock(pin: pin))
        XCTAssertNil(try loaded.unlock(pin: decoyPIN))
        let opened = try XCTUnwrap(try loaded.unlock(pin: Array("4321".utf8)))
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: opened.masterKey).read(item.id), [1, 2, 3])
        XCTAssertEqual(try loaded.unlock(pin: Array("8642".utf8))?.slot, decoySlot)
    }

    /// Which records' PIN slots differ between two version 2 files.
    func changedRegions(_ a: [UInt8], _ b: [UInt8]) -> [Int] {
        XCTAssertEqual(a.count, VaultKeyFile.fileSize)
        XCTAssertEqual(a.prefix(22), b.prefix(22))
        var out: [Int] = []
        for r in 0..<2 {
            let start = 22 + r * VaultKeyFile.recordBytes
            let pinSlot = start..<(start + VaultKeyFile.slotBytes)
            let rest = (start + VaultKeyFile.slotBytes)..<(start + VaultKeyFile.recordBytes)
            XCTAssertEqual(a[rest], b[rest], "record \(r): recovery and link unchanged")
            if a[pinSlot] != b[pinSlot] { out.append(r) }
        }
        return out
    }

    func testEachVaultsRecoveryCodeOpensItsOwnVault() throws {
        let realCode = randomBytes(16), spareCode = randomBytes(16)
        let (file, master, spare) = try VaultKeyFile.create(in: dir, pin: pin, parameters: .testing,
                                                             recoveryCodes: (realCode, spareCode))
        XCTAssertTrue(file.hasRecovery)
        XCTAssertEqual(try file.unlock(recoveryCode: realCode)?.exposedCopy, master.exposedCopy)
        XCTAssertEqual(try file.unlock(recoveryCode: spareCode)?.exposedCopy, spare.exposedCopy)
        XCTAssertNil(try file.unlock(recoveryCode: randomBytes(16)))
        assertVaultError(.invalidArgument) { try file.wrapForRecovery(code: randomBytes(15), masterKey: master) }
        let newCode = randomBytes(16)
        try file.wrapForRecovery(code: newCode, masterKey: master)
        let loaded = try VaultKeyFile.load(from: dir)
        XCTAssertEqual(try loaded.unlock(recoveryCode: newCode)?.exposedCopy, master.exposedCopy)
        XCTAssertNil(try loaded.unlock(recoveryCode: realCode))
        XCTAssertEqual(try loaded.unlock(recoveryCode: spareCode)?.exposedCopy, spare.exposedCopy, "the other vault's code is untouched")
        // A PIN change does not touch the recovery wrapping.
        try loaded.changePIN(old: pin, new: Array("7777".utf8))
        XCTAssertEqual(try VaultKeyFile.load(from: dir).unlock(recoveryCode: newCode)?.exposedCopy, master.exposedCopy)
        // The link: the real key finds the spare, the spare's key finds nothing.
        XCTAssertEqual(try loaded.spareKey(masterKey: master)?.exposedCopy, spare.exposedCopy)
        XCTAssertNil(try loaded.spareKey(masterKey: spare))
    }

    /// Offline guessing: the keys file and the right PIN open nothing without the pepper that comes
    /// from the node's identity key; with it they do.
    func testThePINAloneOpensNothingWithoutTheIdentitysPepper() throws {
        let identity = SigningKeyPair.generate()
        let pepper = VaultKeyFile.pepper(identitySecretKey: identity.secretKey)
        let (file, _) = try VaultKeyFile.initializeVault(in: dir, pin: pin, parameters: .testing, pepper: pepper)
        XCTAssertNotNil(try file.unlock(pin: pin))
        XCTAssertNil(try VaultKeyFile.load(from: dir).unlock(pin: pin), "no pepper")
        let other = VaultKeyFile.pepper(identitySecretKey: SigningKeyPair.generate().secretKey)
        XCTAssertNil(try VaultKeyFile.load(from: dir, pepper: other).unlock(pin: pin), "another identity's pepper")
        XCTAssertNotNil(try VaultKeyFile.load(from: dir, pepper: pepper).unlock(pin: pin))
    }

    /// A version 1 file (first slot real, no pepper) still opens, and the first PIN upgrades it to
    /// version 2 keeping both vaults, the recovery code and the spare's content.
    func testAVersion1FileOpensAndUpgrades() throws {
        let p = VaultKeyParameters.testing
        let masterA = VaultKeys.randomMasterKey(), masterB = VaultKeys.randomMasterKey()
        let code = randomBytes(16)
        var header: [UInt8] = Array("TDMK".utf8) + [1]
        header += withUnsafeBytes(of: p.opsLimit.bigEndian) { Array($0) }
        header += withUnsafeBytes(of: UInt64(p.memLimitBytes).bigEndian) { Array($0) }
        func slot(_ mk: SecretBytes, _ secret: [UInt8]?, key: SecretBytes? = nil, _ label: String) throws -> [UInt8] {
            let salt = randomBytes(16), nonce = randomBytes(24)
            let k = try key ?? PasswordHash.deriveKey(length: 32, passphrase: secret!, salt: salt, opsLimit: p.opsLimit, memLimit: p.memLimitBytes)
            return (secret == nil ? [] : salt) + nonce
                + (try XChaCha20Poly1305.seal(mk.exposedCopy, additionalData: header + Array(label.utf8), nonce: nonce, key: k))
        }
        let bytes = header + [1] + (try slot(masterA, pin, "A")) + (try slot(masterB, decoyPIN, "B")) + (try slot(masterA, code, "R"))
            + (try slot(masterB, nil, key: try VaultKeyFile.linkKey(masterA), "L"))
        XCTAssertEqual(bytes.count, VaultKeyFile.legacyFileSize)
        XCTAssertTrue(VaultKeyFile.isKeysFileSize(bytes.count))
        try FileIO.writeAtomically(bytes, to: VaultKeyFile.url(in: dir))
        let pepper = VaultKeyFile.pepper(identitySecretKey: SigningKeyPair.generate().secretKey)
        let old = try VaultKeyFile.load(from: dir, pepper: pepper)
        XCTAssertEqual(old.formatVersion, 1)
        XCTAssertEqual(try old.unlock(pin: pin)?.masterKey.exposedCopy, masterA.exposedCopy)
        XCTAssertEqual(try old.unlock(pin: decoyPIN)?.masterKey.exposedCopy, masterB.exposedCopy)
        XCTAssertEqual(try old.unlock(recoveryCode: code)?.exposedCopy, masterA.exposedCopy)
        XCTAssertEqual(try old.spareKey(masterKey: masterA)?.exposedCopy, masterB.exposedCopy)
        XCTAssertNil(try old.upgraded(pin: decoyPIN, masterKey: masterB, codes: (randomBytes(16), randomBytes(16))), "only the first PIN upgrades")

        let spareCode = randomBytes(16)
        let new = try XCTUnwrap(try old.upgraded(pin: pin, masterKey: masterA, codes: (code, spareCode)))
        XCTAssertEqual(try Data(contentsOf: VaultKeyFile.url(in: dir)).count, VaultKeyFile.fileSize)
        let loaded = try VaultKeyFile.load(from: dir, pepper: pepper)
        XCTAssertEqual(loaded.formatVersion, 2)
        XCTAssertEqual(try loaded.unlock(pin: pin)?.masterKey.exposedCopy, masterA.exposedCopy)
        XCTAssertNil(try VaultKeyFile.load(from: dir).unlock(pin: pin), "peppered now")
        XCTAssertNil(try loaded.unlock(pin: decoyPIN), "the decoy PIN is set again after an upgrade")
        XCTAssertEqual(try loaded.unlock(recoveryCode: code)?.exposedCopy, masterA.exposedCopy)
        XCTAssertEqual(try loaded.unlock(recoveryCode: spareCode)?.exposedCopy, masterB.exposedCopy)
        try new.setDecoy(pin: decoyPIN, masterKey: masterA)
        XCTAssertEqual(try VaultKeyFile.load(from: dir, pepper: pepper).unlock(pin: decoyPIN)?.masterKey.exposedCopy, masterB.exposedCopy,
                       "the spare keeps its key (and so its content)")
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
        // A flipped byte inside both PIN slots loads (its structure is fine) but opens nothing.
        var badSlot = good; badSlot[60] ^= 1; badSlot[60 + VaultKeyFile.recordBytes] ^= 1
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
