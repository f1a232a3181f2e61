import Sodium

// LAN discovery beacons (Protocol/README.md, "LAN discovery"). Pure: bytes in, bytes out; the
// sockets live in TandemNode's DiscoveryService.

/// Constants of the beacon format.
public enum BeaconFormat {
    /// No beacon is longer than this; a longer datagram is dropped before it is parsed.
    public static let maximumLength = 512
    /// ASCII "TDMB".
    public static let magic: [UInt8] = [0x54, 0x44, 0x4D, 0x42]
    public static let version: UInt8 = 1

    /// What an open beacon's signature covers, before the beacon's bytes.
    public static let openSigningDomain: [UInt8] = Array("tandem-beacon-v1".utf8) + [0]
    /// Domain of the pairwise beacon key derivation.
    public static let keyDomain: [UInt8] = Array("tandem-beacon-key-v1".utf8) + [0]
    /// Domain of a private beacon's slot locator (its MAC).
    public static let locatorDomain: [UInt8] = Array("tandem-beacon-locator-v1".utf8) + [0]
    /// Domain of the pad that hides the TCP port in a private beacon slot.
    public static let portPadDomain: [UInt8] = Array("tandem-beacon-port-v1".utf8) + [0]

    /// Open beacons: a receiver accepts a created-at within this distance of its own clock.
    public static let openFreshnessMilliseconds: UInt64 = 5 * 60 * 1000
    /// Private beacons carry an epoch number: wall-clock milliseconds / this.
    public static let epochMilliseconds: UInt64 = 5 * 60 * 1000
    /// A receiver accepts epochs within this distance of its own.
    public static let epochTolerance: UInt32 = 1

    /// Bytes of a display name in an open beacon, at most.
    public static let maximumNameBytes = 64
    /// Private beacons have a multiple of this many slots…
    public static let slotGranularity = 8
    /// …and at most this many (the largest multiple of 8 that fits in 512 bytes).
    public static let maximumSlots = 24

    /// The epoch of a wall-clock instant.
    public static func epoch(atMilliseconds ms: UInt64) -> UInt32 {
        UInt32(truncatingIfNeeded: ms / epochMilliseconds)
    }
}

/// The kind byte of a beacon.
public enum BeaconKind: UInt8, Sendable, Equatable {
    /// Carries the sender's key and name, signed: anyone on the LAN can find the sender.
    case open = 1
    /// Recognisable only by the sender's friends.
    case `private` = 2
}

/// Why a beacon could not be read or was refused.
public struct BeaconError: Error, CustomStringConvertible, Equatable, Sendable {
    private enum Reason: Equatable, Sendable {
        case oversized
        case malformed
        case badSignature
    }

    private let reason: Reason
    public let detail: String

    private init(_ reason: Reason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    public static func oversized(_ detail: String) -> BeaconError { BeaconError(.oversized, detail) }
    public static func malformed(_ detail: String) -> BeaconError { BeaconError(.malformed, detail) }
    public static func badSignature(_ detail: String) -> BeaconError { BeaconError(.badSignature, detail) }

    public var isOversized: Bool { reason == .oversized }
    public var isMalformed: Bool { reason == .malformed }
    public var isBadSignature: Bool { reason == .badSignature }

    /// The drop reason this error is counted under.
    public var dropReason: BeaconDropReason {
        switch reason {
        case .oversized: return .oversized
        case .malformed: return .malformed
        case .badSignature: return .badSignature
        }
    }

    public var description: String { detail }
}

/// Reads the common header: magic, version, kind. Throws for anything that is not a version-1
/// beacon of a known kind.
public func beaconKind(of bytes: [UInt8]) throws -> BeaconKind {
    guard bytes.count <= BeaconFormat.maximumLength else {
        throw BeaconError.oversized("\(bytes.count) bytes, more than \(BeaconFormat.maximumLength)")
    }
    guard bytes.count >= 6 else { throw BeaconError.malformed("\(bytes.count) bytes, shorter than a header") }
    guard Array(bytes[0..<4]) == BeaconFormat.magic else { throw BeaconError.malformed("no beacon magic") }
    guard bytes[4] == BeaconFormat.version else { throw BeaconError.malformed("beacon version \(bytes[4])") }
    guard let kind = BeaconKind(rawValue: bytes[5]) else { throw BeaconError.malformed("beacon kind \(bytes[5])") }
    return kind
}

// MARK: - Open beacon

/// A signed beacon that names its sender.
///
/// ```
/// 0    4   magic "TDMB"
/// 4    u8  version (1)
/// 5    u8  kind (1)
/// 6    32  Ed25519 public key
/// 38   u16 TCP port (1…65535)
/// 40   u64 created-at, ms since the Unix epoch
/// 48   8   random nonce
/// 56   u8  name length L (0…64)
/// 57   L   display name, UTF-8
/// 57+L 64  Ed25519 signature over "tandem-beacon-v1\0" ‖ bytes [0, 57+L)
/// ```
public struct OpenBeacon: Sendable, Equatable {
    public static let fixedLength = 57
    public static let nonceLength = 8
    public static let minimumLength = fixedLength + SigningKeyPair.signatureBytes
    public static let maximumLength = minimumLength + BeaconFormat.maximumNameBytes

    public let publicKey: [UInt8]
    public let tcpPort: UInt16
    public let createdAt: UInt64
    public let nonce: [UInt8]
    public let displayName: String
    public let signature: [UInt8]
    /// The beacon exactly as sent.
    public let bytes: [UInt8]

    /// Builds and signs an open beacon. `displayName` must be valid for a beacon (see
    /// `fittingName`); the port must not be 0.
    public static func make(identity: SigningKeyPair, tcpPort: UInt16, createdAt: UInt64,
                            nonce: [UInt8] = Sodium.randomBytes(nonceLength),
                            displayName: String) throws -> OpenBeacon {
        guard tcpPort != 0 else { throw BeaconError.malformed("TCP port 0") }
        guard nonce.count == nonceLength else { throw BeaconError.malformed("nonce must be \(nonceLength) bytes") }
        let name = Array(displayName.utf8)
        guard name.count <= BeaconFormat.maximumNameBytes, Self.isAcceptableName(name) else {
            throw BeaconError.malformed("display name is longer than 64 bytes or has control characters")
        }
        var bytes = BeaconFormat.magic
        bytes.reserveCapacity(minimumLength + name.count)
        bytes.append(BeaconFormat.version)
        bytes.append(BeaconKind.open.rawValue)
        bytes.append(contentsOf: identity.publicKey)
        appendBigEndian(&bytes, tcpPort)
        appendBigEndian(&bytes, createdAt)
        bytes.append(contentsOf: nonce)
        bytes.append(UInt8(name.count))
        bytes.append(contentsOf: name)
        let signature = identity.sign(BeaconFormat.openSigningDomain + bytes)
        bytes.append(contentsOf: signature)
        return OpenBeacon(publicKey: identity.publicKey, tcpPort: tcpPort, createdAt: createdAt, nonce: nonce,
                          displayName: displayName, signature: signature, bytes: bytes)
    }

    private init(publicKey: [UInt8], tcpPort: UInt16, createdAt: UInt64, nonce: [UInt8], displayName: String,
                 signature: [UInt8], bytes: [UInt8]) {
        self.publicKey = publicKey
        self.tcpPort = tcpPort
        self.createdAt = createdAt
        self.nonce = nonce
        self.displayName = displayName
        self.signature = signature
        self.bytes = bytes
    }

    /// Reads the layout (no signature check: see `verifySignature`).
    public static func parse(_ bytes: [UInt8]) throws -> OpenBeacon {
        let kind = try beaconKind(of: bytes)
        guard kind == .open else { throw BeaconError.malformed("not an open beacon") }
        guard bytes.count >= minimumLength else {
            throw BeaconError.malformed("open beacon of \(bytes.count) bytes, shorter than \(minimumLength)")
        }
        let nameLength = Int(bytes[56])
        guard nameLength <= BeaconFormat.maximumNameBytes else {
            throw BeaconError.malformed("name length \(nameLength) above \(BeaconFormat.maximumNameBytes)")
        }
        guard bytes.count == minimumLength + nameLength else {
            throw BeaconError.malformed("open beacon of \(bytes.count) bytes, name length says \(minimumLength + nameLength)")
        }
        let port = readBigEndian(bytes, at: 38, as: UInt16.self)
        guard port != 0 else { throw BeaconError.malformed("TCP port 0") }
        let nameBytes = Array(bytes[57..<(57 + nameLength)])
        guard isAcceptableName(nameBytes), let name = String(validating: nameBytes, as: UTF8.self) else {
            throw BeaconError.malformed("display name is not valid UTF-8 text")
        }
        return OpenBeacon(publicKey: Array(bytes[6..<38]), tcpPort: port,
                          createdAt: readBigEndian(bytes, at: 40, as: UInt64.self),
                          nonce: Array(bytes[48..<56]), displayName: name,
                          signature: Array(bytes[(57 + nameLength)...]), bytes: bytes)
    }

    /// Whether the signature verifies under the beacon's own key.
    public func verifySignature() -> Bool {
        let signed = BeaconFormat.openSigningDomain + bytes[0..<(bytes.count - SigningKeyPair.signatureBytes)]
        return Ed25519.verify(signature: signature, message: signed, publicKey: publicKey)
    }

    /// Valid UTF-8 without C0 controls or DEL.
    static func isAcceptableName(_ name: [UInt8]) -> Bool {
        guard String(validating: name, as: UTF8.self) != nil else { return false }
        return !name.contains { $0 < 0x20 || $0 == 0x7F }
    }

    /// `name` cut to at most 64 bytes of UTF-8 at a character boundary, control characters removed.
    public static func fittingName(_ name: String) -> String {
        var out = ""
        var used = 0
        for ch in name {
            if ch.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) { continue }
            let n = ch.utf8.count
            guard used + n <= BeaconFormat.maximumNameBytes else { break }
            out.append(ch)
            used += n
        }
        return out
    }
}

// MARK: - Pairwise keys

/// The keys a node shares with each of its friends for private beacons.
///
/// For two nodes S and R with Ed25519 keys, `k(S→R) = BLAKE2b-256(key: X25519(curve(S_sk), curve(R_pk)),
/// "tandem-beacon-key-v1\0" ‖ S_pk ‖ R_pk)`. Both compute the same DH secret; the order of the
/// public keys makes the key one-directional, so a beacon S made for R does not read as R's beacon
/// to S.
public struct BeaconKeyring: Sendable {
    public struct Friend: Sendable {
        public let publicKey: [UInt8]
        /// k(me→friend): what my beacons are made with.
        let sendKey: SecretBytes
        /// k(friend→me): what the friend's beacons are made with.
        let receiveKey: SecretBytes
    }

    public let ownPublicKey: [UInt8]
    public let friends: [Friend]
    /// Friend keys that could not be used (not 32 bytes, not a curve point, low order, or my own).
    public let rejected: [[UInt8]]

    public init(identity: SigningKeyPair, friends friendKeys: [[UInt8]]) {
        ownPublicKey = identity.publicKey
        var friends: [Friend] = []
        var rejected: [[UInt8]] = []
        var seen = Set<[UInt8]>()
        let mine = try? identity.curve25519()
        for key in friendKeys {
            guard seen.insert(key).inserted else { continue }
            guard key != identity.publicKey, let mine,
                  let shared = try? Self.sharedSecret(mine.secretKey, friend: key) else {
                rejected.append(key)
                continue
            }
            friends.append(Friend(
                publicKey: key,
                sendKey: Self.pairwiseKey(shared: shared, sender: identity.publicKey, receiver: key),
                receiveKey: Self.pairwiseKey(shared: shared, sender: key, receiver: identity.publicKey)))
        }
        self.friends = friends
        self.rejected = rejected
    }

    static func sharedSecret(_ secretKey: SecretBytes, friend: [UInt8]) throws -> SecretBytes {
        let curve = try Ed25519.publicKeyToCurve25519(friend)
        return try X25519.sharedSecret(secretKey: secretKey, publicKey: curve)
    }

    /// k(sender→receiver) from the static DH secret of the two.
    public static func pairwiseKey(shared: SecretBytes, sender: [UInt8], receiver: [UInt8]) -> SecretBytes {
        var key = Hash.blake2b(BeaconFormat.keyDomain + sender + receiver, outputLength: 32, key: shared.exposedCopy)
        return SecretBytes(consuming: &key)
    }

    /// The friend (by public key) who made `beacon` for me, and the TCP port it carries; nil when
    /// none of my friends did. Cost: one BLAKE2b per friend, one more for the match.
    public func recognise(_ beacon: PrivateBeacon) -> (publicKey: [UInt8], tcpPort: UInt16)? {
        var slotByLocator: [[UInt8]: Int] = [:]
        for (i, slot) in beacon.slots.enumerated() where slotByLocator[slot.locator] == nil {
            slotByLocator[slot.locator] = i
        }
        let covered = beacon.locatorInput
        for friend in friends {
            let locator = PrivateBeacon.locator(key: friend.receiveKey, covered: covered)
            guard let index = slotByLocator[locator],
                  Sodium.constantTimeEqual(locator, beacon.slots[index].locator) else { continue }
            let pad = PrivateBeacon.portPad(key: friend.receiveKey, header: beacon.header)
            let port = beacon.slots[index].encryptedPort ^ pad
            return (friend.publicKey, port)
        }
        return nil
    }
}

// MARK: - Private beacon

/// A beacon only the sender's friends can recognise.
///
/// ```
/// 0       4    magic "TDMB"
/// 4       u8   version (1)
/// 5       u8   kind (2)
/// 6       u32  epoch: wall-clock ms / 300 000
/// 10      16   random nonce
/// 26      u8   n, the number of slots: 8, 16 or 24
/// 27      2n   n encrypted ports, u16 each
/// 27+2n   16n  n locators, 16 bytes each
/// ```
/// Slot i is (encrypted port i, locator i). For friend R, with k = k(me→R):
/// `locator = BLAKE2b-128(key: k, "tandem-beacon-locator-v1\0" ‖ bytes [0, 27+2n))` and
/// `encrypted port = port ⊕ BLAKE2b-128(key: k, "tandem-beacon-port-v1\0" ‖ bytes [0, 27))[0..2)`.
/// Unused slots hold random bytes; slots are in random order.
public struct PrivateBeacon: Sendable, Equatable {
    public static let headerLength = 27
    public static let nonceLength = 16
    public static let locatorLength = 16
    public static let slotLength = 2 + locatorLength

    public struct Slot: Sendable, Equatable {
        public let encryptedPort: UInt16
        public let locator: [UInt8]
    }

    public let epoch: UInt32
    public let nonce: [UInt8]
    public let slots: [Slot]
    public let bytes: [UInt8]

    /// Bytes [0, 27).
    var header: ArraySlice<UInt8> { bytes[0..<Self.headerLength] }
    /// Bytes [0, 27+2n): what every locator covers.
    var locatorInput: ArraySlice<UInt8> { bytes[0..<(Self.headerLength + 2 * slots.count)] }

    /// The number of slots a beacon for `friendCount` friends has (the next multiple of 8).
    public static func slotCount(forFriends friendCount: Int) -> Int {
        precondition((1...BeaconFormat.maximumSlots).contains(friendCount))
        let g = BeaconFormat.slotGranularity
        return (friendCount + g - 1) / g * g
    }

    /// Beacons announcing me to all friends in `keyring`: one per 24 friends (none without friends).
    public static func makeAll(keyring: BeaconKeyring, tcpPort: UInt16, epoch: UInt32) -> [PrivateBeacon] {
        var out: [PrivateBeacon] = []
        var start = 0
        let friends = keyring.friends
        while start < friends.count {
            let end = min(start + BeaconFormat.maximumSlots, friends.count)
            out.append(make(for: Array(friends[start..<end]), tcpPort: tcpPort, epoch: epoch))
            start = end
        }
        return out
    }

    /// One beacon for 1…24 friends, with a fresh random nonce and slot order.
    public static func make(for friends: [BeaconKeyring.Friend], tcpPort: UInt16, epoch: UInt32,
                            nonce: [UInt8] = Sodium.randomBytes(nonceLength)) -> PrivateBeacon {
        precondition(nonce.count == nonceLength && tcpPort != 0)
        let n = slotCount(forFriends: friends.count)
        var header = BeaconFormat.magic
        header.append(BeaconFormat.version)
        header.append(BeaconKind.private.rawValue)
        appendBigEndian(&header, epoch)
        header.append(contentsOf: nonce)
        header.append(UInt8(n))

        // Which slot each friend gets: a uniformly random permutation (libsodium's CSPRNG).
        var order = Array(0..<n)
        var rng = SodiumRandom()
        order.shuffle(using: &rng)
        var owner = [Int?](repeating: nil, count: n)
        for (f, _) in friends.enumerated() { owner[order[f]] = f }

        var ports: [UInt8] = []
        ports.reserveCapacity(2 * n)
        for slot in 0..<n {
            if let f = owner[slot] {
                appendBigEndian(&ports, tcpPort ^ portPad(key: friends[f].sendKey, header: header[...]))
            } else {
                ports.append(contentsOf: Sodium.randomBytes(2))
            }
        }
        let covered = header + ports
        var bytes = covered
        bytes.reserveCapacity(headerLength + slotLength * n)
        for slot in 0..<n {
            if let f = owner[slot] {
                bytes.append(contentsOf: locator(key: friends[f].sendKey, covered: covered[...]))
            } else {
                bytes.append(contentsOf: Sodium.randomBytes(locatorLength))
            }
        }
        // Reading back the bytes just written cannot fail.
        return try! parse(bytes)
    }

    private init(epoch: UInt32, nonce: [UInt8], slots: [Slot], bytes: [UInt8]) {
        self.epoch = epoch
        self.nonce = nonce
        self.slots = slots
        self.bytes = bytes
    }

    /// Reads the layout. Whether any friend made it is `BeaconKeyring.recognise`.
    public static func parse(_ bytes: [UInt8]) throws -> PrivateBeacon {
        let kind = try beaconKind(of: bytes)
        guard kind == .private else { throw BeaconError.malformed("not a private beacon") }
        guard bytes.count >= headerLength else {
            throw BeaconError.malformed("private beacon of \(bytes.count) bytes, shorter than its header")
        }
        let n = Int(bytes[26])
        guard n > 0, n <= BeaconFormat.maximumSlots, n % BeaconFormat.slotGranularity == 0 else {
            throw BeaconError.malformed("slot count \(n) is not 8, 16 or 24")
        }
        guard bytes.count == headerLength + slotLength * n else {
            throw BeaconError.malformed("private beacon of \(bytes.count) bytes, \(n) slots need \(headerLength + slotLength * n)")
        }
        let locators = headerLength + 2 * n
        var slots: [Slot] = []
        slots.reserveCapacity(n)
        for i in 0..<n {
            let start = locators + locatorLength * i
            slots.append(Slot(encryptedPort: readBigEndian(bytes, at: headerLength + 2 * i, as: UInt16.self),
                              locator: Array(bytes[start..<(start + locatorLength)])))
        }
        return PrivateBeacon(epoch: readBigEndian(bytes, at: 6, as: UInt32.self), nonce: Array(bytes[10..<26]),
                             slots: slots, bytes: bytes)
    }

    static func locator(key: SecretBytes, covered: ArraySlice<UInt8>) -> [UInt8] {
        Hash.blake2b(BeaconFormat.locatorDomain + covered, outputLength: locatorLength, key: key.exposedCopy)
    }

    static func portPad(key: SecretBytes, header: ArraySlice<UInt8>) -> UInt16 {
        let pad = Hash.blake2b(BeaconFormat.portPadDomain + header, outputLength: 16, key: key.exposedCopy)
        return UInt16(pad[0]) << 8 | UInt16(pad[1])
    }
}

/// libsodium's CSPRNG as a `RandomNumberGenerator`.
struct SodiumRandom: RandomNumberGenerator {
    mutating func next() -> UInt64 { Sodium.randomUInt64() }
}
