import Foundation
import Logging
import NIOConcurrencyHelpers
import Sodium
import TandemProtocol
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeBackup

/// The backup holder driven directly, as a hostile peer would: requests from strangers, friends
/// without an offer and owners, pieces in any order, bad hashes, other owners' names, KIT_GET
/// floods, torn and garbage files on disk, withdrawn offers, malformed payloads. Real files in a
/// temporary directory; a manual clock.
final class BackupHolderTests: XCTestCase {
    var root: URL!
    let clock = NIOLockedValueBox<UInt64>(1_750_000_000_000)
    let me = try! SigningKeyPair(seed: [UInt8](repeating: 41, count: 32))
    let owner = try! SigningKeyPair(seed: [UInt8](repeating: 42, count: 32))
    let other = try! SigningKeyPair(seed: [UInt8](repeating: 43, count: 32))
    let stranger = try! SigningKeyPair(seed: [UInt8](repeating: 44, count: 32))
    var requests = 0

    override func setUpWithError() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("backup-holder-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: root)
    }

    // MARK: helpers

    /// A holder over `root` with what is on disk loaded: a fresh one is a restart.
    func makeHolder() -> BackupHolder {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let clock = self.clock
        let h = BackupHolder(identity: me, root: root, events: EventBus(log: InMemoryEventLog(), logger: logger), logger: logger,
                             now: { clock.withLockedValue { $0 } })
        try! h.load()  // a test directory that cannot be listed is a broken test
        return h
    }

    final class Inbox: @unchecked Sendable {
        private let box = NIOLockedValueBox<[Envelope]>([])
        func add(_ e: Envelope) { box.withLockedValue { $0.append(e) } }
        var items: [Envelope] { box.withLockedValue { $0 } }
    }

    /// Sends one request and returns what came back (after the holder handled it).
    @discardableResult
    func ask(_ h: BackupHolder, _ from: SigningKeyPair, _ type: MessageType, _ payload: [UInt8], isFriend: Bool = true,
             origin: String = "198.51.100.1") -> [Envelope] {
        let inbox = Inbox()
        let env = Envelope.sign(type: type, author: from, recipient: me.publicKey, createdAt: clock.withLockedValue { $0 }, payload: payload)
        h.receive(env, origin: origin, isFriend: isFriend) { inbox.add($0) }
        h.drain()
        for a in inbox.items {
            XCTAssertEqual(a.recipient, from.publicKey, "an answer addressed to someone else")
            XCTAssertEqual(a.author, me.publicKey)
        }
        return inbox.items
    }

    func rid() -> BackupRequestID {
        requests += 1
        return BackupRequestID(bytes: [UInt8](repeating: 7, count: 12) + withUnsafeBytes(of: UInt32(requests).bigEndian) { Array($0) })!
    }

    func blob(_ n: Int, seed: UInt8) -> (name: BlobName, bytes: [UInt8]) {
        let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ Int(seed)) }
        return (BlobName(of: bytes), bytes)
    }

    /// A piece of `b` (its own name and size unless told), answered with a BACKUP_REPLY.
    func send(_ h: BackupHolder, _ from: SigningKeyPair, _ b: (name: BlobName, bytes: [UInt8]), _ range: Range<Int>,
              data: [UInt8]? = nil, isFriend: Bool = true) -> BackupReplyMessage? {
        let p = BackupPieceMessage(requestID: rid(), name: b.name, size: Int64(b.bytes.count), offset: Int64(range.lowerBound),
                                   data: data ?? Array(b.bytes[range]))
        let answers = ask(h, from, .backupPiece, p.payload, isFriend: isFriend)
        XCTAssertLessThanOrEqual(answers.count, 1)
        guard let a = answers.first else { return nil }
        XCTAssertEqual(a.type, .backupReply)
        let r = try? BackupReplyMessage(payload: a.payload)
        XCTAssertEqual(r?.requestID, p.requestID)
        return r
    }

    func push(_ h: BackupHolder, _ from: SigningKeyPair, _ b: (name: BlobName, bytes: [UInt8])) {
        XCTAssertEqual(send(h, from, b, 0..<b.bytes.count)?.status, .complete)
    }

    func offer(_ h: BackupHolder, _ to: SigningKeyPair, quota: Int64, version: UInt64 = 10) throws {
        XCTAssertTrue(try h.setOffer(owner: to.publicKey, quotaBytes: quota, version: version))
    }

    func dir(_ k: SigningKeyPair) -> URL { root.appendingPathComponent(hexString(k.publicKey)) }

    /// Regular files under `url`, relative paths.
    func files(under url: URL) -> [String] {
        guard let e = FileManager.default.enumerator(at: url, includingPropertiesForKeys: [.isRegularFileKey]) else { return [] }
        var out: [String] = []
        for case let f as URL in e where (try? f.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
            out.append(String(f.path.dropFirst(url.path.count + 1)))
        }
        return out.sorted()
    }

    func length(_ url: URL) -> Int64 {
        var st = stat()
        return stat(url.path, &st) == 0 ? Int64(st.st_size) : -1
    }

    func bytesOnDisk(_ k: SigningKeyPair) -> Int64 {
        files(under: dir(k)).filter { $0.hasPrefix("blobs/") || $0.hasPrefix("partial/") || $0 == "kit" }.reduce(0) { t, f in
            t + length(dir(k).appendingPathComponent(f))
        }
    }

    // MARK: the holder's own loop

    /// With `run` going (as in a node), requests are answered in the order received, and a whole
    /// blob's finish comes back from the second thread with COMPLETE.
    func testRunAnswersInTheOrderReceivedAndFinishesBlobs() async throws {
        let h = makeHolder()
        try offer(h, owner, quota: 1_000_000)
        let (answers, sink) = AsyncStream<Envelope>.makeStream()
        let now = clock.withLockedValue { $0 }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await h.run() }
            var ids: [BackupRequestID] = []
            for _ in 0..<50 {
                let id = rid()
                ids.append(id)
                let env = Envelope.sign(type: .backupList, author: owner, recipient: me.publicKey, createdAt: now,
                                        payload: BackupListQueryMessage(requestID: id).payload)
                h.receive(env, origin: "198.51.100.1", isFriend: true) { sink.yield($0) }
            }
            let b = blob(3000, seed: 9)
            let p = BackupPieceMessage(requestID: rid(), name: b.name, size: Int64(b.bytes.count), offset: 0, data: b.bytes)
            h.receive(Envelope.sign(type: .backupPiece, author: owner, recipient: me.publicKey, createdAt: now, payload: p.payload),
                      origin: "198.51.100.1", isFriend: true) { sink.yield($0) }
            var iterator = answers.makeAsyncIterator()
            var got: [BackupRequestID] = []
            for _ in 0..<50 {
                let next = await iterator.next()
                let e = try XCTUnwrap(next)
                XCTAssertEqual(e.type, .backupListReply)
                got.append(try BackupListReplyMessage(payload: e.payload).requestID)
            }
            XCTAssertEqual(got, ids, "answers out of the order received")
            let next = await iterator.next()
            let last = try XCTUnwrap(next)
            let reply = try BackupReplyMessage(payload: last.payload)
            XCTAssertEqual(reply.requestID, p.requestID)
            XCTAssertEqual(reply.status, .complete)
            group.cancelAll()
        }
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.blobs[b3000Name(seed: 9)]?.state, .whole)
    }

    private func b3000Name(seed: UInt8) -> BlobName { blob(3000, seed: seed).name }

    // MARK: who may store

    func testStrangersPieceStoresNothingAndItsNoOfferAnswersAreBudgeted() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 100_000)
        let b = blob(500, seed: 1)
        var answered = 0
        for _ in 0..<30 {
            if let r = send(h, stranger, b, 0..<500, isFriend: false) {
                XCTAssertEqual(r.status, .noOffer)
                answered += 1
            }
        }
        XCTAssertEqual(answered, Int(BackupHolder.strangerAnswersPerMinute), "a stranger gets at most the budgeted NO_OFFER answers")
        XCTAssertNil(h.bookNow.shelves[stranger.publicKey])
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir(stranger).path), "nothing is stored for a stranger")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root.path), [hexString(owner.publicKey)])
        clock.withLockedValue { $0 += 60_000 }
        XCTAssertEqual(send(h, stranger, b, 0..<500, isFriend: false)?.status, .noOffer, "the budget refills")
    }

    func testFriendWithoutAnOfferGetsNoOfferAndNothingOnDisk() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 100_000)
        let b = blob(700, seed: 2)
        for range in [0..<300, 300..<700, 0..<700] {
            XCTAssertEqual(send(h, other, b, range)?.status, .noOffer, "a friend without an offer is always answered NO_OFFER")
        }
        let kit = BackupKitPutMessage(requestID: rid(), locator: KitLocator(bytes: [UInt8](repeating: 5, count: 32))!, version: 1,
                                      sealedKit: [UInt8](repeating: 9, count: 100))
        let a = ask(h, other, .backupKitPut, kit.payload)
        XCTAssertEqual(a.count, 1)
        XCTAssertEqual(try BackupReplyMessage(payload: a[0].payload).status, .noOffer)
        XCTAssertNil(h.bookNow.shelves[other.publicKey])
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir(other).path))
    }

    func testWithdrawnOfferDeletesTheOwnersDirectory() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 100_000)
        push(h, owner, blob(900, seed: 3))
        XCTAssertEqual(send(h, owner, blob(800, seed: 4), 0..<100)?.status, .ok)
        let kit = BackupKitPutMessage(requestID: rid(), locator: KitLocator(bytes: [UInt8](repeating: 5, count: 32))!, version: 1,
                                      sealedKit: [UInt8](repeating: 9, count: 100))
        XCTAssertEqual(try BackupReplyMessage(payload: ask(h, owner, .backupKitPut, kit.payload)[0].payload).status, .ok)
        XCTAssertEqual(files(under: dir(owner)).filter { $0.hasPrefix("blobs/") || $0.hasPrefix("partial/") || $0 == "kit" }.count, 3)

        XCTAssertTrue(try h.setOffer(owner: owner.publicKey, quotaBytes: 0, version: 11))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir(owner).path), "a withdrawn offer deletes everything held")
        XCTAssertNil(h.bookNow.shelves[owner.publicKey])
        XCTAssertEqual(send(h, owner, blob(900, seed: 3), 0..<900)?.status, .noOffer)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir(owner).path))
        XCTAssertTrue(makeHolder().bookNow.shelves.isEmpty, "nothing comes back after a restart")
    }

    // MARK: quota

    func testQuotaIsNeverExceededWhateverThePieceOrder() throws {
        let h = makeHolder()
        // Charges (payload rounded up to 4 KiB, plus 512): A 12 800, B 8 704, C and D 4 608 each.
        let quota: Int64 = 20_000
        try offer(h, owner, quota: quota)
        let a = blob(9_000, seed: 5), b = blob(5_000, seed: 6), c = blob(1_200, seed: 7), d = blob(900, seed: 8)
        // A reserves its whole charge on its first piece: B no longer fits, before any byte of it is written.
        XCTAssertEqual(send(h, owner, a, 0..<1_000)?.status, .ok)
        XCTAssertEqual(send(h, owner, b, 0..<10)?.status, .overQuota)
        XCTAssertEqual(send(h, owner, a, 0..<1_000)?.status, .ok, "a duplicate piece is idempotent")
        XCTAssertEqual(send(h, owner, a, 500..<1_500)?.status, .outOfOrder, "an overlap past what is held")
        XCTAssertEqual(send(h, owner, a, 2_000..<3_000)?.status, .outOfOrder, "a gap")
        XCTAssertEqual(send(h, owner, a, 1_000..<2_500)?.status, .ok)
        XCTAssertEqual(send(h, owner, a, 2_500..<9_000)?.status, .complete)
        XCTAssertEqual(send(h, owner, c, 0..<600)?.status, .ok)
        XCTAssertEqual(send(h, owner, d, 0..<900)?.status, .overQuota, "12 800 + 4 608 reserved, 4 608 more does not fit")

        // Then any order at all: interleaved blobs, duplicates, overlaps, wrong sizes.
        var rng: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ n: Int) -> Int {
            rng = rng &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((rng >> 33) % UInt64(n))
        }
        var statuses = Set<BackupStatus>()
        let all = [a, b, c, d, blob(2_000, seed: 9), blob(4_999, seed: 10)]
        for step in 0..<300 {
            let x = all[next(all.count)]
            let held = Int(h.bookNow.shelves[owner.publicKey]?.blobs[x.name]?.held ?? 0)
            let start = next(3) == 0 ? next(x.bytes.count) : min(held, x.bytes.count - 1)
            let end = min(x.bytes.count, start + 1 + next(1_500))
            if step == 150 { _ = ask(h, owner, .backupForget, BackupForgetMessage(requestID: rid(), keepLast: 1).payload) }
            if let r = send(h, owner, x, start..<end) { statuses.insert(r.status) }
            let s = h.bookNow.shelves[owner.publicKey]!
            XCTAssertLessThanOrEqual(s.usedBytes, quota)
            XCTAssertLessThanOrEqual(bytesOnDisk(owner), quota, "more bytes on disk than the quota")
            XCTAssertTrue(h.bookNow.invariantsHold())
        }
        XCTAssertTrue(statuses.isSuperset(of: [.ok, .overQuota, .outOfOrder, .complete]), "the walk reached every case: \(statuses)")
        XCTAssertLessThanOrEqual(makeHolder().bookNow.shelves[owner.publicKey]!.usedBytes, quota, "nor after a restart")
    }

    // MARK: integrity

    func testPieceThatDoesNotHashToItsNameIsDiscarded() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 10_000)
        let b = blob(1_000, seed: 11)
        XCTAssertEqual(send(h, owner, b, 0..<600)?.status, .ok)
        var bad = Array(b.bytes[600..<1_000])
        bad[17] ^= 0x40
        let r = send(h, owner, b, 600..<1_000, data: bad)
        XCTAssertEqual(r?.status, .hashMismatch)
        XCTAssertEqual(r?.held, 0)
        XCTAssertEqual(files(under: dir(owner)).filter { $0.hasPrefix("blobs/") || $0.hasPrefix("partial/") }, [],
                       "the partial file is gone and nothing was renamed into place")
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.usedBytes, 0, "the reservation is released")
        let have = ask(h, owner, .backupHaveQuery, BackupHaveQueryMessage(requestID: rid(), names: [b.name]).payload)
        XCTAssertEqual(try BackupHaveReplyMessage(payload: have[0].payload).holdings, [BackupHolding(name: b.name, size: 0, held: 0)])
    }

    func testFetchAndProveOfAnotherOwnersBlobAreNotFound() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 10_000)
        try offer(h, other, quota: 10_000)
        let b = blob(1_500, seed: 12)
        push(h, owner, b)
        let f = BackupFetchMessage(requestID: rid(), name: b.name, offset: 100, length: 500)
        let theirs = try BackupFetchedMessage(payload: ask(h, other, .backupFetch, f.payload)[0].payload)
        XCTAssertEqual(theirs.status, .notFound, "names are looked up in the asker's shelf only")
        XCTAssertEqual(theirs.data, [])
        let stranger = try BackupFetchedMessage(payload: ask(h, stranger, .backupFetch, f.payload, isFriend: false)[0].payload)
        XCTAssertEqual(stranger.status, .noOffer)
        XCTAssertEqual(stranger.data, [])
        let mine = try BackupFetchedMessage(payload: ask(h, owner, .backupFetch, f.payload)[0].payload)
        XCTAssertEqual(mine.status, .ok)
        XCTAssertEqual(mine.data, Array(b.bytes[100..<600]))

        let nonce = [UInt8](repeating: 3, count: 32)
        let prove = BackupProveMessage(requestID: rid(), challenges: [BackupProofChallenge(name: b.name, nonce: nonce)])
        let proofOther = try BackupProofMessage(payload: ask(h, other, .backupProve, prove.payload)[0].payload)
        XCTAssertEqual(proofOther.answers.map(\.status), [.notFound])
        XCTAssertEqual(proofOther.answers.first?.mac, [])
        let proofMine = try BackupProofMessage(payload: ask(h, owner, .backupProve, prove.payload)[0].payload)
        XCTAssertEqual(proofMine.answers.first?.mac, BackupProofOfStorage.mac(nonce: nonce, blob: b.bytes))
    }

    // MARK: kits

    func testKitGetBudgets() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 10_000)
        let locator = KitLocator(bytes: [UInt8](repeating: 5, count: 32))!
        let put = BackupKitPutMessage(requestID: rid(), locator: locator, version: 1, sealedKit: [UInt8](repeating: 9, count: 100))
        XCTAssertEqual(try BackupReplyMessage(payload: ask(h, owner, .backupKitPut, put.payload)[0].payload).status, .ok)
        // Eleven fresh keys (a restorer is one) from one address: the 11th gets nothing.
        let askers = (0..<11).map { try! SigningKeyPair(seed: [UInt8](repeating: UInt8(100 + $0), count: 32)) }
        var got: [Int] = []
        for k in askers {
            let a = ask(h, k, .backupKitGet, BackupKitGetMessage(requestID: rid(), locator: locator, index: 0).payload, isFriend: false)
            got.append(a.count)
            if let a = a.first {
                let kit = try BackupKitMessage(payload: a.payload)
                XCTAssertEqual(kit.status, .ok)
                XCTAssertEqual(kit.owner, owner.publicKey)
                XCTAssertEqual(kit.sealedKit, [UInt8](repeating: 9, count: 100))
            }
        }
        XCTAssertEqual(got, Array(repeating: 1, count: 10) + [0], "10 per minute per address")
        // One key from many addresses: 5 per minute.
        let k = askers[0]
        let perKey = (0..<6).map { i in
            ask(h, k, .backupKitGet, BackupKitGetMessage(requestID: rid(), locator: locator, index: 0).payload, isFriend: false,
                origin: "203.0.113.\(i + 1)").count
        }
        XCTAssertEqual(perKey, [1, 1, 1, 1, 0, 0], "the key already spent one of its 5 above")
        clock.withLockedValue { $0 += 60_000 }
        XCTAssertEqual(ask(h, askers[10], .backupKitGet, BackupKitGetMessage(requestID: rid(), locator: locator, index: 0).payload,
                           isFriend: false).count, 1, "a minute later the address is answered again")
    }

    /// A relay is one source address for every tunnel: strangers flooding KIT_GET through it must
    /// not spend the budget of a restorer tunnelled through the same relay (backup.md 7).
    func testStrangersThroughARelayDoNotStarveATunnelledRestorer() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 10_000)
        let locator = KitLocator(bytes: [UInt8](repeating: 6, count: 32))!
        let put = BackupKitPutMessage(requestID: rid(), locator: locator, version: 1, sealedKit: [UInt8](repeating: 9, count: 100))
        XCTAssertEqual(try BackupReplyMessage(payload: ask(h, owner, .backupKitPut, put.payload)[0].payload).status, .ok)
        let relay = "relay:abcdef0123"
        func get(_ k: SigningKeyPair) -> Int {
            ask(h, k, .backupKitGet, BackupKitGetMessage(requestID: rid(), locator: locator, index: 0).payload, isFriend: false, origin: relay).count
        }
        // A stranger floods through the relay: its own key's 5 are answered, then nothing.
        let stranger = try SigningKeyPair(seed: [UInt8](repeating: 200, count: 32))
        XCTAssertEqual((0..<20).map { _ in get(stranger) }, Array(repeating: 1, count: 5) + Array(repeating: 0, count: 15))
        // Fourteen more stranger keys on the same relay, then the restorer: still answered.
        for i in 0..<14 { _ = get(try SigningKeyPair(seed: [UInt8](repeating: UInt8(120 + i), count: 32))) }
        let restorer = try SigningKeyPair(seed: [UInt8](repeating: 250, count: 32))
        XCTAssertEqual(get(restorer), 1, "the restorer's budget is its own, not the relay's address")
        // A direct address is still one budget for all its keys.
        let direct = (0..<11).map { i in
            ask(h, try! SigningKeyPair(seed: [UInt8](repeating: UInt8(30 + i), count: 32)), .backupKitGet,
                BackupKitGetMessage(requestID: rid(), locator: locator, index: 0).payload, isFriend: false, origin: "198.51.100.9").count
        }
        XCTAssertEqual(direct, Array(repeating: 1, count: 10) + [0])
    }

    // MARK: the files

    func testRestartAfterATornPartialWriteReportsTheLengthOnDisk() throws {
        var h = makeHolder()
        try offer(h, owner, quota: 10_000)
        let b = blob(1_000, seed: 13)
        XCTAssertEqual(send(h, owner, b, 0..<600)?.held, 600)
        let partial = dir(owner).appendingPathComponent("partial/\(b.name).1000")
        XCTAssertEqual(length(partial), 600)
        truncate(partial.path, 250)   // a crash tore the last write
        h = makeHolder()
        let have = try BackupHaveReplyMessage(payload: ask(h, owner, .backupHaveQuery,
                                                           BackupHaveQueryMessage(requestID: rid(), names: [b.name]).payload)[0].payload)
        XCTAssertEqual(have.holdings, [BackupHolding(name: b.name, size: 1_000, held: 250)], "held is what is on disk, not the last OK")
        XCTAssertEqual(send(h, owner, b, 600..<1_000)?.status, .outOfOrder)
        XCTAssertEqual(send(h, owner, b, 250..<1_000)?.status, .complete)
        XCTAssertEqual(try [UInt8](Data(contentsOf: dir(owner).appendingPathComponent("blobs/\(b.name)"))), b.bytes)
    }

    func testGarbageOnDiskIsQuarantinedOnLoadNeverFatal() throws {
        var h = makeHolder()
        try offer(h, owner, quota: 10_000)
        let b = blob(300, seed: 14)
        push(h, owner, b)
        let fm = FileManager.default
        let d = dir(owner)
        try fm.createDirectory(at: d.appendingPathComponent("snapshots"), withIntermediateDirectories: true)
        try Data("not json".utf8).write(to: d.appendingPathComponent("snapshots/000000000009-\(String(repeating: "ab", count: 16)).json"))
        try Data([1, 2, 3]).write(to: d.appendingPathComponent("blobs/zz"))
        try Data().write(to: d.appendingPathComponent("blobs/\(blob(10, seed: 99).name)"), options: []) // a blob of 0 bytes
        try fm.createDirectory(at: d.appendingPathComponent("partial"), withIntermediateDirectories: true)
        try Data([7]).write(to: d.appendingPathComponent("partial/garbage"))
        try Data([7]).write(to: root.appendingPathComponent("not-an-owner"))
        let bogus = root.appendingPathComponent(hexString(other.publicKey))
        try fm.createDirectory(at: bogus.appendingPathComponent("blobs"), withIntermediateDirectories: true)
        try Data("{\"quotaBytes\": -1, \"offerVersion\": 3}".utf8).write(to: bogus.appendingPathComponent("shelf.json"))

        h = makeHolder()
        let s = try XCTUnwrap(h.bookNow.shelves[owner.publicKey], "the owner's valid files survive")
        XCTAssertEqual(s.blobs.mapValues(\.size), [b.name: 300])
        XCTAssertEqual(s.usedBytes, 4_608, "300 bytes, charged as a file")
        XCTAssertNil(h.bookNow.shelves[other.publicKey])
        XCTAssertTrue(h.bookNow.invariantsHold())
        XCTAssertEqual(files(under: d).filter { $0 != "shelf.json" }, ["blobs/\(b.name)"], "everything invalid moved away")
        let quarantined = try fm.contentsOfDirectory(atPath: root.appendingPathComponent("quarantine").path)
        XCTAssertEqual(quarantined.count, 6, "\(quarantined)")
        XCTAssertFalse(fm.fileExists(atPath: bogus.path))
        XCTAssertEqual(send(h, owner, b, 0..<300)?.status, .complete, "and the holder keeps working")
    }

    // MARK: malformed

    func testMalformedPayloadsGetMalformedForFriends() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 10_000)
        for type in [MessageType.backupPiece, .backupHaveQuery, .backupSnapshot, .backupFetch, .backupKitPut, .backupKitGet] {
            let env = Envelope.sign(type: type, author: owner, recipient: me.publicKey, createdAt: 1, payload: [0xFF, 0x01, 0x02])
            let inbox = Inbox()
            h.receive(env, origin: "198.51.100.1", isFriend: true) { inbox.add($0) }
            h.drain()
            XCTAssertEqual(inbox.items.count, 1, "\(type)")
            XCTAssertEqual(inbox.items.first?.type, .error)
            let e = try Tandem_V1_Error(serializedBytes: inbox.items[0].payload)
            XCTAssertEqual(e.code, .malformed)
            XCTAssertEqual(e.refMessageID, Data(env.messageID.bytes))
        }
        // A piece whose offset + length passes its size is malformed too (a range rule), never written.
        var p = Tandem_V1_BackupPiece()
        p.requestID = Data(rid().bytes)
        p.name = Data(blob(10, seed: 1).name.bytes)
        p.size = 10
        p.offset = 5
        p.data = Data(repeating: 1, count: 10)
        XCTAssertEqual(ask(h, owner, .backupPiece, try p.serializedBytes()).map(\.type), [.error])
        XCTAssertEqual(files(under: dir(owner)), ["shelf.json"])
        // For strangers, within their budget only, each malformed request charged once: the budget's
        // worth of ERRORs, then nothing.
        let answered = (0..<30).map { _ in ask(h, stranger, .backupPiece, [0xFF], isFriend: false).count }.reduce(0, +)
        XCTAssertEqual(answered, Int(BackupHolder.strangerAnswersPerMinute))
        XCTAssertEqual(files(under: root).filter { $0.hasPrefix(hexString(stranger.publicKey)) }, [])
    }

    // MARK: regressions (found by the holder fuzz target)

    func testStaleOfferChangesNothingOnDisk() throws {
        var h = makeHolder()
        try offer(h, owner, quota: 5_000, version: 10)
        XCTAssertFalse(try h.setOffer(owner: owner.publicKey, quotaBytes: 100, version: 9))
        XCTAssertFalse(try h.setOffer(owner: owner.publicKey, quotaBytes: 200, version: 10))
        h = makeHolder()
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.quotaBytes, 5_000, "a restart brought back an ignored offer")
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.offerVersion, 10)
    }

    func testSnapshotThatCannotBeWrittenLeavesNoTrace() throws {
        var h = makeHolder()
        try offer(h, owner, quota: 20_000)
        let a = blob(400, seed: 20), b = blob(500, seed: 21)
        push(h, owner, a)
        XCTAssertEqual(send(h, owner, b, 0..<100)?.status, .ok)
        // A file where the snapshots directory goes: the record cannot be written.
        try Data([1]).write(to: dir(owner).appendingPathComponent("snapshots"))
        let record = try BackupSnapshotRecord(snapshotID: [UInt8](repeating: 1, count: 16), createdAtMs: 1, blobs: [a.name], indexBlobs: [],
                                              totalBytes: 400, nowMs: clock.withLockedValue { $0 })
        let snap = BackupSnapshotMessage(requestID: rid(), record: record)
        XCTAssertEqual(ask(h, owner, .backupSnapshot, snap.payload).count, 0, "not durable, so not COMPLETE")
        let s = try XCTUnwrap(h.bookNow.shelves[owner.publicKey])
        XCTAssertEqual(s.snapshots, [], "the book does not keep a record that is not on disk")
        XCTAssertEqual(s.blobs[b.name]?.held, 100, "nor does it free the unfinished blob")
        XCTAssertEqual(s.usedBytes, 2 * 4_608, "two blobs; no record charged")
        try FileManager.default.removeItem(at: dir(owner).appendingPathComponent("snapshots"))
        XCTAssertEqual(try BackupReplyMessage(payload: ask(h, owner, .backupSnapshot, snap.payload)[0].payload).status, .complete)
        h = makeHolder()
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.snapshots, [record])
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.usedBytes, 2 * 4_608 + BackupLimits.chargedBytes(for: record))
    }

    func testProofThatFindsACorruptedBlobDropsTheSnapshotsNamingIt() throws {
        var h = makeHolder()
        try offer(h, owner, quota: 20_000)
        let a = blob(400, seed: 22), b = blob(500, seed: 23)
        push(h, owner, a)
        push(h, owner, b)
        let names = [a.name, b.name].sorted()
        let record = try BackupSnapshotRecord(snapshotID: [UInt8](repeating: 2, count: 16), createdAtMs: 1, blobs: names, indexBlobs: [],
                                              totalBytes: 900, nowMs: clock.withLockedValue { $0 })
        XCTAssertEqual(try BackupReplyMessage(payload: ask(h, owner, .backupSnapshot,
                                                           BackupSnapshotMessage(requestID: rid(), record: record).payload)[0].payload).status,
                       .complete)
        let url = dir(owner).appendingPathComponent("blobs/\(a.name)")
        var bytes = try [UInt8](Data(contentsOf: url))
        bytes[10] ^= 1
        try Data(bytes).write(to: url)
        let prove = BackupProveMessage(requestID: rid(), challenges: [BackupProofChallenge(name: a.name, nonce: [UInt8](repeating: 4, count: 32))])
        XCTAssertEqual(try BackupProofMessage(payload: ask(h, owner, .backupProve, prove.payload)[0].payload).answers.map(\.status), [.notFound])
        XCTAssertTrue(h.bookNow.invariantsHold(), "a kept snapshot names a blob the holder deleted")
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.snapshots, [])
        XCTAssertEqual(files(under: dir(owner)).filter { $0.hasPrefix("snapshots/") }, [])
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.blobs[b.name]?.state, .whole, "the other blob stays until a forget")
        let before = h.bookNow.shelves[owner.publicKey]
        h = makeHolder()
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.snapshots, before?.snapshots)
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.usedBytes, 4_608, "the blob left, charged as a file; the dropped record no more")
    }

    func testPieceAfterThePartialFileShrankNeverFillsTheGap() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 10_000)
        let b = blob(1_000, seed: 24)
        XCTAssertEqual(send(h, owner, b, 0..<600)?.held, 600)
        truncate(dir(owner).appendingPathComponent("partial/\(b.name).1000").path, 250)
        let r = send(h, owner, b, 600..<1_000)
        XCTAssertNotEqual(r?.status, .complete, "bytes 250..<600 are zeros on disk")
        let have = try BackupHaveReplyMessage(payload: ask(h, owner, .backupHaveQuery,
                                                           BackupHaveQueryMessage(requestID: rid(), names: [b.name]).payload)[0].payload)
        XCTAssertEqual(have.holdings, [BackupHolding(name: b.name, size: 1_000, held: 250)], "back to what is on disk")
        XCTAssertEqual(send(h, owner, b, 250..<1_000)?.status, .complete)
        XCTAssertEqual(try [UInt8](Data(contentsOf: dir(owner).appendingPathComponent("blobs/\(b.name)"))), b.bytes)
    }

    func testKitThatCannotBeWrittenLeavesOtherOwnersAlone() throws {
        let h = makeHolder()
        try offer(h, owner, quota: 10_000)
        try offer(h, other, quota: 10_000)
        let b = blob(300, seed: 25)
        push(h, other, b)
        // The other owner's shelf file is damaged (a restart would set its directory aside), and
        // a directory sits where this owner's kit goes.
        try Data("garbage".utf8).write(to: dir(other).appendingPathComponent("shelf.json"))
        try FileManager.default.createDirectory(at: dir(owner).appendingPathComponent("kit/x"), withIntermediateDirectories: true)
        let put = BackupKitPutMessage(requestID: rid(), locator: KitLocator(bytes: [UInt8](repeating: 5, count: 32))!, version: 1,
                                      sealedKit: [UInt8](repeating: 9, count: 100))
        XCTAssertEqual(ask(h, owner, .backupKitPut, put.payload).count, 0)
        XCTAssertNil(h.bookNow.shelves[owner.publicKey]?.kit)
        XCTAssertEqual(h.bookNow.shelves[owner.publicKey]?.usedBytes, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir(other).appendingPathComponent("blobs/\(b.name)").path),
                      "a failed kit write moved another owner's files")
        let f = BackupFetchMessage(requestID: rid(), name: b.name, offset: 0, length: 300)
        XCTAssertEqual(try BackupFetchedMessage(payload: ask(h, other, .backupFetch, f.payload)[0].payload).data, b.bytes)
    }

    func testEndedFriendshipDeletesEverythingWhateverTheOffersVersion() throws {
        var h = makeHolder()
        try offer(h, owner, quota: 10_000, version: BackupLimits.maximumVersion)
        try offer(h, other, quota: 10_000, version: 5)
        push(h, owner, blob(200, seed: 26))
        h.withdraw(ownersNotIn: [other.publicKey])
        h.drain()
        XCTAssertNil(h.bookNow.shelves[owner.publicKey], "the book kept an ex-friend's shelf")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir(owner).path))
        XCTAssertEqual(send(h, owner, blob(200, seed: 26), 0..<200)?.status, .noOffer)
        XCTAssertNotNil(h.bookNow.shelves[other.publicKey])
        h = makeHolder()
        XCTAssertEqual(Array(h.bookNow.shelves.keys), [other.publicKey])
    }
}
