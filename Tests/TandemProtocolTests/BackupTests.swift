import Foundation
import Sodium
import SwiftProtobuf
import XCTest
@testable import TandemProtocol

private func rid(_ n: UInt8) -> BackupRequestID { BackupRequestID(bytes: [UInt8](repeating: n, count: 16))! }
private let owner: [UInt8] = [UInt8](repeating: 0xA1, count: 32)
private let other: [UInt8] = [UInt8](repeating: 0xB2, count: 32)
private let now: UInt64 = 1_767_225_600_000

/// A blob of `size` deterministic bytes and its name.
private func blob(_ seed: UInt8, _ size: Int) -> (name: BlobName, bytes: [UInt8]) {
    let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    return (BlobName(of: bytes), bytes)
}

private func piece(_ b: (name: BlobName, bytes: [UInt8]), _ offset: Int, _ length: Int, id: UInt8 = 1) -> BackupPieceMessage {
    BackupPieceMessage(requestID: rid(id), name: b.name, size: Int64(b.bytes.count), offset: Int64(offset),
                       data: Array(b.bytes[offset..<offset + length]))
}

/// A holder service in memory: carries out the book's decisions, hashing files as the node would.
private struct FakeHolder {
    var book = BackupHolderBook()
    var files: [BlobName: [UInt8]] = [:]

    mutating func send(_ p: BackupPieceMessage, nowMs: UInt64 = now, corrupt: Bool = false) -> BackupReplyMessage {
        switch book.receivePiece(owner: owner, p, nowMs: nowMs) {
        case .answer(let r): return r
        case .write(let r):
            write(p)
            return r
        case .writeThenCheck:
            write(p)
            var f = files[p.name]!
            if corrupt { f[0] ^= 1 }
            let r = book.finishBlob(owner: owner, name: p.name, requestID: p.requestID, matches: BlobName(of: f) == p.name)
            if r.status != .complete { files[p.name] = nil } // the service deletes a blob that failed its check
            return r
        }
    }

    mutating func write(_ p: BackupPieceMessage) {
        var f = files[p.name] ?? []
        XCTAssertEqual(Int64(f.count), p.offset, "the book asked for a write that is not an append")
        f += p.data
        files[p.name] = f
    }
}

final class BackupMessageTests: XCTestCase {
    func encode(_ m: some SwiftProtobuf.Message) -> [UInt8] { try! m.serializedBytes() }

    func testOfferRanges() throws {
        var m = Tandem_V1_BackupOffer()
        m.quotaBytes = 10 << 30
        m.version = 5
        XCTAssertEqual(try BackupOfferMessage(payload: encode(m)).quotaBytes, 10 << 30)
        m.quotaBytes = (1 << 50) + 1
        XCTAssertThrowsError(try BackupOfferMessage(payload: encode(m)))
        m.quotaBytes = .max
        XCTAssertThrowsError(try BackupOfferMessage(payload: encode(m)))
        m.quotaBytes = 0
        XCTAssertTrue(try BackupOfferMessage(payload: encode(m)).isWithdrawal)
        m.version = 0
        XCTAssertThrowsError(try BackupOfferMessage(payload: encode(m)))
        m.version = 1 << 53
        XCTAssertThrowsError(try BackupOfferMessage(payload: encode(m)))
        XCTAssertThrowsError(try BackupOfferMessage(payload: [0xff, 0xff]))
        XCTAssertThrowsError(try BackupOfferMessage(payload: [UInt8](repeating: 0, count: 70_000)))
    }

    func testPieceRanges() throws {
        let b = blob(1, 1000)
        var m = Tandem_V1_BackupPiece()
        m.requestID = Data(rid(1).bytes)
        m.name = Data(b.name.bytes)
        m.size = 1000
        m.offset = 900
        m.data = Data(b.bytes[900..<1000])
        let ok = try BackupPieceMessage(payload: encode(m))
        XCTAssertEqual(ok.end, 1000)
        XCTAssertEqual(try BackupPieceMessage(payload: ok.payload), ok)
        m.offset = 901 // past the declared size
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
        m.offset = .max
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
        m.offset = 0
        m.size = UInt64(BackupLimits.maximumBlobBytes) + 1
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
        m.size = 0
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
        m.size = 1 << 26
        m.data = Data()
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
        m.data = Data(count: BackupLimits.pieceBytes + 1)
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
        m.data = Data(count: BackupLimits.pieceBytes)
        XCTAssertNoThrow(try BackupPieceMessage(payload: encode(m)))
        m.name = Data(count: 31)
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
        m.name = Data(b.name.bytes)
        m.requestID = Data(count: 15)
        XCTAssertThrowsError(try BackupPieceMessage(payload: encode(m)))
    }

    func testSnapshotRanges() throws {
        let names = (0..<3).map { blob(UInt8($0), 10).name }.sorted()
        func record(_ f: (inout Tandem_V1_BackupSnapshotRecord) -> Void) -> [UInt8] {
            var r = Tandem_V1_BackupSnapshotRecord()
            r.snapshotID = Data(count: 16)
            r.createdAtMs = now
            r.blobs = names.map { Data($0.bytes) }
            r.indexBlobs = [Data(names[2].bytes)]
            r.totalBytes = 30
            f(&r)
            var m = Tandem_V1_BackupSnapshot()
            m.requestID = Data(rid(1).bytes)
            m.record = r
            return encode(m)
        }
        let ok = try BackupSnapshotMessage(payload: record { _ in }, nowMs: now)
        XCTAssertEqual(try BackupSnapshotMessage(payload: ok.payload, nowMs: now), ok)
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.blobs.reverse() }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.blobs.append($0.blobs[0]) }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.blobs = [] }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.indexBlobs = [Data(count: 32)] }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.createdAtMs = now + 600_001 }, nowMs: now))
        XCTAssertNoThrow(try BackupSnapshotMessage(payload: record { $0.createdAtMs = now + 600_000 }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.createdAtMs = 0 }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.createdAtMs = .max }, nowMs: .max))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.totalBytes = 0 }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.totalBytes = .max }, nowMs: now))
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: record { $0.snapshotID = Data(count: 17) }, nowMs: now))
        var m = Tandem_V1_BackupSnapshot()
        m.requestID = Data(rid(1).bytes)
        XCTAssertThrowsError(try BackupSnapshotMessage(payload: encode(m), nowMs: now))
    }

    func testOtherRanges() throws {
        var q = Tandem_V1_BackupHaveQuery()
        q.requestID = Data(rid(2).bytes)
        XCTAssertThrowsError(try BackupHaveQueryMessage(payload: encode(q)), "no names")
        q.names = [Data(count: 32), Data(count: 32)]
        XCTAssertThrowsError(try BackupHaveQueryMessage(payload: encode(q)), "a name twice")
        q.names = (0..<1025).map { i in Data(blob(UInt8(i % 256), 3 + i).name.bytes) }
        XCTAssertThrowsError(try BackupHaveQueryMessage(payload: encode(q)))

        var hr = Tandem_V1_BackupHaveReply()
        hr.requestID = Data(rid(2).bytes)
        var h = Tandem_V1_BackupHolding()
        h.name = Data(count: 32)
        h.size = 10
        h.held = 11
        hr.holdings = [h]
        XCTAssertThrowsError(try BackupHaveReplyMessage(payload: encode(hr)))
        hr.holdings[0].held = 10
        hr.usedBytes = .max
        XCTAssertThrowsError(try BackupHaveReplyMessage(payload: encode(hr)))
        hr.usedBytes = 10
        XCTAssertTrue(try BackupHaveReplyMessage(payload: encode(hr)).holdings[0].isWhole)

        var f = Tandem_V1_BackupForget()
        f.requestID = Data(rid(3).bytes)
        XCTAssertThrowsError(try BackupForgetMessage(payload: encode(f)))
        f.keepLast = 65
        XCTAssertThrowsError(try BackupForgetMessage(payload: encode(f)))
        f.keepLast = 64
        XCTAssertEqual(try BackupForgetMessage(payload: encode(f)).keepLast, 64)

        var p = Tandem_V1_BackupProve()
        p.requestID = Data(rid(4).bytes)
        XCTAssertThrowsError(try BackupProveMessage(payload: encode(p)))
        var c = Tandem_V1_BackupProofChallenge()
        c.name = Data(count: 32)
        c.nonce = Data(count: 31)
        p.challenges = [c]
        XCTAssertThrowsError(try BackupProveMessage(payload: encode(p)))
        p.challenges[0].nonce = Data(count: 32)
        XCTAssertNoThrow(try BackupProveMessage(payload: encode(p)))
        p.challenges = Array(repeating: c, count: 33)
        XCTAssertThrowsError(try BackupProveMessage(payload: encode(p)))

        var pr = Tandem_V1_BackupProof()
        pr.requestID = Data(rid(4).bytes)
        var a = Tandem_V1_BackupProofAnswer()
        a.name = Data(count: 32)
        a.status = .backupOk
        a.mac = Data(count: 16)
        pr.answers = [a]
        XCTAssertThrowsError(try BackupProofMessage(payload: encode(pr)))
        pr.answers[0].status = .backupNotFound
        pr.answers[0].mac = Data(count: 32)
        XCTAssertThrowsError(try BackupProofMessage(payload: encode(pr)))
        pr.answers[0].mac = Data()
        pr.retryAfterMs = 3_600_001
        XCTAssertThrowsError(try BackupProofMessage(payload: encode(pr)))

        var fe = Tandem_V1_BackupFetch()
        fe.requestID = Data(rid(5).bytes)
        fe.name = Data(count: 32)
        fe.length = 0
        XCTAssertThrowsError(try BackupFetchMessage(payload: encode(fe)))
        fe.length = UInt32(BackupLimits.pieceBytes) + 1
        XCTAssertThrowsError(try BackupFetchMessage(payload: encode(fe)))
        fe.length = 1
        fe.offset = UInt64(BackupLimits.maximumBlobBytes)
        XCTAssertThrowsError(try BackupFetchMessage(payload: encode(fe)))

        var fd = Tandem_V1_BackupFetched()
        fd.requestID = Data(rid(5).bytes)
        fd.name = Data(count: 32)
        fd.status = .backupOk
        fd.size = 4
        fd.offset = 2
        fd.data = Data(count: 3)
        XCTAssertThrowsError(try BackupFetchedMessage(payload: encode(fd)))

        var kp = Tandem_V1_BackupKitPut()
        kp.requestID = Data(rid(6).bytes)
        kp.locator = Data(count: 32)
        kp.version = 1
        kp.sealedKit = Data(count: 40)
        XCTAssertThrowsError(try BackupKitPutMessage(payload: encode(kp)))
        kp.sealedKit = Data(count: 262_145)
        XCTAssertThrowsError(try BackupKitPutMessage(payload: encode(kp)))
        kp.sealedKit = Data(count: 41)
        XCTAssertNoThrow(try BackupKitPutMessage(payload: encode(kp)))
        kp.locator = Data(count: 33)
        XCTAssertThrowsError(try BackupKitPutMessage(payload: encode(kp)))

        var kg = Tandem_V1_BackupKitGet()
        kg.requestID = Data(rid(7).bytes)
        kg.locator = Data(count: 32)
        kg.index = 4
        XCTAssertThrowsError(try BackupKitGetMessage(payload: encode(kg)))
        kg.index = 3
        XCTAssertNoThrow(try BackupKitGetMessage(payload: encode(kg)))

        var k = Tandem_V1_BackupKit()
        k.requestID = Data(rid(7).bytes)
        k.count = 5
        XCTAssertThrowsError(try BackupKitMessage(payload: encode(k)))
        k.count = 1
        k.owner = Data(count: 31)
        XCTAssertThrowsError(try BackupKitMessage(payload: encode(k)))

        var r = Tandem_V1_BackupReply()
        r.requestID = Data(rid(8).bytes)
        r.freedBlobs = 65_537
        XCTAssertThrowsError(try BackupReplyMessage(payload: encode(r)))
        r.freedBlobs = 0
        r.held = UInt64(BackupLimits.maximumBlobBytes) + 1
        XCTAssertThrowsError(try BackupReplyMessage(payload: encode(r)))
        r.held = 0
        r.status = Tandem_V1_BackupStatus(rawValue: 99)!
        XCTAssertEqual(try BackupReplyMessage(payload: encode(r)).status, .unspecified)

        var l = Tandem_V1_BackupListReply()
        l.requestID = Data(rid(9).bytes)
        var s = Tandem_V1_BackupSnapshotSummary()
        s.snapshotID = Data(count: 16)
        s.blobCount = 0
        l.snapshots = [s]
        XCTAssertThrowsError(try BackupListReplyMessage(payload: encode(l)))
    }
}

final class BackupHolderBookTests: XCTestCase {
    func testNothingStoredWithoutOffer() {
        var h = FakeHolder()
        let b = blob(1, 100)
        XCTAssertEqual(h.send(piece(b, 0, 100)).status, .noOffer)
        XCTAssertTrue(h.files.isEmpty)
        XCTAssertEqual(h.book.have(owner: owner, BackupHaveQueryMessage(requestID: rid(1), names: [b.name])).status, .noOffer)
    }

    func testWholeBlobInPiecesAndDuplicates() {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 10_000, version: 1)
        let b = blob(2, 1000)
        XCTAssertEqual(h.send(piece(b, 0, 400)).status, .ok)
        XCTAssertEqual(h.book.shelves[owner]!.usedBytes, 4_096 + 512, "reserved at its declared size's charge from the first piece")
        // A duplicate, and one inside what is held: OK, nothing written.
        XCTAssertEqual(h.send(piece(b, 0, 400)).held, 400)
        XCTAssertEqual(h.send(piece(b, 100, 200)).status, .ok)
        // A gap and an overlap past held: out of order, held says where to resume.
        let gap = h.send(piece(b, 500, 100))
        XCTAssertEqual(gap.status, .outOfOrder)
        XCTAssertEqual(gap.held, 400)
        XCTAssertEqual(h.send(piece(b, 300, 200)).status, .outOfOrder)
        // Another declared size.
        let lie = BackupPieceMessage(requestID: rid(1), name: b.name, size: 2000, offset: 400, data: [1])
        XCTAssertEqual(h.send(lie).status, .sizeMismatch)
        XCTAssertEqual(h.send(piece(b, 400, 600)).status, .complete)
        XCTAssertEqual(h.files[b.name]!, b.bytes)
        XCTAssertEqual(h.send(piece(b, 400, 600)).status, .complete, "a late duplicate")
        XCTAssertEqual(h.book.have(owner: owner, BackupHaveQueryMessage(requestID: rid(2), names: [b.name])).holdings[0],
                       BackupHolding(name: b.name, size: 1000, held: 1000))
        XCTAssertTrue(h.book.invariantsHold())
    }

    /// What an owner makes a holder store counts as what it takes on disk: 10 000 blobs of 2 bytes
    /// (20 KB of data) no longer fit a 20 KB quota, nor do their snapshot records.
    func testTinyBlobsAreChargedWhatTheyTakeOnDisk() {
        XCTAssertEqual(BackupLimits.chargedBytes(forFileOf: 2), 4_096 + 512)
        XCTAssertEqual(BackupLimits.chargedBytes(forFileOf: 4_096), 4_096 + 512)
        XCTAssertEqual(BackupLimits.chargedBytes(forFileOf: 4_097), 8_192 + 512)
        XCTAssertEqual(BackupLimits.chargedBytes(forFileOf: -5), 512, "a bad size cannot go below the overhead")
        XCTAssertGreaterThan(BackupLimits.chargedBytes(forFileOf: .max), 0, "no overflow")

        var h = FakeHolder()
        let quota: Int64 = 20_000
        _ = h.book.setOffer(owner: owner, quotaBytes: quota, version: 1)
        var stored = 0
        var refused = 0
        for i in 0..<10_000 {
            let bytes = [UInt8(truncatingIfNeeded: i), UInt8(truncatingIfNeeded: i >> 8)]
            let b = (name: BlobName(of: bytes), bytes: bytes)
            switch h.send(piece(b, 0, 2)).status {
            case .complete: stored += 1
            case .overQuota: refused += 1
            default: XCTFail("unexpected answer")
            }
        }
        XCTAssertEqual(stored, 4, "4 × 4 608 bytes fit in 20 000; a fifth does not")
        XCTAssertEqual(refused, 10_000 - 4)
        XCTAssertEqual(h.book.shelves[owner]!.usedBytes, 4 * 4_608)
        XCTAssertLessThanOrEqual(h.book.shelves[owner]!.usedBytes, quota)
        XCTAssertTrue(h.book.invariantsHold())

        // A snapshot record is charged too: with 1 392 bytes left, not even one fits.
        let names = h.book.shelves[owner]!.blobs.keys.sorted()
        let record = try! BackupSnapshotRecord(snapshotID: [UInt8](repeating: 1, count: 16), createdAtMs: now, blobs: names,
                                               indexBlobs: [], totalBytes: 8, nowMs: now)
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, BackupSnapshotMessage(requestID: rid(3), record: record)).status, .overQuota)

        // With room, snapshot records count and are released when forgotten.
        var roomy = FakeHolder()
        _ = roomy.book.setOffer(owner: owner, quotaBytes: 1 << 20, version: 1)
        for n in names { _ = roomy.send(piece((name: n, bytes: h.files[n]!), 0, 2)) }
        let before = roomy.book.shelves[owner]!.usedBytes
        XCTAssertEqual(roomy.book.recordSnapshot(owner: owner, BackupSnapshotMessage(requestID: rid(4), record: record)).status, .complete)
        XCTAssertEqual(roomy.book.shelves[owner]!.usedBytes, before + BackupLimits.chargedBytes(for: record))
        XCTAssertTrue(roomy.book.invariantsHold())
        let last = try! BackupSnapshotRecord(snapshotID: [UInt8](repeating: 2, count: 16), createdAtMs: now, blobs: [names[0]],
                                             indexBlobs: [], totalBytes: 2, nowMs: now)
        XCTAssertEqual(roomy.book.recordSnapshot(owner: owner, BackupSnapshotMessage(requestID: rid(5), record: last)).status, .complete)
        _ = roomy.book.forget(owner: owner, BackupForgetMessage(requestID: rid(6), keepLast: 1))
        XCTAssertEqual(roomy.book.shelves[owner]!.usedBytes, 4_608 + BackupLimits.chargedBytes(for: last),
                       "the forgotten record's charge and its blobs' are released")
        XCTAssertTrue(roomy.book.invariantsHold())
    }

    func testNewBlobMustStartAtZeroAndHashIsChecked() {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 10_000, version: 1)
        let b = blob(3, 300)
        XCTAssertEqual(h.send(piece(b, 100, 100)).status, .outOfOrder)
        XCTAssertEqual(h.book.shelves[owner]!.usedBytes, 0)
        XCTAssertEqual(h.send(piece(b, 0, 300), corrupt: true).status, .hashMismatch)
        XCTAssertEqual(h.book.shelves[owner]!.usedBytes, 0, "the reservation is released")
        XCTAssertNil(h.book.shelves[owner]!.blobs[b.name])
        // A piece claiming a name its bytes do not have.
        let fake = BackupPieceMessage(requestID: rid(1), name: blob(9, 5).name, size: 5, offset: 0, data: [1, 2, 3, 4, 5])
        h.files[fake.name] = nil
        XCTAssertEqual(h.send(fake).status, .hashMismatch)
    }

    func testQuotaNeverExceededAdversarial() {
        // Random sequences of pieces of many blobs with lying sizes, duplicates and offsets.
        var rng = SystemRandomNumberGenerator()
        for round in 0..<50 {
            var h = FakeHolder()
            let quota = Int64.random(in: 1...50_000, using: &rng)
            _ = h.book.setOffer(owner: owner, quotaBytes: quota, version: 1)
            let blobs = (0..<12).map { blob(UInt8($0 + round), Int.random(in: 1...9_000, using: &rng)) }
            for _ in 0..<400 {
                let b = blobs.randomElement(using: &rng)!
                let size = Int64(b.bytes.count)
                let declared = Bool.random(using: &rng) ? size : Int64.random(in: 1...20_000, using: &rng)
                let offset = Bool.random(using: &rng) ? (h.book.shelves[owner]?.blobs[b.name]?.held ?? 0) : Int64.random(in: 0..<declared, using: &rng)
                guard offset < declared else { continue }
                let len = Int(min(Int64.random(in: 1...3_000, using: &rng), declared - offset))
                var data = [UInt8](repeating: 7, count: len)
                if declared == size, offset + Int64(len) <= size { data = Array(b.bytes[Int(offset)..<Int(offset) + len]) }
                let p = BackupPieceMessage(requestID: rid(1), name: b.name, size: declared, offset: offset, data: data)
                _ = h.book.receivePiece(owner: owner, p, nowMs: now) // checks are completed below, as the service would
                XCTAssertLessThanOrEqual(h.book.shelves[owner]!.usedBytes, quota)
                XCTAssertLessThanOrEqual(h.book.shelves[owner]!.partialCount, BackupLimits.partialBlobsPerOwner)
                // Complete any blob waiting for its check (as the service would).
                for (name, bl) in h.book.shelves[owner]!.blobs where bl.state == .checking {
                    _ = h.book.finishBlob(owner: owner, name: name, requestID: rid(1), matches: Bool.random(using: &rng))
                }
                XCTAssertTrue(h.book.invariantsHold())
            }
            if Bool.random(using: &rng) {
                _ = h.book.forget(owner: owner, BackupForgetMessage(requestID: rid(2), keepLast: 1))
                XCTAssertEqual(h.book.shelves[owner]!.usedBytes, 0)
            }
        }
    }

    func testOverQuotaAndPartialLimit() {
        var h = FakeHolder()
        // Room for 8 blobs of up to 4 096 bytes (each charged 4 608), not for one of 4 097.
        _ = h.book.setOffer(owner: owner, quotaBytes: 8 * 4_608, version: 1)
        let big = blob(4, 8 * 4_096 + 1)
        XCTAssertEqual(h.send(piece(big, 0, 10)).status, .overQuota)
        let blobs = (0..<9).map { blob(UInt8(10 + $0), 100) }
        for b in blobs.prefix(8) { XCTAssertEqual(h.send(piece(b, 0, 10)).status, .ok) }
        XCTAssertEqual(h.send(piece(blobs[8], 0, 10)).status, .tooManyPartial)
        // Lowering the quota keeps what is held but refuses more.
        _ = h.book.setOffer(owner: owner, quotaBytes: 100, version: 2)
        XCTAssertEqual(h.send(piece(blobs[0], 10, 90)).status, .complete)
        XCTAssertEqual(h.book.setOffer(owner: owner, quotaBytes: 5, version: 2), .ignored)
        guard case .withdrawn(let freed, nil) = h.book.setOffer(owner: owner, quotaBytes: 0, version: 3) else { return XCTFail() }
        XCTAssertEqual(freed.count, 8)
        XCTAssertNil(h.book.shelves[owner])
    }

    func testResumeAfterRestartAndIdleExpiry() {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 10_000, version: 1)
        let b = blob(5, 1000)
        _ = h.send(piece(b, 0, 600))
        // The disk kept only 512 bytes (kill -9 before the page cache was written).
        XCTAssertEqual(h.book.partialOnDisk(owner: owner, name: b.name, held: 512), 512)
        h.files[b.name] = Array(b.bytes[0..<512])
        XCTAssertEqual(h.book.have(owner: owner, BackupHaveQueryMessage(requestID: rid(1), names: [b.name])).holdings[0].held, 512)
        XCTAssertEqual(h.send(piece(b, 600, 400)).status, .outOfOrder)
        XCTAssertEqual(h.send(piece(b, 512, 488)).status, .complete)
        // Idle partials are discarded after 7 days, not before.
        let c = blob(6, 1000)
        _ = h.send(piece(c, 0, 10), nowMs: now)
        XCTAssertTrue(h.book.expireIdlePartials(nowMs: now + 7 * 86_400_000 - 1).isEmpty)
        XCTAssertEqual(h.book.expireIdlePartials(nowMs: now + 7 * 86_400_000).map(\.name), [c.name])
        XCTAssertEqual(h.book.shelves[owner]!.usedBytes, 4_608)
        XCTAssertTrue(h.book.invariantsHold())
    }

    func testSnapshotsAndRetentionFreeExactlyUnreferenced() throws {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 1 << 30, version: 1)
        let bs = (0..<6).map { blob(UInt8(20 + $0), 100 + $0) }
        for b in bs { XCTAssertEqual(h.send(piece(b, 0, b.bytes.count)).status, .complete) }
        func snap(_ id: UInt8, _ idx: [Int]) throws -> BackupSnapshotMessage {
            let names = idx.map { bs[$0].name }.sorted()
            let total = idx.reduce(Int64(0)) { $0 + Int64(bs[$1].bytes.count) }
            return BackupSnapshotMessage(requestID: rid(id), record: try BackupSnapshotRecord(
                snapshotID: [UInt8](repeating: id, count: 16), createdAtMs: now, blobs: names, indexBlobs: [], totalBytes: total, nowMs: now))
        }
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, try snap(1, [0, 1, 2])).status, .complete)
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, try snap(1, [0, 1, 2])).status, .complete, "a resend")
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, try snap(1, [0, 1])).status, .conflict)
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, try snap(2, [1, 2, 3])).status, .complete)
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, try snap(3, [3, 4])).status, .complete)
        // Wrong total and a blob not held.
        let wrong = BackupSnapshotMessage(requestID: rid(9), record: try BackupSnapshotRecord(
            snapshotID: [UInt8](repeating: 9, count: 16), createdAtMs: now, blobs: [bs[0].name], indexBlobs: [], totalBytes: 1, nowMs: now))
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, wrong).status, .missingBlobs)
        let missing = BackupSnapshotMessage(requestID: rid(9), record: try BackupSnapshotRecord(
            snapshotID: [UInt8](repeating: 8, count: 16), createdAtMs: now, blobs: [blob(99, 3).name], indexBlobs: [], totalBytes: 3, nowMs: now))
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, missing).status, .missingBlobs)

        let (r, freed) = h.book.forget(owner: owner, BackupForgetMessage(requestID: rid(4), keepLast: 2))
        // Kept: snapshots 2 and 3 → blobs 1, 2, 3, 4. Freed: 0 and 5 (never referenced).
        XCTAssertEqual(Set(freed), Set([bs[0].name, bs[5].name]))
        XCTAssertEqual(r.freedBlobs, 2)
        XCTAssertEqual(h.book.list(owner: owner, BackupListQueryMessage(requestID: rid(5))).snapshots.map { $0.snapshotID[0] }, [2, 3])
        // Four blobs and two snapshot records (3 and 2 names), each charged as a file.
        XCTAssertEqual(r.usedBytes, 4 * 4_608 + BackupLimits.chargedBytes(forSnapshotNaming: 3) + BackupLimits.chargedBytes(forSnapshotNaming: 2))
        XCTAssertTrue(h.book.invariantsHold())
        let (_, again) = h.book.forget(owner: owner, BackupForgetMessage(requestID: rid(6), keepLast: 64))
        XCTAssertTrue(again.isEmpty)
    }

    func testProofAnswersAndCorruption() {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 1 << 30, version: 1)
        let a = blob(30, 5000), b = blob(31, 70)
        _ = h.send(piece(a, 0, 5000))
        _ = h.send(piece(b, 0, 70))
        let nonce = [UInt8](repeating: 0x42, count: 32)
        let prove = BackupProveMessage(requestID: rid(1), challenges: [
            BackupProofChallenge(name: a.name, nonce: nonce), BackupProofChallenge(name: b.name, nonce: nonce),
            BackupProofChallenge(name: blob(32, 1).name, nonce: nonce),
        ])
        h.files[b.name]![3] ^= 0x10 // the holder's copy of b rots
        let files = h.files
        let (reply, corrupted) = h.book.prove(owner: owner, prove, nowMs: now) { _, name, sink in
            guard let f = files[name] else { throw CocoaError(.fileNoSuchFile) }
            // Streamed in uneven pieces.
            var i = 0
            while i < f.count {
                let n = min(777, f.count - i)
                f[i..<i + n].withUnsafeBytes { sink($0) }
                i += n
            }
        }
        XCTAssertEqual(reply.answers.map(\.status), [.ok, .notFound, .notFound])
        XCTAssertEqual(reply.answers[0].mac, BackupProofOfStorage.mac(nonce: nonce, blob: a.bytes), "the owner's check")
        XCTAssertEqual(corrupted, [b.name])
        XCTAssertNil(h.book.shelves[owner]!.blobs[b.name])
        XCTAssertTrue(h.book.invariantsHold())
        // Another owner cannot ask about (or read) this owner's blobs.
        _ = h.book.setOffer(owner: other, quotaBytes: 1000, version: 1)
        let (r2, _) = h.book.prove(owner: other, prove, nowMs: now) { _, _, _ in XCTFail("read for a stranger's blob") }
        XCTAssertEqual(r2.answers.map(\.status), [.notFound, .notFound, .notFound])
        XCTAssertEqual(h.book.fetch(owner: other, BackupFetchMessage(requestID: rid(2), name: a.name, offset: 0, length: 10)),
                       .answer(BackupFetchedMessage(requestID: rid(2), status: .notFound, name: a.name)))
        XCTAssertEqual(h.book.fetch(owner: owner, BackupFetchMessage(requestID: rid(2), name: a.name, offset: 4990, length: 100)),
                       .read(name: a.name, size: 5000, offset: 4990, length: 10))
    }

    /// A blob found corrupted while proving goes, and so do the snapshots naming it: a kept
    /// snapshot never names a blob the holder does not hold (found by the holder fuzz target).
    func testProofThatFindsCorruptionDropsTheSnapshotsNamingTheBlob() throws {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 1 << 30, version: 1)
        let bs = (0..<3).map { blob(UInt8(40 + $0), 200 + $0) }
        for b in bs { XCTAssertEqual(h.send(piece(b, 0, b.bytes.count)).status, .complete) }
        func snap(_ id: UInt8, _ idx: [Int]) throws -> BackupSnapshotMessage {
            BackupSnapshotMessage(requestID: rid(id), record: try BackupSnapshotRecord(
                snapshotID: [UInt8](repeating: id, count: 16), createdAtMs: now, blobs: idx.map { bs[$0].name }.sorted(), indexBlobs: [],
                totalBytes: idx.reduce(Int64(0)) { $0 + Int64(bs[$1].bytes.count) }, nowMs: now))
        }
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, try snap(1, [0, 1])).status, .complete)
        XCTAssertEqual(h.book.recordSnapshot(owner: owner, try snap(2, [1, 2])).status, .complete)
        h.files[bs[0].name]![7] ^= 1
        let files = h.files
        let prove = BackupProveMessage(requestID: rid(3), challenges: [BackupProofChallenge(name: bs[0].name, nonce: [UInt8](repeating: 1, count: 32))])
        let (reply, corrupted) = h.book.prove(owner: owner, prove, nowMs: now) { _, name, sink in files[name]!.withUnsafeBytes { sink($0) } }
        XCTAssertEqual(reply.answers.map(\.status), [.notFound])
        XCTAssertEqual(corrupted, [bs[0].name])
        XCTAssertTrue(h.book.invariantsHold())
        XCTAssertEqual(h.book.shelves[owner]!.snapshots.map { $0.snapshotID[0] }, [2], "only the snapshot without the lost blob stays")
        XCTAssertEqual(h.book.shelves[owner]!.blobs[bs[1].name]?.state, .whole)
    }

    func testProofBudget() {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 1 << 40, version: 1)
        // Pretend 20 blobs of 64 MiB are held (the book only needs the accounting).
        var names: [BlobName] = []
        for i in 0..<20 {
            let n = blob(UInt8(100 + i), 1).name
            names.append(n)
            h.book.testingInsertWhole(owner: owner, name: n, size: BackupLimits.maximumBlobBytes)
        }
        let prove = BackupProveMessage(requestID: rid(1), challenges: names.map { BackupProofChallenge(name: $0, nonce: [UInt8](repeating: 1, count: 32)) })
        let (r, _) = h.book.prove(owner: owner, prove, nowMs: now) { _, _, _ in XCTFail("no reading over budget") }
        XCTAssertEqual(r.status, .busy)
        XCTAssertGreaterThan(r.retryAfterMs, 0)
    }

    func testKits() throws {
        var book = BackupHolderBook()
        let loc = KitLocator(bytes: [UInt8](repeating: 7, count: 32))!
        let put = BackupKitPutMessage(requestID: rid(1), locator: loc, version: 5, sealedKit: [UInt8](repeating: 1, count: 100))
        XCTAssertEqual(book.putKit(owner: owner, put).reply.status, .noOffer)
        _ = book.setOffer(owner: owner, quotaBytes: 5_000, version: 1)
        XCTAssertTrue(book.putKit(owner: owner, put).store)
        XCTAssertEqual(book.shelves[owner]!.usedBytes, 4_096 + 512, "charged as the file it is")
        XCTAssertFalse(book.putKit(owner: owner, put).store, "same version: ignored")
        let bigger = BackupKitPutMessage(requestID: rid(1), locator: loc, version: 6, sealedKit: [UInt8](repeating: 1, count: 4_097))
        XCTAssertEqual(book.putKit(owner: owner, bigger).reply.status, .overQuota)
        XCTAssertEqual(book.kit(locator: loc, index: 0)?.owner, owner)
        XCTAssertNil(book.kit(locator: loc, index: 1))
        // Other owners copying the locator: at most 4 per locator.
        for i in 0..<4 {
            let o = [UInt8](repeating: UInt8(i), count: 32)
            _ = book.setOffer(owner: o, quotaBytes: 5_000, version: 1)
            XCTAssertEqual(book.putKit(owner: o, put).reply.status, i < 3 ? .ok : .conflict)
        }
        XCTAssertEqual(book.kit(locator: loc, index: 0)?.owner, owner, "the first to put stays first")
        XCTAssertEqual(book.kit(locator: loc, index: 3)?.count, 4)
        XCTAssertTrue(book.invariantsHold())
    }
}

final class BackupPushPlanTests: XCTestCase {
    /// Drives a plan against a holder in memory, optionally dropping the link after `dropAfter`
    /// replies; returns bytes sent.
    fileprivate func push(_ local: [(name: BlobName, bytes: [UInt8], index: Bool)], _ h: inout FakeHolder, dropAfter: Int? = nil) throws -> (Int64, Bool) {
        let names = local.map(\.name)
        let have = h.book.have(owner: owner, BackupHaveQueryMessage(requestID: rid(1), names: names))
        var plan = try BackupPushPlan(local: local.map { .init(name: $0.name, size: Int64($0.bytes.count), isIndex: $0.index) },
                                      holdings: have.holdings, quotaBytes: have.quotaBytes, usedBytes: have.usedBytes)
        let bytes = Dictionary(uniqueKeysWithValues: local.map { ($0.name, $0.bytes) })
        var replies = 0
        while !plan.isReadyForSnapshot {
            let pieces = plan.nextPieces()
            XCTAssertFalse(pieces.isEmpty, "the plan stalled")
            if pieces.isEmpty { break }
            XCTAssertLessThanOrEqual(plan.piecesInFlight.count, BackupLimits.piecesInFlight)
            for p in pieces {
                let data = Array(bytes[p.name]![Int(p.offset)..<Int(p.end)])
                let r = h.send(BackupPieceMessage(requestID: rid(3), name: p.name, size: p.size, offset: p.offset, data: data))
                replies += 1
                if let d = dropAfter, replies >= d { return (plan.bytesSent, false) }
                if case .failed(let e) = plan.handle(r, for: p) { throw e }
            }
        }
        return (plan.bytesSent, true)
    }

    func testPushResumeAndSecondPushSendsNothing() throws {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 1 << 30, version: 1)
        let packs = (0..<5).map { i -> (name: BlobName, bytes: [UInt8], index: Bool) in
            let b = blob(UInt8(40 + i), 300_000 + i * 100_000); return (b.name, b.bytes, false)
        }
        let idx = blob(50, 70_000)
        let local = packs + [(idx.name, idx.bytes, true)]
        let total = local.reduce(0) { $0 + $1.bytes.count }
        // The link drops after 7 replies; a new plan resumes from what the holder reports.
        let (first, done) = try push(local, &h, dropAfter: 7)
        XCTAssertFalse(done)
        let (second, done2) = try push(local, &h)
        XCTAssertTrue(done2)
        XCTAssertLessThanOrEqual(first + second, Int64(total) + Int64(BackupLimits.piecesInFlight * BackupLimits.pieceBytes),
                                 "only pieces in flight at the drop are sent twice")
        XCTAssertLessThan(second, Int64(total))
        for b in local { XCTAssertEqual(h.files[b.name], b.bytes) }
        // Nothing changed: nothing to send.
        let (third, done3) = try push(local, &h)
        XCTAssertTrue(done3)
        XCTAssertEqual(third, 0)
    }

    func testPlanOrderAndQuota() throws {
        let a = blob(60, 10), b = blob(61, 10), i = blob(62, 10)
        let local: [BackupPushPlan.LocalBlob] = [.init(name: i.name, size: 10, isIndex: true), .init(name: a.name, size: 10, isIndex: false),
                                                 .init(name: b.name, size: 10, isIndex: false)]
        // What the holder will charge: three files of 10 bytes and the snapshot record (at most its
        // blobs and 8 index blobs).
        let needed = 3 * BackupLimits.chargedBytes(forFileOf: 10) + BackupLimits.chargedBytes(forSnapshotNaming: 3 + 8)
        var plan = try BackupPushPlan(local: local, holdings: [], quotaBytes: needed, usedBytes: 0)
        let order = plan.nextPieces().map(\.name)
        XCTAssertEqual(order.last, i.name, "the index goes after the packs")
        XCTAssertEqual(Array(order.prefix(2)), [a.name, b.name].sorted())
        XCTAssertThrowsError(try BackupPushPlan(local: local, holdings: [], quotaBytes: needed - 1, usedBytes: 0)) { e in
            XCTAssertEqual((e as? BackupPushPlan.PlanError)?.kind, .overQuota)
        }
        // A holder reporting another size, and duplicate local names.
        XCTAssertThrowsError(try BackupPushPlan(local: local, holdings: [BackupHolding(name: a.name, size: 11, held: 1)], quotaBytes: 1 << 20, usedBytes: 0))
        XCTAssertThrowsError(try BackupPushPlan(local: local + [local[0]], holdings: [], quotaBytes: 1 << 20, usedBytes: 0))
        let record = try plan.snapshotRecord(snapshotID: [UInt8](repeating: 1, count: 16), createdAtMs: now)
        XCTAssertEqual(record.indexBlobs, [i.name])
        XCTAssertEqual(record.totalBytes, 30)
    }

    func testHashMismatchRetriesOnceThenNamesTheBlob() throws {
        var h = FakeHolder()
        _ = h.book.setOffer(owner: owner, quotaBytes: 1 << 20, version: 1)
        let a = blob(70, 1000)
        var plan = try BackupPushPlan(local: [.init(name: a.name, size: 1000, isIndex: false)], holdings: [], quotaBytes: 1 << 20, usedBytes: 0)
        for attempt in 0..<2 {
            let p = plan.nextPieces()
            XCTAssertEqual(p.count, 1)
            let r = h.send(piece(a, 0, 1000), corrupt: true)
            let e = plan.handle(r, for: p[0])
            if attempt == 0 { XCTAssertEqual(e, .progress) } else {
                guard case .failed(let err) = e else { return XCTFail() }
                XCTAssertEqual(err.name, a.name)
                XCTAssertEqual(err.kind, .hashMismatchTwice)
            }
        }
    }
}

final class BackupVectorTests: XCTestCase {
    func testVectors() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Protocol/vectors/backup.json")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as! [String: Any]
        func hex(_ s: Any?) -> [UInt8] { hexBytes(s as! String)! }

        for v in json["proofs"] as! [[String: Any]] {
            let b = hex(v["blob"])
            XCTAssertEqual(BlobName(of: b).bytes, hex(v["name"]))
            XCTAssertEqual(BackupProofOfStorage.mac(nonce: hex(v["nonce"]), blob: b), hex(v["mac"]))
        }
        let kit = json["kit"] as! [String: Any]
        let code = try RecoveryCode(parsing: kit["code"] as! String)
        XCTAssertEqual(code.bytes, hex(kit["code_bytes"]))
        XCTAssertEqual(RecoveryKitSeal.kitKey(code), hex(kit["kit_key"]))
        XCTAssertEqual(RecoveryKitSeal.locator(code).bytes, hex(kit["locator"]))
        let sealed = try RecoveryKitSeal.seal(hex(kit["plaintext"]), code: code, nonce: hex(kit["nonce"]))
        XCTAssertEqual(sealed, hex(kit["sealed"]))
        XCTAssertEqual(RecoveryKitSeal.open(sealed, code: code), hex(kit["plaintext"]))
        // Its home relay is one a restorer can dial (README 14.1).
        let contents = try Tandem_V1_RecoveryKitContents(serializedBytes: hex(kit["plaintext"]) as [UInt8])
        XCTAssertEqual(contents.homeRelays.count, 1)
        for relay in contents.homeRelays { XCTAssertNoThrow(try RelayAddress(parsing: relay), relay) }
        // Sealing from the derived key and locator (a node's <data-dir>/backup-kit) gives the same bytes.
        let locator = KitLocator(bytes: hex(kit["locator"]))!
        XCTAssertEqual(try RecoveryKitSeal.seal(hex(kit["plaintext"]), kitKey: hex(kit["kit_key"]), locator: locator,
                                                nonce: hex(kit["nonce"])), sealed)
        XCTAssertEqual(RecoveryKitSeal.open(sealed, kitKey: hex(kit["kit_key"]), locator: locator), hex(kit["plaintext"]))
        XCTAssertNil(RecoveryKitSeal.open(sealed, kitKey: hex(kit["kit_key"]), locator: KitLocator(bytes: [UInt8](repeating: 7, count: 32))!))
        var tampered = sealed
        tampered[30] ^= 1
        XCTAssertNil(RecoveryKitSeal.open(tampered, code: code))

        // Link-authenticated envelopes (README 5.4): built byte for byte as the generator built them,
        // accepted only on the author's link.
        let linkAuthenticated = json["link_authenticated"] as! [[String: Any]]
        XCTAssertEqual(linkAuthenticated.count, 2)
        let vectorNow = (json["now_ms"] as! NSNumber).uint64Value
        for v in linkAuthenticated {
            let name = v["name"] as! String
            let type = MessageType(rawValue: UInt16(v["type"] as! String, radix: 16)!)
            XCTAssertTrue(type.isLinkAuthenticated, name)
            let author = try SigningKeyPair(seed: hex(v["author_seed"]))
            XCTAssertEqual(author.publicKey, hex(v["author"]), name)
            let env = Envelope.sign(type: type, messageID: MessageID(bytes: hex(v["message_id"])), author: author,
                                    recipient: hex(v["recipient"]), createdAt: (v["created_at"] as! NSNumber).uint64Value,
                                    payload: hex(v["payload"]))
            XCTAssertEqual(env.bytes, hex(v["envelope"]), name)
            func verdict(_ bytes: [UInt8], on peer: [UInt8]?) -> Tandem_V1_ErrorCode? {
                var verifier = FrameVerifier(localPublicKey: hex(v["recipient"]))
                switch verifier.verify(bytes, linkPeer: peer, now: vectorNow) {
                case .success: return nil
                case .failure(let r): return r.code
                }
            }
            XCTAssertNil(verdict(env.bytes, on: hex(v["accepted_on_a_link_from"])), name)
            for peer in v["refused_on_a_link_from"] as! [String] {
                XCTAssertEqual(verdict(env.bytes, on: hex(peer)), .badSignature, "\(name) on a link from \(peer.prefix(8))")
            }
            XCTAssertEqual(verdict(env.bytes, on: nil), .badSignature, "\(name) off a link")
            for refused in v["refused_envelopes"] as! [[String: String]] {
                XCTAssertEqual(verdict(hex(refused["envelope"]), on: author.publicKey), .badSignature, "\(name): \(refused["why"]!)")
            }
        }

        let nowMs = (json["now_ms"] as! NSNumber).uint64Value
        for m in json["messages"] as! [[String: Any]] {
            let type = UInt16(m["type"] as! String, radix: 16)!
            let payload = hex(m["payload"])
            let valid = m["valid"] as! Bool
            let decoded: Bool
            do {
                try Self.decode(type, payload, nowMs: nowMs)
                decoded = true
            } catch {
                decoded = false
            }
            XCTAssertEqual(decoded, valid, "\(m["name"] as! String)")
        }
    }

    /// Decodes with the validating initialiser of the type, and re-encodes a valid one canonically.
    static func decode(_ type: UInt16, _ p: [UInt8], nowMs: UInt64) throws {
        func same(_ a: [UInt8]) { XCTAssertEqual(a, p, "canonical re-encoding of 0x\(String(type, radix: 16))") }
        switch type {
        case 0x0401: same(try BackupOfferMessage(payload: p).payload)
        case 0x0402: same(try BackupHaveQueryMessage(payload: p).payload)
        case 0x0403: same(try BackupHaveReplyMessage(payload: p).payload)
        case 0x0404: same(try BackupPieceMessage(payload: p).payload)
        case 0x0405: same(try BackupReplyMessage(payload: p).payload)
        case 0x0406: same(try BackupSnapshotMessage(payload: p, nowMs: nowMs).payload)
        case 0x0407: same(try BackupForgetMessage(payload: p).payload)
        case 0x0408: same(try BackupListQueryMessage(payload: p).payload)
        case 0x0409: same(try BackupListReplyMessage(payload: p).payload)
        case 0x040A: same(try BackupProveMessage(payload: p).payload)
        case 0x040B: same(try BackupProofMessage(payload: p).payload)
        case 0x040C: same(try BackupFetchMessage(payload: p).payload)
        case 0x040D: same(try BackupFetchedMessage(payload: p).payload)
        case 0x040E: same(try BackupKitPutMessage(payload: p).payload)
        case 0x040F: same(try BackupKitGetMessage(payload: p).payload)
        case 0x0410: same(try BackupKitMessage(payload: p).payload)
        default: XCTFail("unknown type")
        }
    }
}
