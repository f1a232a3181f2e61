/// Protocol-wide constants (Protocol/README.md).
public enum TandemConstants {
    /// The Tandem network key: BLAKE2b-256 of ASCII "tandem/network-key/v1". It parameterises
    /// the Secret Handshake so that Tandem nodes never complete a handshake with nodes of
    /// another network (Scuttlebutt, for example) by accident.
    public static let networkKey: [UInt8] = hex("0e5f8f965a1761ad80733eb15517806bf8a33cb25304ebaced4db55145dca34d")

    /// Default TCP port of a node's listener.
    public static let defaultPort = 7810
    /// UDP port reserved for LAN discovery beacons.
    public static let discoveryPort = 7811

    /// The envelope version this implementation speaks.
    public static let protocolVersion: UInt8 = 1
    public static let supportedVersions: [UInt32] = [1]

    /// Default and hard upper limit of an envelope's length (1 MiB).
    public static let maximumEnvelopeLength = 1 << 20
    /// A frame may be created at most this far in the receiver's future.
    public static let maximumClockSkewMilliseconds: UInt64 = 10 * 60 * 1000
    /// Message ids are remembered this long; older frames are rejected as stale.
    public static let replayWindowMilliseconds: UInt64 = 24 * 60 * 60 * 1000
    /// A handshake that has not finished in this many seconds is dropped.
    public static let handshakeTimeoutSeconds: Int64 = 10
}

/// Lowercase hex of bytes.
public func hexString<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
    // Contiguous bytes (arrays, Data, slices): written straight into the string's storage (a
    // byte-at-a-time loop cost 5,000 instructions for a 16-byte id; every event names one); any
    // other sequence is gathered into an array first.
    if let text = bytes.withContiguousStorageIfAvailable({ hexString(contiguous: $0) }) { return text }
    return Array(bytes).withUnsafeBufferPointer { hexString(contiguous: $0) }
}

private func hexString(contiguous bytes: UnsafeBufferPointer<UInt8>) -> String {
    let (count, overflow) = bytes.count.multipliedReportingOverflow(by: 2)
    precondition(!overflow, "too many bytes for a hex string")
    return String(unsafeUninitializedCapacity: count) { out in
        var i = 0
        for b in bytes {
            out[i] = hexDigit(b >> 4)
            out[i + 1] = hexDigit(b & 15)
            i += 2
        }
        return count
    }
}

@inline(__always) private func hexDigit(_ v: UInt8) -> UInt8 { v < 10 ? 48 + v : 87 + v }

/// Bytes of a hex string; traps on malformed input (for constants). Use `parseHex` for input.
public func hex(_ string: String) -> [UInt8] {
    guard let bytes = parseHex(string) else { preconditionFailure("malformed hex constant") }
    return bytes
}

/// Bytes of a hex string, nil if it is not hex.
public func parseHex(_ string: String) -> [UInt8]? {
    let chars = Array(string.utf8)
    guard chars.count % 2 == 0 else { return nil }
    func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
    var out: [UInt8] = []
    out.reserveCapacity(chars.count / 2)
    var i = 0
    while i < chars.count {
        guard let hi = nibble(chars[i]), let lo = nibble(chars[i + 1]) else { return nil }
        out.append(hi << 4 | lo)
        i += 2
    }
    return out
}
