import Foundation

/// A JSON document as a Swift value: what control requests, responses and event fields carry.
///
/// Integers and fractional numbers are kept apart (`int` / `double`) so sequence numbers and
/// millisecond timestamps survive a round trip exactly.
public enum JSONValue: Codable, Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let b = try? container.decode(Bool.self) {  // not this type: the next
            self = .bool(b)
        } else if let i = try? container.decode(Int64.self) {  // not this type: the next
            self = .int(i)
        } else if let d = try? container.decode(Double.self) {  // not this type: the next
            self = .double(d)
        } else if let s = try? container.decode(String.self) {  // not this type: the next
            self = .string(s)
        } else if let a = try? container.decode([JSONValue].self) {  // not this type: the next
            self = .array(a)
        } else if let o = try? container.decode([String: JSONValue].self) {  // not this type: the next
            self = .object(o)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let b): try container.encode(b)
        case .int(let i): try container.encode(i)
        case .double(let d): try container.encode(d)
        case .string(let s): try container.encode(s)
        case .array(let a): try container.encode(a)
        case .object(let o): try container.encode(o)
        }
    }

    // MARK: Accessors

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// The value as an integer: an `int`, or a `double` with no fractional part that fits.
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d):
            guard d.rounded() == d, let i = Int64(exactly: d) else { return nil }
            return i
        case .null, .bool, .string, .array, .object: return nil
        }
    }

    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        case .null, .bool, .string, .array, .object: return nil
        }
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// `value["key"]` on an object; nil for anything else or a missing key.
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// `value[0]` on an array; nil for anything else or an index out of range.
    public subscript(index: Int) -> JSONValue? {
        if case .array(let a) = self, a.indices.contains(index) { return a[index] }
        return nil
    }

    /// The value as text for comparisons (`tandem wait --match key=value`): a string as itself,
    /// numbers and booleans as JSON spells them, null as "null", arrays and objects as compact JSON.
    public var textValue: String {
        switch self {
        case .string(let s): return s
        case .null, .bool, .int, .double, .array, .object: return compactJSON
        }
    }

    // MARK: Encoding

    private static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// One line of JSON, keys sorted. Non-finite doubles (which JSON cannot carry) become null.
    ///
    /// Written here, not by `JSONEncoder` (every event is encoded once when it is stored, and the
    /// encoder was half the cost of storing one): the same text, byte for byte — keys in code-point
    /// order, `/` not escaped, `"` `\` and control characters escaped as `JSONEncoder` does — with
    /// doubles still formatted by `JSONEncoder` (`JSONValueTests` compares the two).
    public var compactJSON: String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// The UTF-8 JSON bytes, keys sorted.
    public var jsonData: Data {
        var out: [UInt8] = []
        write(into: &out)
        return Data(out)
    }

    private func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): out.append(contentsOf: String(i).utf8)
        case .double(let d):
            if d.isFinite, let text = try? Self.encoder.encode(d) {  // a finite double always encodes
                out.append(contentsOf: text)
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .string(let s): Self.write(string: s, into: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            for (i, (k, v)) in o.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }).enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.write(string: k, into: &out)
                out.append(UInt8(ascii: ":"))
                v.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    private static func write(string: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { writeEscaped($0, into: &out) }
        out.append(UInt8(ascii: "\""))
    }

    /// The bytes of a JSON string's body: runs that need no escape are copied whole, not appended
    /// a byte at a time (every event's fields are written so, messages.md 11.6).
    private static func writeEscaped(_ bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        var start = 0
        for i in bytes.indices {
            let byte = bytes[i]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            if start < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i])) }
            start = i + 1
            out.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
            case 0x0A: out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "t"))
            case 0x08: out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(UInt8(ascii: "f"))
            default:
                out.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            }
        }
        if start < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...])) }
    }

    /// Whether parsing `compactJSON` gives this value back exactly: not when it holds a double
    /// (3.0 is written `3` and read back as an int; NaN becomes null).
    public var survivesJSONRoundTrip: Bool {
        switch self {
        case .double: return false
        case .array(let a): return a.allSatisfy(\.survivesJSONRoundTrip)
        case .object(let o): return o.values.allSatisfy(\.survivesJSONRoundTrip)
        case .null, .bool, .int, .string: return true
        }
    }

    /// Parses UTF-8 JSON text.
    public static func parse(_ data: Data) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: data)
    }

    public static func parse(_ text: String) throws -> JSONValue {
        try parse(Data(text.utf8))
    }
}

extension JSONValue: ExpressibleByNilLiteral {
    public init(nilLiteral: ()) { self = .null }
}

extension JSONValue: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSONValue: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int64) { self = .int(value) }
}

extension JSONValue: ExpressibleByFloatLiteral {
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension JSONValue: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}

extension JSONValue: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
}

extension JSONValue: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue: CustomStringConvertible {
    public var description: String { compactJSON }
}

extension JSONValue {
    /// Convenience constructors for values held in Swift types.
    public init(_ value: Int) { self = .int(Int64(value)) }
    public init(_ value: Int64) { self = .int(value) }
    public init(_ value: UInt64) { self = value <= UInt64(Int64.max) ? .int(Int64(value)) : .double(Double(value)) }
    public init(_ value: String) { self = .string(value) }
    public init(_ value: Bool) { self = .bool(value) }
    public init(_ value: Double) { self = .double(value) }
}
