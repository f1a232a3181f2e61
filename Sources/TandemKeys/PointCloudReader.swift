/// Reads one point-cloud file: PLY (ascii or binary little-endian) or XYZ text, sniffed from the
/// first bytes. Hostile input throws a `KeyInputError`; nothing here traps or allocates more than
/// the caps allow (`TandemKeys.maximumPointsPerFrame`, `maximumFileBytes`, PLYHeader's limits).
public enum PointCloudReader {
    /// The largest file `read` accepts (a 200,000-point ascii PLY with normals and colours fits).
    public static let maximumFileBytes = 64 << 20
    /// Coordinates beyond this (metres) are dropped like NaN: no depth camera sees a kilometre.
    public static let maximumCoordinate = 1_000.0

    public static func read(_ bytes: [UInt8]) throws -> PointFrame {
        guard bytes.count <= maximumFileBytes else {
            throw KeyInputError(.tooLarge("\(bytes.count) bytes (at most \(maximumFileBytes) per file)"))
        }
        return try bytes.withUnsafeBytes { b in
            var start = 0
            while start < b.count, isSpace(b[start]) { start += 1 }
            let body = UnsafeRawBufferPointer(rebasing: b[start...])
            if looksLikePLY(body) {
                guard let header = try PLYHeader.parse(body) else { throw KeyInputError(.truncated("the PLY header has no end_header line")) }
                var reader = PLYBodyReader(header: header)
                _ = try reader.advance(body, atEnd: true)
                // Anything after the body other than blank space is not part of this frame.
                var p = reader.position
                while p < body.count, isSpace(body[p]) { p += 1 }
                guard p == body.count else { throw KeyInputError(.malformedData("\(body.count - p) bytes after the PLY body (one frame per file; streams go through the splitter)")) }
                return try finished(reader.points, dropped: reader.dropped, tracking: header.trackingState)
            }
            let (points, dropped) = try readXYZ(body, separatorsEndFrame: false)
            return try finished(points, dropped: dropped, tracking: nil)
        }
    }

    static func finished(_ points: [SIMD3<Float>], dropped: Int, tracking: TrackingState?) throws -> PointFrame {
        if points.isEmpty, dropped > 0 {
            throw KeyInputError(.noPoints("all \(dropped) points have NaN, infinite or out-of-range coordinates"))
        }
        if points.isEmpty { throw KeyInputError(.noPoints("the frame holds no points")) }
        return PointFrame(points: points, trackingState: tracking, droppedPoints: dropped)
    }

    static func looksLikePLY(_ b: UnsafeRawBufferPointer) -> Bool {
        b.count >= 4 && b[0] == 0x70 && b[1] == 0x6C && b[2] == 0x79 && (b[3] == 0x0A || b[3] == 0x0D)
    }

    @inline(__always) static func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D }

    @inline(__always) static func acceptable(_ v: Double) -> Bool { v.isFinite && abs(v) <= maximumCoordinate }
    @inline(__always) static func acceptable(_ v: Float) -> Bool { v.isFinite && abs(v) <= Float(maximumCoordinate) }

    /// XYZ text: `x y z [more columns…]` per line (spaces, tabs or commas), `#` starts a comment,
    /// blank lines and `---` lines are skipped (in a stream the splitter cuts frames at them first).
    static func readXYZ(_ b: UnsafeRawBufferPointer, separatorsEndFrame: Bool) throws -> ([SIMD3<Float>], Int) {
        var points: [SIMD3<Float>] = []
        var dropped = 0
        var p = 0
        var line = 0
        while p < b.count {
            line += 1
            var end = p
            while end < b.count, b[end] != 0x0A { end += 1 }
            var stop = end
            if let hash = (p..<end).first(where: { b[$0] == 0x23 }) { stop = hash }
            var values: (Double, Double, Double) = (0, 0, 0)
            var n = 0
            var q = p
            while q < stop {
                while q < stop, isSeparator(b[q]) { q += 1 }
                guard q < stop else { break }
                let s = q
                while q < stop, !isSeparator(b[q]) { q += 1 }
                if n == 0, q - s == 3, b[s] == 0x2D, b[s + 1] == 0x2D, b[s + 2] == 0x2D { n = -1; break }
                if n < 3 {
                    guard q - s <= 64, let v = number(b, s, q) else {
                        throw KeyInputError(.malformedData("XYZ line \(line): not a number (expected 'x y z' in metres)"))
                    }
                    switch n {
                    case 0: values.0 = v
                    case 1: values.1 = v
                    default: values.2 = v
                    }
                }
                n += 1
            }
            if n > 0, n < 3 {
                throw KeyInputError(.malformedData("XYZ line \(line): \(n) value\(n == 1 ? "" : "s") (expected 'x y z')"))
            }
            if n >= 3 {
                if acceptable(values.0), acceptable(values.1), acceptable(values.2) {
                    guard points.count < TandemKeys.maximumPointsPerFrame else {
                        throw KeyInputError(.tooLarge("more than \(TandemKeys.maximumPointsPerFrame) points (at most \(TandemKeys.maximumPointsPerFrame) per frame)"))
                    }
                    points.append(SIMD3(Float(values.0), Float(values.1), Float(values.2)))
                } else {
                    dropped += 1
                    guard dropped <= TandemKeys.maximumPointsPerFrame else {
                        throw KeyInputError(.tooLarge("more than \(TandemKeys.maximumPointsPerFrame) points (at most \(TandemKeys.maximumPointsPerFrame) per frame)"))
                    }
                }
            }
            p = end + 1
        }
        return (points, dropped)
    }

    @inline(__always) static func isSeparator(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x2C || c == 0x0D }

    /// A decimal number in b[start..<end]: a fast path for plain decimals, Swift's parser for the
    /// rest (exponents with many digits, nan, inf…). nil if it is not a number.
    static func number(_ b: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Double? {
        var p = start
        var negative = false
        if p < end, b[p] == 0x2D || b[p] == 0x2B { negative = b[p] == 0x2D; p += 1 }
        var mantissa: UInt64 = 0
        var digits = 0
        var scale = 0
        while p < end, b[p] &- 0x30 < 10 {
            if digits < 18 { mantissa = mantissa * 10 + UInt64(b[p] &- 0x30); digits += mantissa == 0 ? 0 : 1 } else { scale += 1 }
            p += 1
        }
        var sawDigits = p > start + (negative || (start < end && b[start] == 0x2B) ? 1 : 0)
        if p < end, b[p] == 0x2E {
            p += 1
            while p < end, b[p] &- 0x30 < 10 {
                sawDigits = true
                if digits < 18 { mantissa = mantissa * 10 + UInt64(b[p] &- 0x30); digits += mantissa == 0 ? 0 : 1; scale -= 1 }
                p += 1
            }
        }
        if sawDigits, p < end, b[p] == 0x65 || b[p] == 0x45 {
            p += 1
            var expNegative = false
            if p < end, b[p] == 0x2D || b[p] == 0x2B { expNegative = b[p] == 0x2D; p += 1 }
            var exponent = 0
            var expDigits = 0
            while p < end, b[p] &- 0x30 < 10 {
                if exponent < 10_000 { exponent = exponent * 10 + Int(b[p] &- 0x30) }
                expDigits += 1
                p += 1
            }
            if expDigits == 0 { return slow(b, start, end) }
            scale += expNegative ? -exponent : exponent
        }
        guard sawDigits, p == end else { return slow(b, start, end) }
        var v = Double(mantissa)
        if scale != 0 {
            if scale > 300 || scale < -300 { return slow(b, start, end) }
            v = scale > 0 ? v * pow10(scale) : v / pow10(-scale)
        }
        return negative ? -v : v
    }

    private static let powers: [Double] = (0...22).map { e in (0..<e).reduce(1.0) { a, _ in a * 10 } }

    @inline(__always) private static func pow10(_ e: Int) -> Double {
        if e <= 22 { return powers[e] }
        var v = 1.0
        var e = e
        while e > 22 { v *= 1e22; e -= 22 }
        return v * powers[e]
    }

    private static func slow(_ b: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Double? {
        guard end - start <= 64 else { return nil }
        return Double(String(decoding: UnsafeRawBufferPointer(rebasing: b[start..<end]), as: UTF8.self))
    }
}
