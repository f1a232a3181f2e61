/// DNS for a locked mode's sites (README "Focus modes"): a hosts file cannot hold a wildcard, so
/// `m.news.example` would slip past a block of `news.example`. The node's small resolver answers
/// every name at or under a blocked site itself (0.0.0.0 / ::, NXDOMAIN for other record types)
/// and forwards the rest. This file is the pure part: reading a query a client sent (hostile
/// input: bounded, no compression, exactly one question) and writing the blocked answer.

/// One DNS query, as a stub resolver sends it (RFC 1035 4.1).
public struct DNSQuery: Sendable, Equatable {
    public static let typeA: UInt16 = 1
    public static let typeAAAA: UInt16 = 28
    /// Largest query read (a stub's query is tens of bytes; EDNS adds an 11-byte OPT record).
    public static let maximumBytes = 512

    public let id: UInt16
    /// Recursion desired, copied into the answer.
    public let recursionDesired: Bool
    /// The name's labels, lower-cased ASCII.
    public let labels: [String]
    public let type: UInt16
    public let qclass: UInt16
    /// The question section as sent (copied into the answer).
    public let question: [UInt8]

    public struct Invalid: Error, Equatable, Sendable { public let reason: String }

    public init(packet: [UInt8]) throws {
        guard packet.count >= 12, packet.count <= Self.maximumBytes else { throw Invalid(reason: "size") }
        func u16(_ i: Int) -> UInt16 { UInt16(packet[i]) << 8 | UInt16(packet[i + 1]) }
        let flags = u16(2)
        guard flags & 0x8000 == 0 else { throw Invalid(reason: "a response, not a query") }
        guard (flags >> 11) & 0xF == 0 else { throw Invalid(reason: "not a standard query") }
        guard u16(4) == 1, u16(6) == 0, u16(8) == 0, u16(10) <= 1 else { throw Invalid(reason: "not one question") }
        var i = 12
        var labels: [String] = []
        var nameBytes = 0
        while true {
            guard i < packet.count else { throw Invalid(reason: "truncated name") }
            let length = Int(packet[i])
            i += 1
            if length == 0 { break }
            guard length <= 63 else { throw Invalid(reason: "a compressed or oversized label") }
            guard i + length <= packet.count else { throw Invalid(reason: "truncated label") }
            nameBytes += length + 1
            guard nameBytes <= 255, labels.count < 127 else { throw Invalid(reason: "name too long") }
            var label = Array(packet[i..<(i + length)])
            for k in label.indices where label[k] >= 65 && label[k] <= 90 { label[k] += 32 }
            labels.append(String(decoding: label, as: UTF8.self))
            i += length
        }
        guard i + 4 <= packet.count else { throw Invalid(reason: "truncated question") }
        id = u16(0)
        recursionDesired = flags & 0x0100 != 0
        self.labels = labels
        type = u16(i)
        qclass = u16(i + 2)
        question = Array(packet[12..<(i + 4)])
    }

    /// The answer for a blocked name: A → 0.0.0.0, AAAA → ::, TTL 60 s (a lock can end soon);
    /// any other type NXDOMAIN. The question is echoed; no additional records.
    public func blockedAnswer() -> [UInt8] {
        let address: [UInt8]? = qclass == 1 && type == Self.typeA ? [0, 0, 0, 0]
            : qclass == 1 && type == Self.typeAAAA ? [UInt8](repeating: 0, count: 16) : nil
        var out: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xFF)]
        // QR, AA, RD as asked, RA; rcode 0 (NOERROR) with the answer, else 3 (NXDOMAIN).
        out.append(0x84 | (recursionDesired ? 0x01 : 0))
        out.append(0x80 | (address == nil ? 3 : 0))
        out += [0, 1, 0, address == nil ? 0 : 1, 0, 0, 0, 0]
        out += question
        if let address {
            out += [0xC0, 0x0C]  // the question's name
            out += [UInt8(type >> 8), UInt8(type & 0xFF), 0, 1, 0, 0, 0, 60, 0, UInt8(address.count)]
            out += address
        }
        return out
    }
}

/// The zones a locked mode blocks at DNS: each blocked site and every name under it.
public struct DNSBlockList: Sendable, Equatable {
    /// Each zone as its labels reversed (`news.example` → ["example", "news"]).
    private let zones: Set<[String]>

    public static let empty = DNSBlockList(sites: [])

    public init(sites: [String]) {
        var zones = Set<[String]>()
        for site in sites.prefix(HostsBlock.maxDomains) {
            guard var name = HostsBlock.normalizedDomain(site) else { continue }
            if name.hasPrefix("www.") { name.removeFirst(4) }  // www.news.example blocks news.example's names too
            zones.insert(name.split(separator: ".").reversed().map(String.init))
        }
        self.zones = zones
    }

    public var isEmpty: Bool { zones.isEmpty }

    /// Whether `labels` (a query's name) is a blocked zone or under one.
    public func blocks(_ labels: [String]) -> Bool {
        guard !zones.isEmpty, !labels.isEmpty else { return false }
        var suffix: [String] = []
        for label in labels.reversed() {
            suffix.append(label)
            if zones.contains(suffix) { return true }
        }
        return false
    }
}
