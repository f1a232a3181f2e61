import Foundation
import Sodium
import SwiftProtobuf
import XCTest
@testable import TandemProtocol

private let now: UInt64 = 1_767_225_600_000
private func rid(_ n: UInt8) -> BackupRequestID { BackupRequestID(bytes: [UInt8](repeating: n, count: 16))! }

/// Signed snapshot headers (backup.md 5.1) and the automatic push schedule (4.1).
final class BackupFreshnessTests: XCTestCase {
    let owner = SigningKeyPair.generate()

    /// A holder's book with `blobs` held whole for `owner`.
    func holder(_ blobs: [[UInt8]]) -> BackupHolderBook {
        var book = BackupHolderBook()
        _ = book.setOffer(owner: owner.publicKey, quotaBytes: 1 << 30, version: 1)
        for (i, bytes) in blobs.enumerated() {
            let p = BackupPieceMessage(requestID: rid(UInt8(i)), name: BlobName(of: bytes), size: Int64(bytes.count), offset: 0, data: bytes)
            if case .writeThenCheck = book.receivePiece(owner: owner.publicKey, p, nowMs: now) {
                XCTAssertEqual(book.finishBlob(owner: owner.publicKey, name: p.name, requestID: p.requestID, matches: true).status, .complete)
            } else {
                XCTFail("a one-piece blob is checked at once")
            }
        }
        return book
    }

    func record(_ blobs: [[UInt8]], index: [Int], generation: UInt64, at: UInt64 = now, id: UInt8 = 1) throws -> BackupSnapshotRecord {
        let local = blobs.enumerated().map { i, b in BackupPushPlan.LocalBlob(name: BlobName(of: b), size: Int64(b.count), isIndex: index.contains(i)) }
        let plan = try BackupPushPlan(local: local, holdings: local.map { BackupHolding(name: $0.name, size: $0.size, held: $0.size) },
                                      quotaBytes: 1 << 30, usedBytes: 0)
        return try plan.snapshotRecord(snapshotID: [UInt8](repeating: id, count: 16), createdAtMs: at, generation: generation, owner: owner)
    }

    func testASignedRecordTravelsAndVerifiesAndTheHolderRefusesAForgery() throws {
        let blobs = [[UInt8](repeating: 1, count: 100), [UInt8](repeating: 2, count: 300), [UInt8](repeating: 3, count: 50)]
        let r = try record(blobs, index: [2], generation: 7)
        XCTAssertEqual(r.generation, 7)
        XCTAssertEqual(r.indexSizes, [50])
        XCTAssertTrue(r.header.verify(r.ownerSignature, owner: owner.publicKey))
        // Through the wire and back.
        let m = BackupSnapshotMessage(requestID: rid(1), record: r)
        let decoded = try BackupSnapshotMessage(payload: m.payload, nowMs: now)
        XCTAssertEqual(decoded.record, r)
        var book = holder(blobs)
        XCTAssertEqual(book.recordSnapshot(owner: owner.publicKey, decoded).status, .complete)
        // LIST carries what a restorer checks.
        let list = try BackupListReplyMessage(payload: book.list(owner: owner.publicKey, BackupListQueryMessage(requestID: rid(2))).payload)
        XCTAssertEqual(list.snapshots.count, 1)
        XCTAssertTrue(list.snapshots[0].isSigned(by: owner.publicKey))
        XCTAssertFalse(list.snapshots[0].isSigned(by: SigningKeyPair.generate().publicKey))

        // A record re-dated or given a higher generation by someone else does not verify: the
        // holder refuses it, and a summary so changed is not the owner's.
        var forged = r.proto
        forged.generation = 99
        forged.snapshotID = Data(repeating: 5, count: 16)
        let forgedMessage = try BackupSnapshotMessage(payload: BackupSnapshotMessage(requestID: rid(3), record: try BackupSnapshotRecord(
            validating: forged, nowMs: now, .backupSnapshot)).payload, nowMs: now)
        XCTAssertEqual(book.recordSnapshot(owner: owner.publicKey, forgedMessage).status, .badRequest)
        let s = list.snapshots[0]
        for changed in [
            BackupSnapshotSummary(snapshotID: s.snapshotID, createdAtMs: s.createdAtMs + 1, blobCount: s.blobCount, indexBlobs: s.indexBlobs,
                                  totalBytes: s.totalBytes, generation: s.generation, indexSizes: s.indexSizes, ownerSignature: s.ownerSignature),
            BackupSnapshotSummary(snapshotID: s.snapshotID, createdAtMs: s.createdAtMs, blobCount: s.blobCount, indexBlobs: s.indexBlobs,
                                  totalBytes: s.totalBytes, generation: s.generation + 1, indexSizes: s.indexSizes, ownerSignature: s.ownerSignature),
            BackupSnapshotSummary(snapshotID: s.snapshotID, createdAtMs: s.createdAtMs, blobCount: s.blobCount, indexBlobs: s.indexBlobs,
                                  totalBytes: s.totalBytes + 1, generation: s.generation, indexSizes: s.indexSizes, ownerSignature: s.ownerSignature),
            BackupSnapshotSummary(snapshotID: s.snapshotID, createdAtMs: s.createdAtMs, blobCount: s.blobCount, indexBlobs: s.indexBlobs,
                                  totalBytes: s.totalBytes, generation: s.generation, indexSizes: [51], ownerSignature: s.ownerSignature),
        ] {
            XCTAssertFalse(changed.isSigned(by: owner.publicKey))
        }
    }

    func testIndexSizesMustBeTheHeldOnesAndFitTheTotal() throws {
        let blobs = [[UInt8](repeating: 1, count: 100), [UInt8](repeating: 3, count: 50)]
        let r = try record(blobs, index: [1], generation: 1)
        var other = holder([[UInt8](repeating: 1, count: 100), [UInt8](repeating: 3, count: 50)])
        XCTAssertEqual(other.recordSnapshot(owner: owner.publicKey, BackupSnapshotMessage(requestID: rid(1), record: r)).status, .complete)
        // Shapes the decoder refuses: sizes without their blobs, too large, a short signature.
        var p = r.proto
        p.indexSizes = [50, 50]
        XCTAssertThrowsError(try BackupSnapshotRecord(validating: p, nowMs: now, .backupSnapshot))
        p = r.proto
        p.indexSizes = [UInt64(BackupLimits.maximumBlobBytes) + 1]
        XCTAssertThrowsError(try BackupSnapshotRecord(validating: p, nowMs: now, .backupSnapshot))
        p = r.proto
        p.ownerSignature = Data(count: 63)
        XCTAssertThrowsError(try BackupSnapshotRecord(validating: p, nowMs: now, .backupSnapshot))
        p = r.proto
        p.indexSizes = []
        XCTAssertThrowsError(try BackupSnapshotRecord(validating: p, nowMs: now, .backupSnapshot), "signed without sizes")
        p = r.proto
        p.generation = BackupLimits.maximumVersion + 1
        XCTAssertThrowsError(try BackupSnapshotRecord(validating: p, nowMs: now, .backupSnapshot))
        // An unsigned record (an owner from before 5.1) is still kept by a holder.
        let unsigned = try BackupSnapshotRecord(snapshotID: [UInt8](repeating: 9, count: 16), createdAtMs: now, blobs: r.blobs,
                                                indexBlobs: r.indexBlobs, totalBytes: r.totalBytes, nowMs: now)
        XCTAssertEqual(other.recordSnapshot(owner: owner.publicKey, BackupSnapshotMessage(requestID: rid(2), record: unsigned)).status, .complete)
        XCTAssertFalse(unsigned.summary.isSigned(by: owner.publicKey))
    }

    func testSummariesOfEveryShapeDecodeWithoutTrapping() throws {
        var m = Tandem_V1_BackupListReply()
        m.requestID = Data(repeating: 1, count: 16)
        m.status = .backupOk
        var s = Tandem_V1_BackupSnapshotSummary()
        s.snapshotID = Data(repeating: 1, count: 16)
        s.blobCount = 1
        s.totalBytes = 10
        s.indexBlobs = [Data(repeating: 2, count: 32)]
        for (sizes, sig, gen, ok) in [([UInt64](), Data(), UInt64(0), true), ([5], Data(count: 64), 3, true), ([11], Data(count: 64), 3, false),
                                      ([5, 5], Data(), 0, false), ([5], Data(count: 3), 0, false), ([UInt64.max], Data(count: 64), 1, false),
                                      ([5], Data(count: 64), UInt64.max, false)] {
            s.indexSizes = sizes
            s.ownerSignature = sig
            s.generation = gen
            m.snapshots = [s]
            let bytes: [UInt8] = try m.serializedBytes()
            if ok { XCTAssertNoThrow(try BackupListReplyMessage(payload: bytes)) } else { XCTAssertThrowsError(try BackupListReplyMessage(payload: bytes)) }
        }
    }

    // MARK: - The schedule

    func testAChangeIsDueAfterTheDelayAndAStreamOfChangesCannotPostponeIt() {
        let k: [UInt8] = [UInt8](repeating: 1, count: 32)
        var p = BackupSchedulePolicy(config: .init(delayMs: 5_000, daily: false), holders: [.init(key: k, lastPushAtMs: 1_000)])
        XCTAssertNil(p.nextWakeMs(), "nothing changed, no daily push")
        p.behind([k], nowMs: 10_000)
        XCTAssertEqual(p.nextWakeMs(), 15_000)
        p.behind([k], nowMs: 12_000)
        XCTAssertEqual(p.nextWakeMs(), 15_000, "a later change does not move the push")
        XCTAssertEqual(p.due(nowMs: 14_999), [])
        XCTAssertEqual(p.due(nowMs: 15_000), [k])
        // A change during the push (after it started) keeps the holder behind.
        p.behind([k], nowMs: 16_000)
        p.pushed(k, startedAtMs: 15_000, nowMs: 17_000)
        XCTAssertNil(p.nextWakeMs())
        p.behind([k], nowMs: 18_000)
        p.pushed(k, startedAtMs: 17_500, nowMs: 19_000)
        XCTAssertEqual(p.holders[0].dirtySinceMs, 18_000)
    }

    func testFailuresBackOffAndDailyPushesHappen() {
        let k: [UInt8] = [UInt8](repeating: 2, count: 32)
        var p = BackupSchedulePolicy(config: .init(delayMs: 0, daily: true), holders: [.init(key: k, lastPushAtMs: 0)])
        XCTAssertEqual(p.nextWakeMs(), BackupSchedulePolicy.dayMs)
        p.pushed(k, startedAtMs: 100, nowMs: 100)
        XCTAssertEqual(p.nextWakeMs(), 100 + BackupSchedulePolicy.dayMs)
        p.behind([k], nowMs: 1_000)
        XCTAssertEqual(p.due(nowMs: 1_000), [k])
        var expected: [Int64] = []
        for f in 1...9 {
            p.failed(k, nowMs: 1_000)
            expected.append(p.nextWakeMs()! - 1_000)
            XCTAssertEqual(p.holders[0].failures, f)
        }
        XCTAssertEqual(expected, [60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000, 3_600_000, 3_600_000, 3_600_000])
        p.pushed(k, startedAtMs: 2_000, nowMs: 3_000)
        XCTAssertEqual(p.holders[0].failures, 0)
        // Ranges: a delay past a week is clamped; holders come and go.
        XCTAssertEqual(BackupSchedulePolicy.Config(delayMs: .max, daily: false).delayMs, BackupSchedulePolicy.Config.maximumDelayMs)
        XCTAssertEqual(BackupSchedulePolicy.Config(delayMs: -5, daily: false).delayMs, 0)
        let j: [UInt8] = [UInt8](repeating: 3, count: 32)
        p.setHolders([j], lastPushAtMs: [:])
        XCTAssertEqual(p.holders.map(\.key), [j])
        XCTAssertEqual(BackupSchedulePolicy.backoffMs(failures: .max), BackupSchedulePolicy.maximumBackoffMs)
    }
}
