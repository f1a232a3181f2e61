import Foundation
import XCTest
@testable import TandemKeys

/// The enrolment frames `tandem-bench keys --seed N` offers for the catalogue's object number
/// `object`: the bench's point counts (one generator over every object's 12 frames, in catalogue
/// order) and frame seeds.
func benchFrames(seed: UInt64, object: Int) -> [PointFrame] {
    var g = SplitMix64(seed: seed)
    for _ in 0..<(12 * object) { _ = g.next() }
    let catalogue = SyntheticShapes.catalogue
    return (0..<12).map { offered in
        SyntheticShapes.view(of: catalogue[object], seed: seed &* 1_000_003 &+ UInt64(object * 100 + offered), points: 3_000 + Int(g.next() % 12_001))
    }
}

/// Issue 35: the enrolment's registration checked against what the enrolment cameras saw as empty.
final class CalibrationTests: XCTestCase {
    func enrolment(seed: UInt64, _ name: String) -> ObjectEnrollment {
        guard let object = SyntheticShapes.catalogue.firstIndex(where: { $0.name == name }) else { XCTFail(name); return ObjectEnrollment() }
        var e = ObjectEnrollment()
        for frame in benchFrames(seed: seed, object: object) { _ = e.add(frame) }
        return e
    }

    /// Seed 17's 2:3:4 box (16 × 12 × 8 cm): registration as it was takes four frames a quarter turn
    /// off about the box's long axis (their 8 and 12 cm sides swapped; each fits the model of the
    /// frames before it at ≥ 0.75), and the model measures 16.4 × 12.2 × 12.1 cm. Those frames put
    /// their surface where the other frames' cameras saw empty space (12–31 % of each frame's
    /// points), so enrolment registers again with every pose held to the free space.
    func testEnrolmentRegistersAgainWhenAFrameLiesWhereAnotherCameraSawEmptySpace() throws {
        let e = enrolment(seed: 17, "box-2-3-4")
        let views = e.views
        let (tau, cell) = ObjectTemplate.scales(views)
        let shares = ObjectTemplate.freeSpaceShares(views, ObjectTemplate.register(views, tau: tau, cell: cell), tau: tau, cell: cell).compactMap { $0 }
        XCTAssertEqual(shares.count, 12)
        XCTAssertGreaterThan(shares.max() ?? 0, 0.25)
        let t = try e.finish(force: !e.isComplete)
        XCTAssertGreaterThanOrEqual(t.views.filter(\.registered).count, 11)
        let spans = KeyCloseness.extents(t.model, normals: t.normals).spans.map(\.length)
        XCTAssertEqual(spans[0], 0.16, accuracy: 0.015, "\(spans)")
        XCTAssertEqual(spans[1], 0.12, accuracy: 0.015, "\(spans)")
        XCTAssertEqual(spans[2], 0.08, accuracy: 0.015, "\(spans)")
    }

    /// Seed 17's teapot without a spout: its views lie in the other cameras' empty space by at most
    /// 0.11 of their surface (under `inconsistentShare`), so its model is built exactly as
    /// registration places the views — though the free-space registration would place some
    /// differently (and with it the models, and the margins calibrated on them, of every object it
    /// touches: Protocol/keys.md, section 8, sessions 12–14).
    func testAModelWhoseViewsAgreeIsBuiltAsRegistered() throws {
        let e = enrolment(seed: 17, "teapot-no-spout")
        let views = e.views
        let (tau, cell) = ObjectTemplate.scales(views)
        let poses = ObjectTemplate.register(views, tau: tau, cell: cell)
        let shares = ObjectTemplate.freeSpaceShares(views, poses, tau: tau, cell: cell).compactMap { $0 }
        XCTAssertGreaterThan(shares.max() ?? 0, ObjectTemplate.freeShare)
        XCTAssertLessThanOrEqual(shares.max() ?? 1, ObjectTemplate.inconsistentShare)
        XCTAssertNotEqual(ObjectTemplate.register(views, tau: tau, cell: cell, freeSpace: true), poses)
        let clean = views.map { v in
            var c = v
            c.cloud = ShapeAnalysis.surface(v.cloud, extents: v.extents)
            return c
        }
        let expected = ObjectTemplate.build(clean, poses: poses, tau: tau, cell: cell, goodFrames: e.goodFrames, viewpoints: e.viewpoints, flags: [])
        let t = try e.finish(force: !e.isComplete)
        XCTAssertEqual(t.model, expected.model)
        XCTAssertEqual(t.maximumShortfall, expected.maximumShortfall)
        XCTAssertEqual(t.maximumDeficit, expected.maximumDeficit)
    }

    /// An open jar (lid off: 12.8 % shorter, the same width) is a stretched twin of the jar: the
    /// bench's models on the tuning seeds 1 and 2 fit, the open jar stretched, at 0.77 and 0.79 —
    /// under the earlier twin fit of 0.85, and the jar opened the open jar's key without a warning
    /// (seed 11: 2 of 4 sweeps).
    func testEnrolmentSaysAnOpenJarIsCloseToTheJar() throws {
        for seed in [1, 2] as [UInt64] {
            let ej = enrolment(seed: seed, "jar"), eo = enrolment(seed: seed, "jar-open")
            let jar = try ej.finish(force: !ej.isComplete), open = try eo.finish(force: !eo.isComplete)
            let stretch = KeyCloseness.stretch(jar, open)
            XCTAssertEqual(stretch.map { Double($0) } ?? 0, 0.128, accuracy: 0.01, "seed \(seed)")
            XCTAssertEqual(KeyCloseness.stretch(open, jar), stretch)
            let xj = KeyCloseness.extents(jar.model, normals: jar.normals), xo = KeyCloseness.extents(open.model, normals: open.normals)
            let fit = KeyCloseness.scaledFit(jar, xj, open, xo, KeyCloseness.differences(xj, xo))
            XCTAssertGreaterThanOrEqual(fit, KeyCloseness.twinFit, "seed \(seed)")
            XCTAssertLessThan(fit, 0.85, "seed \(seed)")
            XCTAssertEqual(KeyCloseness.closeKeys(jar, others: [(name: "open", template: open)]).map(\.other), ["open"], "seed \(seed)")
        }
    }
}
