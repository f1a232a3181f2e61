import Foundation
import Logging
import Sodium
import SwiftProtobuf
import TandemNet
import TandemProtocol
import TandemStore
import TandemVault
import TandemNodeCore

/// The recovery kit (Protocol/backup.md section 7): building it from the node's files and store,
/// sealing it under the key derived from the recovery code, and, on a fresh machine, validating an
/// opened kit and writing a data directory from it.
///
/// **The kit key file, `<data-dir>/backup-kit`** (64 bytes, 0600): kit key ‖ locator, both derived
/// from the recovery code (`RecoveryKitSeal.kitKey/locator`). The node needs them to re-seal its kit
/// whenever a friend, a relay or the ledger changes, and that happens while the vault is locked, when
/// the code itself is sealed inside the vault (`<vault>/recovery`). Keeping the derived key beside the
/// identity reveals nothing new: the data dir already holds the identity seed (in clear, or under its
/// own passphrase) and the keys file, and whoever reads the data dir has everything the kit holds
/// except the vault's master key, which the kit does not carry either (see `vault_master_key` below).
/// The code cannot be computed back from the derived key (BLAKE2b is one-way), so it stays wrapped.
/// The file is written when the clear code exists (`<data-dir>/recovery-code`, before `vault init`),
/// at `vault init` before the clear code is removed, and at an unlock of the real vault when it is
/// missing (a node made before this file existed).
public enum RecoveryKit {
    public static let keyFileName = RecoveryKitKeyFile.fileName
    /// Where each friend was last reached: the kit keeps this many addresses per friend at most.
    public static let maximumAddressesPerFriend = 4

    /// A friend's address in a kit: a host (an IP address or a name) and a port.
    enum KitAddress {
        static func isValid(host: String, port: Int) -> Bool {
            guard (1...65_535).contains(port), (1...253).contains(host.utf8.count) else { return false }
            return host.utf8.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x2D || b == 0x3A || b == 0x5F
            }
        }
    }

    /// The kit key and locator a node keeps (shared with the vault, which writes it: the core's
    /// `RecoveryKitKeyFile`).
    public typealias KeyFile = RecoveryKitKeyFile

    // MARK: - Building and sealing

    public struct SealedKit: Sendable, Equatable {
        public let locator: KitLocator
        /// nonce ‖ AEAD, 41 … 262 144 bytes: BACKUP_KIT_PUT's `sealed_kit`.
        public let sealed: [UInt8]
        /// BLAKE2b-256 of the plaintext encoded with `created_at_ms` = 0: equal digests mean the
        /// same kit, so a push can tell whether it changed since a holder's last put.
        public let digest: [UInt8]
        /// Ledger entries (the newest) left out because the kit would pass 256 KiB.
        public let ledgerEntriesLeftOut: Int
    }

    /// The node's kit sealed under its kit key, or nil when the node has no kit key yet.
    ///
    /// `generation` gives the kit's generation for its digest (the node's counter: the same for an
    /// unchanged kit, the next one otherwise; backup.md 7); without it the kit carries generation 0.
    /// The plaintext is padded with zero bytes to its size class (`sizeClass`), so a holder sees
    /// only which class a kit falls in, not how many friends or ledger entries it gained.
    public static func sealedKit(identity: SigningKeyPair, store: NodeStore, dataDirectory: DataDirectory, nowMs: UInt64,
                                 generation: (([UInt8]) throws -> UInt64)? = nil) throws -> SealedKit? {
        guard let key = try KeyFile.fromDataDirectory(dataDirectory.url) else { return nil }
        var contents = try contents(identity: identity, store: store, dataDirectory: dataDirectory.url)
        contents.createdAtMs = 0
        contents.generation = 0
        var leftOut = 0
        var plain: [UInt8] = try contents.serializedBytes()
        // A ledger too long for one kit keeps its oldest entries (a prefix of the chain still verifies).
        let budget = RecoveryKitSeal.maximumPlaintextBytes - 16
        while plain.count > budget, !contents.ledgerEntries.isEmpty {
            let excess = plain.count - budget
            var drop = 0, freed = 0
            while freed < excess, drop < contents.ledgerEntries.count {
                freed += contents.ledgerEntries[contents.ledgerEntries.count - 1 - drop].count + 4
                drop += 1
            }
            contents.ledgerEntries.removeLast(drop)
            leftOut += drop
            plain = try contents.serializedBytes()
        }
        guard plain.count <= budget else {
            throw NodeError.failed("the recovery kit would hold \(plain.count) bytes, more than \(budget)")
        }
        let digest = Hash.blake2b(plain, outputLength: 32)
        contents.createdAtMs = nowMs
        contents.generation = try generation?(digest) ?? 0
        plain = try contents.serializedBytes()
        if let pad = padding(for: plain.count, limit: budget) {
            contents.padding = Data(count: pad)
            plain = try contents.serializedBytes()
        }
        defer { Sodium.wipe(&plain) }
        let sealed = try RecoveryKitSeal.seal(plain, kitKey: key.kitKey, locator: key.locator,
                                              nonce: Sodium.randomBytes(RecoveryKitSeal.nonceBytes))
        return SealedKit(locator: key.locator, sealed: sealed, digest: digest, ledgerEntriesLeftOut: leftOut)
    }

    /// The size classes of a kit's plaintext (backup.md 7, "What a holder sees"): 4 KiB, then
    /// doubling, the last one the largest plaintext a kit may have.
    static func sizeClass(_ n: Int, limit: Int) -> Int {
        var c = 4_096
        while c < n + 3, c < limit { c *= 2 }
        return min(c, limit)
    }

    /// The length of a `padding` field (tag 11: one byte, then a varint length, then at least one
    /// byte: proto3 does not encode an empty one) that brings an encoding of `n` bytes to exactly
    /// `target`; nil when none does.
    static func paddingLength(from n: Int, to target: Int) -> Int? {
        for lengthBytes in 1...3 {
            let p = target - n - 1 - lengthBytes
            guard p >= 1 else { continue }
            let needed = p < 128 ? 1 : p < 16_384 ? 2 : 3
            if needed == lengthBytes { return p }
        }
        return nil
    }

    /// The padding for a plaintext of `n` bytes: to its size class, or the next one when the
    /// class cannot be met exactly (a varint boundary); nil at the largest class when neither fits.
    static func padding(for n: Int, limit: Int) -> Int? {
        var target = sizeClass(n, limit: limit)
        while target <= limit {
            if let p = paddingLength(from: n, to: target) { return p }
            guard target < limit else { return nil }
            target = min(target * 2, limit)
        }
        return nil
    }

    /// What a push puts at holders (BackupService's kit provider): the kit sealed now, with the
    /// node's kit generation for its contents, or nil without a kit key.
    package static let provider: BackupService.KitProvider = { identity, store, dataDirectory in
        let nowMs = min(wallClockMilliseconds(), BackupLimits.maximumVersion)
        return try sealedKit(identity: identity, store: store, dataDirectory: dataDirectory, nowMs: nowMs, generation: { digest in
            UInt64(try store.step { step in try step.backupGeneration("kit", digest: digest, nowMs: Int64(nowMs)) }.generation)
        }).map { OutgoingKit(locator: $0.locator, sealed: $0.sealed, digest: $0.digest) }
    }

    /// What the kit holds, from the node's files and store.
    ///
    /// `vault_master_key` is left empty: the keys file's recovery slot opens with the recovery code,
    /// so a restorer derives slot A's master key itself (and B's through the link), and the node
    /// cannot read the master key while the vault is locked, which is when kits are re-sealed.
    ///
    /// `friend_contacts` carries each friend's contact record as the store keeps it: the canonical
    /// `ContactRecord` bytes (the signed envelope that carried it is not stored). The kit's AEAD
    /// under the code is what vouches for them.
    static func contents(identity: SigningKeyPair, store: NodeStore, dataDirectory: URL) throws -> Tandem_V1_RecoveryKitContents {
        var c = Tandem_V1_RecoveryKitContents()
        var seed = identity.seed()
        c.identitySeed = Data(seed)
        Sodium.wipe(&seed)
        let keys = dataDirectory.appendingPathComponent("vault").appendingPathComponent(VaultKeyFile.fileName)
        if let data = FileManager.default.contents(atPath: keys.path), VaultKeyFile.isKeysFileSize(data.count) {
            c.vaultKeysFile = data
        }
        for friend in try store.contacts([.friend]) {
            guard let record = friend.record, !record.isEmpty else { continue }
            c.friendContacts.append(record)
            // The most recent few, in a fixed order: the kit changes when the set does, not when a
            // friend is merely seen again.
            let recent = try store.addresses(Array(friend.publicKey)).prefix(maximumAddressesPerFriend)
            for a in recent.sorted(by: { ($0.host, $0.port) < ($1.host, $1.port) }) {
                guard KitAddress.isValid(host: a.host, port: a.port) else { continue }
                var k = Tandem_V1_RecoveryKitAddress()
                k.publicKey = friend.publicKey
                k.host = a.host
                k.port = UInt32(a.port)
                c.friendAddresses.append(k)
            }
        }
        c.displayName = try store.setting("display_name") ?? ""
        c.homeRelays = try store.relays().map { RelayAddress(id: NodeID(publicKey: $0.publicKey), host: $0.host, port: $0.port).description }
        c.ledgerEntries = try store.ledger().map { Data(KitLedgerEntry(row: $0).bytes) }
        return c
    }

    // MARK: - Opening and validating

    /// Why a kit is refused as a whole.
    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public let description: String
        init(_ d: String) { description = d }
    }

    /// A validated kit: what a restore writes.
    public struct Opened: Sendable {
        public let identity: SigningKeyPair
        public let keysFile: [UInt8]?
        public let friends: [RestoredFriend]
        public let homeRelays: [RelayAddress]
        public let ledger: [RestoredLedgerEntry]
        /// The node's display name ("" when it had none, or when the kit's was not valid).
        public let displayName: String
        public let createdAtMs: UInt64
        /// The owner's kit generation (backup.md 7): higher is newer; 0 in kits from before it.
        public var generation: UInt64 = 0
        /// Entries skipped, one line each (never fatal).
        public let skipped: [String]
    }

    /// Opens `sealed` with the code's key and validates it; `owner` is the key the holder named.
    public static func open(_ sealed: [UInt8], code: RecoveryCode, owner: [UInt8]?) throws -> Opened {
        guard var plain = RecoveryKitSeal.open(sealed, code: code) else {
            throw Refusal("the kit does not open with this recovery code (damaged, or not this code's)")
        }
        defer { Sodium.wipe(&plain) }
        let contents: Tandem_V1_RecoveryKitContents
        do {
            contents = try Tandem_V1_RecoveryKitContents(serializedBytes: plain)
        } catch {
            throw Refusal("the kit opens but does not decode")
        }
        return try validate(contents, owner: owner)
    }

    /// Every field range-checked. The seed and the keys file are essential (a refusal); a bad
    /// contact, relay or ledger entry is skipped and reported.
    public static func validate(_ c: Tandem_V1_RecoveryKitContents, owner: [UInt8]?) throws -> Opened {
        guard c.identitySeed.count == SigningKeyPair.seedBytes else {
            throw Refusal("the kit's identity seed is \(c.identitySeed.count) bytes, not 32")
        }
        let identity = try SigningKeyPair(seed: Array(c.identitySeed))
        guard let owner else { throw Refusal("the holder did not say whose kit it is") }
        guard identity.publicKey == owner else {
            throw Refusal("the kit's identity is \(NodeID(publicKey: identity.publicKey).short)…, not the owner the holder named (\(NodeID(publicKey: owner).short)…)")
        }
        var keysFile: [UInt8]?
        if !c.vaultKeysFile.isEmpty {
            try checkKeysFile(Array(c.vaultKeysFile))
            keysFile = Array(c.vaultKeysFile)
        }
        guard c.vaultMasterKey.isEmpty || c.vaultMasterKey.count == 32 else {
            throw Refusal("the kit's vault master key is \(c.vaultMasterKey.count) bytes")
        }
        var skipped: [String] = []
        var friends: [RestoredFriend] = []
        var seen = Set<[UInt8]>()
        guard c.friendContacts.count <= 10_000 else { throw Refusal("the kit lists \(c.friendContacts.count) friends") }
        for (i, bytes) in c.friendContacts.enumerated() {
            do {
                guard bytes.count <= PayloadLimits.maximumRecordBytes else { throw Refusal("\(bytes.count) bytes") }
                let proto = try Tandem_V1_ContactRecord(serializedBytes: bytes)
                // Validated as the friends flow validates a record, its author being the key it names.
                let record = try ContactRecord(validating: proto, author: Array(proto.publicKey), type: .contactUpdate)
                guard record.publicKey.count == 32 else { throw Refusal("the record's key is not 32 bytes") }
                guard record.publicKey != identity.publicKey else { throw Refusal("the record is the node's own") }
                guard seen.insert(record.publicKey).inserted else { throw Refusal("a second record for the same friend") }
                friends.append(RestoredFriend(publicKey: record.publicKey, displayName: record.displayName,
                                              record: record.canonicalBytes, recordVersion: record.storedVersion,
                                              homeRelay: record.homeRelay.map { StoredRelay(publicKey: $0.id.publicKey, host: $0.host, port: $0.port, atMs: 0) }))
            } catch {
                skipped.append("friend record \(i + 1): \(error)")
            }
        }
        guard c.friendAddresses.count <= 10_000 * maximumAddressesPerFriend else {
            throw Refusal("the kit lists \(c.friendAddresses.count) friend addresses")
        }
        var badAddresses = 0
        let friendIndex = Dictionary(friends.enumerated().map { (Data($1.publicKey), $0) }, uniquingKeysWith: { first, _ in first })
        for a in c.friendAddresses {
            guard let i = friendIndex[a.publicKey] else { continue }
            guard KitAddress.isValid(host: a.host, port: Int(a.port)), friends[i].addresses.count < maximumAddressesPerFriend else {
                badAddresses += 1
                continue
            }
            let address = RestoredAddress(host: a.host, port: Int(a.port))
            if !friends[i].addresses.contains(address) { friends[i].addresses.append(address) }
        }
        if badAddresses > 0 { skipped.append("\(badAddresses) friend addresses: not host and port, or more than \(maximumAddressesPerFriend) for a friend") }
        var relays: [RelayAddress] = []
        for text in c.homeRelays.prefix(64) {
            guard text.utf8.count <= PayloadLimits.homeRelayBytes, let r = try? RelayAddress(parsing: text) else {  // a peer's text that breaks the rule: skipped and reported
                skipped.append("home relay \(String(text.prefix(80)).terminalSafe): not ID@host:port")
                continue
            }
            guard relays.count < NodeStore.maximumHomeRelays else {
                skipped.append("home relay \(r): more than \(NodeStore.maximumHomeRelays)")
                continue
            }
            if !relays.contains(where: { $0.id == r.id }) { relays.append(r) }
        }
        if c.homeRelays.count > 64 { skipped.append("\(c.homeRelays.count - 64) more home relays") }
        // The ledger is a hash chain from the genesis: the longest prefix that verifies is kept
        // (found by bisection: a prefix that breaks stays broken when extended).
        guard c.ledgerEntries.count <= 100_000 else { throw Refusal("the kit holds \(c.ledgerEntries.count) ledger entries") }
        var parsed: [KitLedgerEntry] = []
        for (i, bytes) in c.ledgerEntries.enumerated() {
            guard let e = KitLedgerEntry(bytes: Array(bytes)) else {
                skipped.append("ledger entries \(i + 1)…\(c.ledgerEntries.count): entry \(i + 1) is malformed")
                break
            }
            parsed.append(e)
        }
        var good = 0
        if let broken = Ledger.verify(parsed.map(\.entry)) {
            var low = 0, high = parsed.count - 1 // prefix of `low` verifies, of `high + 1` does not
            while low < high {
                let mid = (low + high + 1) / 2
                if Ledger.verify(parsed[..<mid].map(\.entry)) == nil { low = mid } else { high = mid - 1 }
            }
            good = low
            skipped.append("ledger entries \(good + 1)…\(c.ledgerEntries.count): \(broken)")
        } else {
            good = parsed.count
        }
        var ledger: [RestoredLedgerEntry] = []
        for e in parsed.prefix(good) {
            // Verified entries hold canonical records.
            guard let record = Outcome.decode(e.entry.record) else { break }
            ledger.append(RestoredLedgerEntry(entry: e.entry, challengeId: Array(record.challengeID), committedAtMs: e.committedAtMs))
        }
        // As `tandem name` takes it: at most 64 bytes, one line.
        var displayName = c.displayName
        if displayName.utf8.count > 64 || displayName.contains(where: { $0.isNewline }) {
            skipped.append("display name: longer than 64 bytes or more than one line")
            displayName = ""
        }
        return Opened(identity: identity, keysFile: keysFile, friends: friends, homeRelays: relays, ledger: ledger,
                      displayName: displayName, createdAtMs: c.createdAtMs, generation: min(c.generation, BackupLimits.maximumVersion),
                      skipped: skipped)
    }

    /// A keys file must load with TandemVault's own checks (size, magic, version, Argon2id ranges).
    static func checkKeysFile(_ bytes: [UInt8]) throws {
        guard VaultKeyFile.isKeysFileSize(bytes.count) else {
            throw Refusal("the kit's vault keys file is \(bytes.count) bytes, not \(VaultKeyFile.fileSize) (or \(VaultKeyFile.legacyFileSize), version 1)")
        }
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-kit-\(hexString(Sodium.randomBytes(8)))")
        defer { try? FileManager.default.removeItem(at: scratch) }  // best effort: a scratch copy under the temporary directory
        do {
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try DurableFile.write(bytes, to: VaultKeyFile.url(in: scratch))
            let file = try VaultKeyFile.load(from: scratch)
            guard file.hasRecovery else { throw Refusal("the kit's vault keys file has no recovery code set") }
        } catch let r as Refusal {
            throw r
        } catch {
            throw Refusal("the kit's vault keys file is damaged: \(error)")
        }
    }
}

/// One ledger row in the kit (`ledger_entries`, backup.md section 7):
///
///     seq (u64) ‖ committed_at_ms (u64) ‖ previous_hash (32) ‖ hash (32) ‖ record length (u32) ‖ record ‖ signatures (n × 96)
///
/// all of the `ledger` table's columns (Protocol/README.md 13.7) but the challenge id, which the
/// record holds.
struct KitLedgerEntry {
    let entry: LedgerEntry
    let committedAtMs: Int64

    init(row: (entry: LedgerEntry, committedAtMs: Int64)) {
        entry = row.entry
        committedAtMs = row.committedAtMs
    }

    var bytes: [UInt8] {
        var out: [UInt8] = []
        func u64(_ v: UInt64) { for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: v >> UInt64(s))) } }
        u64(UInt64(bitPattern: entry.seq))
        u64(UInt64(bitPattern: committedAtMs))
        out += entry.previousHash + entry.hash
        let n = UInt32(clamping: entry.record.count)
        for s in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: n >> UInt32(s))) }
        out += entry.record + entry.packedSignatures
        return out
    }

    /// Nil for anything malformed: sizes, a seq outside 1…2^53, a time outside 0…2^53, a record
    /// over 8 KiB, signatures not a whole number of 96-byte pairs (1…16 of them).
    init?(bytes b: [UInt8]) {
        guard b.count >= 84, b.count <= 84 + 8192 + 16 * 96 else { return nil }
        func u64(_ at: Int) -> UInt64 { b[at..<(at + 8)].reduce(0) { $0 << 8 | UInt64($1) } }
        let seq = u64(0), committed = u64(8)
        guard (1...(UInt64(1) << 53)).contains(seq), committed <= UInt64(1) << 53 else { return nil }
        let length = Int(b[80..<84].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        guard length <= 8192, 84 + length <= b.count else { return nil }
        let sigBytes = Array(b[(84 + length)...])
        guard let sigs = LedgerEntry.unpackSignatures(sigBytes), (1...16).contains(sigs.count) else { return nil }
        entry = LedgerEntry(seq: Int64(seq), record: Array(b[84..<(84 + length)]), signatures: sigs,
                            previousHash: Array(b[16..<48]), hash: Array(b[48..<80]))
        committedAtMs = Int64(committed)
    }
}
