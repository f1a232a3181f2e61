import Foundation
import Logging
import TandemNet

/// The relay's config file: UTF-8 lines of `key = value`. `#` starts a comment at the start of a
/// line or after whitespace; values may be double-quoted (`\"` and `\\` inside quotes); blank
/// lines are ignored. Keys are the kebab-case names in `configKeys`; a key set twice is an error.
/// Every error is a usage error naming `file:line`.
extension RelayConfiguration {
    /// Every key the config file accepts, in the order the help text lists them.
    public static let configKeys: [String] = settings.map(\.key)

    /// Larger files are refused: a config file is a few dozen lines.
    static let maximumConfigFileBytes = 1 << 20

    /// Reads `path` and applies its settings on top of `base`.
    public static func load(file path: String, into base: RelayConfiguration = .init()) throws -> RelayConfiguration {
        let text = try readConfigText(path)
        var configuration = base
        var firstLine: [String: Int] = [:]
        // "\r\n" is a single Character in Swift, so it must be named as a separator of its own.
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        for (index, line) in lines.enumerated() {
            let origin = "\(path):\(index + 1)"
            let entry: (key: String, value: String)?
            do {
                entry = try parseConfigLine(line)
            } catch let problem as ConfigProblem {
                throw TandemError("\(origin): \(problem.message)", exitCode: TandemError.usageExitCode)
            }
            guard let entry else { continue }
            if let earlier = firstLine[entry.key] {
                throw TandemError("\(origin): '\(entry.key)' is already set on line \(earlier)",
                                  exitCode: TandemError.usageExitCode)
            }
            try configuration.apply(key: entry.key, value: entry.value, origin: origin)
            firstLine[entry.key] = index + 1
        }
        return configuration
    }

    /// Sets one field from its config-file spelling. `origin` prefixes any error message
    /// (`relay.conf:7`, or a flag name when the value comes from the command line).
    public mutating func apply(key: String, value: String, origin: String) throws {
        guard let setting = Self.settings.first(where: { $0.key == key }) else {
            var message = "\(origin): unknown key '\(key)'"
            if let near = Self.nearestKey(to: key) { message += " (did you mean '\(near)'?)" }
            throw TandemError(message, exitCode: TandemError.usageExitCode)
        }
        do {
            try setting.set(&self, value, key)
        } catch let problem as ConfigProblem {
            throw TandemError("\(origin): \(problem.message)", exitCode: TandemError.usageExitCode)
        }
    }
}

// MARK: - The keys

private struct ConfigProblem: Error {
    let message: String
}

private struct ConfigSetting: Sendable {
    let key: String
    let set: @Sendable (inout RelayConfiguration, _ value: String, _ key: String) throws -> Void
}

extension RelayConfiguration {
    fileprivate static let settings: [ConfigSetting] = [
        ConfigSetting(key: "listen") { c, v, k in
            (c.listenHost, c.listenPort) = try parseAddress(v, key: k, defaultHost: "0.0.0.0")
        },
        ConfigSetting(key: "metrics") { c, v, k in
            if v.lowercased() == "off" {
                c.metricsHost = nil
            } else {
                let (host, port) = try parseAddress(v, key: k, defaultHost: "127.0.0.1")
                c.metricsHost = host
                c.metricsPort = port
            }
        },
        ConfigSetting(key: "data-dir") { c, v, k in c.dataDirectory = try nonEmpty(v, key: k) },
        ConfigSetting(key: "public-address") { c, v, k in c.publicAddress = try nonEmpty(v, key: k) },
        ConfigSetting(key: "event-loops") { c, v, k in c.eventLoops = try eventLoopCount(v, key: k) },
        ConfigSetting(key: "max-clients") { c, v, k in c.maximumClients = try positive(v, key: k) },
        ConfigSetting(key: "max-clients-per-address") { c, v, k in c.maximumClientsPerAddress = try positive(v, key: k) },
        ConfigSetting(key: "max-pending") { c, v, k in c.maximumPendingConnections = try positive(v, key: k) },
        ConfigSetting(key: "max-pending-per-address") { c, v, k in c.maximumPendingPerAddress = try positive(v, key: k) },
        ConfigSetting(key: "handshake-timeout") { c, v, k in c.handshakeTimeoutSeconds = try seconds(v, key: k) },
        ConfigSetting(key: "idle-timeout") { c, v, k in c.idleTimeoutSeconds = try seconds(v, key: k) },
        ConfigSetting(key: "max-tunnels-per-client") { c, v, k in c.maximumTunnelsPerClient = try positive(v, key: k) },
        ConfigSetting(key: "max-tunnels-per-pair") { c, v, k in c.maximumTunnelsPerPair = try positive(v, key: k) },
        ConfigSetting(key: "tunnel-join-timeout") { c, v, k in c.tunnelJoinTimeoutSeconds = try seconds(v, key: k) },
        ConfigSetting(key: "client-rate") { c, v, k in c.clientBytesPerSecond = try bytes(v, key: k, zeroAllowed: true) },
        ConfigSetting(key: "tunnel-queue") { c, v, k in c.tunnelQueueBytes = try bytes(v, key: k) },
        ConfigSetting(key: "mailbox-items-per-recipient") { c, v, k in c.mailboxItemsPerRecipient = try positive(v, key: k) },
        ConfigSetting(key: "mailbox-bytes-per-recipient") { c, v, k in c.mailboxBytesPerRecipient = try bytes(v, key: k) },
        ConfigSetting(key: "mailbox-items-per-sender") { c, v, k in c.mailboxItemsPerSender = try positive(v, key: k) },
        ConfigSetting(key: "mailbox-total-items") { c, v, k in c.mailboxTotalItems = try positive(v, key: k) },
        ConfigSetting(key: "mailbox-total-bytes") { c, v, k in c.mailboxTotalBytes = try bytes(v, key: k) },
        ConfigSetting(key: "mailbox-item-bytes") { c, v, k in c.mailboxItemBytes = try bytes(v, key: k) },
        ConfigSetting(key: "mailbox-ttl") { c, v, k in c.mailboxTTLSeconds = try seconds(v, key: k) },
        ConfigSetting(key: "mailbox-bytes-per-sender") { c, v, k in c.mailboxBytesPerSender = try bytes(v, key: k) },
        ConfigSetting(key: "mailbox-bytes-per-address") { c, v, k in c.mailboxBytesPerAddress = try bytes(v, key: k) },
        ConfigSetting(key: "mailbox-item-charge") { c, v, k in c.mailboxItemCharge = try bytes(v, key: k) },
        ConfigSetting(key: "mailbox-queue") { c, v, k in c.mailboxQueueJobs = try positive(v, key: k) },
        ConfigSetting(key: "log-format") { c, v, k in
            guard let format = LogFormat(rawValue: v) else {
                throw ConfigProblem(message: "\(k) must be text or json, got '\(v)'")
            }
            c.logFormat = format
        },
        ConfigSetting(key: "log-level") { c, v, k in
            guard let level = Logger.Level(rawValue: v) else {
                let names = Logger.Level.allCases.map(\.rawValue).joined(separator: "|")
                throw ConfigProblem(message: "\(k) must be one of \(names), got '\(v)'")
            }
            c.logLevel = level.rawValue
        },
    ]

    /// A key within two edits of `key`, for "did you mean".
    private static func nearestKey(to key: String) -> String? {
        let scored = settings.map { ($0.key, editDistance(Array(key), Array($0.key))) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= 2 else { return nil }
        return best.0
    }
}

// MARK: - Values

private func nonEmpty(_ value: String, key: String) throws -> String {
    guard !value.isEmpty else { throw ConfigProblem(message: "\(key) needs a value") }
    return value
}

private func parseAddress(_ value: String, key: String, defaultHost: String) throws -> (String, Int) {
    let (host, port): (String, Int)
    do {
        (host, port) = try HostPort.parse(value, defaultHost: defaultHost)
    } catch let error as TandemError {
        throw ConfigProblem(message: "\(key): \(error.message)")
    }
    guard (1...65535).contains(port) else {
        throw ConfigProblem(message: "\(key) must be host:port with a port from 1 to 65535, got '\(value)'")
    }
    guard !host.isEmpty else { throw ConfigProblem(message: "\(key) has an empty host in '\(value)'") }
    return (host, port)
}

/// Only ASCII digits: `Int` alone would also take "+5".
private func digits(_ text: Substring) -> Int? {
    guard !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
    return Int(text)
}

private func positive(_ value: String, key: String) throws -> Int {
    guard let n = digits(Substring(value)), n > 0 else {
        throw ConfigProblem(message: "\(key) must be a positive number, got '\(value)'")
    }
    return n
}

/// Event-loop threads: 1 to `RelayConfiguration.maximumEventLoops`.
private func eventLoopCount(_ value: String, key: String) throws -> Int {
    guard let n = digits(Substring(value)), (1...RelayConfiguration.maximumEventLoops).contains(n) else {
        throw ConfigProblem(message: "\(key) must be between 1 and \(RelayConfiguration.maximumEventLoops), got '\(value)'")
    }
    return n
}

/// A byte count: digits with an optional k/K (KiB), m/M (MiB) or g/G (GiB) suffix.
private func bytes(_ value: String, key: String, zeroAllowed: Bool = false) throws -> Int {
    func bad() -> ConfigProblem {
        let what = zeroAllowed ? "a number of bytes (0 = unlimited)" : "a positive number of bytes"
        return ConfigProblem(message: "\(key) must be \(what) with an optional k, m or g suffix, got '\(value)'")
    }
    var number = Substring(value)
    var multiplier = 1
    switch number.last {
    case "k", "K": multiplier = 1 << 10
    case "m", "M": multiplier = 1 << 20
    case "g", "G": multiplier = 1 << 30
    default: break
    }
    if multiplier != 1 { number = number.dropLast() }
    guard let n = digits(number) else { throw bad() }
    let (total, overflow) = n.multipliedReportingOverflow(by: multiplier)
    guard !overflow else { throw ConfigProblem(message: "\(key) is too large: '\(value)'") }
    guard total > 0 || zeroAllowed else { throw bad() }
    return total
}

/// A positive whole number of seconds, written as a duration (`45s`, `30m`, `12h`, `7d`, `1h30m`)
/// or as plain seconds.
private func seconds(_ value: String, key: String) throws -> Int64 {
    let duration: Duration
    do {
        duration = try DurationText.parse(value)
    } catch let error as TandemError {
        throw ConfigProblem(message: "\(key): \(error.message)")
    }
    let (whole, fraction) = duration.components
    guard fraction == 0 else {
        throw ConfigProblem(message: "\(key) must be a whole number of seconds, got '\(value)'")
    }
    guard whole > 0 else { throw ConfigProblem(message: "\(key) must be longer than zero, got '\(value)'") }
    return whole
}

// MARK: - Lines

private func readConfigText(_ path: String) throws -> String {
    func cannot(_ why: String) -> TandemError {
        TandemError("cannot read config file \(path): \(why)", exitCode: TandemError.usageExitCode)
    }
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw cannot(String(cString: strerror(errno))) }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw cannot(String(cString: strerror(errno))) }
    guard (info.st_mode & S_IFMT) == S_IFREG else { throw cannot("not a regular file") }
    let limit = RelayConfiguration.maximumConfigFileBytes
    var data = [UInt8](repeating: 0, count: limit + 1)
    var filled = 0
    while filled < data.count {
        let n = data.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, $0.count - filled) }
        if n < 0, errno == EINTR { continue }
        guard n >= 0 else { throw cannot(String(cString: strerror(errno))) }
        if n == 0 { break }
        filled += n
    }
    guard filled <= limit else { throw cannot("larger than \(limit / 1024) KiB") }
    var content = data[..<filled]
    if content.starts(with: [0xEF, 0xBB, 0xBF]) { content = content.dropFirst(3) }
    guard let text = String(bytes: content, encoding: .utf8) else { throw cannot("not UTF-8 text") }
    return text
}

/// One line without its newline → nil for blank/comment lines, else the key and the unquoted value.
private func parseConfigLine(_ line: Substring) throws -> (key: String, value: String)? {
    let body = stripComment(line).trimmingCharacters(in: .whitespacesAndNewlines)
    if body.isEmpty { return nil }
    guard let equals = body.firstIndex(of: "=") else {
        throw ConfigProblem(message: "expected 'key = value', got '\(body)'")
    }
    let key = body[..<equals].trimmingCharacters(in: .whitespaces)
    guard !key.isEmpty else { throw ConfigProblem(message: "a key is missing before '='") }
    var value = body[body.index(after: equals)...].trimmingCharacters(in: .whitespaces)
    if value.hasPrefix("\"") {
        value = try unquote(value, key: key)
    } else if value.contains("\"") {
        throw ConfigProblem(message: "\(key): a quote may only surround the whole value")
    }
    return (key, value)
}

/// Cuts the line at the first `#` that starts it or follows whitespace, outside double quotes.
private func stripComment(_ line: Substring) -> Substring {
    var inQuotes = false
    var escaped = false
    var previous: Character? = nil
    for index in line.indices {
        let c = line[index]
        defer { previous = c }
        if inQuotes {
            if escaped { escaped = false } else if c == "\\" { escaped = true } else if c == "\"" { inQuotes = false }
            continue
        }
        if c == "\"" { inQuotes = true }
        if c == "#", previous == nil || previous!.isWhitespace { return line[..<index] }
    }
    return line
}

/// `"…"` with `\"` and `\\` escapes; nothing may follow the closing quote.
private func unquote(_ text: String, key: String) throws -> String {
    var out = ""
    var escaped = false
    var rest = text.dropFirst()
    while let c = rest.first {
        rest = rest.dropFirst()
        if escaped {
            guard c == "\"" || c == "\\" else {
                throw ConfigProblem(message: "\(key): unknown escape '\\\(c)' in a quoted value (only \\\" and \\\\)")
            }
            out.append(c)
            escaped = false
        } else if c == "\\" {
            escaped = true
        } else if c == "\"" {
            guard rest.allSatisfy(\.isWhitespace) else {
                throw ConfigProblem(message: "\(key): unexpected text after the closing quote")
            }
            return out
        } else {
            out.append(c)
        }
    }
    throw ConfigProblem(message: "\(key): the quoted value has no closing quote")
}

private func editDistance(_ a: [Character], _ b: [Character]) -> Int {
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var row = Array(0...b.count)
    for i in 1...a.count {
        var next = [i] + Array(repeating: 0, count: b.count)
        for j in 1...b.count {
            next[j] = min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        row = next
    }
    return row[b.count]
}
