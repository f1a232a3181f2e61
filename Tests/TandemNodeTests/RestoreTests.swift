import Foundation
import Logging
import NIOPosix
import Sodium
import SwiftProtobuf
import TandemNet
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import TandemVault
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeBackup

/// The restore's fetch plan as a value: window, piece sizes, hash checks naming holder and blob,
/// resume, timeouts and resends.
final class RestorePlanTests: XCTestCase {
    private var ids: UInt64 = 0
    private func newID() -> BackupRequestID {
        ids += 1
        var b = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 { b[15 - i] = UInt8(truncatingIfNeeded: ids >> (8 * UInt64(i))) }
        return BackupRequestID(bytes: b)!
    }

    private func blob(_ content: [UInt8]) -> (RestorePlan.Blob, [UInt8]) {
        (RestorePlan.Blob(name: BlobName(of: content), size: Int64(content.count)), content)
    }

    private func answer(_ r: RestorePlan.Request, _ content: [UInt8]) -> BackupFetchedMessage {
        let end = min(Int(r.offset) + r.length, content.count)
        return BackupFetchedMessage(requestID: r.requestID, status: .ok, name: r.name, size: Int64(content.count),
                                    offset: r.offset, data: Array(content[Int(r.offset)..<end]))
    }

    func testWindowOfSixteenPiecesOf256KiB() {
        let big = (0..<3).map { i in blob([UInt8](repeating: UInt8(i), count: 5 * RestorePlan.pieceBytes + 17)) }
        var plan = RestorePlan(holder: "H", blobs: big.map(\.0), inPlace: [])
        let (opened, requests) = plan.next(nowMs: 0, newID: newID)
        XCTAssertEqual(opened.count, 3)
        XCTAssertEqual(requests.count, 16)
        XCTAssertTrue(requests.allSatisfy { $0.length <= RestorePlan.pieceBytes })
        // Pieces of one blob are asked in offset order, the last one short.
        let first = requests.filter { $0.name == big[0].0.name }
        XCTAssertEqual(first.map(\.offset), (0..<6).map { Int64($0 * RestorePlan.pieceBytes) })
        XCTAssertEqual(first.last?.length, 17)
        XCTAssertEqual(plan.next(nowMs: 0, newID: newID).requests.count, 0, "the window is full")
        // One answer frees one slot.
        _ = plan.receive(answer(requests[0], big[0].1))
        XCTAssertEqual(plan.next(nowMs: 0, newID: newID).requests.count, 1)
    }

    /// Drives a plan to its end against an in-memory holder; returns the blobs as written.
    private func drive(_ plan: inout RestorePlan, holder: [BlobName: [UInt8]], tamper: BlobName? = nil) -> [BlobName: [UInt8]] {
        var files: [BlobName: [UInt8]] = [:]
        var rounds = 0
        while !plan.isDone, plan.failure == nil, rounds < 10_000 {
            rounds += 1
            let (opened, requests) = plan.next(nowMs: 0, newID: newID)
            for b in opened { files[b.name] = [UInt8](repeating: 0, count: Int(b.size)) }
            XCTAssertLessThanOrEqual(plan.inFlightCount, RestorePlan.window)
            for r in requests {
                var content = holder[r.name]!
                if r.name == tamper { content[content.count / 2] ^= 1 }
                switch plan.receive(answer(r, content)) {
                case .ignored: break
                case .write(let name, let offset, let data, let finished):
                    files[name]!.replaceSubrange(Int(offset)..<(Int(offset) + data.count), with: data)
                    if finished { _ = plan.verified(name, actual: BlobName(of: files[name]!)) }
                }
            }
        }
        return files
    }

    func testFetchesEveryBlobAndChecksIt() {
        let blobs = (0..<7).map { i in blob(Sodium.randomBytes(1 + i * 200_000)) }
        var plan = RestorePlan(holder: "H", blobs: blobs.map(\.0), inPlace: [])
        let files = drive(&plan, holder: Dictionary(uniqueKeysWithValues: blobs.map { ($0.0.name, $0.1) }))
        XCTAssertTrue(plan.isDone)
        XCTAssertNil(plan.failure)
        for (b, content) in blobs { XCTAssertEqual(files[b.name], content) }
        XCTAssertEqual(plan.doneBytes, plan.totalBytes)
    }

    func testAFlippedByteNamesTheHolderAndTheBlob() {
        let blobs = (0..<3).map { i in blob(Sodium.randomBytes(300_000 + i)) }
        var plan = RestorePlan(holder: "tdm1holder at 127.0.0.1:9", blobs: blobs.map(\.0), inPlace: [])
        _ = drive(&plan, holder: Dictionary(uniqueKeysWithValues: blobs.map { ($0.0.name, $0.1) }), tamper: blobs[1].0.name)
        let f = try! XCTUnwrap(plan.failure)
        XCTAssertEqual(f.blob, blobs[1].0.name)
        XCTAssertEqual(f.holder, "tdm1holder at 127.0.0.1:9")
        XCTAssertTrue("\(f)".contains(blobs[1].0.name.description))
        XCTAssertTrue("\(f)".contains("refused"))
        XCTAssertFalse(plan.isDone)
    }

    func testResumeSkipsBlobsInPlace() {
        let blobs = (0..<4).map { i in blob(Sodium.randomBytes(100_000 + i)) }
        var plan = RestorePlan(holder: "H", blobs: blobs.map(\.0), inPlace: [blobs[0].0.name, blobs[2].0.name])
        XCTAssertEqual(plan.skipped, 2)
        XCTAssertEqual(plan.doneBytes, blobs[0].0.size + blobs[2].0.size)
        let (opened, requests) = plan.next(nowMs: 0, newID: newID)
        XCTAssertEqual(Set(opened.map(\.name)), [blobs[1].0.name, blobs[3].0.name])
        XCTAssertFalse(requests.contains { $0.name == blobs[0].0.name || $0.name == blobs[2].0.name })
        let everything = RestorePlan(holder: "H", blobs: blobs.map(\.0), inPlace: Set(blobs.map(\.0.name)))
        XCTAssertTrue(everything.isDone)
    }

    func testTimeoutsResendWithNewIDsThenGiveUp() {
        let (b, content) = blob(Sodium.randomBytes(1000))
        var plan = RestorePlan(holder: "H", blobs: [b], inPlace: [])
        var now: Int64 = 0
        var r = plan.next(nowMs: now, newID: newID).requests
        XCTAssertEqual(r.count, 1)
        var seen: Set<BackupRequestID> = [r[0].requestID]
        for attempt in 1...RestorePlan.resends {
            now += RestorePlan.answerTimeoutMs
            plan.tick(nowMs: now)
            XCTAssertNil(plan.failure)
            XCTAssertEqual(plan.next(nowMs: now, newID: newID).requests.count, 0, "backoff before the resend")
            now += Int64(1_000 << (attempt - 1))
            r = plan.next(nowMs: now, newID: newID).requests
            XCTAssertEqual(r.count, 1)
            XCTAssertTrue(seen.insert(r[0].requestID).inserted, "a resend uses a new request id")
        }
        // A late answer to an abandoned id is ignored.
        var stale = r[0]
        stale = RestorePlan.Request(requestID: newID(), name: stale.name, offset: stale.offset, length: stale.length)
        XCTAssertEqual(plan.receive(answer(stale, content)), .ignored)
        now += RestorePlan.answerTimeoutMs
        plan.tick(nowMs: now)
        XCTAssertTrue(plan.failure?.reason.contains("unreachable") ?? false)
    }

    func testDishonestAnswersFail() {
        let (b, content) = blob(Sodium.randomBytes(1000))
        var plan = RestorePlan(holder: "H", blobs: [b], inPlace: [])
        let r = plan.next(nowMs: 0, newID: newID).requests[0]
        _ = plan.receive(BackupFetchedMessage(requestID: r.requestID, status: .ok, name: b.name, size: 999, offset: 0,
                                              data: Array(content[0..<999])))
        XCTAssertEqual(plan.failure?.blob, b.name)

        var plan2 = RestorePlan(holder: "H", blobs: [b], inPlace: [])
        let r2 = plan2.next(nowMs: 0, newID: newID).requests[0]
        _ = plan2.receive(BackupFetchedMessage(requestID: r2.requestID, status: .notFound, name: b.name))
        XCTAssertTrue(plan2.failure?.reason.contains("NOT_FOUND") ?? false)
    }
}

/// The recovery kit: built from a store and files, sealed, opened, validated, applied.
final class RecoveryKitTests: XCTestCase {
    var dir: URL!

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("kit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: dir)
    }

    func friend(_ name: String, relay: RelayAddress? = nil) throws -> (SigningKeyPair, RestoredFriend) {
        let key = SigningKeyPair.generate()
        var r = Tandem_V1_ContactRecord()
        r.publicKey = Data(key.publicKey)
        r.displayName = name
        r.addresses = [":7000"]
        r.homeRelay = relay?.description ?? ""
        r.version = 5
        let record = try ContactRecord(validating: r, author: key.publicKey, type: .contactUpdate)
        return (key, RestoredFriend(publicKey: key.publicKey, displayName: name, record: record.canonicalBytes, recordVersion: 5,
                                    homeRelay: relay.map { StoredRelay(publicKey: $0.id.publicKey, host: $0.host, port: $0.port, atMs: 0) }))
    }

    func ledger(_ me: SigningKeyPair, _ other: SigningKeyPair, count: Int) -> [RestoredLedgerEntry] {
        var out: [RestoredLedgerEntry] = []
        var last: LedgerEntry?
        for i in 0..<count {
            var rec = Tandem_V1_OutcomeRecord()
            rec.challengeID = Data(Sodium.randomBytes(16))
            rec.startAtUs = 1_700_000_000_000_000 + UInt64(i)
            rec.durationMs = 60_000
            rec.inviter = Data(me.publicKey)
            for k in [me, other] {
                var o = Tandem_V1_ParticipantOutcome()
                o.publicKey = Data(k.publicKey)
                o.result = .completed
                rec.outcomes.append(o)
            }
            let bytes = Outcome.encode(rec)
            let e = Ledger.append(after: last, record: bytes, signatures: [(me.publicKey, Outcome.sign(bytes, with: me)),
                                                                         (other.publicKey, Outcome.sign(bytes, with: other))])
            last = e
            out.append(RestoredLedgerEntry(entry: e, challengeId: Array(rec.challengeID), committedAtMs: 1_700_000_000_000 + Int64(i)))
        }
        return out
    }

    func testRoundTripThroughSealAndOpen() throws {
        let me = SigningKeyPair.generate()
        let relay = RelayAddress(id: NodeID(publicKey: SigningKeyPair.generate().publicKey), host: "relay.example", port: 7777)
        let (bob, bobRecord) = try friend("bob", relay: relay)
        let (_, carolRecord) = try friend("carol")
        let source = try NodeStore.inMemory()
        let entries = ledger(me, bob, count: 3)
        try source.batch { try $0.applyRestore(RestoredState(friends: [bobRecord, carolRecord],
                                              homeRelays: [StoredRelay(publicKey: relay.id.publicKey, host: relay.host, port: relay.port, atMs: 0)],
                                              ledger: entries, addresses: []), nowMs: 1_000) }
        try source.batch { try $0.setSetting("display_name", "Alice") }
        let data = DataDirectory(url: dir)
        // No kit key and no clear code: no kit.
        XCTAssertNil(try RecoveryKit.sealedKit(identity: me, store: source, dataDirectory: data, nowMs: 5))
        let code = RecoveryCode(bytes: Sodium.randomBytes(16))
        try Data((code.canonical + "\n").utf8).write(to: dir.appendingPathComponent("recovery-code"))
        let kit = try XCTUnwrap(try RecoveryKit.sealedKit(identity: me, store: source, dataDirectory: data, nowMs: 5))
        XCTAssertEqual(kit.locator, RecoveryKitSeal.locator(code))
        XCTAssertEqual(try RecoveryKit.KeyFile.load(dir), RecoveryKit.KeyFile(code: code), "the kit key file is made from the clear code")
        let again = try XCTUnwrap(try RecoveryKit.sealedKit(identity: me, store: source, dataDirectory: data, nowMs: 99))
        XCTAssertEqual(kit.digest, again.digest, "the digest ignores created_at")
        XCTAssertNotEqual(kit.sealed, again.sealed)

        let opened = try RecoveryKit.open(kit.sealed, code: code, owner: me.publicKey)
        XCTAssertEqual(opened.identity.publicKey, me.publicKey)
        XCTAssertEqual(Set(opened.friends.map(\.publicKey)), [bob.publicKey, carolRecord.publicKey])
        XCTAssertEqual(opened.homeRelays, [relay])
        XCTAssertEqual(opened.ledger.map(\.entry), entries.map(\.entry))
        XCTAssertEqual(opened.createdAtMs, 5)
        XCTAssertEqual(opened.displayName, "Alice")
        XCTAssertTrue(opened.skipped.isEmpty)
        XCTAssertNil(opened.keysFile)

        let target = try NodeStore.inMemory()
        XCTAssertFalse(try target.holdsNodeState())
        let state = RestoredState(friends: opened.friends, homeRelays: opened.homeRelays.map {
            StoredRelay(publicKey: $0.id.publicKey, host: $0.host, port: $0.port, atMs: 0) }, ledger: opened.ledger,
                                  addresses: [(bob.publicKey, "10.0.0.2", 7000)], displayName: opened.displayName)
        try target.batch { try $0.applyRestore(state, nowMs: 2_000) }
        try target.batch { try $0.applyRestore(state, nowMs: 3_000) } // a second run writes the same
        XCTAssertTrue(try target.holdsNodeState())
        XCTAssertEqual(Set(try target.friendKeys()), [bob.publicKey, carolRecord.publicKey])
        XCTAssertEqual(try target.contact(bob.publicKey)?.record, Data(bobRecord.record))
        XCTAssertEqual(try target.peerRelay(bob.publicKey)?.publicKey, relay.id.publicKey)
        XCTAssertEqual(try target.relays().map(\.publicKey), [relay.id.publicKey])
        XCTAssertEqual(try target.ledger().map(\.entry), entries.map(\.entry))
        XCTAssertNil(Ledger.verify(try target.ledger().map(\.entry)))
        XCTAssertEqual(try target.addresses(bob.publicKey).first?.host, "10.0.0.2")
        XCTAssertEqual(try target.setting("display_name"), "Alice")
        XCTAssertEqual(try target.setting("advertised_port"), "0")
    }

    func testTamperedKitAndWrongOwnerAreRefused() throws {
        let me = SigningKeyPair.generate()
        let code = RecoveryCode(bytes: Sodium.randomBytes(16))
        try RecoveryKit.KeyFile(code: code).save(dir)
        let kit = try XCTUnwrap(try RecoveryKit.sealedKit(identity: me, store: try NodeStore.inMemory(), dataDirectory: DataDirectory(url: dir), nowMs: 1))
        var tampered = kit.sealed
        tampered[tampered.count / 2] ^= 1
        XCTAssertThrowsError(try RecoveryKit.open(tampered, code: code, owner: me.publicKey)) { e in
            XCTAssertTrue("\(e)".contains("does not open"))
        }
        XCTAssertThrowsError(try RecoveryKit.open(kit.sealed, code: RecoveryCode(bytes: Sodium.randomBytes(16)), owner: me.publicKey))
        XCTAssertThrowsError(try RecoveryKit.open(kit.sealed, code: code, owner: SigningKeyPair.generate().publicKey)) { e in
            XCTAssertTrue("\(e)".contains("not the owner"))
        }
        XCTAssertThrowsError(try RecoveryKit.open(kit.sealed, code: code, owner: nil))
        XCTAssertNoThrow(try RecoveryKit.open(kit.sealed, code: code, owner: me.publicKey))
    }

    func testBadEntriesAreSkippedNeverFatal() throws {
        let me = SigningKeyPair.generate()
        let (bob, bobRecord) = try friend("bob")
        let entries = ledger(me, bob, count: 3)
        var c = Tandem_V1_RecoveryKitContents()
        c.identitySeed = Data(me.seed())
        c.friendContacts = [Data(bobRecord.record), Data([0xff, 0xff, 0x01]), Data(bobRecord.record)]
        c.displayName = "two\nlines"
        c.homeRelays = ["not a relay", RelayAddress(id: NodeID(publicKey: bob.publicKey), host: "h", port: 1).description]
        var broken = KitLedgerEntry(row: (entries[1].entry, 0)).bytes
        broken[100] ^= 1
        c.ledgerEntries = [Data(KitLedgerEntry(row: (entries[0].entry, 7)).bytes), Data(broken), Data(KitLedgerEntry(row: (entries[2].entry, 0)).bytes)]
        let opened = try RecoveryKit.validate(c, owner: me.publicKey)
        XCTAssertEqual(opened.friends.map(\.publicKey), [bob.publicKey])
        XCTAssertEqual(opened.homeRelays.count, 1)
        XCTAssertEqual(opened.ledger.count, 1, "the chain is kept up to its first break")
        XCTAssertEqual(opened.ledger.first?.committedAtMs, 7)
        XCTAssertEqual(opened.skipped.count, 5, "\(opened.skipped)")
        XCTAssertEqual(opened.displayName, "")

        var short = c
        short.identitySeed = Data([1, 2, 3])
        XCTAssertThrowsError(try RecoveryKit.validate(short, owner: me.publicKey))
        var badKeys = c
        badKeys.vaultKeysFile = Data(repeating: 0, count: VaultKeyFile.fileSize)
        XCTAssertThrowsError(try RecoveryKit.validate(badKeys, owner: me.publicKey)) { e in XCTAssertTrue("\(e)".contains("keys file")) }
        XCTAssertNil(KitLedgerEntry(bytes: Array(broken.prefix(50))))
        XCTAssertNil(KitLedgerEntry(bytes: []))
    }

    /// Where the node last reached each friend travels in the kit (the four most recent, in host
    /// order), comes back with the friend, is written to the restored store, and gives a restore
    /// its other holders: those addresses first (two at most), then the home relay.
    func testFriendsAddressesTravelInTheKitAndGiveTheRestoreOtherHolders() throws {
        let me = SigningKeyPair.generate()
        let relay = RelayAddress(id: NodeID(publicKey: SigningKeyPair.generate().publicKey), host: "relay.example", port: 7777)
        let (bob, bobRecord) = try friend("bob", relay: relay)
        let (carol, carolRecord) = try friend("carol")
        let source = try NodeStore.inMemory()
        try source.batch { try $0.applyRestore(RestoredState(friends: [bobRecord, carolRecord], homeRelays: [], ledger: [], addresses: []), nowMs: 1_000) }
        for (i, host) in ["10.0.0.9", "10.0.0.1", "192.168.1.20", "fe80::1", "10.0.0.5"].enumerated() {
            try source.batch { try $0.rememberAddress(bob.publicKey, host: host, port: 7000 + i, source: "lan", nowMs: 2_000 + Int64(i)) }
        }
        try source.batch { try $0.rememberAddress(carol.publicKey, host: "carol.example", port: 7100, source: "record", nowMs: 2_000) }
        let code = RecoveryCode(bytes: Sodium.randomBytes(16))
        try RecoveryKit.KeyFile(code: code).save(dir)
        let kit = try XCTUnwrap(try RecoveryKit.sealedKit(identity: me, store: source, dataDirectory: DataDirectory(url: dir), nowMs: 5))
        let opened = try RecoveryKit.open(kit.sealed, code: code, owner: me.publicKey)
        XCTAssertTrue(opened.skipped.isEmpty, "\(opened.skipped)")
        let bobBack = try XCTUnwrap(opened.friends.first { $0.publicKey == bob.publicKey })
        // The four most recent (10.0.0.9, the oldest, is left out), sorted by host.
        XCTAssertEqual(bobBack.addresses, [RestoredAddress(host: "10.0.0.1", port: 7001), RestoredAddress(host: "10.0.0.5", port: 7004),
                                           RestoredAddress(host: "192.168.1.20", port: 7002), RestoredAddress(host: "fe80::1", port: 7003)])
        XCTAssertEqual(opened.friends.first { $0.publicKey == carol.publicKey }?.addresses, [RestoredAddress(host: "carol.example", port: 7100)])
        // Seen again: the kit does not change (the digest decides whether it is pushed again).
        try source.batch { try $0.rememberAddress(bob.publicKey, host: "10.0.0.1", port: 7001, source: "lan", nowMs: 9_000) }
        XCTAssertEqual(try XCTUnwrap(try RecoveryKit.sealedKit(identity: me, store: source, dataDirectory: DataDirectory(url: dir), nowMs: 6)).digest,
                       kit.digest)

        let target = try NodeStore.inMemory()
        try target.batch { try $0.applyRestore(RestoredState(friends: opened.friends, homeRelays: [], ledger: [], addresses: []), nowMs: 50_000) }
        XCTAssertEqual(Set(try target.addresses(bob.publicKey).map(\.host)), ["10.0.0.1", "10.0.0.5", "192.168.1.20", "fe80::1"])
        XCTAssertEqual(try target.addresses(carol.publicKey).map(\.source), ["kit"])

        // Restoring from carol: bob is tried at his first two addresses, then through his relay.
        let from = RestoreClient.Options(holder: NodeID(publicKey: carol.publicKey), host: "carol.example", port: 7100, code: code,
                                         dataDirectory: DataDirectory(url: dir), relay: nil)
        let others = RestoreClient.otherHolders(from, friends: opened.friends)
        XCTAssertEqual(others.map(\.holder.publicKey), [bob.publicKey, bob.publicKey, bob.publicKey])
        XCTAssertEqual(others.map(\.host), ["10.0.0.1", "10.0.0.5", "relay.example"])
        XCTAssertEqual(others.map { $0.relay == nil }, [true, true, false])
    }

    /// Addresses that are not a host and a port, beyond four for a friend, or for someone not in
    /// the kit: left out (counted in one skipped line), never fatal.
    func testBadKitAddressesAreSkipped() throws {
        let me = SigningKeyPair.generate()
        let (bob, bobRecord) = try friend("bob")
        var c = Tandem_V1_RecoveryKitContents()
        c.identitySeed = Data(me.seed())
        c.friendContacts = [Data(bobRecord.record)]
        func address(_ key: [UInt8], _ host: String, _ port: UInt32) -> Tandem_V1_RecoveryKitAddress {
            var a = Tandem_V1_RecoveryKitAddress()
            a.publicKey = Data(key)
            a.host = host
            a.port = port
            return a
        }
        c.friendAddresses = [address(bob.publicKey, "10.0.0.1", 7000), address(bob.publicKey, "10.0.0.1", 0),
                             address(bob.publicKey, "host with space", 7000), address(bob.publicKey, "evil\u{1b}[2J", 7000),
                             address(bob.publicKey, String(repeating: "a", count: 254), 7000), address(bob.publicKey, "10.0.0.2", 70_000),
                             address(SigningKeyPair.generate().publicKey, "10.0.0.3", 7000),
                             address(bob.publicKey, "10.0.0.1", 7000), address(bob.publicKey, "b", 1), address(bob.publicKey, "c", 2),
                             address(bob.publicKey, "d", 3), address(bob.publicKey, "e", 4)]
        let opened = try RecoveryKit.validate(c, owner: me.publicKey)
        XCTAssertEqual(opened.friends.first?.addresses.map(\.host), ["10.0.0.1", "b", "c", "d"])
        XCTAssertEqual(opened.skipped.count, 1, "\(opened.skipped)")
        XCTAssertTrue(opened.skipped[0].hasPrefix("6 friend addresses"), "\(opened.skipped)")
        var flood = c
        flood.friendAddresses = Array(repeating: address(bob.publicKey, "h", 1), count: 10_000 * RecoveryKit.maximumAddressesPerFriend + 1)
        XCTAssertThrowsError(try RecoveryKit.validate(flood, owner: me.publicKey)) { XCTAssertTrue("\($0)".contains("friend addresses"), "\($0)") }
    }

    func testALedgerTooLongForOneKitKeepsItsOldestEntries() throws {
        let me = SigningKeyPair.generate()
        let (bob, bobRecord) = try friend("bob")
        let entries = ledger(me, bob, count: 800)
        let source = try NodeStore.inMemory()
        try source.batch { try $0.applyRestore(RestoredState(friends: [bobRecord], homeRelays: [], ledger: entries, addresses: []), nowMs: 1) }
        let code = RecoveryCode(bytes: Sodium.randomBytes(16))
        try RecoveryKit.KeyFile(code: code).save(dir)
        let kit = try XCTUnwrap(try RecoveryKit.sealedKit(identity: me, store: source, dataDirectory: DataDirectory(url: dir), nowMs: 1))
        XCTAssertGreaterThan(kit.ledgerEntriesLeftOut, 0)
        XCTAssertLessThanOrEqual(kit.sealed.count, RecoveryKitSeal.maximumSealedBytes)
        let opened = try RecoveryKit.open(kit.sealed, code: code, owner: me.publicKey)
        XCTAssertEqual(opened.ledger.count, 800 - kit.ledgerEntriesLeftOut)
        XCTAssertEqual(opened.ledger.map(\.entry), Array(entries.prefix(opened.ledger.count)).map(\.entry))
        XCTAssertTrue(opened.skipped.isEmpty)
    }

    func testKeysFileTravelsAndOpensWithTheCode() throws {
        let vault = dir.appendingPathComponent("vault")
        let (keyFile, master, _) = try VaultKeyFile.create(in: vault, pin: Array("1234".utf8), parameters: .testing)
        let code = RecoveryCode(bytes: Sodium.randomBytes(16))
        try keyFile.wrapForRecovery(code: code.bytes, masterKey: master)
        try RecoveryKitKeyFile.remember(code: code, vaultDirectory: vault)
        let me = SigningKeyPair.generate()
        let kit = try XCTUnwrap(try RecoveryKit.sealedKit(identity: me, store: try NodeStore.inMemory(), dataDirectory: DataDirectory(url: dir), nowMs: 1))
        let opened = try RecoveryKit.open(kit.sealed, code: code, owner: me.publicKey)
        let bytes = try XCTUnwrap(opened.keysFile)
        XCTAssertEqual(bytes, Array(try Data(contentsOf: VaultKeyFile.url(in: vault))))
        let restoredKeys = try RestoreClient(group: MultiThreadedEventLoopGroup.singleton, logger: Logger(label: "t"))
            .vaultKeys(keysFile: bytes, code: code, staging: dir.appendingPathComponent("staging"))
        XCTAssertEqual(restoredKeys.masterA.exposedCopy, master.exposedCopy)
        XCTAssertNotNil(restoredKeys.masterB)
        XCTAssertEqual(restoredKeys.locatorA, try VaultRepository.indexLocator(masterKey: master))
        // The decoy's key is not the real vault's: it makes no kit key.
        XCTAssertNil(try keyFile.spareKey(masterKey: restoredKeys.masterB!))
    }
}
