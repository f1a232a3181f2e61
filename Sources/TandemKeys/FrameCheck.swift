/// Is this frame good enough to enrol or verify? Point count after the region of interest, the
/// cloud's robust span (objects are 3–60 cm: a span beyond 1.5 m means the background is in view,
/// under 2 cm the camera is too close or the object too small), its distance from the camera, and
/// the camera's tracking state. Guidance says what to do about the first thing wrong.
public struct FrameQualityReport: Sendable, Equatable, Codable {
    public var good: Bool
    /// 0…1: 0 for a frame that is not good, otherwise higher for more points, an object-sized
    /// span and a comfortable distance.
    public var quality: Double
    public var guidance: String?
    /// Points inside the region of interest.
    public var points: Int
    /// Robust extents (metres), longest first.
    public var extents: [Double]
}

public enum FrameCheck {
    public static let minimumPoints = 500
    public static let maximumSpan: Float = 1.5
    public static let minimumSpan: Float = 0.02
    /// Centroid distance from the camera (metres) outside which we ask to move.
    public static let farthest: Float = 1.5
    public static let nearest: Float = 0.08

    public static func assess(_ frame: PointFrame, roi: RegionOfInterest? = nil) -> FrameQualityReport {
        assess(frame, ShapeAnalysis(frame, roi: roi))
    }

    static func assess(_ frame: PointFrame, _ a: ShapeAnalysis) -> FrameQualityReport {
        let extents = [Double(a.extents.x), Double(a.extents.y), Double(a.extents.z)]
        func bad(_ guidance: String) -> FrameQualityReport {
            FrameQualityReport(good: false, quality: 0, guidance: guidance, points: a.pointCount, extents: extents)
        }
        switch frame.trackingState {
        case .limited?: return bad("tracking limited: hold the camera steady")
        case .notAvailable?: return bad("tracking lost: hold the camera steady and point it at the object")
        case .normal?, nil: break
        }
        if a.pointCount < minimumPoints { return bad("too few points: more light or move closer (\(a.pointCount) of \(minimumPoints))") }
        let span = a.extents.x
        if span > maximumSpan {
            return bad("move closer: the cloud spans \(centimetres(span)) (crop the background or set a region of interest)")
        }
        let distance = length3(a.axes.centroid)
        if distance > farthest { return bad("move closer: the object is \(centimetres(distance)) away") }
        if span < minimumSpan { return bad("move back: the cloud spans only \(centimetres(span)) (too close, or the object is too small)") }
        if distance < nearest { return bad("move back: the object is only \(centimetres(distance)) away") }
        // Quality: points (saturating at 3,000), span within 3–60 cm, distance 0.2–1 m.
        let pointsFactor = min(1, Double(a.pointCount) / 3_000)
        let spanFactor: Double = span < 0.03 ? 0.6 : (span > 0.6 ? max(0.3, 1 - Double(span - 0.6)) : 1)
        let distanceFactor: Double = distance < 0.2 ? 0.7 : (distance > 1 ? 0.7 : 1)
        let quality = 0.4 + 0.6 * pointsFactor * spanFactor * distanceFactor
        var guidance: String?
        if pointsFactor < 0.5 { guidance = "few points: more light or move closer" }
        return FrameQualityReport(good: true, quality: quality, guidance: guidance, points: a.pointCount, extents: extents)
    }

    static func centimetres(_ metres: Float) -> String {
        let cm = Double(metres) * 100
        return cm >= 100 ? "\(Double(Int(cm)) / 100) m" : "\(Int(cm.rounded())) cm"
    }
}
