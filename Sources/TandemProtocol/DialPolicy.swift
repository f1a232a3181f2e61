import Foundation

/// What kind of network an IP address belongs to. A node dials loopback, link-local and private
/// addresses only when it learnt them itself, or from a peer in that same kind of network
/// (Protocol/README.md 12.8, "Dialling policy").
public enum AddressScope: String, Sendable, Equatable {
    case loopback
    case linkLocal = "link-local"
    case privateNetwork = "private"
    /// Unspecified, multicast, broadcast, reserved: never dialled when claimed.
    case unusable
    case global
    /// Not an IP literal (a DNS name): its scope is known only once resolved.
    case name

    /// The scope of a host string: an IPv4 or IPv6 literal (brackets allowed), else `.name`.
    public init(host: String) {
        var h = host
        if h.hasPrefix("["), h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        if let zone = h.firstIndex(of: "%") { h = String(h[..<zone]) }
        if let v4 = Self.ipv4(h) {
            self = Self.scope(v4: v4)
        } else if let v6 = Self.ipv6(h) {
            self = Self.scope(v6: v6)
        } else {
            self = .name
        }
    }

    static func ipv4(_ s: String) -> [UInt8]? {
        var a = in_addr()
        guard inet_pton(AF_INET, s, &a) == 1 else { return nil }
        return withUnsafeBytes(of: &a) { Array($0) }
    }

    static func ipv6(_ s: String) -> [UInt8]? {
        var a = in6_addr()
        guard inet_pton(AF_INET6, s, &a) == 1 else { return nil }
        return withUnsafeBytes(of: &a) { Array($0) }
    }

    static func scope(v4 b: [UInt8]) -> AddressScope {
        switch (b[0], b[1]) {
        case (127, _): return .loopback
        case (169, 254): return .linkLocal
        case (10, _), (192, 168): return .privateNetwork
        case (172, 16...31): return .privateNetwork
        case (100, 64...127): return .privateNetwork          // carrier-grade NAT
        case (0, _), (224...255, _): return .unusable          // this network, multicast, reserved, broadcast
        default: return .global
        }
    }

    static func scope(v6 b: [UInt8]) -> AddressScope {
        if b[0..<10].allSatisfy({ $0 == 0 }), b[10] == 0xff, b[11] == 0xff { return scope(v4: Array(b[12..<16])) }  // v4-mapped
        if b[0..<15].allSatisfy({ $0 == 0 }) { return b[15] == 1 ? .loopback : .unusable }                      // ::1, ::
        if b[0] == 0xfe, b[1] & 0xc0 == 0x80 { return .linkLocal }                                               // fe80::/10
        if b[0] & 0xfe == 0xfc { return .privateNetwork }                                                         // fc00::/7
        if b[0] == 0xff { return .unusable }                                                                     // multicast
        return .global
    }
}

/// Where a known address came from, in the order the node trusts (and dials) them.
public enum AddressSource: String, Sendable, CaseIterable {
    /// Typed by the user (`--address`, a share code).
    case manual
    /// A LAN beacon's source address with its announced port.
    case lan
    /// The IP address a peer's link came from, with the port its record announced.
    case observed
    /// A host named in a peer's record or an invite hint: the peer's word only.
    case claimed

    /// Rows written by older nodes: "record" paired the link's host with a port (observed) or
    /// carried a host of its own (claimed, the stricter reading); "hint" is claimed.
    public init(stored: String) {
        switch stored {
        case "manual": self = .manual
        case "lan": self = .lan
        case "observed": self = .observed
        default: self = .claimed
        }
    }
}

/// The dialling policy, pure: which addresses a peer's claims may add, and in which order the
/// node tries what it knows. A peer never makes the node probe hosts of its choosing in an order of
/// its choosing: claimed addresses in special-purpose ranges are refused unless the claimer itself
/// is in that kind of network, at most `maximumClaimed` are tried per round, in random order,
/// after everything the node learnt itself.
public struct DialPolicy: Sendable {
    public static let maximumAttempts = 4
    public static let maximumClaimed = 2

    public init() {}

    /// Whether a peer (seen at `claimerHost`, or nil through a relay or mail) may make us remember
    /// `host` as one of its addresses.
    public static func mayRemember(claimed host: String, port: Int, claimerHost: String?) -> Bool {
        guard (1...65_535).contains(port) else { return false }
        let scope = AddressScope(host: host)
        switch scope {
        case .global, .name: return true
        case .unusable: return false
        case .loopback, .linkLocal, .privateNetwork:
            guard let claimerHost else { return false }
            return AddressScope(host: claimerHost) == scope
        }
    }

    /// Whether a LAN beacon's source may be dialled: beacons travel one broadcast domain, so their
    /// source is loopback, link-local or private; a "global" source is spoofed or routed oddly.
    public static func mayDialSighting(host: String) -> Bool {
        switch AddressScope(host: host) {
        case .loopback, .linkLocal, .privateNetwork: return true
        case .global, .name, .unusable: return false
        }
    }

    public struct Candidate: Equatable, Sendable {
        public let host: String
        public let port: Int
        public let source: AddressSource
        public init(host: String, port: Int, source: AddressSource) {
            self.host = host
            self.port = port
            self.source = source
        }
    }

    /// What to try this round, in order: by source (manual, lan, observed, claimed), newest first
    /// within a source as given, claimed ones shuffled and at most `maximumClaimed`; duplicates
    /// and unusable ports dropped; at most `maximumAttempts`.
    public static func order(_ known: [Candidate], shuffle: ([Candidate]) -> [Candidate] = { $0.shuffled() }) -> [Candidate] {
        var seen = Set<String>()
        var out: [Candidate] = []
        for source in AddressSource.allCases {
            var group = known.filter { $0.source == source && (1...65_535).contains($0.port) }
            if source == .claimed { group = Array(shuffle(group).prefix(maximumClaimed)) }
            for c in group where seen.insert("\(c.host)|\(c.port)").inserted {
                out.append(c)
            }
        }
        return Array(out.prefix(maximumAttempts))
    }
}
