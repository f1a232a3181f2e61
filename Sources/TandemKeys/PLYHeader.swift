/// A parsed PLY header (http://paulbourke.net/dataformats/ply/): the elements and their properties,
/// with every count and size capped before any body byte is read.
struct PLYHeader: Equatable {
    enum Format: Equatable { case ascii, binaryLittleEndian }

    enum ScalarType: Equatable {
        case int8, uint8, int16, uint16, int32, uint32, float32, float64

        init?(_ name: Substring) {
            switch name {
            case "char", "int8": self = .int8
            case "uchar", "uint8": self = .uint8
            case "short", "int16": self = .int16
            case "ushort", "uint16": self = .uint16
            case "int", "int32": self = .int32
            case "uint", "uint32": self = .uint32
            case "float", "float32": self = .float32
            case "double", "float64": self = .float64
            default: return nil
            }
        }

        var size: Int {
            switch self {
            case .int8, .uint8: return 1
            case .int16, .uint16: return 2
            case .int32, .uint32, .float32: return 4
            case .float64: return 8
            }
        }

        var isInteger: Bool {
            switch self {
            case .float32, .float64: return false
            case .int8, .uint8, .int16, .uint16, .int32, .uint32: return true
            }
        }

        /// The value at `offset` (little-endian); the caller has checked the bounds.
        func load(_ b: UnsafeRawBufferPointer, _ offset: Int) -> Double {
            switch self {
            case .int8: return Double(Int8(bitPattern: b[offset]))
            case .uint8: return Double(b[offset])
            case .int16: return Double(Int16(littleEndian: b.loadUnaligned(fromByteOffset: offset, as: Int16.self)))
            case .uint16: return Double(UInt16(littleEndian: b.loadUnaligned(fromByteOffset: offset, as: UInt16.self)))
            case .int32: return Double(Int32(littleEndian: b.loadUnaligned(fromByteOffset: offset, as: Int32.self)))
            case .uint32: return Double(UInt32(littleEndian: b.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            case .float32: return Double(Float(bitPattern: UInt32(littleEndian: b.loadUnaligned(fromByteOffset: offset, as: UInt32.self))))
            case .float64: return Double(bitPattern: UInt64(littleEndian: b.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            }
        }
    }

    struct Property: Equatable {
        var name: String
        var type: ScalarType
        /// For `property list COUNT_TYPE ITEM_TYPE name`: the count's type (`type` is the items').
        var listCountType: ScalarType?
    }

    struct Element: Equatable {
        var name: String
        var count: Int
        var properties: [Property]

        /// Bytes per row in binary, when no property is a list.
        var fixedRowSize: Int? {
            var size = 0
            for p in properties {
                if p.listCountType != nil { return nil }
                size += p.type.size
            }
            return size
        }
    }

    var format: Format
    var elements: [Element]
    var trackingState: TrackingState?
    /// Bytes from the start of the file through the end of the `end_header` line.
    var length: Int
    /// Index of the `vertex` element and of its x, y, z properties.
    var vertexElement: Int
    var xyz: (Int, Int, Int)

    static func == (a: PLYHeader, b: PLYHeader) -> Bool {
        a.format == b.format && a.elements == b.elements && a.trackingState == b.trackingState && a.length == b.length
    }

    static let maximumBytes = 16_384
    static let maximumLines = 256
    static let maximumElements = 32
    static let maximumProperties = 64
    /// Rows of any non-vertex element (faces, edges…): they are skipped, but each costs time.
    static let maximumOtherRows = 4_000_000
    /// Items in one list row (a face's vertex indices).
    static let maximumListItems = 1_024

    /// The header at the start of `b`: nil when its `end_header` line has not arrived yet.
    static func parse(_ b: UnsafeRawBufferPointer) throws -> PLYHeader? {
        // Find the end of the `end_header` line within the cap.
        let limit = min(b.count, maximumBytes)
        var lines: [Substring] = []
        var lineStart = 0
        var end: Int?
        var i = 0
        while i < limit {
            if b[i] == 0x0A {
                var lineEnd = i
                if lineEnd > lineStart, b[lineEnd - 1] == 0x0D { lineEnd -= 1 }
                let line = Substring(String(decoding: UnsafeRawBufferPointer(rebasing: b[lineStart..<lineEnd]), as: UTF8.self))
                lines.append(line)
                if lines.count > maximumLines { throw KeyInputError(.malformedHeader("more than \(maximumLines) header lines")) }
                lineStart = i + 1
                if line.trimmingSpaces == "end_header" { end = i + 1; break }
            }
            i += 1
        }
        guard let length = end else {
            if b.count >= maximumBytes { throw KeyInputError(.malformedHeader("no end_header within \(maximumBytes) bytes")) }
            // Reject early what cannot become a PLY header.
            if lines.first.map({ $0.trimmingSpaces != "ply" }) ?? false { throw KeyInputError(.malformedHeader("first line is not 'ply'")) }
            return nil
        }
        guard lines.first?.trimmingSpaces == "ply" else { throw KeyInputError(.malformedHeader("first line is not 'ply'")) }
        var format: Format?
        var elements: [Element] = []
        var tracking: TrackingState?
        for (n, line) in lines.enumerated().dropFirst() {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard let keyword = words.first else { continue }
            switch keyword {
            case "format":
                guard words.count >= 2 else { throw KeyInputError(.malformedHeader("line \(n + 1): format without a value")) }
                switch words[1] {
                case "ascii": format = .ascii
                case "binary_little_endian": format = .binaryLittleEndian
                case "binary_big_endian": throw KeyInputError(.unsupported("binary_big_endian PLY (write ascii or binary_little_endian)"))
                default: throw KeyInputError(.malformedHeader("line \(n + 1): unknown format '\(words[1].prefix(40))'"))
                }
            case "comment", "obj_info":
                if words.count >= 3, words[1] == "tracking_state" {
                    guard let state = TrackingState(rawValue: String(words[2])) else {
                        throw KeyInputError(.malformedHeader("line \(n + 1): tracking_state must be normal, limited or not_available"))
                    }
                    tracking = state
                }
            case "element":
                guard words.count == 3, let count = Int(words[2]), count >= 0 else {
                    throw KeyInputError(.malformedHeader("line \(n + 1): expected 'element NAME COUNT'"))
                }
                guard elements.count < maximumElements else { throw KeyInputError(.malformedHeader("more than \(maximumElements) elements")) }
                let name = String(words[1].prefix(64))
                if name == "vertex" {
                    guard count <= TandemKeys.maximumPointsPerFrame else {
                        throw KeyInputError(.tooLarge("\(count) vertices (at most \(TandemKeys.maximumPointsPerFrame) per frame)"))
                    }
                } else if count > maximumOtherRows {
                    throw KeyInputError(.tooLarge("element '\(name)' has \(count) rows (at most \(maximumOtherRows))"))
                }
                elements.append(Element(name: name, count: count, properties: []))
            case "property":
                guard !elements.isEmpty else { throw KeyInputError(.malformedHeader("line \(n + 1): property before any element")) }
                guard elements[elements.count - 1].properties.count < maximumProperties else {
                    throw KeyInputError(.malformedHeader("more than \(maximumProperties) properties in one element"))
                }
                if words.count == 5, words[1] == "list" {
                    guard let countType = ScalarType(words[2]), countType.isInteger, let itemType = ScalarType(words[3]) else {
                        throw KeyInputError(.malformedHeader("line \(n + 1): bad list property types"))
                    }
                    elements[elements.count - 1].properties.append(Property(name: String(words[4].prefix(64)), type: itemType, listCountType: countType))
                } else if words.count == 3, let type = ScalarType(words[1]) {
                    elements[elements.count - 1].properties.append(Property(name: String(words[2].prefix(64)), type: type, listCountType: nil))
                } else {
                    throw KeyInputError(.malformedHeader("line \(n + 1): expected 'property TYPE NAME' or 'property list COUNT_TYPE TYPE NAME'"))
                }
            case "end_header":
                break
            default:
                throw KeyInputError(.malformedHeader("line \(n + 1): unknown keyword '\(keyword.prefix(40))'"))
            }
        }
        guard let format else { throw KeyInputError(.malformedHeader("no format line")) }
        guard let v = elements.firstIndex(where: { $0.name == "vertex" }) else { throw KeyInputError(.malformedHeader("no vertex element")) }
        let props = elements[v].properties
        guard let x = props.firstIndex(where: { $0.name == "x" && $0.listCountType == nil }),
              let y = props.firstIndex(where: { $0.name == "y" && $0.listCountType == nil }),
              let z = props.firstIndex(where: { $0.name == "z" && $0.listCountType == nil }) else {
            throw KeyInputError(.malformedHeader("the vertex element needs scalar x, y and z properties"))
        }
        return PLYHeader(format: format, elements: elements, trackingState: tracking, length: length, vertexElement: v, xyz: (x, y, z))
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while let f = s.first, f == " " || f == "\t" || f == "\r" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\r" { s = s.dropLast() }
        return s
    }
}
