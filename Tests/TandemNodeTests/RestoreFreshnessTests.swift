import Foundation
import Sodium
import TandemNet
@testable import TandemProtocol
@_spi(StoreOwner) import TandemStore
import XCTest
@testable import TandemNodeCore
@testable import NodeBackup

/// The restore's freshness decision (backup.md 8.1), its bound on downloads (8.2), and the kit's
/// generation and padding (7).
final class RestoreFreshnessTests: XCTestCase {
    let owner = SigningKeyPair.generate()

    func signedSummary(_ generation: UInt64, at: UInt64, total: Int64 = 1_000, count: Int = 3, key: SigningKeyPair? = nil) -> BackupSnapshotSummary {
        let index = BlobName(of: [generation.asByte, 0xEE])
        let header = BackupSnapshotHeader(snapshotID: [UInt8](repeating: generation.asByte, count: 16), generation: generation, createdAtMs: at,
                                          totalBytes: total, blobCount: count, indexBlobs: [index], indexSizes: [100])
        let sig = (key ?? owner).sign(header.signable(owner: owner.publicKey))
        return BackupSnapshotSummary(snapshotID: header.snapshotID, createdAtMs: at, blobCount: count, indexBlobs: [index], totalBytes: total,
                                     generation: generation, indexSizes: [100], ownerSignature: sig)
    }

    func copy(_ name: String, _ snapshots: [BackupSnapshotSummary], error: String? = nil) -> HolderCopy {
        let (signed, unsigned) = RestoreFreshness.signed(snapshots, owner: owner.publicKey)
        return HolderCopy(holder: NodeID(publicKey: SigningKeyPair.generate().publicKey), name: name, snapshots: signed, unsigned: unsigned,
                          error: error)
    }

    func testTheHighestSignedGenerationWinsWhoeverHoldsIt() {
        let day: UInt64 = 86_400_000
        let named = copy("bob", [signedSummary(4, at: 10 * day), signedSummary(9, at: 20 * day, key: SigningKeyPair.generate()),
                                 signedSummary(5, at: 11 * day)])
        let carol = copy("carol", [signedSummary(8, at: 19 * day)])
        let dave = copy("dave", [], error: "unreachable")
        let erin = copy("erin", [signedSummary(8, at: 19 * day)])
        XCTAssertEqual(named.unsigned, 1, "a record the owner did not sign is left out")
        XCTAssertEqual(named.newest?.generation, 5)
        let order = RestoreFreshness.order([named, carol, dave, erin])
        XCTAssertEqual(order.map(\.name), ["carol", "erin", "bob"], "newest first; equal generations keep the survey's order")
        let text = RestoreFreshness.sentence([named, carol, dave, erin])
        XCTAssertEqual(text, "newest copy: generation 8 from 1970-01-20 00:00 UTC at carol; erin holds the same generation from "
                       + "1970-01-20 00:00 UTC; bob holds 5 (3 older) from 1970-01-12 00:00 UTC; dave: unreachable")
        XCTAssertTrue(RestoreFreshness.sentence([dave]).hasPrefix("no friend holds a signed copy"))
    }

    func testAHolderCannotMakeARestoreFetchMoreThanTheOwnerSigned() {
        let s = signedSummary(3, at: 1, total: 1_000, count: 3)
        XCTAssertNil(RestoreFreshness.exceedsSignedSizes(s, indexSizes: [100], packSizes: [400, 500]))
        XCTAssertNotNil(RestoreFreshness.exceedsSignedSizes(s, indexSizes: [101], packSizes: []), "an index size not the signed one")
        XCTAssertNotNil(RestoreFreshness.exceedsSignedSizes(s, indexSizes: [100], packSizes: [400, 501]), "past the signed total")
        XCTAssertNotNil(RestoreFreshness.exceedsSignedSizes(s, indexSizes: [100], packSizes: [1, 1, 1]), "more blobs than signed")
        XCTAssertNotNil(RestoreFreshness.exceedsSignedSizes(s, indexSizes: [100], packSizes: [.max, .max]), "no overflow")
    }

    func testTheKitCarriesItsGenerationAndIsPaddedToItsSizeClass() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("kit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let code = RecoveryCode(bytes: Sodium.randomBytes(16))
        try Data((code.canonical + "\n").utf8).write(to: dir.appendingPathComponent("recovery-code"))
        let store = try NodeStore.inMemory()
        let data = DataDirectory(url: dir)
        let small = try XCTUnwrap(try RecoveryKit.sealedKit(identity: owner, store: store, dataDirectory: data, nowMs: 5, generation: { _ in 7 }))
        XCTAssertEqual(try RecoveryKit.open(small.sealed, code: code, owner: owner.publicKey).generation, 7)
        try store.batch { try $0.setSetting("display_name", String(repeating: "n", count: 60)) }
        let named = try XCTUnwrap(try RecoveryKit.sealedKit(identity: owner, store: store, dataDirectory: data, nowMs: 5))
        XCTAssertNotEqual(small.digest, named.digest)
        XCTAssertEqual(small.sealed.count, named.sealed.count, "both in the first size class")
        XCTAssertEqual(small.sealed.count, 4_096 + RecoveryKitSeal.nonceBytes + 16)
        let again = try XCTUnwrap(try RecoveryKit.sealedKit(identity: owner, store: store, dataDirectory: data, nowMs: 9, generation: { _ in 8 }))
        XCTAssertEqual(again.digest, named.digest, "generation, time and padding are not in the digest")
        // Every plaintext length lands on a class (4 KiB doubling), never in between.
        let limit = RecoveryKitSeal.maximumPlaintextBytes - 16
        var classes = Set<Int>()
        for n in Array(0...40_000) + [131_069, 131_070, 131_071, 200_000] {
            guard let p = RecoveryKit.padding(for: n, limit: limit) else { return XCTFail("no padding for \(n)") }
            let total = n + 1 + (p < 128 ? 1 : p < 16_384 ? 2 : 3) + p
            classes.insert(total)
        }
        XCTAssertEqual(classes, [4_096, 8_192, 16_384, 32_768, 65_536, 131_072, limit], "\(classes.sorted())")
    }
}

private extension UInt64 {
    var asByte: UInt8 { UInt8(truncatingIfNeeded: self) }
}
