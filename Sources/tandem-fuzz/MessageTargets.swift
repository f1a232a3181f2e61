import TandemProtocol

// The "messages" target: arbitrary bytes into every messaging decoder (Protocol/messages.md 3) and
// steps into the ordering and file machines. Checked: nothing traps; what decodes re-encodes to a
// payload that decodes to the same value; the ordering machine never releases a seq twice or out of
// order; the file receiver never marks a chunk it was not given a verified copy of.
extension FuzzTarget {
    static let messages = FuzzTarget(name: "messages", summary: "messaging payload decoders, the ordering and file-receiver machines",
                                     maximumLength: 30_000, shortRunShare: 2, run: { input in
        switch input.pick(3) {
        case 0: MessageFuzzing.decoders(&input)
        case 1: MessageFuzzing.ordering(&input)
        default: MessageFuzzing.file(&input)
        }
    })
}

enum MessageFuzzing {
    static let forwarder = [UInt8](repeating: 2, count: 32)

    static func decoders(_ input: inout FuzzInput) {
        let which = input.pick(14)
        let p = input.rest()
        switch which {
        case 0: if let m = try? ChatMessageBody(payload: p, createdAtMs: 1 << 52) { check(try? ChatMessageBody(payload: m.payload, createdAtMs: 1 << 52) == m) }
        case 1: _ = try? ChatForwardMessage(payload: p, forwarder: forwarder)
        case 2: if let m = try? ChatReactionMessage(payload: p) { check(try? ChatReactionMessage(payload: m.payload) == m) }
        case 3: if let m = try? CheerMessage(payload: p) { check(try? CheerMessage(payload: m.payload) == m) }
        case 4: if let m = try? ReadReceiptMessage(payload: p) { check(try? ReadReceiptMessage(payload: m.payload) == m) }
        case 5: if let m = try? RetractMessage(payload: p) { check(try? RetractMessage(payload: m.payload) == m) }
        case 6: if let m = try? GapRequestMessage(payload: p) { check(try? GapRequestMessage(payload: m.payload) == m) }
        case 7: if let m = try? ConversationSettingsMessage(payload: p) { check(try? ConversationSettingsMessage(payload: m.payload) == m) }
        case 8: if let m = try? FileOfferMessage(payload: p) { check(try? FileOfferMessage(payload: m.payload) == m) }
        case 9: if let m = try? FileRequestMessage(payload: p) { check(try? FileRequestMessage(payload: m.payload) == m) }
        case 10:
            // Read in place or through SwiftProtobuf: the same answer for every input.
            let m = try? FileChunkMessage(payload: p)
            check(m == (try? FileChunkMessage.decodedBySwiftProtobuf(p)))
            if let m { check(try? FileChunkMessage(payload: m.payload) == m) }
        case 11: if let m = try? DeliveryReceiptMessage(payload: p) { check(try? DeliveryReceiptMessage(payload: m.payload) == m) }
        case 12:
            // ACKS (README 12.5): what decodes holds 1 … 256 distinct 16-byte ids and re-encodes to itself.
            if let m = try? AcksMessage(payload: p) {
                check((1...AcksMessage.maximumIDs).contains(m.messageIDs.count) && Set(m.messageIDs).count == m.messageIDs.count
                      && m.messageIDs.allSatisfy { $0.count == 16 })
                check(try? AcksMessage(payload: m.payload) == m)
            }
        default: _ = try? FileCancelMessage(payload: p)
        }
    }

    static func ordering(_ input: inout FuzzInput) {
        var o = ConversationOrder(heldAboveGap: UInt64(input.u8()) + 1, maximumAuthors: 3)
        let authors = (0..<4).map { [UInt8](repeating: UInt8($0), count: 32) }
        var released: [[UInt8]: UInt64] = [:]
        while input.remaining > 0 {
            let a = authors[input.pick(4)]
            let seq = input.bool() ? UInt64(input.u8()) : input.uint64()
            switch o.receive(author: a, seq: seq, lamport: input.uint64(), messageID: [UInt8](repeating: 0, count: 16)) {
            case .released(let r):
                for m in r {
                    check(m.seq == (released[a] ?? 0) + 1)
                    released[a] = m.seq
                }
            case .held(let missing):
                check(missing.count <= ChatLimits.gapRanges)
            case .duplicate, .refused:
                break
            }
            _ = o.gapRequest(author: a, nowMs: input.int64())
        }
    }

    static func file(_ input: inout FuzzInput) {
        let n = Int(input.u8() % 3) + 1
        let chunks = (0..<n).map { i in [UInt8](repeating: UInt8(i), count: i == n - 1 ? Int(input.u8()) + 1 : ChatLimits.chunkBytes) }
        let leaves = chunks.map { ChunkTree.leafHash($0) }
        let id = FileID(bytes: [UInt8](repeating: 5, count: 16))!
        let size = UInt64((n - 1) * ChatLimits.chunkBytes + chunks[n - 1].count)
        let offer = FileOfferMessage(fileID: id, name: "f", size: size, fileHash: [UInt8](repeating: 0, count: 32), chunkRoot: ChunkTree.root(leaves))
        let window = Int(input.u8() % 4) + 1
        // Any refill, in range or not (clamped to 1 … window): the window refilled in steps (messages.md 7.3).
        var r = FileReceiver(offer: offer, nowMs: 0, deadlineMs: 1_000_000, window: window, refill: Int(Int8(bitPattern: input.u8())))
        while input.remaining > 0 {
            switch input.pick(8) {
            case 0: _ = r.accept(nowMs: input.int64())
            case 1: _ = r.tick(nowMs: input.int64())
            case 2:
                let i = input.pick(n)
                _ = r.receive(FileChunkMessage(fileID: id, index: i, data: chunks[i], proof: ChunkTree.proof(index: i, leaves)), nowMs: 1)
            case 3:
                if let c = try? FileChunkMessage(payload: input.take(input.u16() % 2_048)) {
                    let before = r.verifiedChunks
                    if case .success = r.receive(c, nowMs: 1) { check(c.data == chunks[c.index] && r.verifiedChunks == before + 1) }
                }
            case 4:
                // Checked off the core (messages.md 11.4): held only once the check says it matches.
                if let c = try? FileChunkMessage(payload: input.take(input.u16() % 2_048)),
                   case .success(let actions) = r.receiveUnchecked(c, nowMs: 1),
                   case .checkAndWrite(let i, _, let data, let chunkCheck)? = actions.first {
                    check(i == c.index && r.checking.contains(i) && !r.has(i))
                    if chunkCheck.matches(data) {
                        check(data == chunks[i])
                        _ = r.chunksChecked([i], nowMs: 1)
                        check(r.has(i) && !r.checking.contains(i))
                    } else {
                        _ = r.chunkFailedCheck(i)
                        check(!r.has(i) && !r.checking.contains(i))
                    }
                }
            case 5:
                let i = input.pick(n)
                _ = r.receiveUnchecked(FileChunkMessage(fileID: id, index: i, data: chunks[i], proof: ChunkTree.proof(index: i, leaves)), nowMs: 1)
            case 6:
                let i = input.pick(n)
                if input.pick(2) == 0 { _ = r.chunksChecked([i], nowMs: 1) } else { r.chunkLost(i) }
            default: r.linkLost()
            }
        }
    }

    static func check(_ ok: Bool?) {
        if ok != true { fatalError("messages fuzz target: invariant broken") }
    }
}
