import Foundation
import Sodium
import SwiftProtobuf
import TandemNode
import NodeBackup
import TandemProtocol

// The "holder" target: structure-aware, over real files. One backup holder (BackupHolderHarness:
// the node's BackupHolder and HeldBlobs under a temporary directory, on /dev/shm when there is
// one) with offers to two owners of small fuzz-chosen quotas. Each input is a sequence of steps:
// a backup request, well-formed or mangled, from either owner or a stranger, friend or not (HAVE,
// PIECE of real small blobs named by their BLAKE2b or of made-up ones, SNAPSHOT, FORGET, LIST,
// PROVE, FETCH — names the other owner holds included —, KIT_PUT, KIT_GET); a restart (a new
// holder loading the same files); damage to the files between steps (a truncated partial, a
// flipped byte in a whole blob, garbage in shelf.json or a snapshot file, stray files and
// directories where the holder writes); a changed or withdrawn offer; an ended friendship; the
// clock moving on.
//
// Checked after every step: nothing trapped; the book's own invariants; every answer is signed by
// the holder, addressed to the asker, decodes with its validating decoder, answers the request's
// id, and is at most one; a friend's malformed request gets MALFORMED and a well-formed one its
// answer (unless something on disk makes a write fail); FETCH and PROVE answer OK only for blobs
// the asker holds whole, with the right bytes and MAC; used ≤ quota (unless the holder lowered it);
// nothing is stored for strangers or owners without an offer; every whole blob in the book has its
// file, of its size, hashing to its name (unless the fuzzer altered that file), every kit and
// snapshot its file, and no blob or snapshot file is left that the book does not count; a restart
// with no altered file since the last load gives back the same book. Damage comes in two kinds:
// altered content (what load reads differs from what the holder wrote: the partial-length and
// leftover-file checks and the restart comparison are off from then on) and obstacles (a file or
// directory where the holder writes: its writes fail, and every check but "a friend is always
// answered" stays on, so a failed write must leave the book as the files are).
// TANDEM_FUZZ_TRACE=1 prints each step.

extension FuzzTarget {
    static let holder = FuzzTarget(name: "holder",
                                   summary: "backup requests, restarts and damaged files into a node's backup holder (real files)",
                                   maximumLength: 4096, shortRunShare: 1, run: { HolderTarget.run(&$0) })
}

/// The holder's clock: set by the input, read on the holder's queue.
final class HolderClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value: UInt64
    init(_ ms: UInt64) { value = ms }
    var ms: UInt64 {
        get { lock.lock(); defer { lock.unlock() }; return value }
        set { lock.lock(); value = newValue; lock.unlock() }
    }
}

/// What the holder answered, collected from its queue.
final class HolderAnswers: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Envelope] = []
    func add(_ e: Envelope) { lock.lock(); items.append(e); lock.unlock() }
    func take() -> [Envelope] { lock.lock(); defer { items = []; lock.unlock() }; return items }
}

enum HolderTarget {
    static let me = try! SigningKeyPair(seed: [UInt8](repeating: 31, count: 32))
    static let owners: [SigningKeyPair] = [32, 33].map { try! SigningKeyPair(seed: [UInt8](repeating: $0, count: 32)) }
    static let strangers: [SigningKeyPair] = [34, 35].map { try! SigningKeyPair(seed: [UInt8](repeating: $0, count: 32)) }
    static let origin = "198.51.100.1"
    static let maximumSteps = 48

    /// Real blobs, named by their hash so that they can complete; small, so that steps stay fast.
    static let blobs: [(name: BlobName, bytes: [UInt8])] = [1, 2, 37, 300, 1024, 2500, 4000].enumerated().map { i, n in
        let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i &* 7 &+ 1) }
        return (BlobName(of: bytes), bytes)
    }
    static let locators: [KitLocator] = [0xA1, 0xA2].map { KitLocator(bytes: [UInt8](repeating: $0, count: 32))! }
    static let snapshotIDs: [[UInt8]] = (0..<3).map { [UInt8](repeating: UInt8(0xD0 + $0), count: 16) }

    static let clock = HolderClock(FuzzKeys.now)
    /// TANDEM_FUZZ_TRACE=1: each step on stderr (to read a crash input).
    static let tracing = getenv("TANDEM_FUZZ_TRACE") != nil
    static func trace(_ text: @autoclosure () -> String) {
        if tracing { FileHandle.standardError.write(Data("holder: \(text())\n".utf8)) }
    }
    static let answers = HolderAnswers()
    static let root: URL = {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? URL(fileURLWithPath: "/dev/shm")
                                                                      : FileManager.default.temporaryDirectory
        return base.appendingPathComponent("tandem-fuzz-holder-\(getpid())")
    }()

    /// Per input: what the fuzzer did to the holder, to know what to expect.
    struct Model {
        var harness: BackupHolderHarness
        var offerVersion: [[UInt8]: UInt64] = [:]
        /// Owners whose quota the holder lowered below what they use.
        var lowered = Set<[UInt8]>()
        /// Whole blobs whose file the fuzzer altered (owner hex / name).
        var tampered = Set<String>()
        /// Kits whose file the fuzzer altered.
        var tamperedKits = Set<[UInt8]>()
        /// Files were altered since the last load (a restart may then give another book).
        var damagedSinceLoad = false
        /// Files were altered at some point of this input (what is on disk may differ from the book).
        var damaged = false
        /// Something sits where the holder writes, or files were altered: a write may fail, and a
        /// request then goes unanswered. Obstacles alone keep every other check.
        var obstructed = false
        var requests = 0
    }

    static func run(_ input: inout FuzzInput) {
        let fm = FileManager.default
        try? fm.removeItem(at: root)
        try? fm.createDirectory(at: root, withIntermediateDirectories: true)
        clock.ms = FuzzKeys.now
        _ = answers.take()
        var m = Model(harness: BackupHolderHarness(identity: me, root: root, now: { clock.ms }))
        for owner in owners {
            let quota = 1 + Int64(input.u16() % 12_000)
            let ok = (try? m.harness.setOffer(owner: owner.publicKey, quotaBytes: quota, version: 10)) ?? false
            check(ok, "the first offer is not recorded")
            m.offerVersion[owner.publicKey] = 10
        }
        for _ in 0..<maximumSteps where !input.isExhausted {
            switch input.u8() % 20 {
            case 0: reload(&m)
            case 1, 2: damage(&input, &m)
            case 3: offer(&input, &m)
            case 4:
                clock.ms = clock.ms &+ (input.bool() ? UInt64(input.u16()) * 1000 : UInt64(7 * 86_400_000 + Int(input.u16())))
                m.harness.expireIdlePartials()
                m.harness.drain()
            case 5 where input.pick(4) == 0:
                let friends = Set(owners.map(\.publicKey).filter { _ in input.bool() })
                trace("friends now: \(friends.map { hexString($0.prefix(4)) })")
                m.harness.withdraw(ownersNotIn: friends)
                m.harness.drain()
            default:
                request(&input, &m)
            }
            checkState(&m)
        }
        reload(&m)
        checkState(&m)
    }

    static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition {
            FileHandle.standardError.write(Data("holder target: \(message())\n".utf8))
            abort()
        }
    }

    // MARK: - Steps

    static func reload(_ m: inout Model) {
        trace("restart")
        let before = m.harness.book
        m.harness.reload()
        let after = m.harness.book
        if !m.damagedSinceLoad {
            for (owner, s) in before.shelves {
                guard let t = after.shelves[owner] else { return check(false, "a restart lost owner \(hexString(owner.prefix(4)))") }
                check(s.quotaBytes == t.quotaBytes && s.offerVersion == t.offerVersion,
                      "a restart changed the offer: \(s.quotaBytes)/\(s.offerVersion) → \(t.quotaBytes)/\(t.offerVersion)")
                check(s.blobs.mapValues { [$0.size, $0.held] } == t.blobs.mapValues { [$0.size, $0.held] },
                      "a restart changed the blobs: \(s.blobs.mapValues { [$0.size, $0.held] }) → \(t.blobs.mapValues { [$0.size, $0.held] })")
                check(s.snapshots == t.snapshots, "a restart changed the snapshots: \(s.snapshots.count) → \(t.snapshots.count)")
                check(s.kit?.locator == t.kit?.locator && s.kit?.version == t.kit?.version && s.kit?.size == t.kit?.size,
                      "a restart changed the kit")
                check(s.usedBytes == t.usedBytes, "a restart changed used: \(s.usedBytes) → \(t.usedBytes)")
            }
            check(after.shelves.count == before.shelves.count, "a restart found owners the holder did not have")
        } else {
            // Damaged files can add what no owner sent (a stray partial reserves its size): only
            // then may a restart find more than the quota.
            for (owner, t) in after.shelves where t.usedBytes > t.quotaBytes { m.lowered.insert(owner) }
        }
        m.damagedSinceLoad = false
    }

    static func offer(_ input: inout FuzzInput, _ m: inout Model) {
        let owner = owners[input.pick(owners.count)].publicKey
        let quota: Int64
        switch input.u8() % 6 {
        case 0: quota = 0
        case 1: quota = BackupLimits.maximumQuotaBytes
        default: quota = 1 + Int64(input.u16() % 12_000)
        }
        let current = m.offerVersion[owner] ?? 10
        let version: UInt64
        switch input.u8() % 4 {
        case 0: version = max(1, current - UInt64(input.u8() % 10))   // stale or equal: ignored
        case 1: version = BackupLimits.maximumVersion
        default: version = min(current + 1 + UInt64(input.u8()), BackupLimits.maximumVersion)
        }
        let before = m.harness.book.shelves[owner]
        let recorded = (try? m.harness.setOffer(owner: owner, quotaBytes: quota, version: version)) ?? false
        trace("offer to \(hexString(owner.prefix(4))): quota \(quota) version \(version) → \(recorded)")
        let after = m.harness.book.shelves[owner]
        if let before, version <= before.offerVersion {
            check(!recorded && after == before, "a stale offer changed the book")
            return
        }
        check(recorded, "a newer offer was not recorded")
        m.offerVersion[owner] = max(version, m.offerVersion[owner] ?? 0)
        if quota == 0 {
            check(after == nil, "a withdrawn offer left a shelf")
            m.lowered.remove(owner)
        } else if let after, after.usedBytes > after.quotaBytes {
            m.lowered.insert(owner)
        }
    }

    static func requestID(_ input: inout FuzzInput, _ m: inout Model) -> Data {
        m.requests += 1
        if input.pick(32) == 0 { return Data(input.take(Int(input.u8() % 20))) }
        return Data([UInt8](repeating: 0, count: 12) + withUnsafeBytes(of: UInt32(m.requests).bigEndian) { Array($0) })
    }

    static func blobName(_ input: inout FuzzInput) -> Data {
        switch input.u8() % 16 {
        case 0: return Data(input.exactly(32))
        case 1: return Data(input.take(Int(input.u8() % 40)))
        default: return Data(blobs[input.pick(blobs.count)].name.bytes)
        }
    }

    static func request(_ input: inout FuzzInput, _ m: inout Model) {
        let senderChoice = input.u8() % 6
        let sender = senderChoice < 4 ? owners[Int(senderChoice) / 2] : strangers[Int(senderChoice) - 4]
        let isOwner = senderChoice < 4
        let isFriend = isOwner ? input.pick(8) != 0 : input.pick(4) == 0
        let rid = requestID(&input, &m)
        let type: MessageType
        let message: any SwiftProtobuf.Message
        switch input.u8() % 12 {
        case 0:
            var q = Tandem_V1_BackupHaveQuery(); q.requestID = rid
            q.names = (0..<(1 + input.pick(8))).map { _ in blobName(&input) }
            type = .backupHaveQuery; message = q
        case 1, 2, 3:
            type = .backupPiece; message = piece(&input, m, owner: sender.publicKey, rid: rid)
        case 4:
            var s = Tandem_V1_BackupSnapshot(); s.requestID = rid
            var r = Tandem_V1_BackupSnapshotRecord()
            r.snapshotID = Data(input.pick(16) == 0 ? input.take(16 + input.pick(3) - 1) : snapshotIDs[input.pick(snapshotIDs.count)])
            r.createdAtMs = input.pick(8) == 0 ? input.uint64() : clock.ms
            let chosen = blobs.filter { _ in input.bool() }.sorted { $0.name < $1.name }
            r.blobs = chosen.map { Data($0.name.bytes) } + (input.pick(8) == 0 ? [blobName(&input)] : [])
            r.indexBlobs = chosen.filter { _ in input.pick(4) == 0 }.map { Data($0.name.bytes) }
            r.totalBytes = input.pick(4) == 0 ? input.uint64() % 10_000 : UInt64(chosen.reduce(0) { $0 + $1.bytes.count })
            if input.pick(16) != 0 { s.record = r }
            type = .backupSnapshot; message = s
        case 5:
            var f = Tandem_V1_BackupForget(); f.requestID = rid
            f.keepLast = input.pick(8) == 0 ? input.u32() : UInt32(input.pick(4))
            type = .backupForget; message = f
        case 6:
            var l = Tandem_V1_BackupListQuery(); l.requestID = rid
            type = .backupList; message = l
        case 7:
            var p = Tandem_V1_BackupProve(); p.requestID = rid
            p.challenges = (0..<(1 + input.pick(4))).map { _ in
                var c = Tandem_V1_BackupProofChallenge()
                c.name = blobName(&input)
                c.nonce = Data(input.pick(16) == 0 ? input.take(Int(input.u8() % 40)) : input.exactly(32))
                return c
            }
            type = .backupProve; message = p
        case 8, 9:
            var f = Tandem_V1_BackupFetch(); f.requestID = rid
            f.name = blobName(&input)
            f.offset = input.pick(8) == 0 ? input.uint64() : UInt64(input.u16() % 4200)
            f.length = input.pick(8) == 0 ? input.u32() : UInt32(1 + input.u16() % 4200)
            type = .backupFetch; message = f
        case 10:
            var k = Tandem_V1_BackupKitPut(); k.requestID = rid
            k.locator = Data(input.pick(16) == 0 ? input.take(32) : locators[input.pick(locators.count)].bytes)
            k.version = input.pick(8) == 0 ? input.uint64() : UInt64(1 + input.u8() % 8)
            k.sealedKit = Data([UInt8](repeating: input.u8(), count: input.pick(16) == 0 ? Int(input.u8() % 50) : 41 + input.u16() % 3000))
            type = .backupKitPut; message = k
        default:
            var k = Tandem_V1_BackupKitGet(); k.requestID = rid
            k.locator = Data(input.pick(16) == 0 ? input.take(32) : locators[input.pick(locators.count)].bytes)
            k.index = input.pick(8) == 0 ? input.u32() : UInt32(input.pick(5))
            type = .backupKitGet; message = k
        }
        var payload: [UInt8] = (try? message.serializedBytes()) ?? []
        if input.pick(16) == 0, !payload.isEmpty {
            // Mangled: a byte changed, cut short, or replaced by noise.
            switch input.u8() % 3 {
            case 0: payload[input.u16() % payload.count] ^= input.u8() | 1
            case 1: payload = Array(payload.prefix(input.u16() % payload.count))
            default: payload = input.take(Int(input.u8()))
            }
        }
        let valid = isValid(type, payload)
        let before = m.harness.book
        let env = Envelope.sign(type: type, author: sender, recipient: me.publicKey, createdAt: clock.ms, payload: payload)
        m.harness.receive(env, origin: origin, isFriend: isFriend) { answers.add($0) }
        m.harness.drain()
        let got = answers.take()
        trace("\(type) from \(hexString(sender.publicKey.prefix(4)))\(isFriend ? " (friend)" : "")\(valid ? "" : " malformed"): "
              + "\(got.map { a in a.type == .backupReply ? "\((try? BackupReplyMessage(payload: a.payload))?.status ?? .unspecified)" : "\(a.type)" })")
        check(got.count <= 1, "\(got.count) answers to one request")
        if isFriend, type != .backupKitGet, !m.obstructed {
            check(got.count == 1, "a friend's \(valid ? "well-formed" : "malformed") \(type) got no answer")
        }
        guard let a = got.first else { return }
        check(a.author == me.publicKey && a.recipient == sender.publicKey, "an answer not addressed to the asker")
        if !valid {
            check(a.type == .error, "a malformed \(type) got \(a.type), not MALFORMED")
            let e = try? Tandem_V1_Error(serializedBytes: a.payload)
            check(e?.code == .malformed && e?.refMessageID == Data(env.messageID.bytes), "a malformed request's error is not MALFORMED for it")
            return
        }
        checkAnswer(a, to: type, payload: payload, asker: sender.publicKey, isOwner: isOwner, before: before, m)
    }

    static func piece(_ input: inout FuzzInput, _ m: Model, owner: [UInt8], rid: Data) -> Tandem_V1_BackupPiece {
        var p = Tandem_V1_BackupPiece(); p.requestID = rid
        let b = blobs[input.pick(blobs.count)]
        let real = input.pick(8) != 0
        p.name = real ? Data(b.name.bytes) : blobName(&input)
        let size = b.bytes.count
        switch input.u8() % 8 {
        case 0: p.size = input.uint64()
        case 1: p.size = UInt64(1 + input.u16() % 5000)
        default: p.size = UInt64(size)
        }
        let held = m.harness.book.shelves[owner]?.blobs[BlobName(bytes: Array(p.name)) ?? b.name]?.held ?? 0
        switch input.u8() % 8 {
        case 0: p.offset = input.uint64()
        case 1: p.offset = UInt64(input.u16()) % UInt64(max(size, 1))
        case 2: p.offset = 0
        default: p.offset = UInt64(held)
        }
        let length = input.bool() ? size : 1 + input.u16() % 1500
        if p.size == UInt64(size), p.offset < UInt64(size) {
            let o = Int(p.offset)
            var data = Array(b.bytes[o..<min(size, o + length)])
            if input.pick(16) == 0 { data[input.u16() % data.count] ^= 0x55 }
            p.data = Data(data)
        } else {
            p.data = Data(input.take(input.pick(16) == 0 ? 0 : length))
        }
        return p
    }

    static func isValid(_ type: MessageType, _ p: [UInt8]) -> Bool {
        switch type {
        case .backupHaveQuery: return (try? BackupHaveQueryMessage(payload: p)) != nil
        case .backupPiece: return (try? BackupPieceMessage(payload: p)) != nil
        case .backupSnapshot: return (try? BackupSnapshotMessage(payload: p, nowMs: clock.ms)) != nil
        case .backupForget: return (try? BackupForgetMessage(payload: p)) != nil
        case .backupList: return (try? BackupListQueryMessage(payload: p)) != nil
        case .backupProve: return (try? BackupProveMessage(payload: p)) != nil
        case .backupFetch: return (try? BackupFetchMessage(payload: p)) != nil
        case .backupKitPut: return (try? BackupKitPutMessage(payload: p)) != nil
        case .backupKitGet: return (try? BackupKitGetMessage(payload: p)) != nil
        default: return false
        }
    }

    // MARK: - Answers

    static func checkAnswer(_ a: Envelope, to type: MessageType, payload: [UInt8], asker: [UInt8], isOwner: Bool,
                            before: BackupHolderBook, _ m: Model) {
        let shelf = before.shelves[asker]
        check(shelf == nil || isOwner, "a stranger has a shelf")
        func noOfferUnlessShelf(_ status: BackupStatus) {
            if shelf == nil { check(status == .noOffer, "\(type) without an offer answered \(status)") }
            else { check(status != .noOffer, "\(type) with an offer answered NO_OFFER") }
        }
        switch type {
        case .backupHaveQuery:
            let q = try! BackupHaveQueryMessage(payload: payload)
            guard a.type == .backupHaveReply, let r = try? BackupHaveReplyMessage(payload: a.payload) else {
                return check(false, "HAVE answered by \(a.type) or undecodable")
            }
            check(r.requestID == q.requestID, "HAVE answer to another request")
            noOfferUnlessShelf(r.status)
            if let shelf {
                check(r.holdings == q.names.map { shelf.holding($0) }, "HAVE holdings differ from the book")
            }
        case .backupPiece, .backupSnapshot, .backupForget, .backupKitPut:
            guard a.type == .backupReply, let r = try? BackupReplyMessage(payload: a.payload) else {
                return check(false, "\(type) answered by \(a.type) or undecodable")
            }
            let id: BackupRequestID
            switch type {
            case .backupPiece: id = try! BackupPieceMessage(payload: payload).requestID
            case .backupSnapshot: id = try! BackupSnapshotMessage(payload: payload, nowMs: clock.ms).requestID
            case .backupForget: id = try! BackupForgetMessage(payload: payload).requestID
            default: id = try! BackupKitPutMessage(payload: payload).requestID
            }
            check(r.requestID == id, "\(type) answer to another request")
            noOfferUnlessShelf(r.status)
            if type == .backupPiece, r.status == .complete {
                let p = try! BackupPieceMessage(payload: payload)
                check(BlobName(of: realBytes(p.name) ?? []) == p.name, "COMPLETE for a blob that does not hash to its name")
            }
        case .backupList:
            guard a.type == .backupListReply, let r = try? BackupListReplyMessage(payload: a.payload) else {
                return check(false, "LIST answered by \(a.type) or undecodable")
            }
            check(r.requestID == (try! BackupListQueryMessage(payload: payload)).requestID, "LIST answer to another request")
            noOfferUnlessShelf(r.status)
        case .backupProve:
            let q = try! BackupProveMessage(payload: payload)
            guard a.type == .backupProof, let r = try? BackupProofMessage(payload: a.payload) else {
                return check(false, "PROVE answered by \(a.type) or undecodable")
            }
            check(r.requestID == q.requestID, "PROVE answer to another request")
            noOfferUnlessShelf(r.status)
            if r.status == .ok {
                check(r.answers.count == q.challenges.count, "PROVE answered \(r.answers.count) of \(q.challenges.count)")
                for (c, answer) in zip(q.challenges, r.answers) where answer.status == .ok {
                    check(answer.name == c.name, "a proof answer for another name")
                    check(shelf?.blobs[c.name]?.state == .whole, "a proof over a blob the asker does not hold")
                    let bytes = realBytes(c.name)
                    check(bytes != nil, "a proof over a blob that cannot be whole")
                    if let bytes, !m.tampered.contains(key(asker, c.name)) {
                        check(answer.mac == BackupProofOfStorage.mac(nonce: c.nonce, blob: bytes), "a wrong proof MAC")
                    }
                }
            }
        case .backupFetch:
            let f = try! BackupFetchMessage(payload: payload)
            guard a.type == .backupFetched, let r = try? BackupFetchedMessage(payload: a.payload) else {
                return check(false, "FETCH answered by \(a.type) or undecodable")
            }
            check(r.requestID == f.requestID, "FETCH answer to another request")
            noOfferUnlessShelf(r.status)
            if r.status == .ok {
                check(r.name == f.name && r.offset == f.offset, "FETCH answered another range")
                check(shelf?.blobs[f.name]?.state == .whole, "FETCH returned bytes of a blob the asker does not hold")
                if let bytes = realBytes(f.name), !m.tampered.contains(key(asker, f.name)) {
                    let end = min(bytes.count, Int(f.offset) + f.length)
                    check(r.size == Int64(bytes.count) && r.data == Array(bytes[Int(f.offset)..<end]), "FETCH returned other bytes")
                }
            } else {
                check(r.data.isEmpty, "FETCH \(r.status) with data")
            }
        case .backupKitGet:
            let g = try! BackupKitGetMessage(payload: payload)
            guard a.type == .backupKit, let r = try? BackupKitMessage(payload: a.payload) else {
                return check(false, "KIT_GET answered by \(a.type) or undecodable")
            }
            check(r.requestID == g.requestID, "KIT_GET answer to another request")
            if r.status == .ok {
                guard let owner = r.owner, let k = before.shelves[owner]?.kit else { return check(false, "a kit from no shelf") }
                check(k.locator == g.locator && Int64(r.sealedKit.count) == k.size && r.version == k.version, "a kit that is not the book's")
            }
        default:
            check(false, "an answer to \(type)")
        }
    }

    static func realBytes(_ name: BlobName) -> [UInt8]? { blobs.first { $0.name == name }?.bytes }

    static func key(_ owner: [UInt8], _ name: BlobName) -> String { "\(hexString(owner))/\(name)" }

    // MARK: - Damage

    static func fileLength(_ url: URL) -> Int64? {
        var st = stat()
        guard stat(url.path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    static func pad12(_ n: Int) -> String { String(repeating: "0", count: max(0, 12 - String(n).count)) + String(n) }

    static func files(_ dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).sorted()
    }

    static func damage(_ input: inout FuzzInput, _ m: inout Model) {
        let book = m.harness.book
        let held = owners.map(\.publicKey).filter { book.shelves[$0] != nil }
        guard !held.isEmpty else { return }
        let owner = held[input.pick(held.count)]
        let dir = m.harness.ownerDirectory(owner)
        trace("damage to \(hexString(owner.prefix(4)))'s files")
        func altered() {
            m.damaged = true
            m.damagedSinceLoad = true
            m.obstructed = true
        }
        func write(_ bytes: [UInt8], _ path: String) {
            _ = FileManager.default.createFile(atPath: dir.appendingPathComponent(path).path, contents: Data(bytes))
        }
        switch input.u8() % 8 {
        case 0:
            // A torn partial write: the file is shorter than what the holder said it held.
            let partials = files(dir.appendingPathComponent("partial"))
            guard !partials.isEmpty else { return }
            let url = dir.appendingPathComponent("partial").appendingPathComponent(partials[input.pick(partials.count)])
            guard let h = try? FileHandle(forWritingTo: url) else { return }
            altered()
            let length = (try? h.seekToEnd()) ?? 0
            try? h.truncate(atOffset: length == 0 ? 0 : UInt64(input.u16()) % length)
            try? h.close()
        case 1:
            // Bit rot in a whole blob.
            let whole = book.shelves[owner]!.blobs.filter { $0.value.state == .whole }.keys.sorted()
            guard !whole.isEmpty else { return }
            let name = whole[input.pick(whole.count)]
            let url = dir.appendingPathComponent("blobs").appendingPathComponent(name.description)
            guard var bytes = try? [UInt8](Data(contentsOf: url)), !bytes.isEmpty else { return }
            bytes[input.u16() % bytes.count] ^= input.u8() | 1
            try? Data(bytes).write(to: url)
            altered()
            m.tampered.insert(key(owner, name))
        case 2:
            let garbage: [[UInt8]] = [input.take(Int(input.u8() % 64)), Array(#"{"quotaBytes":-5,"offerVersion":1}"#.utf8),
                                      Array(#"{"quotaBytes":4000,"offerVersion":0}"#.utf8),
                                      Array(#"{"quotaBytes":99999999999999999,"offerVersion":3,"kitLocator":"zz","kitVersion":1}"#.utf8)]
            write(garbage[input.pick(garbage.count)], "shelf.json")
            altered()
        case 3:
            let snaps = files(dir.appendingPathComponent("snapshots")).filter { $0.hasSuffix(".json") }
            let name = snaps.isEmpty || input.bool() ? "\(pad12(Int(input.u8())))-\(hexString(input.exactly(16))).json" : snaps[input.pick(snaps.count)]
            let text = input.bool() ? input.take(Int(input.u8() % 80))
                : Array(#"{"id":"\#(hexString(snapshotIDs[0]))","createdAtMs":1,"blobs":["\#(blobs[0].name)"],"indexBlobs":[],"totalBytes":\#(input.u8())}"#.utf8)
            try? FileManager.default.createDirectory(at: dir.appendingPathComponent("snapshots"), withIntermediateDirectories: true)
            write(text, "snapshots/" + name)
            altered()
        case 4:
            // Stray files and directories where the holder reads and writes.
            let strays = ["junk", "blobs/zz", "blobs/\(blobs[0].name).tmp", "partial/\(blobs[1].name)", "partial/\(blobs[2].name).0",
                          "partial/\(blobs[3].name).x", "snapshots/readme.txt", ".tmp-shelf.json-00"]
            let path = strays[input.pick(strays.count)]
            try? FileManager.default.createDirectory(at: dir.appendingPathComponent(path).deletingLastPathComponent(),
                                                     withIntermediateDirectories: true)
            write(input.take(Int(input.u8() % 16)), path)
            altered()
        case 5:
            // A directory or a file where the holder expects the other: its writes there fail.
            let paths = ["kit", "snapshots", "blobs", "partial", "snapshots/\(pad12(5))-\(hexString(snapshotIDs[1])).json",
                         "blobs/\(blobs[input.pick(blobs.count)].name)", "partial/\(blobs[4].name).\(blobs[4].bytes.count)"]
            let path = paths[input.pick(paths.count)]
            let url = dir.appendingPathComponent(path)
            guard !FileManager.default.fileExists(atPath: url.path) else { return }
            m.obstructed = true
            if input.bool() {
                try? FileManager.default.createDirectory(at: url.appendingPathComponent("x"), withIntermediateDirectories: true)
            } else {
                try? FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
                write([1, 2, 3], path)
                // A blob nobody sent: a restart takes it by its name and size (load hashes nothing).
                if path.hasPrefix("blobs/"), let n = parseHex(String(path.dropFirst(6))).flatMap({ BlobName(bytes: $0) }) {
                    m.tampered.insert(key(owner, n))
                    altered()
                }
                // A file inside blobs/, partial/ or snapshots/ is content load reads; a file in
                // place of one of those directories (or of the kit) only makes writes fail.
                if path.contains("/") { altered() }
            }
        case 6:
            let url = dir.appendingPathComponent("kit")
            guard FileManager.default.fileExists(atPath: url.path) else { return }
            write(input.take(Int(input.u8())), "kit")
            altered()
            m.tamperedKits.insert(owner)
        default:
            // A whole blob cut short.
            let whole = book.shelves[owner]!.blobs.filter { $0.value.state == .whole }.keys.sorted()
            guard !whole.isEmpty else { return }
            let name = whole[input.pick(whole.count)]
            let url = dir.appendingPathComponent("blobs").appendingPathComponent(name.description)
            guard let h = try? FileHandle(forWritingTo: url) else { return }
            let length = (try? h.seekToEnd()) ?? 0
            try? h.truncate(atOffset: length == 0 ? 0 : UInt64(input.u16()) % length)
            try? h.close()
            altered()
            m.tampered.insert(key(owner, name))
        }
    }

    // MARK: - State

    static func checkState(_ m: inout Model) {
        let book = m.harness.book
        check(book.invariantsHold(), "the book's invariants do not hold")
        let fm = FileManager.default
        for s in strangers {
            check(book.shelves[s.publicKey] == nil, "a shelf for a stranger")
            check(!fm.fileExists(atPath: m.harness.ownerDirectory(s.publicKey).path), "files stored for a stranger")
        }
        for owner in owners.map(\.publicKey) {
            let dir = m.harness.ownerDirectory(owner)
            guard let s = book.shelves[owner] else {
                check(!fm.fileExists(atPath: dir.path), "files kept for an owner without an offer")
                m.lowered.remove(owner)
                m.tampered = m.tampered.filter { !$0.hasPrefix(hexString(owner)) }
                m.tamperedKits.remove(owner)
                continue
            }
            if !m.lowered.contains(owner) {
                check(s.usedBytes <= s.quotaBytes, "used \(s.usedBytes) passed the quota \(s.quotaBytes)")
            }
            // An altered file stays excused until the holder deletes it.
            m.tampered = m.tampered.filter { k in
                !k.hasPrefix(hexString(owner))
                    || fm.fileExists(atPath: dir.appendingPathComponent("blobs").appendingPathComponent(String(k.split(separator: "/")[1])).path)
            }
            if s.kit == nil { m.tamperedKits.remove(owner) }
            for (name, b) in s.blobs {
                switch b.state {
                case .checking:
                    check(false, "a blob left in its check")
                case .whole:
                    guard !m.tampered.contains(key(owner, name)) else { continue }
                    let url = dir.appendingPathComponent("blobs").appendingPathComponent(name.description)
                    let bytes = (try? [UInt8](Data(contentsOf: url))) ?? []
                    check(Int64(bytes.count) == b.size && BlobName(of: bytes) == name,
                          "whole blob \(name) is \(bytes.count) bytes on disk (book: \(b.size)) or does not hash to its name")
                case .partial(let held):
                    guard !m.damaged else { continue }
                    let url = dir.appendingPathComponent("partial").appendingPathComponent("\(name).\(b.size)")
                    let length = fileLength(url)
                    check(held == 0 || (length ?? -1) >= held, "partial \(name) is \(length ?? -1) bytes on disk, the book holds \(held)")
                }
            }
            if !m.damaged {
                for f in files(dir.appendingPathComponent("blobs")) where fileLength(dir.appendingPathComponent("blobs/" + f)) != nil {
                    let n = parseHex(f).flatMap { BlobName(bytes: $0) }
                    check(n.map { s.blobs[$0]?.state == .whole } ?? false, "blob file \(f) the book does not count")
                }
                for f in files(dir.appendingPathComponent("partial")) where fileLength(dir.appendingPathComponent("partial/" + f)) != nil {
                    let parts = f.split(separator: ".")
                    let n = parseHex(String(parts[0])).flatMap { BlobName(bytes: $0) }
                    let counted = n.flatMap { s.blobs[$0] }.map { b in
                        if case .partial = b.state { return parts.count == 2 && Int64(parts[1]) == b.size } else { return false }
                    } ?? false
                    check(counted, "partial file \(f) the book does not count")
                }
                let ids = Set(files(dir.appendingPathComponent("snapshots")).filter {
                    $0.hasSuffix(".json") && fileLength(dir.appendingPathComponent("snapshots/" + $0)) != nil
                }.map {
                    String($0.dropLast(5).split(separator: "-").last ?? "")
                })
                check(ids == Set(s.snapshots.map { hexString($0.snapshotID) }), "snapshot files \(ids.count) ≠ book's \(s.snapshots.count)")
            }
            if let k = s.kit, !m.tamperedKits.contains(owner) {
                let length = fileLength(dir.appendingPathComponent("kit"))
                check(length == k.size, "kit file \(length ?? -1) bytes, the book says \(k.size)")
            }
        }
    }
}
