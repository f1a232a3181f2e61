import Foundation
import GRDB
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import Sodium
import TandemNet
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import TandemVault
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeVault

/// The PIN rules as a value: the lockout schedule, what counts, the break-in log.
final class PinGuardTests: XCTestCase {
    func testScheduleOfWaits() {
        var g = PinGuard()
        var now: Int64 = 1_000_000
        var waits: [Int64?] = []
        for _ in 1...11 {
            g.failed(nowMs: now)
            waits.append(g.wait(nowMs: now))
            now += 10_000_000 // far past any wait, so every failure is an allowed attempt
        }
        XCTAssertEqual(waits, [nil, nil, 30_000, 30_000, 120_000, 120_000, 120_000, 900_000, 900_000, 3_600_000, 3_600_000])
    }

    func testSuccessResetsTheCounterButKeepsTheLog() {
        var g = PinGuard()
        for i in 0..<4 { g.failed(nowMs: Int64(i)) }
        XCTAssertEqual(g.failures, 4)
        XCTAssertEqual(g.breakIns, [.init(atMs: 2, attempt: 3), .init(atMs: 3, attempt: 4)], "logged from the third failure on: when, and which in a row")
        g.succeeded()
        XCTAssertEqual(g.failures, 0)
        XCTAssertNil(g.wait(nowMs: 10))
        XCTAssertEqual(g.breakIns.count, 2)
        g.failed(nowMs: 20)
        XCTAssertNil(g.wait(nowMs: 20), "after a right PIN the count starts again")
    }

    func testLogKeepsTheLastTwenty() {
        var g = PinGuard()
        for i in 0..<40 { g.failed(nowMs: Int64(i)) }
        XCTAssertEqual(g.breakIns.count, 20)
        XCTAssertEqual(g.breakIns.first?.atMs, 20)
        XCTAssertEqual(g.breakIns.last?.atMs, 39)
    }

    func testStoredValuesAreBounded() {
        let now: Int64 = 5_000
        let g = PinGuard(failures: -3, lockedUntilMs: Int64.max, breakIns: Array(repeating: .init(atMs: 1, attempt: 3), count: 99), nowMs: now)
        XCTAssertEqual(g.failures, 0)
        XCTAssertEqual(g.wait(nowMs: now), 3_600_000, "a lockout further away than the longest wait is cut to it")
        XCTAssertEqual(g.breakIns.count, 20)
    }

    func testLogEntriesAreSealedAndOpenOnlyWithTheirKey() throws {
        let identity = SigningKeyPair.generate()
        let key = VaultService.breakInLogKey(identity: identity)
        let entry = PinGuard.BreakIn(atMs: 1_700_000_000_123, attempt: 4)
        let sealed = try BreakInLog.seal(entry, key: key)
        XCTAssertEqual(sealed.first, 1)
        XCTAssertEqual(BreakInLog.open(sealed, key: key), entry)
        XCTAssertNil(BreakInLog.open(sealed, key: VaultService.breakInLogKey(identity: SigningKeyPair.generate())), "another identity's key opens nothing")
        XCTAssertNil(BreakInLog.open(sealed, key: nil))
        var flipped = sealed
        flipped[flipped.count - 1] ^= 1
        XCTAssertNil(BreakInLog.open(flipped, key: key))
        XCTAssertNil(BreakInLog.open(Data(), key: key))
        XCTAssertNil(BreakInLog.open(Data([7, 1, 2]), key: key))
        XCTAssertNil(BreakInLog.open(Data([0, 1, 2]), key: key), "a clear entry of the wrong length")
        // What migration v8 left of an old entry: its time, in clear.
        XCTAssertEqual(BreakInLog.open(Data([0]) + Data(BreakInLog.plain(.init(atMs: 5, attempt: 0))), key: nil), .init(atMs: 5, attempt: 0))
    }
}

/// The vault service over a real store file and vault directory: the lockout survives a restart,
/// attempts refused during a wait do not count, decoy and real vaults stay apart, change-PIN keeps
/// every item, auto-lock 0 locks after each operation.
final class VaultServiceTests: XCTestCase {
    var root: URL!
    let clock = NIOLockedValueBox<Int64>(1_700_000_000_000)
    let identity = SigningKeyPair.generate()

    override func setUpWithError() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("vault-service-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: root)
    }

    /// A fresh service over the same files: what a node restart (or kill -9) leaves.
    func makeService() throws -> (VaultService, NodeStore) {
        let store = try NodeStore(path: root.appendingPathComponent("node.sqlite").path)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        var configuration = VaultService.Configuration()
        configuration.keyParameters = .testing
        configuration.breakInLogKey = VaultService.breakInLogKey(identity: identity)
        let clock = self.clock
        let service = VaultService(directory: root.appendingPathComponent("vault"), store: store,
                                   events: EventBus(log: StoreEventLog(store: store), logger: logger),
                                   health: StoreHealth(logger: logger), configuration: configuration,
                                   group: MultiThreadedEventLoopGroup.singleton, logger: logger,
                                   now: { clock.withLockedValue { $0 } })
        return (service, store)
    }

    func code(_ body: () async throws -> Void) async -> String? {
        do {
            try await body()
            return nil
        } catch let e as ControlError {
            return e.code
        } catch {
            return "\(error)"
        }
    }

    func items(_ service: VaultService, pin: String? = nil) async throws -> [String] {
        try await service.withVault(pin: pin) { v in v.repository.items.map(\.name).sorted() }
    }

    func testLockoutSurvivesARestartAndRefusedAttemptsDoNotCount() async throws {
        var (service, _) = try makeService()
        try await service.initialize(pin: "2468")
        service.lockNow(reason: "test")
        for _ in 0..<2 { let c = await code { try await service.unlock(pin: "1111") }; XCTAssertEqual(c, "wrong_pin") }
        let third = await code { try await service.unlock(pin: "1111") }
        XCTAssertEqual(third, "wrong_pin")
        // Even the right PIN is refused during the wait, and the refusal is not counted.
        let refused = await code { try await service.unlock(pin: "2468") }
        XCTAssertEqual(refused, "locked_out")

        // Restart: a new service over the same store still waits.
        (service, _) = try makeService()
        let afterRestart = await code { try await service.unlock(pin: "2468") }
        XCTAssertEqual(afterRestart, "locked_out", "a restart never shortens a lockout")
        let status = await service.status()
        XCTAssertEqual(status["failed_attempts"]?.intValue, 3)
        XCTAssertEqual(status["retry_in_ms"]?.intValue, 30_000)

        clock.withLockedValue { $0 += 30_001 }
        let fourth = await code { try await service.unlock(pin: "0000") }
        XCTAssertEqual(fourth, "wrong_pin")
        clock.withLockedValue { $0 += 30_001 }
        try await service.unlock(pin: "2468")
        let reset = await service.status()
        XCTAssertEqual(reset["failed_attempts"]?.intValue, 0)
        let log = try await service.breakIns(pin: nil)
        XCTAssertEqual(log.count, 2, "the third and fourth wrong PINs are logged")
        XCTAssertEqual(log.map(\.attempt), [3, 4], "when, and which wrong PIN in a row")
    }

    /// Four one-digit typos of the owner's PIN: nothing of them is anywhere in node.sqlite (its
    /// bytes, its write-ahead log, any row), and the owner still sees when and how many.
    func testBreakInsKeepNoDigitOfAWrongPIN() async throws {
        var (service, store) = try makeService()
        try await service.initialize(pin: "483920")
        service.lockNow(reason: "test")
        let typos = ["583920", "473920", "481920", "483970"]
        var times: [Int64] = []
        for typo in typos {
            clock.withLockedValue { $0 += 60_000 }  // past any wait: each one is a counted attempt
            times.append(clock.withLockedValue { $0 })
            let c = await code { try await service.unlock(pin: typo) }
            XCTAssertEqual(c, "wrong_pin")
        }
        let needles = (typos + ["483920"]).map { Array($0.utf8) } + [Array("•".utf8)]
        // Foundation's search (built optimised): the store's files are megabytes (its log is sized at
        // open), too many for a slice-by-slice scan in a debug build (48 s).
        func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
            Data(haystack).range(of: Data(needle)) != nil
        }
        let rows = try store.read { db -> [[UInt8]] in
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            var values: [[UInt8]] = []
            for t in tables {
                for row in try Row.fetchAll(db, sql: "SELECT * FROM \"\(t)\"") {
                    for (_, v) in row {
                        switch v.storage {
                        case .string(let s): values.append(Array(s.utf8))
                        case .blob(let d): values.append(Array(d))
                        case .int64(let i): values.append(Array(String(i).utf8))
                        case .double, .null: break
                        }
                    }
                }
            }
            return values
        }
        for value in rows {
            for n in needles { XCTAssertFalse(contains(value, n), "a row holds \(String(decoding: n, as: UTF8.self))") }
        }
        let files = ["node.sqlite", "node.sqlite-wal"].compactMap { FileManager.default.contents(atPath: root.appendingPathComponent($0).path) }
        XCTAssertFalse(files.isEmpty)
        for file in files {
            let bytes = [UInt8](file)
            for n in needles { XCTAssertFalse(contains(bytes, n), "node.sqlite holds \(String(decoding: n, as: UTF8.self))") }
        }

        // The owner (after a restart, with the right PIN) sees when, and which wrong PIN in a row.
        (service, _) = try makeService()
        clock.withLockedValue { $0 += 60_000 }
        try await service.unlock(pin: "483920")
        let log = try await service.breakIns(pin: nil)
        XCTAssertEqual(log, [PinGuard.BreakIn(atMs: times[2], attempt: 3), PinGuard.BreakIn(atMs: times[3], attempt: 4)])
    }

    func testAGuardThatCannotBeReadCountsThreeWrongPins() async throws {
        var (service, store) = try makeService()
        try await service.initialize(pin: "2468")
        service.lockNow(reason: "test")
        let c = await code { try await service.unlock(pin: "1111") }
        XCTAssertEqual(c, "wrong_pin")
        XCTAssertEqual(try store.vaultPinGuard()?.guardRow.failures, 1, "the guard is in its table")
        // A store that cannot give the guard back (here: its log's table gone) never means no wrong PIN.
        try store.batch { step in try step.write { db in try db.execute(sql: "DROP TABLE vaultBreakInEntry") } }
        (service, _) = try makeService()
        let refused = await code { try await service.unlock(pin: "2468") }
        XCTAssertEqual(refused, "locked_out")
        let status = await service.status()
        XCTAssertEqual(status["failed_attempts"]?.intValue, 3)
    }

    func testDecoyAndRealVaultsStayApart() async throws {
        let (service, _) = try makeService()
        try await service.initialize(pin: "1357")
        _ = try await service.withVault(pin: nil) { v in try v.repository.importData(Array("real".utf8), name: "real.txt", type: .document, album: nil, createdAtMs: nil, nowMs: 1) }
        try await service.setDecoy(pin: "1357", decoy: "9753")
        let sameAsPIN = await code { try await service.setDecoy(pin: "1357", decoy: "1357") }
        XCTAssertNotNil(sameAsPIN)

        try await service.unlock(pin: "9753")
        let decoyStatus = await service.status()
        let decoyItems = try await items(service)
        XCTAssertEqual(decoyItems, [], "the decoy shows none of the real items")
        _ = try await service.withVault(pin: nil) { v in try v.repository.importData(Array("decoy".utf8), name: "decoy.txt", type: .document, album: nil, createdAtMs: nil, nowMs: 2) }

        try await service.unlock(pin: "1357")
        let realStatus = await service.status()
        let realItems = try await items(service)
        XCTAssertEqual(realItems, ["real.txt"])
        XCTAssertEqual(decoyStatus.objectValue?.keys.sorted(), realStatus.objectValue?.keys.sorted(), "status has the same shape in both")
    }

    func testChangePINKeepsEveryItem() async throws {
        let (service, _) = try makeService()
        try await service.initialize(pin: "1111")
        _ = try await service.withVault(pin: nil) { v in
            for i in 0..<3 { _ = try v.repository.importData(Array(repeating: UInt8(i), count: 1000), name: "f\(i)", type: .document, album: nil, createdAtMs: nil, nowMs: 1) }
        }
        try await service.changePIN(old: "1111", new: "22222")
        service.lockNow(reason: "test")
        let old = await code { try await service.unlock(pin: "1111") }
        XCTAssertEqual(old, "wrong_pin")
        try await service.unlock(pin: "22222")
        let names = try await items(service)
        XCTAssertEqual(names, ["f0", "f1", "f2"])
        let content = try await service.withVault(pin: nil) { v in try v.repository.read(v.repository.items.first { $0.name == "f2" }!.id) }
        XCTAssertEqual(content, Array(repeating: 2, count: 1000))
    }

    func testAutoLockZeroLocksAfterEachOperationAndAPINOpensForOne() async throws {
        let (service, _) = try makeService()
        try await service.initialize(pin: "4321")
        try await service.setAutoLock(ms: 0)
        _ = try await items(service)
        XCTAssertFalse(service.isUnlocked)
        let locked = await code { _ = try await self.items(service) }
        XCTAssertEqual(locked, "vault_locked")
        let names = try await items(service, pin: "4321")
        XCTAssertEqual(names, [])
        XCTAssertFalse(service.isUnlocked)
    }

    /// The code `vault init` shows opens the real vault without the PIN (what a restore needs);
    /// the decoy's code opens the decoy, as consistently as the real one.
    func testRecoveryCodeOpensTheRealVault() async throws {
        let (service, _) = try makeService()
        let code = try await service.initialize(pin: "1212")
        _ = try await service.withVault(pin: nil) { v in try v.repository.importData([1, 2, 3], name: "kept", type: .document, album: nil, createdAtMs: nil, nowMs: 1) }
        let shown = try await service.recoveryCode(pin: "1212")
        XCTAssertEqual(shown, code)
        let dir = root.appendingPathComponent("vault")
        guard let master = try VaultKeyFile.load(from: dir).unlock(recoveryCode: code.bytes) else { return XCTFail("the code opens nothing") }
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: master).items.map(\.name), ["kept"])
        try await service.setDecoy(pin: "1212", decoy: "3434")
        try await service.unlock(pin: "3434")
        let decoyCode = try await service.recoveryCode(pin: "3434")
        XCTAssertNotEqual(decoyCode, code, "the decoy shows a code of its own")
        let decoyMaster = try XCTUnwrap(try VaultKeyFile.load(from: dir).unlock(recoveryCode: decoyCode.bytes))
        XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: decoyMaster).items.map(\.name), [], "the decoy's code opens the decoy")

        // A restore seals a new code for the spare (it cannot know the old one): the next
        // `recovery show` re-wraps the decoy's recovery slot so the code shown still opens it.
        let realMaster = try XCTUnwrap(try VaultKeyFile.load(from: dir).unlock(recoveryCode: code.bytes))
        let resealed = RecoveryCode(bytes: Sodium.randomBytes(16))
        try RecoveryCodes.seal([(code, realMaster), (resealed, decoyMaster)], vault: dir)
        let shownAfter = try await service.recoveryCode(pin: "3434")
        XCTAssertEqual(shownAfter, resealed)
        XCTAssertEqual(try VaultKeyFile.load(from: dir).unlock(recoveryCode: resealed.bytes)?.exposedCopy, decoyMaster.exposedCopy)
        XCTAssertEqual(try VaultKeyFile.load(from: dir).unlock(recoveryCode: code.bytes)?.exposedCopy, realMaster.exposedCopy)
    }

    /// `vault change-pin` works with the real PIN and with the decoy PIN, each changing only its
    /// own vault's PIN; a new PIN that is the other vault's is refused and counted.
    func testChangePINWorksWithEitherPIN() async throws {
        let (service, _) = try makeService()
        try await service.initialize(pin: "1111")
        _ = try await service.withVault(pin: nil) { v in try v.repository.importData([1], name: "real", type: .document, album: nil, createdAtMs: nil, nowMs: 1) }
        try await service.setDecoy(pin: "1111", decoy: "2222")
        try await service.unlock(pin: "2222")
        _ = try await service.withVault(pin: nil) { v in try v.repository.importData([2], name: "decoy", type: .document, album: nil, createdAtMs: nil, nowMs: 1) }

        try await service.changePIN(old: "2222", new: "decoy passphrase")
        try await service.changePIN(old: "1111", new: "3333")
        let taken = await code { try await service.changePIN(old: "3333", new: "decoy passphrase") }
        XCTAssertEqual(taken?.contains("cannot be used"), true, taken ?? "accepted")
        let counted = await service.status()
        XCTAssertEqual(counted["failed_attempts"]?.intValue, 1, "a taken new PIN counts as a wrong one")

        service.lockNow(reason: "test")
        for old in ["1111", "2222"] {
            let refused = await code { try await service.unlock(pin: old) }
            XCTAssertEqual(refused, "wrong_pin")
        }
        clock.withLockedValue { $0 += 60_000 }  // past the wait three wrong PINs cost
        let real = try await items(service, pin: "3333")
        XCTAssertEqual(real, ["real"])
        try await service.unlock(pin: "decoy passphrase")
        let decoy = try await items(service)
        XCTAssertEqual(decoy, ["decoy"])
    }

    /// `vault init` stopped after each of its steps (what a kill -9 leaves: every file is written
    /// atomically) leaves no vault, or a vault whose PIN and recovery code work; a new service
    /// over what is left then makes or opens one.
    func testInitStoppedAfterAnyStepLeavesNothingOrAWholeVault() async throws {
        struct Stop: Error {}
        for step in VaultCreation.Step.allCases {
            try? FileManager.default.removeItem(at: root)
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let dir = root.appendingPathComponent("vault")
            XCTAssertThrowsError(try VaultCreation.run(vault: dir, secret: Array("1357".utf8), parameters: .testing, pepper: nil,
                                                       after: { if $0 == step { throw Stop() } }))
            let (service, _) = try makeService()  // the next start tidies
            if step.rawValue < VaultCreation.Step.keysFile.rawValue {
                XCTAssertFalse(service.exists, "step \(step)")
                let left = (try? FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("index").path)) ?? []
                XCTAssertEqual(left, [], "step \(step): index files no key opens are gone")
                XCTAssertFalse(FileManager.default.fileExists(atPath: RecoveryCodes.sealedURL(vault: dir).path), "step \(step)")
                let code = try await service.initialize(pin: "2468")
                let shown = try await service.recoveryCode(pin: "2468")
                XCTAssertEqual(shown, code)
            } else {
                XCTAssertTrue(service.exists, "step \(step)")
                XCTAssertFalse(FileManager.default.fileExists(atPath: RecoveryCodes.clearURL(vault: dir).path),
                               "step \(step): the clear code is gone once sealed")
                let code = try await service.recoveryCode(pin: "1357")
                let master = try XCTUnwrap(try VaultKeyFile.load(from: dir).unlock(recoveryCode: code.bytes), "step \(step)")
                XCTAssertEqual(try VaultRepository.open(at: dir, masterKey: master).items.count, 0)
            }
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("index").path).count, 2)
        }
    }

    /// A copy of vault/ in another node (another identity, so another pepper) does not open with
    /// the right PIN: what offline guessing from a copy of the folder would need.
    func testACopyOfTheVaultFolderDoesNotOpenUnderAnotherIdentity() async throws {
        var configuration = VaultService.Configuration()
        configuration.pinPepper = VaultService.pinPepper(identity: identity)
        let dir = root.appendingPathComponent("vault")
        _ = try VaultCreation.run(vault: dir, secret: Array("1357".utf8), parameters: .testing, pepper: configuration.pinPepper, after: { _ in })
        XCTAssertNotNil(try VaultKeyFile.load(from: dir, pepper: configuration.pinPepper).unlock(pin: Array("1357".utf8)))
        XCTAssertNil(try VaultKeyFile.load(from: dir, pepper: VaultService.pinPepper(identity: SigningKeyPair.generate())).unlock(pin: Array("1357".utf8)))
        XCTAssertNil(try VaultKeyFile.load(from: dir).unlock(pin: Array("1357".utf8)))
    }

    /// `recovery show` checks the PIN it is given even while a vault is open, and answers for the
    /// vault that PIN opens: a wrong PIN is refused and counted, no PIN is refused without counting,
    /// the decoy PIN gives the decoy's code every time, and the open vault stays the one it was.
    func testRecoveryCodeAlwaysChecksThePIN() async throws {
        let (service, _) = try makeService()
        let realCode = try await service.initialize(pin: "1212")
        try await service.setDecoy(pin: "1212", decoy: "3434")
        try await service.unlock(pin: "1212")
        _ = try await service.withVault(pin: nil) { v in try v.repository.importData([7], name: "real.txt", type: .document, album: nil, createdAtMs: nil, nowMs: 1) }
        XCTAssertTrue(service.isUnlocked)

        let noPIN = await code { _ = try await service.recoveryCode(pin: nil) }
        XCTAssertEqual(noPIN, "pin_required", "an open vault does not give the code away")
        let wrong = await code { _ = try await service.recoveryCode(pin: "0000") }
        XCTAssertEqual(wrong, "wrong_pin")
        let malformed = await code { _ = try await service.recoveryCode(pin: "12a") }
        XCTAssertEqual(malformed, "wrong_pin")
        let counted = await service.status()
        XCTAssertEqual(counted["failed_attempts"]?.intValue, 2, "each wrong PIN counts, as at an unlock")
        XCTAssertTrue(service.isUnlocked, "a wrong PIN here does not touch the open vault")

        let decoy1 = try await service.recoveryCode(pin: "3434")
        let decoy2 = try await service.recoveryCode(pin: "3434")
        XCTAssertEqual(decoy1, decoy2, "the decoy's code is the same every time")
        XCTAssertNotEqual(decoy1, realCode)
        let real = try await service.recoveryCode(pin: "1212")
        XCTAssertEqual(real, realCode, "the real PIN gives the real code")
        let stillOpen = try await items(service)
        XCTAssertEqual(stillOpen, ["real.txt"], "the real vault is still the open one")
        let reset = await service.status()
        XCTAssertEqual(reset["failed_attempts"]?.intValue, 0, "a right PIN resets the count")

        // Under the decoy session too: the real PIN gives the real code, the decoy's its own.
        try await service.unlock(pin: "3434")
        let realUnderDecoy = try await service.recoveryCode(pin: "1212")
        let decoyUnderDecoy = try await service.recoveryCode(pin: "3434")
        XCTAssertEqual(realUnderDecoy, realCode)
        XCTAssertEqual(decoyUnderDecoy, decoy1)

        // During a lockout even the right PIN is refused.
        for _ in 0..<3 { _ = await code { _ = try await service.recoveryCode(pin: "9999") } }
        let lockedOut = await code { _ = try await service.recoveryCode(pin: "1212") }
        XCTAssertEqual(lockedOut, "locked_out")
    }

    /// What an import killed mid-way left in the vault's tmp/ is shredded at the next unlock: the
    /// files gone, a symlink removed without touching what it points to.
    func testUnlockShredsWhatAnImportLeftInTmp() async throws {
        let (service, _) = try makeService()
        try await service.initialize(pin: "1357")
        service.lockNow(reason: "test")
        let tmp = root.appendingPathComponent("vault/tmp")
        try FileManager.default.createDirectory(at: tmp, withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 3 << 20).write(to: tmp.appendingPathComponent("import-0001"))
        try Data().write(to: tmp.appendingPathComponent("import-0002"))
        let outside = root.appendingPathComponent("keep.txt")
        try Data("keep".utf8).write(to: outside)
        try FileManager.default.createSymbolicLink(at: tmp.appendingPathComponent("import-0003"), withDestinationURL: outside)
        try await service.unlock(pin: "1357")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: tmp.path), [])
        XCTAssertEqual(FileManager.default.contents(atPath: outside.path), Data("keep".utf8), "a symlink is never followed")
        XCTAssertNotNil(ImportScratch.memoryFile().map { close($0) }, "this system stages photo copies in memory")
    }

    /// A node stopping during a long vault operation: the service ends at once (the service
    /// group gives cancelled services 2 s) and the vault is locked; the operation ends on its own.
    func testStoppingDoesNotWaitForAnOperationInProgress() async throws {
        let (service, _) = try makeService()
        try await service.initialize(pin: "5656")
        let slow = Task { try await service.withVault(pin: nil) { _ in Thread.sleep(forTimeInterval: 3); return true } }
        try await Task.sleep(for: .milliseconds(100))
        let running = Task { try await service.run() }
        try await Task.sleep(for: .milliseconds(100))
        let cancelledAt = ContinuousClock.now
        running.cancel()
        _ = try await running.value
        XCTAssertLessThan(ContinuousClock.now - cancelledAt, .seconds(1.5))
        XCTAssertFalse(service.isUnlocked)
        XCTAssertTrue(service.isStopping)
        _ = try await slow.value
    }

    func testPINShapeAndMissingVault() async throws {
        let (service, _) = try makeService()
        let none = await code { try await service.unlock(pin: "1234") }
        XCTAssertEqual(none, "no_vault")
        for bad in ["123", "", "12\u{7}4", "tab\there", String(repeating: "x", count: 257)] {
            do {
                try await service.initialize(pin: bad)
                XCTFail("'\(bad)' accepted as a PIN")
            } catch let e as NodeError {
                XCTAssertTrue(e.message.contains("4 to 256 characters"), e.message)
            }
        }
        // Passphrases: any text of 4 or more characters, normalized (NFC) so the same words typed
        // with a combining accent open it too.
        try await service.initialize(pin: "caf\u{E9} au lait")
        service.lockNow(reason: "test")
        try await service.unlock(pin: "cafe\u{301} au lait")
        let again = await code { try await service.initialize(pin: "1234") }
        XCTAssertEqual(again, "conflict")
    }
}
