/// Reads a PLY body after its header, incrementally: `advance` goes as far as the bytes allow and
/// remembers where it stopped, so a stream fed a byte at a time costs linear time overall.
struct PLYBodyReader {
    let header: PLYHeader
    private(set) var points: [SIMD3<Float>] = []
    private(set) var dropped = 0
    private var element = 0
    private var row = 0
    /// Offset in the frame's bytes (from the start of the header) of the next unread row.
    private(set) var position: Int
    private(set) var isComplete = false

    init(header: PLYHeader) {
        self.header = header
        self.position = header.length
        points.reserveCapacity(header.elements[header.vertexElement].count)
        skipEmptyElements()
    }

    private mutating func skipEmptyElements() {
        while element < header.elements.count, row >= header.elements[element].count {
            element += 1
            row = 0
        }
        if element >= header.elements.count { isComplete = true }
    }

    /// Reads rows from `frame` (the frame's bytes so far, header included). Returns true once the
    /// whole body is read; `atEnd`: no more bytes will come (a missing row is then an error).
    mutating func advance(_ frame: UnsafeRawBufferPointer, atEnd: Bool) throws -> Bool {
        while !isComplete {
            let progressed: Bool
            switch header.format {
            case .binaryLittleEndian: progressed = try binaryRows(frame)
            case .ascii: progressed = try asciiRow(frame, atEnd: atEnd)
            }
            if !progressed {
                if atEnd {
                    throw KeyInputError(.truncated("element '\(header.elements[element].name)' ends at row \(row) of \(header.elements[element].count)"))
                }
                return false
            }
            skipEmptyElements()
        }
        if header.format == .ascii {
            // The frame ends with the line of its last row.
            if position > header.length, position <= frame.count, position > 0, frame[position - 1] == 0x0A { return true }
            while position < frame.count, frame[position] != 0x0A {
                let c = frame[position]
                guard c == 0x20 || c == 0x09 || c == 0x0D else { throw KeyInputError(.malformedData("extra values after the last PLY row")) }
                position += 1
            }
            if position < frame.count { position += 1; return true }
            return atEnd
        }
        return true
    }

    private mutating func keep(_ x: Double, _ y: Double, _ z: Double) {
        if PointCloudReader.acceptable(x), PointCloudReader.acceptable(y), PointCloudReader.acceptable(z) {
            points.append(SIMD3(Float(x), Float(y), Float(z)))
        } else {
            dropped += 1
        }
    }

    // MARK: binary

    /// Reads as many whole rows of the current element as are present; false when none is.
    private mutating func binaryRows(_ b: UnsafeRawBufferPointer) throws -> Bool {
        let e = header.elements[element]
        let isVertex = element == header.vertexElement
        if let size = e.fixedRowSize {
            let available = size == 0 ? e.count - row : min(e.count - row, (b.count - position) / size)
            guard available > 0 else { return false }
            if isVertex {
                var offsets = [Int](repeating: 0, count: e.properties.count)
                var o = 0
                for (i, p) in e.properties.enumerated() { offsets[i] = o; o += p.type.size }
                let (ix, iy, iz) = header.xyz
                let tx = e.properties[ix].type, ty = e.properties[iy].type, tz = e.properties[iz].type
                let ox = offsets[ix], oy = offsets[iy], oz = offsets[iz]
                var p = position
                if tx == .float32, ty == .float32, tz == .float32 {
                    for _ in 0..<available {
                        let x = Float(bitPattern: UInt32(littleEndian: b.loadUnaligned(fromByteOffset: p + ox, as: UInt32.self)))
                        let y = Float(bitPattern: UInt32(littleEndian: b.loadUnaligned(fromByteOffset: p + oy, as: UInt32.self)))
                        let z = Float(bitPattern: UInt32(littleEndian: b.loadUnaligned(fromByteOffset: p + oz, as: UInt32.self)))
                        if PointCloudReader.acceptable(x), PointCloudReader.acceptable(y), PointCloudReader.acceptable(z) {
                            points.append(SIMD3(x, y, z))
                        } else {
                            dropped += 1
                        }
                        p += size
                    }
                } else {
                    for _ in 0..<available {
                        keep(tx.load(b, p + ox), ty.load(b, p + oy), tz.load(b, p + oz))
                        p += size
                    }
                }
            }
            position += available * size
            row += available
            return true
        }
        // Rows with lists: one at a time.
        var p = position
        var xyz = (0.0, 0.0, 0.0)
        for (i, prop) in e.properties.enumerated() {
            if let countType = prop.listCountType {
                guard p + countType.size <= b.count else { return false }
                let n = countType.load(b, p)
                guard n >= 0, n <= Double(PLYHeader.maximumListItems) else {
                    throw KeyInputError(.malformedData("list of \(n) items in element '\(e.name)' (at most \(PLYHeader.maximumListItems))"))
                }
                p += countType.size + Int(n) * prop.type.size
                guard p <= b.count else { return false }
            } else {
                guard p + prop.type.size <= b.count else { return false }
                if isVertex {
                    if i == header.xyz.0 { xyz.0 = prop.type.load(b, p) }
                    if i == header.xyz.1 { xyz.1 = prop.type.load(b, p) }
                    if i == header.xyz.2 { xyz.2 = prop.type.load(b, p) }
                }
                p += prop.type.size
            }
        }
        if isVertex { keep(xyz.0, xyz.1, xyz.2) }
        position = p
        row += 1
        return true
    }

    // MARK: ascii

    /// Reads one row (its values may span lines); false when the bytes end inside it.
    private mutating func asciiRow(_ b: UnsafeRawBufferPointer, atEnd: Bool) throws -> Bool {
        let e = header.elements[element]
        let isVertex = element == header.vertexElement
        var p = position
        var xyz = (0.0, 0.0, 0.0)
        func token() throws -> (Int, Int)? {
            while p < b.count, PointCloudReader.isSpace(b[p]) { p += 1 }
            let start = p
            while p < b.count, !PointCloudReader.isSpace(b[p]) { p += 1 }
            if p == start || (p == b.count && !atEnd) { return nil }
            if p - start > 64 { throw KeyInputError(.malformedData("a PLY value of more than 64 characters")) }
            return (start, p)
        }
        for (i, prop) in e.properties.enumerated() {
            if prop.listCountType != nil {
                guard let t = try token() else { return false }
                guard let n = PointCloudReader.number(b, t.0, t.1), n >= 0, n <= Double(PLYHeader.maximumListItems), n == n.rounded() else {
                    throw KeyInputError(.malformedData("bad list count in element '\(e.name)' row \(row)"))
                }
                for _ in 0..<Int(n) {
                    guard let t = try token() else { return false }
                    guard PointCloudReader.number(b, t.0, t.1) != nil else {
                        throw KeyInputError(.malformedData("not a number in element '\(e.name)' row \(row)"))
                    }
                }
            } else {
                guard let t = try token() else { return false }
                guard let v = PointCloudReader.number(b, t.0, t.1) else {
                    throw KeyInputError(.malformedData("not a number in element '\(e.name)' row \(row)"))
                }
                if isVertex {
                    if i == header.xyz.0 { xyz.0 = v }
                    if i == header.xyz.1 { xyz.1 = v }
                    if i == header.xyz.2 { xyz.2 = v }
                }
            }
        }
        if isVertex { keep(xyz.0, xyz.1, xyz.2) }
        position = p
        row += 1
        return true
    }
}
