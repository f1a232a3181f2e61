/// What `ObjectEnrollment.add` says about one frame.
public struct EnrollmentFrameReport: Sendable, Equatable, Codable {
    /// The frame was good and is kept.
    public var accepted: Bool
    public var quality: Double
    public var guidance: String?
    /// The frame shows the object from a viewpoint not seen before.
    public var newViewpoint: Bool
    public var goodFrames: Int
    public var viewpoints: Int
    public var isComplete: Bool
}

/// Enrolling an object: frames one at a time. Complete with at least `requiredFrames` good frames
/// covering at least `requiredViewpoints` distinct viewpoints; frames beyond `maximumFrames` are
/// refused (a frame from a new viewpoint then replaces one from the most repeated viewpoint).
/// Codable so that the node can keep an unfinished enrolment between commands (to restart, start a
/// new one). Two frames share a viewpoint when their feature vectors agree (cosine ≥ 0.985) and
/// their principal axes, as seen by the camera, are within 20°.
public struct ObjectEnrollment: Sendable, Codable, Equatable {
    public static let requiredFrames = 8
    public static let requiredViewpoints = 4
    public static let maximumFrames = 12
    public static let minimumForcedFrames = 3
    static let sameViewCosine = 0.985
    static let sameViewDegrees = 20.0
    /// When neither view has a well-defined axis (a cube face-on, a ball), only the shape can tell.
    static let sameShapeCosine = 0.998

    public let roi: RegionOfInterest?
    var views: [EnrolledView] = []
    /// Viewpoint cluster of each view.
    var cluster: [Int] = []
    public private(set) var rejectedFrames = 0

    public init(roi: RegionOfInterest? = nil) {
        self.roi = roi.flatMap { $0.isValid ? $0 : nil }
    }

    public var goodFrames: Int { views.count }
    public var viewpoints: Int { Set(cluster).count }
    public var isComplete: Bool { goodFrames >= Self.requiredFrames && viewpoints >= Self.requiredViewpoints }

    public var warnings: [String] { Self.warningText(flags(forced: false)) }

    public mutating func add(_ frame: PointFrame) -> EnrollmentFrameReport {
        let analysis = ShapeAnalysis(frame, roi: roi)
        let check = FrameCheck.assess(frame, analysis)
        func report(_ accepted: Bool, _ guidance: String?, _ new: Bool) -> EnrollmentFrameReport {
            EnrollmentFrameReport(accepted: accepted, quality: check.quality, guidance: guidance, newViewpoint: new,
                                  goodFrames: goodFrames, viewpoints: viewpoints, isComplete: isComplete)
        }
        guard check.good else { rejectedFrames += 1; return report(false, check.guidance, false) }
        let view = EnrolledView(analysis, quality: check.quality)
        let same = views.indices.first { i in
            let c = cosine(views[i].vector, view.vector)
            guard let angle = views[i].axes.orientationDifference(view.axes) else { return c >= Self.sameShapeCosine }
            return c >= Self.sameViewCosine && angle < Self.sameViewDegrees
        }
        let newViewpoint = same == nil
        let id = same.map { cluster[$0] } ?? ((cluster.max() ?? -1) + 1)
        if views.count >= Self.maximumFrames {
            guard newViewpoint, let largest = largestCluster(), clusterSize(largest) > 1,
                  let victim = cluster.lastIndex(of: largest) else {
                return report(false, isComplete ? "enrolment is complete: finish it" : "enough frames from these views: finish with force, or start again moving around the object", false)
            }
            views.remove(at: victim); cluster.remove(at: victim)
        }
        views.append(view); cluster.append(id)
        var guidance = check.guidance
        if !newViewpoint, !isComplete { guidance = "same view as before: turn the object or move around it" }
        return report(true, guidance, newViewpoint)
    }

    private func clusterSize(_ c: Int) -> Int { cluster.filter { $0 == c }.count }
    private func largestCluster() -> Int? { Set(cluster).max { clusterSize($0) < clusterSize($1) } }

    func flags(forced: Bool) -> ObjectTemplate.Flags {
        var f: ObjectTemplate.Flags = forced ? [.forced] : []
        guard !views.isEmpty else { return f }
        let flatness = views.map { Double($0.extents.z / max($0.extents.x, 1e-6)) }.sorted()[views.count / 2]
        if flatness < 0.08 { f.insert(.flat) }
        // Featureless: every view looks alike (a sphere, a plain ball).
        if views.count >= 3 {
            var least = 1.0
            for i in views.indices { for j in views.indices where j > i { least = min(least, cosine(views[i].vector, views[j].vector)) } }
            if least > 0.995 { f.insert(.featureless) }
        }
        if viewpoints < Self.requiredViewpoints { f.insert(.fewViewpoints) }
        return f
    }

    static func warningText(_ f: ObjectTemplate.Flags) -> [String] {
        var w: [String] = []
        if f.contains(.flat) { w.append("flat object: its shape is not distinctive, any flat object of the same size may open this lock") }
        if f.contains(.featureless) { w.append("featureless object: every view looks alike, similar objects may open this lock") }
        if f.contains(.forced) { w.append("finished early: fewer frames or viewpoints than required, recognition is less reliable") }
        if f.contains(.fewViewpoints), !f.contains(.forced) { w.append("few viewpoints: recognition is less reliable") }
        return w
    }

    /// The template. Without `force` the enrolment must be complete; with it, at least
    /// `minimumForcedFrames` good frames are needed and the template is marked less reliable.
    public func finish(force: Bool) throws -> ObjectTemplate {
        if !isComplete {
            guard force else {
                throw KeyInputError(.unsupported("enrolment incomplete: \(goodFrames) good frames of \(Self.requiredFrames), \(viewpoints) viewpoints of \(Self.requiredViewpoints)"))
            }
            guard goodFrames >= Self.minimumForcedFrames else {
                throw KeyInputError(.unsupported("enrolment has \(goodFrames) good frames; even a forced finish needs \(Self.minimumForcedFrames)"))
            }
        }
        return ObjectTemplate.build(views, goodFrames: goodFrames, viewpoints: viewpoints, flags: flags(forced: !isComplete))
    }
}
