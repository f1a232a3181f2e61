import Foundation
import XCTest
@testable import TandemKeys

/// `tandem-bench keys --seed N`'s point counts: one generator over every object's 12 enrolment
/// frames (in catalogue order), then over every object's 4 sweeps of 3 frames.
func benchEnrolment(seed: UInt64, _ name: String) -> ObjectEnrollment {
    let catalogue = SyntheticShapes.catalogue
    guard let object = catalogue.firstIndex(where: { $0.name == name }) else { XCTFail(name); return ObjectEnrollment() }
    var g = SplitMix64(seed: seed)
    for _ in 0..<(12 * object) { _ = g.next() }
    var e = ObjectEnrollment()
    for offered in 0..<12 {
        _ = e.add(SyntheticShapes.view(of: catalogue[object], seed: seed &* 1_000_003 &+ UInt64(object * 100 + offered),
                                       points: 3_000 + Int(g.next() % 12_001)))
    }
    return e
}

func benchSweep(seed: UInt64, _ name: String, sweep: Int) -> [PointFrame] {
    let catalogue = SyntheticShapes.catalogue
    guard let object = catalogue.firstIndex(where: { $0.name == name }) else { XCTFail(name); return [] }
    var g = SplitMix64(seed: seed)
    for _ in 0..<(12 * catalogue.count + 12 * object + 3 * sweep) { _ = g.next() }
    let base = seed &* 7_919 &+ UInt64(object * 1_000 + sweep * 10) &+ 500_000
    let pose = SyntheticPose.random(seed: base)
    return (0..<3).map { k in
        SyntheticShapes.view(of: catalogue[object], pose: pose.turned(degrees: Float(k) * 40), seed: base &+ UInt64(k),
                             points: 3_000 + Int(g.next() % 12_001))
    }
}
