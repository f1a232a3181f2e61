/// Cuts a byte stream (stdin: `tandem … --object -`) into frames as the bytes arrive.
///
/// - PLY frames delimit themselves (the header's element counts); ascii and binary may be mixed.
/// - XYZ frames end at a line holding `---` or at a blank line (or at the end of the stream).
/// - Blank lines and `---` lines between frames are skipped.
///
/// Feed bytes with `append`, then call `nextFrame()` until it returns nil (need more bytes); at the
/// end of the stream call `finish()` until it returns nil. A frame may hold at most
/// `maximumFrameBytes`; a longer one, or any malformed frame, throws, and the splitter then stays
/// failed (every later call throws the same error): a stream cannot be resynchronised safely.
public struct PointCloudStreamSplitter: Sendable {
    public static let defaultMaximumFrameBytes = 32 << 20

    public let maximumFrameBytes: Int
    private var buffer: [UInt8] = []
    /// Start of the unconsumed bytes in `buffer`.
    private var start = 0
    private var state: State = .between

    private enum State: Sendable {
        /// Before a frame: skipping separators.
        case between
        /// In a PLY frame whose header is not complete yet.
        case plyHeader
        /// In a PLY body.
        case plyBody(PLYBodyReader)
        /// In an XYZ frame; `scanned`: bytes (from the frame start) known to hold no separator line.
        case xyz(scanned: Int)
        case failed(KeyInputError)
    }

    public init(maximumFrameBytes: Int = PointCloudStreamSplitter.defaultMaximumFrameBytes) {
        self.maximumFrameBytes = max(1_024, maximumFrameBytes)
    }

    /// Bytes held and not yet returned as a frame.
    public var bufferedBytes: Int { buffer.count - start }

    public mutating func append(_ bytes: [UInt8]) {
        if case .failed = state { return }
        buffer.append(contentsOf: bytes)
        // A caller that appends without pulling frames still cannot make us hold more than one
        // maximal frame and its separators.
        if bufferedBytes > maximumFrameBytes + 4_096, case .between = state {
            // Separators only would have been skipped by nextFrame; let it decide.
        } else if bufferedBytes > 2 * maximumFrameBytes + 4_096 {
            fail(KeyInputError(.tooLarge("more than \(maximumFrameBytes) bytes buffered without a complete frame")))
        }
    }

    public mutating func append<S: Sequence>(contentsOf bytes: S) where S.Element == UInt8 {
        append(Array(bytes))
    }

    private mutating func fail(_ error: KeyInputError) {
        state = .failed(error)
        buffer = []
        start = 0
    }

    public mutating func nextFrame() throws -> PointFrame? {
        try next(atEnd: false)
    }

    /// At the end of the stream: the next remaining frame, nil when none is left. Throws if the
    /// stream stops inside a PLY frame.
    public mutating func finish() throws -> PointFrame? {
        try next(atEnd: true)
    }

    private mutating func next(atEnd: Bool) throws -> PointFrame? {
        do {
            let frame = try step(atEnd: atEnd)
            compact()
            return frame
        } catch let error as KeyInputError {
            fail(error)
            throw error
        }
    }

    private mutating func compact() {
        if start > 65_536, start * 2 > buffer.count {
            buffer.removeFirst(start)
            start = 0
        }
    }

    private mutating func step(atEnd: Bool) throws -> PointFrame? {
        while true {
            switch state {
            case .failed(let error):
                throw error
            case .between:
                guard try skipSeparators(atEnd: atEnd) else { return nil }
                let available = buffer.count - start
                let isPLY: Bool? = buffer.withUnsafeBytes { b in
                    let s = UnsafeRawBufferPointer(rebasing: b[start...])
                    if PointCloudReader.looksLikePLY(s) { return true }
                    let prefix = Array("ply\n".utf8)
                    if available < 4, !atEnd, zip(s, prefix).allSatisfy({ $0 == $1 }) { return nil }
                    return false
                }
                guard let isPLY else { return nil }
                state = isPLY ? .plyHeader : .xyz(scanned: 0)
            case .plyHeader:
                let header: PLYHeader? = try buffer.withUnsafeBytes { b in
                    try PLYHeader.parse(UnsafeRawBufferPointer(rebasing: b[start...]))
                }
                guard let header else {
                    if atEnd { throw KeyInputError(.truncated("the stream ends inside a PLY header")) }
                    return nil
                }
                state = .plyBody(PLYBodyReader(header: header))
            case .plyBody(var reader):
                // Out of the enum while it grows, so that its point array is not copied.
                state = .between
                let frameBytes = buffer.count - start
                let done = try buffer.withUnsafeBytes { b in
                    try reader.advance(UnsafeRawBufferPointer(rebasing: b[start...]), atEnd: atEnd)
                }
                guard done else {
                    if frameBytes > maximumFrameBytes {
                        throw KeyInputError(.tooLarge("a frame of more than \(maximumFrameBytes) bytes"))
                    }
                    state = .plyBody(reader)
                    return nil
                }
                guard reader.position <= maximumFrameBytes else {
                    throw KeyInputError(.tooLarge("a frame of \(reader.position) bytes (at most \(maximumFrameBytes))"))
                }
                start += reader.position
                state = .between
                return try PointCloudReader.finished(reader.points, dropped: reader.dropped, tracking: reader.header.trackingState)
            case .xyz(let scanned):
                // Look for the separator line ending this frame.
                var lineStart = start + scanned
                var end: (frame: Int, next: Int)?
                var p = lineStart
                while p < buffer.count {
                    if buffer[p] == 0x0A {
                        if isSeparatorLine(lineStart, p) { end = (lineStart, p + 1); break }
                        lineStart = p + 1
                    }
                    p += 1
                }
                if end == nil, atEnd { end = (buffer.count, buffer.count) }
                guard let end else {
                    if buffer.count - start > maximumFrameBytes {
                        throw KeyInputError(.tooLarge("an XYZ frame of more than \(maximumFrameBytes) bytes (end frames with a '---' line)"))
                    }
                    state = .xyz(scanned: lineStart - start)
                    return nil
                }
                guard end.frame - start <= maximumFrameBytes else {
                    throw KeyInputError(.tooLarge("an XYZ frame of \(end.frame - start) bytes (at most \(maximumFrameBytes))"))
                }
                let (points, dropped) = try buffer.withUnsafeBytes { b in
                    try PointCloudReader.readXYZ(UnsafeRawBufferPointer(rebasing: b[start..<end.frame]), separatorsEndFrame: true)
                }
                start = end.next
                state = .between
                // A frame of comments only is no frame.
                if points.isEmpty, dropped == 0 { continue }
                return try PointCloudReader.finished(points, dropped: dropped, tracking: nil)
            }
        }
    }

    /// A blank line (spaces only) or `---`.
    private func isSeparatorLine(_ from: Int, _ to: Int) -> Bool {
        var p = from
        while p < to, buffer[p] == 0x20 || buffer[p] == 0x09 || buffer[p] == 0x0D { p += 1 }
        if p == to { return true }
        guard to - p >= 3, buffer[p] == 0x2D, buffer[p + 1] == 0x2D, buffer[p + 2] == 0x2D else { return false }
        p += 3
        while p < to, buffer[p] == 0x20 || buffer[p] == 0x09 || buffer[p] == 0x0D { p += 1 }
        return p == to
    }

    /// Skips blank space and `---` lines; true when a frame starts at `start`, false when more
    /// bytes are needed to tell.
    private mutating func skipSeparators(atEnd: Bool) throws -> Bool {
        while start < buffer.count {
            let c = buffer[start]
            if PointCloudReader.isSpace(c) { start += 1; continue }
            guard c == 0x2D else { return true }
            // `---` line, or a negative number starting an XYZ frame?
            var p = start
            while p < buffer.count, buffer[p] != 0x0A { p += 1 }
            if p == buffer.count {
                // An unfinished line: wait while it may still become a `---` line.
                if atEnd {
                    if isSeparatorLine(start, p) { start = p; continue }
                    return true
                }
                let line = buffer[start..<p]
                let mayBeSeparator = (line.count <= 3 && line.allSatisfy { $0 == 0x2D }) || isSeparatorLine(start, p)
                return !mayBeSeparator
            }
            if isSeparatorLine(start, p) { start = p + 1; continue }
            return true
        }
        if start == buffer.count, start > 0 { buffer.removeAll(keepingCapacity: true); start = 0 }
        return false
    }
}

