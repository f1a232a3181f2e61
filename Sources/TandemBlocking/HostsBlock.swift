/// The managed block in a hosts file, as pure text in → text out (no I/O).
///
/// A mode's block:
///
///     # BEGIN tandem mode NAME
///     # Managed by Tandem while this mode is locked; removed when it unlocks. Do not edit.
///     0.0.0.0 example.com
///     :: example.com
///     0.0.0.0 www.example.com
///     :: www.example.com
///     # END tandem mode NAME
///
/// Every domain, and its `www.` form, maps to `0.0.0.0` (IPv4) and `::` (IPv6), so connections
/// fail locally instead of reaching the site.
///
/// Guarantees:
/// - Every line outside a block of the mode is kept byte for byte; `removing(applying(text))`
///   returns `text` exactly (CRLF files, files without a final newline, any other content) as long
///   as `text` held no marker of that mode.
/// - A new block is appended at the end. If the file does not end with a newline, one (the file's
///   own style: `\r\n` when its first line ends so, else `\n`) is added before the block and the
///   block's last line gets none, so removing the block restores the missing final newline.
/// - The block is written in the file's newline style; an existing block is replaced in place.
/// - Several blocks of one mode (hand-copied): the first is replaced, the others removed.
/// - A damaged block (a `BEGIN` line whose next marker line is not its `END`, or no marker follows
///   at all) is taken to be the `BEGIN` line plus the lines right after it that look like ours
///   (`0.0.0.0 HOST`, `:: HOST`, or our comment line), up to the first line that does not. Lines the
///   user wrote further down are never swallowed. An `END` line without a `BEGIN` is removed alone.
///
/// Text is handled as UTF-8 bytes: `\r\n` is never merged or split, invalid UTF-8 read from a file
/// is kept as it was (see the `[UInt8]` forms used by `HostsFile`).
public enum HostsBlock {
    public static let beginPrefix = "# BEGIN tandem mode "
    public static let endPrefix = "# END tandem mode "
    static let commentLine = "# Managed by Tandem while this mode is locked; removed when it unlocks. Do not edit."
    /// At most this many domains are taken from one list (each adds up to 4 lines).
    public static let maxDomains = 10_000
    /// A mode's name in a marker is cut to this many UTF-8 bytes.
    public static let maxModeNameBytes = 200

    // MARK: - String API

    /// `text` with the block of `mode` listing `domains` (and their `www.` forms): the existing
    /// block replaced in place, or a new one appended. No valid domain = the block removed.
    public static func applying(mode: String, domains: [String], to text: String) -> String {
        String(decoding: applying(mode: mode, domains: domains, to: Array(text.utf8)), as: UTF8.self)
    }

    /// `text` without any block (or damaged block, or stray marker) of `mode`; every other byte kept.
    public static func removing(mode: String, from text: String) -> String {
        String(decoding: removing(mode: mode, from: Array(text.utf8)), as: UTF8.self)
    }

    /// `text` without any Tandem block of any mode.
    public static func removingAll(from text: String) -> String {
        String(decoding: removingAll(from: Array(text.utf8)), as: UTF8.self)
    }

    /// The modes that have a marker in `text` (a block, a damaged block left by a crash, a stray
    /// `END`), in order of first appearance, each once.
    public static func modes(in text: String) -> [String] {
        modeNames(in: Array(text.utf8)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The name as it is written in the markers: control characters (newlines included) become
    /// `_`, surrounding spaces and tabs are trimmed, an empty name becomes `_`, and the name is cut
    /// to `maxModeNameBytes` UTF-8 bytes. Two names that differ only in those ways share a block.
    public static func markerName(_ mode: String) -> String {
        var scalars = String.UnicodeScalarView()
        var bytes = 0
        for scalar in mode.unicodeScalars {
            let isControl = scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value)
                || scalar.value == 0x2028 || scalar.value == 0x2029 || scalar.value == 0x85
            let s: Unicode.Scalar = isControl ? "_" : scalar
            let size = UTF8.width(s)
            if bytes + size > maxModeNameBytes { break }
            bytes += size
            scalars.append(s)
        }
        var name = String(scalars)
        while let first = name.unicodeScalars.first, first == " " || first == "\t" { name.unicodeScalars.removeFirst() }
        while let last = name.unicodeScalars.last, last == " " || last == "\t" { name.unicodeScalars.removeLast() }
        return name.isEmpty ? "_" : name
    }

    /// `raw` as a host name for the hosts file, or nil when it is not one. Lenient on form
    /// (`https://Example.com:443/path` → `example.com`, a final dot and a leading `*.` dropped),
    /// strict on content: ASCII letters, digits, `-`, `_`; labels of 1–63 bytes, at most 253 in
    /// all; at least two labels; not an IP address; never `localhost` or a name under it.
    /// Internationalised names must be given in their `xn--` form.
    public static func normalizedDomain(_ raw: String) -> String? {
        var s = Substring(raw)
        while let c = s.first, c == " " || c == "\t" || c == "\n" || c == "\r" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" || c == "\n" || c == "\r" { s.removeLast() }
        guard !s.isEmpty, s.utf8.count <= 2048 else { return nil }
        if let range = s.range(of: "://") { s = s[range.upperBound...] }
        if let cut = s.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { s = s[..<cut] }
        if let at = s.lastIndex(of: "@") { s = s[s.index(after: at)...] }
        if let colon = s.lastIndex(of: ":") {
            let port = s[s.index(after: colon)...]
            guard port.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            s = s[..<colon]
        }
        var bytes = Array(s.utf8)
        if bytes.last == UInt8(ascii: ".") { bytes.removeLast() }
        if bytes.starts(with: Array("*.".utf8)) { bytes.removeFirst(2) }
        guard !bytes.isEmpty, bytes.count <= 253 else { return nil }
        for i in bytes.indices where bytes[i] >= UInt8(ascii: "A") && bytes[i] <= UInt8(ascii: "Z") {
            bytes[i] += 32
        }
        let labels = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard labels.count >= 2 else { return nil }
        for label in labels {
            guard (1...63).contains(label.count),
                  label.first != UInt8(ascii: "-"), label.last != UInt8(ascii: "-"),
                  label.allSatisfy({ isHostByte($0) })
            else { return nil }
        }
        if let last = labels.last, last.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            return nil  // an IPv4 address, or a name no resolver would ask for
        }
        let name = String(decoding: bytes, as: UTF8.self)
        if name == "localhost.localdomain" || name.hasSuffix(".localhost") { return nil }
        return name
    }

    /// The host names a block lists for `domains` (each normalised, then its `www.` form unless it
    /// already starts with `www.`; duplicates dropped, order kept), and the entries that were not
    /// domains. At most `maxDomains` entries are read.
    public static func hostNames(for domains: [String]) -> (names: [String], rejected: [String]) {
        var names: [String] = []
        var seen = Set<String>()
        var rejected: [String] = []
        for raw in domains.prefix(maxDomains) {
            guard let domain = normalizedDomain(raw) else {
                if rejected.count < 100 { rejected.append(String(raw.prefix(100))) }
                continue
            }
            for name in domain.hasPrefix("www.") ? [domain] : [domain, "www." + domain]
            where name.utf8.count <= 253 && seen.insert(name).inserted {
                names.append(name)
            }
        }
        return (names, rejected)
    }

    // MARK: - Byte API

    /// `applying(mode:domains:to:)` on bytes.
    public static func applying(mode: String, domains: [String], to bytes: [UInt8]) -> [UInt8] {
        let name = Array(markerName(mode).utf8)
        let names = hostNames(for: domains).names
        let lines = splitLines(bytes)
        let ranges = blockRanges(name: name, lines: lines, bytes: bytes)
        if names.isEmpty {
            return rewrite(bytes, lines: lines, ranges: ranges, replacement: nil)
        }
        if ranges.isEmpty {
            let crlf = usesCRLF(bytes)
            var out = bytes
            let endsOpen = !bytes.isEmpty && bytes.last != UInt8(ascii: "\n")
            if endsOpen { out += crlf ? [13, 10] : [10] }
            out += block(name: name, hostNames: names, crlf: crlf, terminated: !endsOpen)
            return out
        }
        return rewrite(bytes, lines: lines, ranges: ranges) { crlf, terminated in
            block(name: name, hostNames: names, crlf: crlf, terminated: terminated)
        }
    }

    /// `removing(mode:from:)` on bytes.
    public static func removing(mode: String, from bytes: [UInt8]) -> [UInt8] {
        let name = Array(markerName(mode).utf8)
        let lines = splitLines(bytes)
        return rewrite(bytes, lines: lines, ranges: blockRanges(name: name, lines: lines, bytes: bytes), replacement: nil)
    }

    /// `removingAll(from:)` on bytes (by the names as written, so a name that is not valid UTF-8
    /// is removed as well).
    public static func removingAll(from bytes: [UInt8]) -> [UInt8] {
        var current = bytes
        // Each pass removes every marker of one name; bounded by the number of distinct names.
        for name in modeNames(in: bytes) {
            let lines = splitLines(current)
            current = rewrite(current, lines: lines, ranges: blockRanges(name: name, lines: lines, bytes: current), replacement: nil)
        }
        return current
    }

    /// The marker names in `bytes`, each once, in order of first appearance.
    static func modeNames(in bytes: [UInt8]) -> [[UInt8]] {
        var names: [[UInt8]] = []
        var seen = Set<[UInt8]>()
        for line in splitLines(bytes) {
            switch marker(line, bytes) {
            case .begin(let name), .end(let name):
                if seen.insert(name).inserted { names.append(name) }
            case nil:
                break
            }
        }
        return names
    }

    // MARK: - Lines

    struct Line {
        /// First byte of the line.
        var start: Int
        /// End of the content (the `\n`, or the end of the text); a `\r` before it is content.
        var contentEnd: Int
        /// After the `\n` (or the end of the text).
        var end: Int
        var terminated: Bool { end > contentEnd }
    }

    static func splitLines(_ bytes: [UInt8]) -> [Line] {
        var lines: [Line] = []
        var start = 0
        var i = 0
        while i < bytes.count {
            if bytes[i] == 10 {
                lines.append(Line(start: start, contentEnd: i, end: i + 1))
                start = i + 1
            }
            i += 1
        }
        if start < bytes.count { lines.append(Line(start: start, contentEnd: bytes.count, end: bytes.count)) }
        return lines
    }

    /// The line's content without a final `\r`.
    static func content(_ line: Line, _ bytes: [UInt8]) -> ArraySlice<UInt8> {
        var end = line.contentEnd
        if end > line.start && bytes[end - 1] == 13 { end -= 1 }
        return bytes[line.start..<end]
    }

    static func endsWithCR(_ line: Line, _ bytes: [UInt8]) -> Bool {
        line.contentEnd > line.start && bytes[line.contentEnd - 1] == 13
    }

    /// The text's newline style: CRLF when its first line ends with `\r\n`.
    static func usesCRLF(_ bytes: [UInt8]) -> Bool {
        guard let first = bytes.firstIndex(of: 10) else { return false }
        return first > 0 && bytes[first - 1] == 13
    }

    enum Marker: Equatable {
        case begin([UInt8])
        case end([UInt8])
    }

    private static let beginBytes = Array(beginPrefix.utf8)
    private static let endBytes = Array(endPrefix.utf8)

    static func marker(_ line: Line, _ bytes: [UInt8]) -> Marker? {
        let text = content(line, bytes)
        func name(after prefix: [UInt8]) -> [UInt8]? {
            guard text.count > prefix.count, text.starts(with: prefix) else { return nil }
            var rest = Array(text.dropFirst(prefix.count))
            while let last = rest.last, last == 32 || last == 9 { rest.removeLast() }
            return rest.isEmpty ? nil : rest
        }
        if let n = name(after: beginBytes) { return .begin(n) }
        if let n = name(after: endBytes) { return .end(n) }
        return nil
    }

    private static let commentBytes = Array(commentLine.utf8)

    /// A line we could have written inside a block: our comment, or `0.0.0.0 HOST` / `:: HOST`.
    static func looksOurs(_ line: Line, _ bytes: [UInt8]) -> Bool {
        let text = content(line, bytes)
        if text.elementsEqual(commentBytes) { return true }
        let host: ArraySlice<UInt8>
        if text.starts(with: Array("0.0.0.0 ".utf8)) {
            host = text.dropFirst(8)
        } else if text.starts(with: Array(":: ".utf8)) {
            host = text.dropFirst(3)
        } else {
            return false
        }
        return !host.isEmpty && host.count <= 253 && host.allSatisfy { isHostByte($0) || $0 == UInt8(ascii: ".") }
    }

    static func isHostByte(_ b: UInt8) -> Bool {
        (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
            || b == UInt8(ascii: "-") || b == UInt8(ascii: "_")
    }

    /// The line ranges (inclusive, ascending, disjoint) that belong to blocks of `name`.
    static func blockRanges(name: [UInt8], lines: [Line], bytes: [UInt8]) -> [ClosedRange<Int>] {
        var ranges: [ClosedRange<Int>] = []
        var i = 0
        while i < lines.count {
            switch marker(lines[i], bytes) {
            case .begin(let n) where n == name:
                var j = i + 1
                while j < lines.count && marker(lines[j], bytes) == nil { j += 1 }
                if j < lines.count, marker(lines[j], bytes) == .end(name) {
                    ranges.append(i...j)
                    i = j + 1
                } else {
                    var k = i + 1
                    while k < lines.count && marker(lines[k], bytes) == nil && looksOurs(lines[k], bytes) { k += 1 }
                    ranges.append(i...(k - 1))
                    i = k
                }
            case .end(let n) where n == name:
                ranges.append(i...i)
                i += 1
            default:
                i += 1
            }
        }
        return ranges
    }

    /// `bytes` without the lines in `ranges`; the first range replaced by `replacement(crlf,
    /// terminated)` when given (in the style of that range's first line, ending with a newline
    /// when the range did). A removed range that ended the text without a newline takes the
    /// newline before it too, so the text again ends without one.
    static func rewrite(_ bytes: [UInt8], lines: [Line], ranges: [ClosedRange<Int>],
                        replacement: ((_ crlf: Bool, _ terminated: Bool) -> [UInt8])?) -> [UInt8] {
        guard !ranges.isEmpty else { return bytes }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var cursor = 0  // next line index to copy
        var openTailCRLF: Bool?
        for (index, range) in ranges.enumerated() {
            for line in lines[cursor..<range.lowerBound] { out += bytes[line.start..<line.end] }
            let first = lines[range.lowerBound]
            let last = lines[range.upperBound]
            let crlf = endsWithCR(first, bytes)
            if index == 0, let replacement {
                out += replacement(crlf, last.terminated)
            } else if !last.terminated {
                openTailCRLF = crlf
            }
            cursor = range.upperBound + 1
        }
        for line in lines[cursor...] { out += bytes[line.start..<line.end] }
        if let crlf = openTailCRLF, out.last == 10 {
            out.removeLast()
            if crlf && out.last == 13 { out.removeLast() }
        }
        return out
    }

    static func block(name: [UInt8], hostNames: [String], crlf: Bool, terminated: Bool) -> [UInt8] {
        let nl: [UInt8] = crlf ? [13, 10] : [10]
        var out: [UInt8] = beginBytes + name + nl + commentBytes + nl
        for host in hostNames {
            out += Array("0.0.0.0 \(host)".utf8) + nl
            out += Array(":: \(host)".utf8) + nl
        }
        out += endBytes + name
        if terminated { out += nl }
        return out
    }
}
