/// Writes frames as PLY (for fixtures, tests and tools): a vertex element with float x, y, z, and
/// the tracking state as a header comment when the frame has one.
public enum PLYWriter {
    public static func ascii(_ frame: PointFrame) -> [UInt8] {
        var text = header(frame, format: "ascii")
        text.reserveCapacity(text.count + frame.points.count * 30)
        for p in frame.points {
            text += "\(p.x) \(p.y) \(p.z)\n"
        }
        return Array(text.utf8)
    }

    public static func binary(_ frame: PointFrame) -> [UInt8] {
        var out = Array(header(frame, format: "binary_little_endian").utf8)
        out.reserveCapacity(out.count + frame.points.count * 12)
        for p in frame.points {
            for v in [p.x, p.y, p.z] {
                let bits = v.bitPattern.littleEndian
                withUnsafeBytes(of: bits) { out.append(contentsOf: $0) }
            }
        }
        return out
    }

    /// XYZ text, one `x y z` line per point (frames in a stream are separated by `---` lines).
    public static func xyz(_ frame: PointFrame) -> [UInt8] {
        var text = ""
        text.reserveCapacity(frame.points.count * 30)
        for p in frame.points { text += "\(p.x) \(p.y) \(p.z)\n" }
        return Array(text.utf8)
    }

    private static func header(_ frame: PointFrame, format: String) -> String {
        var h = "ply\nformat \(format) 1.0\ncomment written by TandemKeys\n"
        if let t = frame.trackingState { h += "comment tracking_state \(t.rawValue)\n" }
        h += "element vertex \(frame.points.count)\nproperty float x\nproperty float y\nproperty float z\nend_header\n"
        return h
    }
}
