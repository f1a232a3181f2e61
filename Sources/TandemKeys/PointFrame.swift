/// Object keys (issue 14): point-cloud frames, shape features and the two-stage verifier.
/// Pure Swift, Foundation only. Protocol/keys.md describes the formats, the features and the rule.
public enum TandemKeys {
    /// Points kept in one frame at most; a file announcing more is refused before anything is allocated.
    public static let maximumPointsPerFrame = 200_000
}

/// The camera's own opinion of a frame (ARKit/ARCore-style), from a PLY header comment
/// `comment tracking_state normal|limited|not_available`. Absent: unknown, treated as normal.
public enum TrackingState: String, Sendable, Codable, Equatable {
    case normal
    case limited
    case notAvailable = "not_available"
}

/// One depth frame: points in metres in the camera's frame (camera at the origin looking along +z,
/// the usual depth-camera convention). Non-finite points never get here: the readers drop them.
public struct PointFrame: Sendable, Equatable {
    public var points: [SIMD3<Float>]
    public var trackingState: TrackingState?
    /// Points the reader dropped because a coordinate was NaN, infinite or beyond ±1 km.
    public var droppedPoints: Int

    public init(points: [SIMD3<Float>], trackingState: TrackingState? = nil, droppedPoints: Int = 0) {
        self.points = points
        self.trackingState = trackingState
        self.droppedPoints = droppedPoints
    }
}

/// An axis-aligned box in the camera's frame (metres): only points inside it are used.
public struct RegionOfInterest: Sendable, Codable, Equatable {
    public var minimum: SIMD3<Float>
    public var maximum: SIMD3<Float>

    public init(minimum: SIMD3<Float>, maximum: SIMD3<Float>) {
        self.minimum = minimum
        self.maximum = maximum
    }

    public func contains(_ p: SIMD3<Float>) -> Bool {
        all(p .>= minimum) && all(p .<= maximum)
    }

    public func filter(_ points: [SIMD3<Float>]) -> [SIMD3<Float>] {
        points.filter(contains)
    }

    /// A box is usable when every bound is finite and minimum ≤ maximum on each axis.
    public var isValid: Bool {
        minimum.x.isFinite && minimum.y.isFinite && minimum.z.isFinite
            && maximum.x.isFinite && maximum.y.isFinite && maximum.z.isFinite && all(minimum .<= maximum)
    }
}

/// Anything wrong with key input (a frame file, a stream, a stored template): one clear line.
/// A struct over a private enum so that new cases do not break callers.
public struct KeyInputError: Error, CustomStringConvertible, Equatable {
    enum Kind: Equatable {
        case unknownFormat
        case malformedHeader(String)
        case unsupported(String)
        case truncated(String)
        case malformedData(String)
        case tooLarge(String)
        case noPoints(String)
        case badTemplate(String)
    }

    let kind: Kind

    init(_ kind: Kind) { self.kind = kind }

    public var description: String {
        switch kind {
        case .unknownFormat: return "unknown point-cloud format: expected a PLY file (starting with 'ply') or XYZ text (x y z per line)"
        case .malformedHeader(let s): return "malformed PLY header: \(s)"
        case .unsupported(let s): return "unsupported point cloud: \(s)"
        case .truncated(let s): return "truncated point cloud: \(s)"
        case .malformedData(let s): return "malformed point data: \(s)"
        case .tooLarge(let s): return "point cloud too large: \(s)"
        case .noPoints(let s): return "no usable points: \(s)"
        case .badTemplate(let s): return "invalid object template: \(s)"
        }
    }

    public var isTruncation: Bool {
        if case .truncated = kind { return true }
        return false
    }
}
