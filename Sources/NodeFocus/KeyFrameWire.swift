import TandemKeys
import TandemNodeCore

/// One point-cloud frame as the CLI sends it to its node (`frame_b64` of the key methods,
/// Protocol/control.md "Local focus"): the CLI reads the PLY/XYZ file or stream, applies the region of
/// interest, and keeps at most `maximumPoints` points (a uniform random sample: the features are
/// density-invariant, and a frame then fits one control line).
///
///     "TKF1" | tracking u8 (0 unknown, 1 normal, 2 limited, 3 not_available) | points u32 LE
///            | points × (x, y, z) float32 LE, metres
///
/// Decoding is the node's one validating initialiser for it: exact length, a count within the
/// limit (at least one point), every coordinate finite and within ±1 km; anything else is refused
/// with a reason.
public enum KeyFrameWire {
    public static let maximumPoints = 3_000
    static let magic: [UInt8] = Array("TKF1".utf8)

    public struct Refused: Error, CustomStringConvertible, Equatable {
        public let description: String
    }

    /// The frame a client sends: `frame` after `roi`, sampled down to `maximumPoints` (seeded: the
    /// same frame always gives the same bytes).
    public static func encode(_ frame: PointFrame, roi: RegionOfInterest? = nil, seed: UInt64 = 0x7464_6D6B_6579) -> [UInt8] {
        var points = roi.map { $0.filter(frame.points) } ?? frame.points
        if points.count > maximumPoints {
            var rng = SplitMix64(seed: seed ^ UInt64(points.count))
            for i in 0..<maximumPoints {
                let j = i + Int(rng.next() % UInt64(points.count - i))
                points.swapAt(i, j)
            }
            points.removeLast(points.count - maximumPoints)
        }
        var out = magic
        out.reserveCapacity(9 + points.count * 12)
        let tracking: UInt8
        switch frame.trackingState {
        case nil: tracking = 0
        case .normal?: tracking = 1
        case .limited?: tracking = 2
        case .notAvailable?: tracking = 3
        }
        out.append(tracking)
        appendU32(&out, UInt32(points.count))
        for p in points { for c in [p.x, p.y, p.z] { appendU32(&out, c.bitPattern) } }
        return out
    }

    public static func decode(_ bytes: [UInt8]) throws(Refused) -> PointFrame {
        guard bytes.count >= 9, Array(bytes[0..<4]) == magic else { throw Refused(description: "not a key frame (TKF1)") }
        let tracking: TrackingState?
        switch bytes[4] {
        case 0: tracking = nil
        case 1: tracking = .normal
        case 2: tracking = .limited
        case 3: tracking = .notAvailable
        default: throw Refused(description: "unknown tracking state \(bytes[4])")
        }
        let count = Int(readU32(bytes, 5))
        guard count > 0 else { throw Refused(description: "a key frame without points") }
        guard count <= maximumPoints else { throw Refused(description: "a key frame carries at most \(maximumPoints) points, not \(count)") }
        guard bytes.count == 9 + count * 12 else { throw Refused(description: "a key frame of \(count) points is \(9 + count * 12) bytes, not \(bytes.count)") }
        var points: [SIMD3<Float>] = []
        points.reserveCapacity(count)
        for i in 0..<count {
            let o = 9 + i * 12
            let p = SIMD3<Float>(Float(bitPattern: readU32(bytes, o)), Float(bitPattern: readU32(bytes, o + 4)), Float(bitPattern: readU32(bytes, o + 8)))
            guard p.x.isFinite, p.y.isFinite, p.z.isFinite, abs(p.x) <= 1000, abs(p.y) <= 1000, abs(p.z) <= 1000 else {
                throw Refused(description: "point \(i) of the key frame is not a finite coordinate within 1 km")
            }
            points.append(p)
        }
        return PointFrame(points: points, trackingState: tracking)
    }

    private static func appendU32(_ out: inout [UInt8], _ v: UInt32) {
        out.append(UInt8(truncatingIfNeeded: v))
        out.append(UInt8(truncatingIfNeeded: v >> 8))
        out.append(UInt8(truncatingIfNeeded: v >> 16))
        out.append(UInt8(truncatingIfNeeded: v >> 24))
    }

    private static func readU32(_ b: [UInt8], _ o: Int) -> UInt32 {
        UInt32(b[o]) | UInt32(b[o + 1]) << 8 | UInt32(b[o + 2]) << 16 | UInt32(b[o + 3]) << 24
    }
}
