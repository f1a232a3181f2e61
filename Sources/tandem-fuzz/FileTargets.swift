import Foundation
import Sodium
import SwiftProtobuf
import TandemNode
import TandemNodeCore
import NodeMessages
import TandemProtocol
import TandemStore

// The "files" target: structure-aware, into a real node's file flow (NodeHarness: its services over
// an in-memory store). Each input is a sequence of steps: FILE_OFFERs (from a friend or a stranger,
// fields near their edges, through the router as relay mail), FILE_CANCELs, FILE_REQUESTs, and
// FILE_CHUNKs handed to the receiving side as a link would (valid paths of a small tree the target
// knows, forged ones, wrong indices, lengths and files), accepts, cancels and ticks; and a thread's
// files (messages.md 7.7): FILE_OFFERs with a challenge id, directly and inside FORWARD, from the
// thread's inviter (our friend), a participant who is not our friend, or a stranger, signed by any of
// them (or by another key than the author's), about the thread or another challenge.
// Invariants: nothing traps; a stranger's offer leaves no row; every stored transfer validates; no
// incoming transfer holds a chunk that did not verify (each held chunk is one the target sent with a
// good path); pending offers stay within the bounds; a thread's file is fetched only from our friend
// (the inviter) and stored only when a participant signed it.

extension FuzzTarget {
    static let files = FuzzTarget(name: "files", summary: "file offers, requests, chunks and cancels into a node's file flow",
                                  maximumLength: 4096, run: { FileTarget.run(&$0) })
}

enum FileTarget {
    static let me = try! SigningKeyPair(seed: [UInt8](repeating: 41, count: 32))
    static let friend = try! SigningKeyPair(seed: [UInt8](repeating: 42, count: 32))
    static let stranger = try! SigningKeyPair(seed: [UInt8](repeating: 43, count: 32))
    /// A participant of the thread who is not our friend (reaches us only through the inviter, `friend`).
    static let member = try! SigningKeyPair(seed: [UInt8](repeating: 44, count: 32))
    static let thread = [UInt8](repeating: 45, count: 16)
    static let harness: NodeHarness? = try? NodeHarness(identity: me)

    /// A small file the target can prove chunks of: 3 chunks of 64 bytes are not allowed (chunks are
    /// 256 KiB), so the files here are one chunk of up to 512 bytes, or a sparse 3-chunk file whose
    /// last chunk is short; the tree is built over the real chunk contents.
    struct Known {
        let offer: FileOfferMessage
        let chunks: [[UInt8]]
        let tree: ChunkTreeLevels
    }

    static func known(_ input: inout FuzzInput) -> Known {
        let multi = input.bool()
        let chunks: [[UInt8]]
        if multi {
            let fill = input.u8()
            chunks = [[UInt8](repeating: fill, count: ChatLimits.chunkBytes), [UInt8](repeating: fill &+ 1, count: ChatLimits.chunkBytes),
                      [UInt8](repeating: fill &+ 2, count: 1 + Int(input.u8()))]
        } else {
            chunks = [input.take(1 + Int(input.u8()) * 2)].map { $0.isEmpty ? [0] : $0 }
        }
        let tree = ChunkTreeLevels(leaves: chunks.map { ChunkTree.leafHash($0) })
        let size = UInt64(chunks.reduce(0) { $0 + $1.count })
        let offer = FileOfferMessage(fileID: FileID(bytes: [UInt8](repeating: input.u8(), count: 16))!, name: "f\(input.u8()).bin",
                                     size: size, fileHash: Hash.blake2b(chunks.flatMap { $0 }), chunkRoot: tree.root)
        return Known(offer: offer, chunks: chunks, tree: tree)
    }

    static func offerPayload(_ k: Known, _ input: inout FuzzInput) -> [UInt8] {
        guard input.pick(4) == 0 else { return k.offer.payload }
        var m = Tandem_V1_FileOffer()
        m.fileID = Data(input.pick(4) == 0 ? input.take(Int(input.u8() % 20)) : k.offer.fileID.bytes)
        m.name = input.pick(2) == 0 ? input.text() : k.offer.name
        m.size = input.bool() ? input.uint64() : k.offer.size
        m.fileHash = Data(input.bool() ? input.take(32) : k.offer.fileHash)
        m.chunkSize = input.pick(4) == 0 ? input.u32() : UInt32(ChatLimits.chunkBytes)
        m.chunkRoot = Data(input.bool() ? input.take(32) : k.offer.chunkRoot)
        return (try? m.serializedBytes()) ?? []
    }

    static func chunk(_ k: Known, _ input: inout FuzzInput) -> FileChunkMessage? {
        let index = input.pick(4) == 0 ? Int(input.u16()) % ChatLimits.maximumChunks : input.pick(k.chunks.count)
        guard index < k.chunks.count || input.bool() else { return nil }
        var data = index < k.chunks.count ? k.chunks[index] : input.take(1 + Int(input.u8()))
        var proof = index < k.tree.count ? k.tree.proof(index: index) : []
        switch input.u8() % 8 {
        case 0: if !data.isEmpty { data[input.pick(data.count)] ^= 1 << (input.u8() % 8) }  // forged content
        case 1: if !proof.isEmpty { proof[input.pick(proof.count)] = input.exactly(32) }      // forged path
        case 2: proof = (0..<Int(input.u8() % 15)).map { _ in input.exactly(32) }
        case 3: data = Array(data.prefix(max(1, data.count - 1)))                                  // wrong length
        default: break
        }
        // A full-size chunk that would verify is forged: the harness runs no writing lane, so a kept
        // 256 KiB chunk would wait in its queue for the rest of the run (the short last chunk and the
        // one-chunk files are kept, and reach the write).
        if data.count > 4096, index < k.chunks.count, data == k.chunks[index] { data[data.count - 1] &+= 1 }
        guard !data.isEmpty, data.count <= ChatLimits.chunkBytes, proof.count <= ChatLimits.maximumProofHashes else { return nil }
        return FileChunkMessage(fileID: k.offer.fileID, index: index, data: data, proof: proof)
    }

    static func run(_ input: inout FuzzInput) {
        guard let node = harness else { return check(false, "the harness does not start") }
        let runtime = node.runtime
        let files = runtime.messageFiles
        do {
            try node.reset()
            NodeCore.blocking { files.forgetAll() }
            try node.befriend(friend.publicKey)
        } catch {
            return check(false, "cannot reset the harness: \(error)")
        }
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        node.deliver(invite(nowMs: nowMs))
        var threadFiles: [FileID: Set<[UInt8]>] = [:]  // file → who signed offers of it in a thread
        var knowns: [Known] = []
        /// Chunks sent with a good path and the right contents, per file.
        var good: [FileID: Set<Int>] = [:]
        for _ in 0..<16 where !input.isExhausted {
            switch input.u8() % 9 {
            case 0, 1:
                let k = known(&input)
                knowns.append(k)
                let sender = input.pick(4) == 0 ? stranger : friend
                let type: MessageType = input.pick(8) == 0 ? .fileCancel : .fileOffer
                let payload = type == .fileOffer ? offerPayload(k, &input)
                    : FileCancelMessage(fileID: k.offer.fileID, reason: FileCancelMessage.Reason(rawValue: input.pick(6)) ?? .unspecified).payload
                node.deliver(Envelope.sign(type: type, author: sender, recipient: me.publicKey, createdAt: UInt64(nowMs - 1000), payload: payload))
                if sender.publicKey == stranger.publicKey {
                    let row = try? runtime.store.fileTransfer(k.offer.fileID.bytes)  // fuzzing: a failed read shows as no row here; all rows are read below
                    check(row.flatMap { $0 }?.peer != Data(stranger.publicKey), "a stranger's offer was stored")
                }
            case 2, 3, 4:
                guard !knowns.isEmpty else { continue }
                let k = knowns[input.pick(knowns.count)]
                guard let c = chunk(k, &input) else { continue }
                let author = input.pick(8) == 0 ? stranger.publicKey : friend.publicKey
                if author == friend.publicKey, c.index < k.chunks.count, c.data == k.chunks[c.index], c.proof == k.tree.proof(index: c.index) {
                    good[k.offer.fileID, default: []].insert(c.index)
                }
                NodeCore.blocking {
                    do {
                        try runtime.store.step { step in files.receive(c, from: author, step) }
                    } catch {
                        check(false, "a chunk's step failed: \(error)")
                    }
                }
            case 5:
                guard !knowns.isEmpty else { continue }
                let k = knowns[input.pick(knowns.count)]
                let accept = input.bool()
                NodeCore.blocking {
                    // Refused when there is nothing to accept or cancel: an expected outcome here.
                    try? runtime.store.step { step in
                        if accept { try files.accept(k.offer.fileID, step) } else { try files.cancel(k.offer.fileID, step) }
                    }
                }
            case 6:
                // A FILE_REQUEST as mail: never served (no link to answer on), never trapping.
                var m = Tandem_V1_FileRequest()
                m.fileID = Data(knowns.first?.offer.fileID.bytes ?? input.exactly(16))
                m.ranges = (0..<Int(input.u8() % 4)).map { _ in
                    var r = Tandem_V1_ChunkRange(); r.first = input.u32() % 20_000; r.count = input.u32() % 20_000; return r
                }
                let payload = (try? m.serializedBytes()) ?? []
                node.deliver(Envelope.sign(type: .fileRequest, author: friend, recipient: me.publicKey, createdAt: UInt64(nowMs - 1000),
                                           payload: payload))
            case 8:
                let k = known(&input)
                knowns.append(k)
                let (frame, author) = threadOffer(k, nowMs: nowMs, &input)
                threadFiles[k.offer.fileID, default: []].insert(author)
                node.deliver(frame)
            default:
                NodeCore.blocking { files.tick() }
            }
        }
        // Every chunk held was one sent with a good path; every row validates; bounds hold.
        let held = NodeCore.blocking { files.heldChunks() }
        for (id, indices) in held {
            check(Set(indices).isSubset(of: good[id] ?? []), "file \(id) holds chunks \(indices) not all verified")
        }
        guard let rows = try? runtime.store.read({ db in try StoredFileTransfer.fetchAll(db) }) else {  // fuzzing: checked next
            return check(false, "cannot read the file transfers")
        }
        check(rows.allSatisfy { $0.offer != nil }, "a stored transfer does not validate")
        check(rows.allSatisfy { $0.peer != Data(stranger.publicKey) }, "a stranger's transfer is stored")
        for row in rows {
            let conversation = try? runtime.store.conversation(id: row.conversationId)  // fuzzing: a failed read skips the row
            guard conversation?.challengeId != nil else { continue }
            check(row.peer == Data(friend.publicKey), "a thread's file is fetched from someone who is not our friend")
            let authors = FileID(bytes: Array(row.fileId)).flatMap { threadFiles[$0] } ?? []
            check(authors.contains(friend.publicKey) || authors.contains(member.publicKey), "a thread's file offered by a non-participant is stored")
        }
        let pending = rows.filter { $0.direction == .incoming && [.offered, .receiving, .verifying].contains($0.state) }
        check(pending.count <= ChatLimits.pendingFilesPerFriend, "\(pending.count) pending offers from one friend")
    }

    /// The challenge whose thread the files go to: invited by `friend`, with `me` and `member`.
    static func invite(nowMs: Int64) -> Envelope {
        var m = Tandem_V1_ChallengeInvite()
        m.challengeID = Data(thread)
        m.participants = [Data(friend.publicKey), Data(me.publicKey), Data(member.publicKey)]
        m.durationMs = 60_000
        m.startAtUs = UInt64(nowMs) * 1000 + 300_000_000
        m.expiresAtUs = UInt64(nowMs) * 1000 + 600_000_000
        return Envelope.sign(type: .challengeInvite, author: friend, recipient: me.publicKey, createdAt: UInt64(nowMs - 1000),
                             payload: (try? m.serializedBytes()) ?? [])
    }

    /// A FILE_OFFER in the thread (or another challenge's): directly from its author, or inside a
    /// FORWARD; the author, the forwarder and the signer drawn from the inviter, the member, a stranger
    /// and us. Returns the frame and the key that signed the offer (the envelope's author field when
    /// a forged signature makes them differ).
    static func threadOffer(_ k: Known, nowMs: Int64, _ input: inout FuzzInput) -> (Envelope, [UInt8]) {
        let keys = [friend, member, stranger, me]
        var m = Tandem_V1_FileOffer()
        if let base = try? Tandem_V1_FileOffer(serializedBytes: offerPayload(k, &input)) { m = base }  // drawn just above: always parses
        m.challengeID = Data(input.pick(6) == 0 ? input.take(Int(input.u8() % 20)) : thread)
        let payload = (try? m.serializedBytes()) ?? []
        let author = keys[input.pick(3)]
        let created = UInt64(nowMs - 1000)
        guard input.bool() else {
            // Directly (only the inviter may send it so).
            return (Envelope.sign(type: .fileOffer, author: author, recipient: me.publicKey, createdAt: created, payload: payload), author.publicKey)
        }
        let forwarder = keys[input.pick(4) == 0 ? 1 + input.pick(2) : 0]
        var inner = Envelope.sign(type: .fileOffer, author: author, recipient: input.pick(8) == 0 ? me.publicKey : forwarder.publicKey,
                                  createdAt: created, payload: payload).bytes
        if input.pick(6) == 0, !inner.isEmpty { inner[input.pick(inner.count)] ^= 1 << (input.u8() % 8) }  // forged: signature breaks
        var f = Tandem_V1_ChatForward()
        f.challengeID = Data(input.pick(8) == 0 ? input.exactly(16) : thread)
        f.envelope = Data(inner)
        return (Envelope.sign(type: .chatForward, author: forwarder, recipient: me.publicKey, createdAt: created,
                              payload: (try? f.serializedBytes()) ?? []), author.publicKey)
    }

    static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition {
            FileHandle.standardError.write(Data("files target: \(message())\n".utf8))
            abort()
        }
    }
}
