import Foundation
import TandemProtocol

// The backup machines, driven from the "machines" target (MachineTargets.swift): every backup
// decoder on raw bytes, then a BackupHolderBook fed with pieces, snapshots, forgets, proofs,
// fetches, kits and clock steps chosen by the input (what reaches the book has passed the
// validating decoder, as in the node), and a BackupPushPlan answered by that book. Checked:
// nothing traps; the book's accounting equals what it holds, and `used` never passes a quota the
// holder did not lower; a fetch decision never reads outside a blob; the plan never has more than
// 16 pieces in flight and never sends a piece outside its blob.

enum BackupMachine {
    static let owners: [[UInt8]] = (0..<3).map { [UInt8](repeating: UInt8(0xC0 + $0), count: 32) }

    static func run(_ input: inout FuzzInput) {
        var clock = ManualClock()
        // Decoders on raw bytes.
        let raw = input.take(Int(input.u16() % 2048))
        let type = 0x0401 + UInt16(input.u8() % 16)
        decodeAny(type, raw, nowMs: clock.ms)

        var book = BackupHolderBook()
        var quotas: [[UInt8]: Int64] = [:]
        var lowered = Set<[UInt8]>()
        let blobs: [(name: BlobName, bytes: [UInt8])] = (0..<4).map { i in
            let bytes = (0..<(1 + Int(input.u16() % 3000))).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) }
            return (BlobName(of: bytes), bytes)
        }
        // The holder's files, per owner (each owner's partial and whole blobs are its own, as in HeldBlobs).
        var files: [[UInt8]: [UInt8]] = [:]
        for _ in 0..<MachineTargets.maximumSteps where !input.isExhausted {
            let owner = owners[input.pick(owners.count)]
            let rid = BackupRequestID(bytes: input.exactly(16))!
            switch input.u8() % 10 {
            case 0:
                let q = input.bool() ? Int64(input.u16()) * 16 : Int64(clamping: input.uint64() % (UInt64(1) << 51))
                let v = input.uint64()
                if case .recorded = book.setOffer(owner: owner, quotaBytes: q, version: v) {
                    if let old = quotas[owner], q < old { lowered.insert(owner) }
                    quotas[owner] = min(q, BackupLimits.maximumQuotaBytes)
                } else if book.shelves[owner] == nil {
                    quotas[owner] = nil
                    lowered.remove(owner)
                }
            case 1, 2, 3:
                let b = blobs[input.pick(blobs.count)]
                let name = input.pick(8) == 0 ? BlobName(bytes: input.exactly(32))! : b.name
                var p = Tandem_V1_BackupPiece()
                p.requestID = Data(rid.bytes)
                p.name = Data(name.bytes)
                p.size = input.bool() ? UInt64(b.bytes.count) : input.uint64()
                let held = book.shelves[owner]?.blobs[name]?.held ?? 0
                p.offset = input.bool() ? UInt64(held) : input.uint64()
                let len = Int(input.u16() % 4000)
                if p.size == UInt64(b.bytes.count), p.offset < UInt64(b.bytes.count) {
                    let o = Int(p.offset)
                    p.data = Data(b.bytes[o..<min(b.bytes.count, o + max(len, 1))])
                } else {
                    p.data = Data(input.take(len))
                }
                guard let m = try? BackupPieceMessage(payload: (try? p.serializedBytes()) ?? []) else { break }
                switch book.receivePiece(owner: owner, m, nowMs: clock.ms) {
                case .answer(let r):
                    MachineTargets.check(r.requestID == rid, "reply to another request")
                case .write:
                    append(&files, owner, m)
                case .writeThenCheck:
                    append(&files, owner, m)
                    let ok = files[fileKey(owner, m.name)].map { BlobName(of: $0) == m.name } ?? false
                    let r = book.finishBlob(owner: owner, name: m.name, requestID: rid, matches: ok && input.pick(16) != 0)
                    if r.status != .complete { files[fileKey(owner, m.name)] = nil }
                }
            case 4:
                let names = blobs.map(\.name).filter { _ in input.bool() }.sorted()
                guard !names.isEmpty else { break }
                let total = input.bool() ? names.reduce(Int64(0)) { t, n in t + Int64(blobs.first { $0.name == n }!.bytes.count) }
                                         : Int64(input.u16())
                guard let rec = try? BackupSnapshotRecord(snapshotID: input.exactly(16), createdAtMs: clock.ms, blobs: names,
                                                          indexBlobs: [], totalBytes: total, nowMs: clock.ms) else { break }
                _ = book.recordSnapshot(owner: owner, BackupSnapshotMessage(requestID: rid, record: rec))
            case 5:
                let (_, freed) = book.forget(owner: owner, BackupForgetMessage(requestID: rid, keepLast: 1 + input.pick(64)))
                for n in freed { files[fileKey(owner, n)] = nil }
            case 6:
                let cs = blobs.filter { _ in input.bool() }.map { BackupProofChallenge(name: $0.name, nonce: input.exactly(32)) }
                guard !cs.isEmpty else { break }
                let snapshot = files
                _ = book.prove(owner: owner, BackupProveMessage(requestID: rid, challenges: cs), nowMs: clock.ms) { o, name, sink in
                    guard let f = snapshot[fileKey(o, name)] else { throw CocoaError(.fileNoSuchFile) }
                    f.withUnsafeBytes { sink($0) }
                }
            case 7:
                let b = blobs[input.pick(blobs.count)]
                let f = BackupFetchMessage(requestID: rid, name: b.name, offset: Int64(input.u16()) % BackupLimits.maximumBlobBytes,
                                           length: 1 + input.u16() % BackupLimits.pieceBytes)
                if case .read(_, let size, let offset, let length) = book.fetch(owner: owner, f) {
                    MachineTargets.check(offset >= 0 && length >= 1 && offset + Int64(length) <= size, "fetch outside the blob")
                }
            case 8:
                let loc = KitLocator(bytes: [UInt8](repeating: input.u8() % 2, count: 32))!
                let put = BackupKitPutMessage(requestID: rid, locator: loc, version: 1 + input.uint64() % BackupLimits.maximumVersion,
                                              sealedKit: [UInt8](repeating: 0, count: 41 + input.u16()))
                _ = book.putKit(owner: owner, put)
                _ = book.kit(locator: loc, index: input.pick(5))
            default:
                clock.advance(&input)
                _ = book.expireIdlePartials(nowMs: clock.ms)
            }
            MachineTargets.check(book.invariantsHold(), "holder book accounting broken")
            for (o, s) in book.shelves where !lowered.contains(o) {
                MachineTargets.check(s.usedBytes <= s.quotaBytes, "used \(s.usedBytes) passed quota \(s.quotaBytes)")
            }
        }
        planAgainst(&input, book: book, blobs: blobs)
    }

    static func fileKey(_ owner: [UInt8], _ name: BlobName) -> [UInt8] { owner + name.bytes }

    static func append(_ files: inout [[UInt8]: [UInt8]], _ owner: [UInt8], _ p: BackupPieceMessage) {
        var f = files[fileKey(owner, p.name)] ?? []
        MachineTargets.check(Int64(f.count) == p.offset || (p.offset == 0 && !f.isEmpty), "a write that is not an append")
        if p.offset == 0 { f = [] }
        f += p.data
        files[fileKey(owner, p.name)] = f
    }

    /// A push plan built from the book's answers, with replies fuzzed.
    static func planAgainst(_ input: inout FuzzInput, book: BackupHolderBook, blobs: [(name: BlobName, bytes: [UInt8])]) {
        let owner = owners[0]
        let rid = BackupRequestID(bytes: [UInt8](repeating: 9, count: 16))!
        let local = blobs.map { BackupPushPlan.LocalBlob(name: $0.name, size: Int64($0.bytes.count), isIndex: false) }
        let have = book.have(owner: owner, BackupHaveQueryMessage(requestID: rid, names: local.map(\.name)))
        guard var plan = try? BackupPushPlan(local: local, holdings: have.holdings, quotaBytes: have.quotaBytes,
                                             usedBytes: have.usedBytes) else { return }
        for _ in 0..<MachineTargets.maximumSteps where !input.isExhausted && !plan.isFailed {
            let pieces = plan.nextPieces(limit: 1 + input.pick(20))
            MachineTargets.check(plan.piecesInFlight.count <= BackupLimits.piecesInFlight, "too many pieces in flight")
            for p in pieces {
                MachineTargets.check(p.offset >= 0 && p.length >= 1 && p.end <= p.size, "piece outside its blob")
                if input.pick(8) == 0 { plan.timedOut(p); continue }
                let status = BackupStatus(rawValue: input.pick(15)) ?? .ok
                let r = BackupReplyMessage(requestID: rid, status: status, name: input.bool() ? p.name : nil,
                                           held: Int64(input.u16()) % (p.size + 1), quotaBytes: 0, usedBytes: 0,
                                           retryAfterMs: UInt64(input.u16()))
                _ = plan.handle(r, for: p)
            }
        }
    }

    static func decodeAny(_ type: UInt16, _ p: [UInt8], nowMs: UInt64) {
        switch type {
        case 0x0401: _ = try? BackupOfferMessage(payload: p)
        case 0x0402: _ = try? BackupHaveQueryMessage(payload: p)
        case 0x0403: _ = try? BackupHaveReplyMessage(payload: p)
        case 0x0404: _ = try? BackupPieceMessage(payload: p)
        case 0x0405: _ = try? BackupReplyMessage(payload: p)
        case 0x0406:
            if let m = try? BackupSnapshotMessage(payload: p, nowMs: nowMs) {
                _ = m.record.header.verify(m.record.ownerSignature, owner: [UInt8](repeating: 7, count: 32))
            }
        case 0x0407: _ = try? BackupForgetMessage(payload: p)
        case 0x0408: _ = try? BackupListQueryMessage(payload: p)
        case 0x0409:
            // What a restorer then does with each summary (backup.md 8.1, 8.2): never a trap.
            if let m = try? BackupListReplyMessage(payload: p) {
                let owner = [UInt8](repeating: 7, count: 32)
                for s in m.snapshots {
                    _ = s.isSigned(by: owner)
                    _ = s.header.signable(owner: owner)
                    _ = BackupSnapshotHeader.domain
                }
                _ = m.snapshots.sorted { ($0.generation, $0.createdAtMs) > ($1.generation, $1.createdAtMs) }
            }
        case 0x040A: _ = try? BackupProveMessage(payload: p)
        case 0x040B: _ = try? BackupProofMessage(payload: p)
        case 0x040C: _ = try? BackupFetchMessage(payload: p)
        case 0x040D: _ = try? BackupFetchedMessage(payload: p)
        case 0x040E: _ = try? BackupKitPutMessage(payload: p)
        case 0x040F: _ = try? BackupKitGetMessage(payload: p)
        default: _ = try? BackupKitMessage(payload: p)
        }
    }
}
