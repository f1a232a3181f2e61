import Foundation

/// `multipart/form-data` (RFC 7578), bounded: at most `maximumParts` parts, headers of at most
/// `maximumHeaderBytes` each; anything malformed is refused as a whole.
package enum WebMultipart {
    package static let maximumParts = 32
    package static let maximumHeaderBytes = 4096

    package struct Part: Sendable, Equatable {
        package var name: String
        package var filename: String?
        package var body: [UInt8]
    }

    package struct Malformed: Error, CustomStringConvertible {
        package let description: String
    }

    /// The boundary of a `multipart/form-data` content type (1–70 characters, RFC 2046).
    package static func boundary(_ contentType: String?) -> String? {
        guard let contentType else { return nil }
        let fields = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard fields.first?.lowercased() == "multipart/form-data" else { return nil }
        for f in fields.dropFirst() {
            let kv = f.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2, kv[0].lowercased() == "boundary" else { continue }
            var b = kv[1]
            if b.count >= 2, b.hasPrefix("\""), b.hasSuffix("\"") { b = String(b.dropFirst().dropLast()) }
            guard (1...70).contains(b.utf8.count), b.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
            return b
        }
        return nil
    }

    package static func parse(_ body: [UInt8], boundary: String) throws -> [Part] {
        let dash = Array("--\(boundary)".utf8)
        let delimiter = Array("\r\n--\(boundary)".utf8)
        guard body.starts(with: dash) else { throw Malformed(description: "the form does not start with its boundary") }
        var parts: [Part] = []
        var at = dash.count
        while true {
            // After a boundary: "--" ends the form, CRLF starts a part.
            if body.count >= at + 2, body[at] == UInt8(ascii: "-"), body[at + 1] == UInt8(ascii: "-") { return parts }
            guard body.count >= at + 2, body[at] == 13, body[at + 1] == 10 else { throw Malformed(description: "a boundary without its line end") }
            at += 2
            guard parts.count < maximumParts else { throw Malformed(description: "more than \(maximumParts) parts") }
            guard let headerEnd = find(Array("\r\n\r\n".utf8), in: body, from: at, limit: maximumHeaderBytes) else {
                throw Malformed(description: "a part's headers do not end")
            }
            let headers = String(decoding: body[at..<headerEnd], as: UTF8.self)
            at = headerEnd + 4
            guard let end = find(delimiter, in: body, from: at, limit: nil) else { throw Malformed(description: "a part does not end") }
            let (name, filename) = try disposition(headers)
            parts.append(Part(name: name, filename: filename, body: Array(body[at..<end])))
            at = end + delimiter.count
        }
    }

    /// The `name` and `filename` of a part's Content-Disposition (form-data).
    static func disposition(_ headers: String) throws -> (String, String?) {
        for line in headers.components(separatedBy: "\r\n") {
            let kv = line.split(separator: ":", maxSplits: 1)
            guard kv.count == 2, kv[0].trimmingCharacters(in: .whitespaces).lowercased() == "content-disposition" else { continue }
            var name: String?
            var filename: String?
            for param in splitParams(String(kv[1])).dropFirst() {
                let pv = param.split(separator: "=", maxSplits: 1).map(String.init)
                guard pv.count == 2 else { continue }
                var v = pv[1].trimmingCharacters(in: .whitespaces)
                if v.count >= 2, v.hasPrefix("\""), v.hasSuffix("\"") {
                    v = String(v.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"")
                }
                switch pv[0].trimmingCharacters(in: .whitespaces).lowercased() {
                case "name": name = v
                case "filename": filename = (v as NSString).lastPathComponent  // a browser sends the name only; never a path
                default: break
                }
            }
            guard let name else { throw Malformed(description: "a part without a name") }
            return (name, filename)
        }
        throw Malformed(description: "a part without Content-Disposition")
    }

    /// `form-data; name="a;b"; filename="x"` split on the semicolons outside quotes.
    static func splitParams(_ s: String) -> [String] {
        var out: [String] = []
        var current = ""
        var quoted = false
        var escaped = false
        for c in s {
            if escaped { current.append(c); escaped = false; continue }
            if c == "\\" && quoted { current.append(c); escaped = true; continue }
            if c == "\"" { quoted.toggle() }
            if c == ";" && !quoted { out.append(current.trimmingCharacters(in: .whitespaces)); current = ""; continue }
            current.append(c)
        }
        out.append(current.trimmingCharacters(in: .whitespaces))
        return out
    }

    /// The first index of `needle` in `hay` at or after `from` (within `limit` bytes when given).
    static func find(_ needle: [UInt8], in hay: [UInt8], from: Int, limit: Int?) -> Int? {
        guard !needle.isEmpty, hay.count >= needle.count else { return nil }
        let last = min(hay.count - needle.count, limit.map { from.addingReportingOverflow($0).overflow ? Int.max : from + $0 } ?? Int.max)
        guard from <= last else { return nil }
        let first = needle[0]
        return hay.withUnsafeBufferPointer { h -> Int? in
            var i = from
            while i <= last {
                if h[i] == first {
                    var j = 1
                    while j < needle.count, h[i + j] == needle[j] { j += 1 }
                    if j == needle.count { return i }
                }
                i += 1
            }
            return nil
        }
    }
}

/// A parsed form: its text fields and chosen files.
struct WebUploadForm: Sendable {
    var parts: [WebMultipart.Part]

    /// The form in `body`, or nil when it is not `multipart/form-data` or is malformed.
    static func parse(_ body: [UInt8], contentType: String?) -> WebUploadForm? {
        guard let boundary = WebMultipart.boundary(contentType) else { return nil }
        return (try? WebMultipart.parse(body, boundary: boundary)).map { WebUploadForm(parts: $0) }  // malformed: refused as a whole
    }

    /// A text field.
    func field(_ name: String) -> String? {
        parts.first { $0.name == name && $0.filename == nil }.map { String(decoding: $0.body, as: UTF8.self) }
    }

    /// A file that was chosen (a file input left empty sends a part with no bytes).
    func file(_ name: String) -> WebMultipart.Part? {
        parts.first { $0.name == name && $0.filename != nil && !$0.body.isEmpty }
    }
}
