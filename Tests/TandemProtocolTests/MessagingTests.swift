import Foundation
import Sodium
@testable import TandemProtocol
import XCTest

/// Messaging payloads (Protocol/messages.md): codecs byte by byte, every validating initialiser's
/// refusals, text handling, the inbound ordering machine, the chunk hash tree and the file receiver.
final class MessagingTests: XCTestCase {
    let cid = [UInt8](0..<16)
    let mid = [UInt8](16..<32)

    // MARK: codecs

    func testMessageEncodesCanonicallyByteByByte() throws {
        let m = ChatMessageBody(challengeID: nil, seq: 1, lamport: 2, text: "hi", replyTo: nil, sentAtMs: 1000)
        // seq (field 2) = 1, lamport (3) = 2, text (4) = "hi", sent_at_ms (6) = 1000 (0xe8 0x07).
        XCTAssertEqual(m.payload, [0x10, 0x01, 0x18, 0x02, 0x22, 0x02, 0x68, 0x69, 0x30, 0xe8, 0x07])
        XCTAssertEqual(try ChatMessageBody(payload: m.payload, createdAtMs: 1000), m)
        let r = ChatMessageBody(challengeID: cid, seq: 3, lamport: 9, text: "ok", replyTo: mid, sentAtMs: 5, expiresAfterMs: 60_000)
        XCTAssertEqual(try ChatMessageBody(payload: r.payload, createdAtMs: 5), r)
    }

    func testEveryPayloadRoundTrips() throws {
        let f = FileID(bytes: mid)!
        XCTAssertEqual(try ChatReactionMessage(payload: ChatReactionMessage(challengeID: nil, messageID: mid, emoji: "👍").payload).emoji, "👍")
        let cheer = CheerMessage(challengeID: cid, subject: [UInt8](repeating: 7, count: 32), emoji: "🎉", text: "well done")
        XCTAssertEqual(try CheerMessage(payload: cheer.payload), cheer)
        XCTAssertEqual(try ReadReceiptMessage(payload: ReadReceiptMessage(readUpToSeq: 4, readAtMs: 9).payload).readUpToSeq, 4)
        XCTAssertEqual(try RetractMessage(payload: RetractMessage(challengeID: cid, messageID: mid).payload).messageID, mid)
        let gap = GapRequestMessage(challengeID: nil, author: [UInt8](repeating: 1, count: 32),
                                    ranges: [SeqRange(first: 2, last: 3), SeqRange(first: 7, last: 7)])
        XCTAssertEqual(try GapRequestMessage(payload: gap.payload), gap)
        let s = ConversationSettingsMessage(disappearAfterMs: 86_400_000, version: 12)
        XCTAssertEqual(try ConversationSettingsMessage(payload: s.payload), s)
        let offer = FileOfferMessage(fileID: f, name: "desk.jpg", size: 600_000, fileHash: [UInt8](repeating: 1, count: 32),
                                     chunkRoot: [UInt8](repeating: 2, count: 32))
        XCTAssertEqual(try FileOfferMessage(payload: offer.payload), offer)
        XCTAssertEqual(offer.chunkCount, 3)
        let req = FileRequestMessage(fileID: f, ranges: [ChunkRange(first: 0, count: 2)])
        XCTAssertEqual(try FileRequestMessage(payload: req.payload), req)
        let chunk = FileChunkMessage(fileID: f, index: 1, data: [1, 2, 3], proof: [[UInt8](repeating: 3, count: 32)])
        XCTAssertEqual(try FileChunkMessage(payload: chunk.payload), chunk)
        XCTAssertEqual(try FileCancelMessage(payload: FileCancelMessage(fileID: f, reason: .expired).payload).reason, .expired)
    }

    func testTypesAreInTheMessagingRange() {
        for t in MessageType.messageTypes {
            XCTAssertTrue(t.isMessage)
            XCTAssertFalse(t.isBackup || t.isChallenge)
            XCTAssertNotNil(MessageType.messageNames[t.rawValue])
        }
        XCTAssertFalse(MessageType.ack.isMessage)
        XCTAssertTrue(MessageType.chatMessage.isAcknowledgedMessage)
        XCTAssertFalse(MessageType.fileChunk.isAcknowledgedMessage)
        XCTAssertTrue(MessageType.fileChunk.isLinkAuthenticated)
        XCTAssertFalse(MessageType.chatMessage.isLinkAuthenticated)
    }

    // MARK: refusals

    private func raw(_ fill: (inout Tandem_V1_ChatMessage) -> Void) -> [UInt8] {
        var m = Tandem_V1_ChatMessage()
        m.seq = 1
        m.lamport = 1
        m.text = "x"
        m.sentAtMs = 10
        fill(&m)
        return try! m.serializedBytes()
    }

    func testMessageRefusesEverythingOutOfBounds() {
        func refused(_ p: [UInt8], created: UInt64 = 10, _ line: UInt = #line) {
            XCTAssertThrowsError(try ChatMessageBody(payload: p, createdAtMs: created), line: line)
        }
        XCTAssertNoThrow(try ChatMessageBody(payload: raw { _ in }, createdAtMs: 10))
        refused(raw { $0.seq = 0 })
        refused(raw { $0.seq = UInt64.max })
        refused(raw { $0.seq = 1 << 53 })
        refused(raw { $0.lamport = 0 })
        refused(raw { $0.lamport = UInt64.max })
        refused(raw { $0.text = "" })
        refused(raw { $0.text = String(repeating: "a", count: 16_385) })
        refused(raw { $0.text = "a\u{0}b" })
        refused(raw { $0.challengeID = Data([1, 2, 3]) })
        refused(raw { $0.replyTo = Data(repeating: 1, count: 15) })
        refused(raw { $0.sentAtMs = 11 })           // after the envelope's created_at
        refused(raw { $0.sentAtMs = 0 })
        refused(raw { $0.expiresAfterMs = 1 })
        refused(raw { $0.expiresAfterMs = UInt64.max })
        refused([0xff, 0xff, 0xff])                 // not protobuf
        refused([UInt8](repeating: 0, count: ChatLimits.maximumPayloadBytes + 1))
        // Invalid UTF-8 in the text field (0x22 = field 4, length 2, bytes c3 28).
        refused([0x10, 0x01, 0x18, 0x01, 0x22, 0x02, 0xc3, 0x28, 0x30, 0x0a])
        // Exactly 16 KiB is allowed.
        XCTAssertNoThrow(try ChatMessageBody(payload: raw { $0.text = String(repeating: "a", count: 16_384) }, createdAtMs: 10))
    }

    func testTextIsNormalisedToNFCAndBoundedAfterIt() throws {
        let decomposed = "e\u{301}"  // e + combining acute
        let m = try ChatMessageBody(payload: raw { $0.text = decomposed }, createdAtMs: 10)
        XCTAssertEqual(Array(m.text.unicodeScalars), Array("\u{e9}".unicodeScalars))
        // U+0958 is excluded from composition: NFC decomposes it to two scalars (3 → 6 bytes), so
        // 16 KiB of them is 32 KiB after NFC: refused.
        let grows = String(repeating: "\u{958}", count: 5_000)
        XCTAssertLessThanOrEqual(grows.utf8.count, 16_384)
        XCTAssertThrowsError(try ChatText.normalised(grows))
    }

    func testTerminalSafeTextKeepsLinesAndDefusesControls() {
        XCTAssertEqual(ChatText.terminalSafe("a\nb\tc"), "a\nb\tc")
        XCTAssertEqual(ChatText.terminalSafe("\u{1b}[2Jgone"), "\\x1b[2Jgone")
        XCTAssertEqual(ChatText.terminalSafe("x\ry"), "x\\x0dy")
        XCTAssertEqual(ChatText.terminalSafe("\u{9b}31m"), "\\u{9b}31m")
        XCTAssertEqual(ChatText.terminalSafe("abc\u{202e}gpj.exe"), "abc\\u{202e}gpj.exe")
        XCTAssertEqual(ChatText.terminalSafe("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}")
        XCTAssertEqual(ChatText.terminalSafe("a\u{200b}b"), "a\\u{200b}b")
        // Joiners stay: they build emoji and scripts.
        let family = "👨\u{200d}👩\u{200d}👧"
        XCTAssertEqual(ChatText.terminalSafe(family), family)
    }

    func testOtherPayloadsRefuseOutOfBounds() throws {
        func reaction(_ emoji: String) throws -> ChatReactionMessage {
            var m = Tandem_V1_ChatReaction()
            m.messageID = Data(mid)
            m.emoji = emoji
            return try ChatReactionMessage(payload: try m.serializedBytes())
        }
        XCTAssertThrowsError(try reaction(String(repeating: "👍", count: 17)))   // 68 bytes
        XCTAssertThrowsError(try reaction("\u{1b}[31m"))
        XCTAssertThrowsError(try reaction("a b"))
        XCTAssertThrowsError(try reaction("\u{202e}"))
        XCTAssertTrue(try reaction("").isRemoval)

        var cheer = Tandem_V1_Cheer()
        cheer.challengeID = Data(cid)
        cheer.subject = Data(repeating: 1, count: 31)
        XCTAssertThrowsError(try CheerMessage(payload: try cheer.serializedBytes()))
        cheer.subject = Data(repeating: 1, count: 32)
        cheer.text = String(repeating: "a", count: 281)
        XCTAssertThrowsError(try CheerMessage(payload: try cheer.serializedBytes()))

        var gap = Tandem_V1_GapRequest()
        gap.author = Data(repeating: 1, count: 32)
        XCTAssertThrowsError(try GapRequestMessage(payload: try gap.serializedBytes()))   // no ranges
        func range(_ a: UInt64, _ b: UInt64) -> Tandem_V1_SeqRange {
            var r = Tandem_V1_SeqRange()
            r.first = a
            r.last = b
            return r
        }
        for bad in [[range(3, 2)], [range(1, 1025)], [range(5, 6), range(6, 7)], [range(5, 6), range(1, 2)],
                    [range(0, 1)], [range(UInt64.max - 1, UInt64.max)], Array(repeating: range(1, 1), count: 17)] {
            gap.ranges = bad
            XCTAssertThrowsError(try GapRequestMessage(payload: try gap.serializedBytes()))
        }
        gap.ranges = [range(1, 1024), range(1026, 1026)]
        XCTAssertEqual(try GapRequestMessage(payload: try gap.serializedBytes()).ranges.count, 2)

        var s = Tandem_V1_ConversationSettings()
        s.version = 1
        s.disappearAfterMs = 29_999
        XCTAssertThrowsError(try ConversationSettingsMessage(payload: try s.serializedBytes()))
        s.disappearAfterMs = 0
        s.version = 0
        XCTAssertThrowsError(try ConversationSettingsMessage(payload: try s.serializedBytes()))

        var r = Tandem_V1_ReadReceipt()
        r.readUpToSeq = 0
        r.readAtMs = 1
        XCTAssertThrowsError(try ReadReceiptMessage(payload: try r.serializedBytes()))
    }

    func testFilePayloadsRefuseOutOfBounds() throws {
        func offer(_ fill: (inout Tandem_V1_FileOffer) -> Void) throws -> FileOfferMessage {
            var m = Tandem_V1_FileOffer()
            m.fileID = Data(mid)
            m.name = "a.txt"
            m.size = 10
            m.fileHash = Data(repeating: 1, count: 32)
            m.chunkRoot = Data(repeating: 2, count: 32)
            m.chunkSize = 262_144
            fill(&m)
            return try FileOfferMessage(payload: try m.serializedBytes())
        }
        XCTAssertNoThrow(try offer { _ in })
        XCTAssertNoThrow(try offer { $0.size = 1 << 32 })
        XCTAssertThrowsError(try offer { $0.size = (1 << 32) + 1 })
        XCTAssertThrowsError(try offer { $0.size = 0 })
        XCTAssertThrowsError(try offer { $0.size = UInt64.max })
        for name in ["", ".", "..", ".hidden", "a/b", "..\\x", "a\u{0}b", "photo\u{202e}gpj.exe", "a\nb", String(repeating: "n", count: 256)] {
            XCTAssertThrowsError(try offer { $0.name = name }, name)
        }
        XCTAssertThrowsError(try offer { $0.chunkSize = 65_536 })
        XCTAssertThrowsError(try offer { $0.fileHash = Data(repeating: 1, count: 31) })
        XCTAssertThrowsError(try offer { $0.fileID = Data() })
        XCTAssertThrowsError(try offer { $0.messageID = Data([1]) })

        func request(_ ranges: [(UInt32, UInt32)]) throws -> FileRequestMessage {
            var m = Tandem_V1_FileRequest()
            m.fileID = Data(mid)
            m.ranges = ranges.map { var r = Tandem_V1_ChunkRange(); r.first = $0.0; r.count = $0.1; return r }
            return try FileRequestMessage(payload: try m.serializedBytes())
        }
        XCTAssertNoThrow(try request([(0, 16_384)]))
        XCTAssertThrowsError(try request([]))
        XCTAssertThrowsError(try request([(0, 0)]))
        XCTAssertThrowsError(try request([(UInt32.max, UInt32.max)]))
        XCTAssertThrowsError(try request([(16_383, 2)]))
        XCTAssertThrowsError(try request([(4, 2), (5, 1)]))
        XCTAssertFalse(try request([(0, 4)]).fits(chunkCount: 3))

        func chunk(_ fill: (inout Tandem_V1_FileChunk) -> Void) throws -> FileChunkMessage {
            var m = Tandem_V1_FileChunk()
            m.fileID = Data(mid)
            m.data = Data([1])
            fill(&m)
            return try FileChunkMessage(payload: try m.serializedBytes())
        }
        XCTAssertNoThrow(try chunk { _ in })
        XCTAssertThrowsError(try chunk { $0.data = Data() })
        XCTAssertThrowsError(try chunk { $0.data = Data(count: 262_145) })
        XCTAssertThrowsError(try chunk { $0.index = UInt32.max })
        XCTAssertThrowsError(try chunk { $0.proof = Array(repeating: Data(count: 32), count: 15) })
        XCTAssertThrowsError(try chunk { $0.proof = [Data(count: 31)] })

        var cancel = Tandem_V1_FileCancel()
        cancel.fileID = Data(mid)
        cancel.reason = .UNRECOGNIZED(99)
        XCTAssertEqual(try FileCancelMessage(payload: try cancel.serializedBytes()).reason, .unspecified)
    }

    // MARK: forwarding

    func testForwardCarriesTheAuthorsSignedFrameAndRefusesForgeries() throws {
        let author = fixedPair(1), inviter = fixedPair(2), stranger = fixedPair(3)
        let body = ChatMessageBody(challengeID: cid, seq: 1, lamport: 1, text: "ready?", replyTo: nil, sentAtMs: 100)
        let inner = Envelope.sign(type: .chatMessage, author: author, recipient: inviter.publicKey, createdAt: 100, payload: body.payload)
        let fwd = ChatForwardMessage(challengeID: cid, inner: inner, content: .message(body))
        let back = try ChatForwardMessage(payload: fwd.payload, forwarder: inviter.publicKey)
        XCTAssertEqual(back.inner.bytes, inner.bytes)
        XCTAssertEqual(back.content, .message(body))

        // A forger who changes one byte of the text.
        var tampered = inner.bytes
        tampered[Envelope.headerLength + 7] ^= 1
        var m = Tandem_V1_ChatForward()
        m.challengeID = Data(cid)
        m.envelope = Data(tampered)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try m.serializedBytes(), forwarder: inviter.publicKey))
        // A frame the "author" never addressed to this forwarder.
        XCTAssertThrowsError(try ChatForwardMessage(payload: fwd.payload, forwarder: stranger.publicKey))
        // Another thread's frame.
        m.envelope = Data(inner.bytes)
        m.challengeID = Data(repeating: 9, count: 16)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try m.serializedBytes(), forwarder: inviter.publicKey))
        // A direct message (no thread) wrapped as a forward.
        let direct = ChatMessageBody(challengeID: nil, seq: 1, lamport: 1, text: "x", replyTo: nil, sentAtMs: 1)
        let d = Envelope.sign(type: .chatMessage, author: author, recipient: inviter.publicKey, createdAt: 1, payload: direct.payload)
        m.challengeID = Data(cid)
        m.envelope = Data(d.bytes)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try m.serializedBytes(), forwarder: inviter.publicKey))
        // A type that is never forwarded.
        let other = Envelope.sign(type: .readReceipt, author: author, recipient: inviter.publicKey, createdAt: 1,
                                  payload: ReadReceiptMessage(readUpToSeq: 1, readAtMs: 1).payload)
        m.envelope = Data(other.bytes)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try m.serializedBytes(), forwarder: inviter.publicKey))
        // Garbage and an oversized inner envelope.
        m.envelope = Data([1, 2, 3])
        XCTAssertThrowsError(try ChatForwardMessage(payload: try m.serializedBytes(), forwarder: inviter.publicKey))
        m.envelope = Data(count: ChatLimits.maximumForwardedEnvelopeBytes + 1)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try m.serializedBytes(), forwarder: inviter.publicKey))
    }

    // MARK: ordering

    let a = [UInt8](repeating: 0xaa, count: 32)
    let b = [UInt8](repeating: 0xbb, count: 32)
    private func id(_ n: UInt64) -> [UInt8] { withUnsafeBytes(of: n.bigEndian) { Array($0) } + [UInt8](repeating: 0, count: 8) }

    func testInOrderArrivalsAreReleasedOnceAndDuplicatesAreNot() {
        var o = ConversationOrder()
        guard case .released(let r1) = o.receive(author: a, seq: 1, lamport: 1, messageID: id(1)) else { return XCTFail() }
        XCTAssertEqual(r1.map(\.seq), [1])
        XCTAssertEqual(o.receive(author: a, seq: 1, lamport: 1, messageID: id(1)), .duplicate)
        guard case .released(let r2) = o.receive(author: a, seq: 2, lamport: 2, messageID: id(2)) else { return XCTFail() }
        XCTAssertEqual(r2.map(\.seq), [2])
        XCTAssertEqual(o.released(author: a), 2)
    }

    func testAGapHoldsLaterMessagesAsksForTheMissingAndReleasesInOrder() {
        var o = ConversationOrder(gapRetryMs: 1_000)
        _ = o.receive(author: a, seq: 1, lamport: 1, messageID: id(1))
        XCTAssertEqual(o.receive(author: a, seq: 4, lamport: 4, messageID: id(4)), .held(missing: [SeqRange(first: 2, last: 3)]))
        XCTAssertEqual(o.receive(author: a, seq: 6, lamport: 6, messageID: id(6)),
                       .held(missing: [SeqRange(first: 2, last: 3), SeqRange(first: 5, last: 5)]))
        XCTAssertEqual(o.receive(author: a, seq: 4, lamport: 4, messageID: id(4)), .duplicate)
        XCTAssertEqual(o.gapRequest(author: a, nowMs: 0), [SeqRange(first: 2, last: 3), SeqRange(first: 5, last: 5)])
        XCTAssertNil(o.gapRequest(author: a, nowMs: 999))          // asked recently
        XCTAssertNotNil(o.gapRequest(author: a, nowMs: 1_000))
        XCTAssertEqual(o.receive(author: a, seq: 3, lamport: 3, messageID: id(3)), .held(missing: [SeqRange(first: 2, last: 2), SeqRange(first: 5, last: 5)]))
        guard case .released(let r) = o.receive(author: a, seq: 2, lamport: 2, messageID: id(2)) else { return XCTFail() }
        XCTAssertEqual(r.map(\.seq), [2, 3, 4])
        guard case .released(let r5) = o.receive(author: a, seq: 5, lamport: 5, messageID: id(5)) else { return XCTFail() }
        XCTAssertEqual(r5.map(\.seq), [5, 6])
        XCTAssertEqual(o.heldCount(author: a), 0)
        XCTAssertNil(o.gapRequest(author: a, nowMs: 10_000))
    }

    func testTheHoldingWindowIsBoundedAndSeqsNearTheTopDoNotTrap() {
        var o = ConversationOrder(heldAboveGap: 8)
        XCTAssertEqual(o.receive(author: a, seq: 10, lamport: 1, messageID: id(10)), .refused(.beyondWindow))
        XCTAssertEqual(o.receive(author: a, seq: 0, lamport: 1, messageID: id(0)), .refused(.seqOutOfRange))
        XCTAssertEqual(o.receive(author: a, seq: UInt64.max, lamport: UInt64.max, messageID: id(1)), .refused(.seqOutOfRange))
        XCTAssertEqual(o.receive(author: a, seq: ChatLimits.maximumCounter, lamport: 1, messageID: id(1)), .refused(.beyondWindow))
        // Restored near the top of the range: the last valid seq is released, nothing wraps.
        o.restore(ownSeq: 0, maximumLamport: 0, author: a, released: ChatLimits.maximumCounter - 1, lastLamport: UInt64.max - 1, held: [])
        guard case .released(let r) = o.receive(author: a, seq: ChatLimits.maximumCounter, lamport: 1, messageID: id(2)) else { return XCTFail() }
        XCTAssertEqual(r.first?.displayKey.lamport, UInt64.max)
        XCTAssertEqual(o.receive(author: a, seq: ChatLimits.maximumCounter, lamport: 1, messageID: id(2)), .duplicate)
        // A long gap is asked for in ranges of at most 1 024, at most 16 of them.
        var big = ConversationOrder(heldAboveGap: 100_000)
        _ = big.receive(author: b, seq: 50_000, lamport: 1, messageID: id(1))
        let ranges = big.gapRequest(author: b, nowMs: 0) ?? []
        XCTAssertEqual(ranges.count, 16)
        XCTAssertTrue(ranges.allSatisfy { $0.count <= 1_024 })
        XCTAssertEqual(ranges.first, SeqRange(first: 1, last: 1_024))
    }

    func testTooManyAuthorsAreRefused() {
        var o = ConversationOrder(maximumAuthors: 2)
        _ = o.receive(author: a, seq: 1, lamport: 1, messageID: id(1))
        _ = o.receive(author: b, seq: 1, lamport: 1, messageID: id(2))
        XCTAssertEqual(o.receive(author: [UInt8](repeating: 3, count: 32), seq: 1, lamport: 1, messageID: id(3)), .refused(.tooManyAuthors))
    }

    func testDisplayOrderIsCausalAcrossAuthors() {
        // Alice writes two messages; Bob, having seen her first, replies (lamport 2); Alice's second
        // was written before she saw Bob's reply (lamport 2 as well): tie broken by key.
        var bobSide = ConversationOrder()
        _ = bobSide.receive(author: a, seq: 1, lamport: 1, messageID: id(1))
        let reply = bobSide.nextOutbound()
        XCTAssertEqual(reply.seq, 1)
        XCTAssertEqual(reply.lamport, 2)
        var aliceSide = ConversationOrder()
        _ = aliceSide.nextOutbound()
        let second = aliceSide.nextOutbound()
        XCTAssertEqual(second.lamport, 2)
        let keys = [ConversationOrder.DisplayKey(lamport: 2, author: b, seq: 1), ConversationOrder.DisplayKey(lamport: 2, author: a, seq: 2),
                    ConversationOrder.DisplayKey(lamport: 1, author: a, seq: 1)].sorted()
        XCTAssertEqual(keys.map(\.seq), [1, 2, 1])
        XCTAssertEqual(keys.first?.author, a)
        // Once Alice sees the reply, her next message sorts below it.
        _ = aliceSide.receive(author: b, seq: 1, lamport: 2, messageID: id(3))
        XCTAssertEqual(aliceSide.nextOutbound().lamport, 3)
        // A lamport that does not grow with seq is raised above the author's previous one.
        var o = ConversationOrder()
        _ = o.receive(author: a, seq: 1, lamport: 10, messageID: id(1))
        guard case .released(let r) = o.receive(author: a, seq: 2, lamport: 3, messageID: id(2)) else { return XCTFail() }
        XCTAssertEqual(r[0].displayKey.lamport, 11)
        XCTAssertEqual(r[0].lamport, 3)
    }

    // MARK: chunk tree

    func testChunkTreeProofsVerifyForEveryLeafOfOddSizedTrees() {
        for n in [1, 2, 3, 5, 7, 8, 13] {
            let leaves = (0..<n).map { ChunkTree.leafHash([UInt8(truncatingIfNeeded: $0)]) }
            let root = ChunkTree.root(leaves)
            for i in 0..<n {
                let proof = ChunkTree.proof(index: i, leaves)
                XCTAssertTrue(ChunkTree.verify(leaf: leaves[i], index: i, count: n, proof: proof, root: root), "n=\(n) i=\(i)")
                XCTAssertFalse(ChunkTree.verify(leaf: leaves[(i + 1) % n], index: i, count: n, proof: proof, root: root) && n > 1)
                XCTAssertFalse(ChunkTree.verify(leaf: leaves[i], index: i, count: n, proof: proof + [root], root: root))
            }
        }
        XCTAssertFalse(ChunkTree.verify(leaf: [UInt8](repeating: 0, count: 32), index: -1, count: 1, proof: [], root: [UInt8](repeating: 0, count: 32)))
        XCTAssertFalse(ChunkTree.verify(leaf: [UInt8](repeating: 0, count: 32), index: Int.max, count: Int.max, proof: [], root: []))
    }

    // MARK: file receiver

    /// A file of `n` bytes, its offer and its chunk messages.
    private func file(_ n: Int) -> (FileOfferMessage, [FileChunkMessage], [UInt8]) {
        var rng = SplitMix64(seed: UInt64(n))
        let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let size = ChatLimits.chunkBytes
        let chunks = stride(from: 0, to: n, by: size).map { Array(bytes[$0..<min($0 + size, n)]) }
        let leaves = chunks.map { ChunkTree.leafHash($0) }
        let id = FileID(bytes: mid)!
        let offer = FileOfferMessage(fileID: id, name: "f.bin", size: UInt64(n), fileHash: Hash.blake2b(bytes), chunkRoot: ChunkTree.root(leaves))
        let msgs = chunks.indices.map { FileChunkMessage(fileID: id, index: $0, data: chunks[$0], proof: ChunkTree.proof(index: $0, leaves)) }
        return (offer, msgs, bytes)
    }

    func testAWindowLargerThanARequestIsAskedForInRequestsASenderServesWhole() throws {
        let n = 3 * FileReceiver.chunksPerRequest - 7
        let offer = FileOfferMessage(fileID: FileID(bytes: mid)!, name: "f.bin", size: UInt64(n * ChatLimits.chunkBytes),
                                     fileHash: [UInt8](repeating: 1, count: 32), chunkRoot: [UInt8](repeating: 2, count: 32))
        var r = FileReceiver(offer: offer, nowMs: 0, window: n + 5)
        let per = FileReceiver.chunksPerRequest
        XCTAssertEqual(r.accept(nowMs: 0), [.request([ChunkRange(first: 0, count: per)]),
                                            .request([ChunkRange(first: per, count: per)]),
                                            .request([ChunkRange(first: 2 * per, count: n - 2 * per)])])
        // After a broken link everything is asked again, still in whole requests.
        r.linkLost()
        let again = r.tick(nowMs: 1)
        XCTAssertEqual(again.count, 3)
        for case .request(let ranges) in again { XCTAssertLessThanOrEqual(ranges.reduce(0) { $0 + $1.count }, per) }
    }

    func testAFileIsFetchedInAWindowVerifiedAndCompleted() throws {
        let (offer, chunks, bytes) = file(5 * ChatLimits.chunkBytes + 17)
        var r = FileReceiver(offer: offer, nowMs: 0, window: 4)
        XCTAssertEqual(r.accept(nowMs: 0), [.request([ChunkRange(first: 0, count: 4)])])
        var written: [Int: [UInt8]] = [:]
        var pending = Array(chunks[0..<4])
        while !pending.isEmpty {
            let c = pending.removeFirst()
            let actions = try r.receive(c, nowMs: 1).get()
            for a in actions {
                switch a {
                case .write(let i, let offset, let data):
                    XCTAssertEqual(offset, UInt64(i * ChatLimits.chunkBytes))
                    written[i] = data
                case .request(let ranges):
                    for range in ranges { pending += chunks[range.first..<range.end] }
                case .hashWholeFile:
                    let whole = (0..<chunks.count).flatMap { written[$0]! }
                    XCTAssertEqual(whole, bytes)
                    XCTAssertEqual(r.wholeFileHashed(Hash.blake2b(whole)), [.finish])
                case .finish, .cancel, .checkAndWrite:
                    XCTFail("unexpected \(a)")
                }
            }
        }
        XCTAssertEqual(r.phase, .complete)
        XCTAssertEqual(r.verifiedBytes, offer.size)
    }

    func testBadChunksAreRefusedAndTooManyEndTheTransfer() throws {
        let (offer, chunks, _) = file(3 * ChatLimits.chunkBytes)
        var r = FileReceiver(offer: offer, nowMs: 0, window: 8, maximumBadChunks: 2)
        XCTAssertEqual(r.receive(chunks[0], nowMs: 0), .failure(ChunkRefusalError(.notReceiving)))
        _ = r.accept(nowMs: 0)
        var bad = chunks[1].data
        bad[0] ^= 1
        let forged = FileChunkMessage(fileID: offer.fileID, index: 1, data: bad, proof: chunks[1].proof)
        XCTAssertEqual(r.receive(forged, nowMs: 1), .failure(ChunkRefusalError(.badHash)))
        XCTAssertFalse(r.has(1))
        // A chunk with another chunk's path, a short chunk, one out of range, one of another file.
        XCTAssertEqual(r.receive(FileChunkMessage(fileID: offer.fileID, index: 2, data: chunks[0].data, proof: chunks[0].proof), nowMs: 1),
                       .failure(ChunkRefusalError(.badHash, giveUp: true)))
        XCTAssertEqual(r.phase, .failed(.badData))
        var s = FileReceiver(offer: offer, nowMs: 0)
        _ = s.accept(nowMs: 0)
        XCTAssertEqual(s.receive(FileChunkMessage(fileID: offer.fileID, index: 0, data: [1], proof: []), nowMs: 1), .failure(ChunkRefusalError(.wrongLength)))
        XCTAssertEqual(s.receive(FileChunkMessage(fileID: offer.fileID, index: 3, data: [1], proof: []), nowMs: 1), .failure(ChunkRefusalError(.outOfRange)))
        XCTAssertEqual(s.receive(FileChunkMessage(fileID: FileID(bytes: cid)!, index: 0, data: [1], proof: []), nowMs: 1), .failure(ChunkRefusalError(.wrongFile)))
        _ = try s.receive(chunks[0], nowMs: 1).get()
        XCTAssertEqual(s.receive(chunks[0], nowMs: 1), .failure(ChunkRefusalError(.duplicate)))
        // A whole-file hash that does not match the offer's (an inconsistent offer).
        _ = try s.receive(chunks[1], nowMs: 1).get()
        XCTAssertEqual(try s.receive(chunks[2], nowMs: 1).get().last, .hashWholeFile)
        XCTAssertEqual(s.wholeFileHashed([UInt8](repeating: 0, count: 32)), [.cancel(.badData)])
    }

    /// Chunks received unchecked (messages.md 11.4: their hash is checked where they are written):
    /// the same refusals as on the core; held only once reported checked; a bad one is counted as
    /// on the core and asked again, the 16th ends the transfer; one whose job was lost is asked again.
    func testChunksCheckedOffTheCoreAreHeldOnlyOnceTheyMatch() throws {
        let (offer, chunks, _) = file(3 * ChatLimits.chunkBytes + 5)
        var r = FileReceiver(offer: offer, nowMs: 0, window: 4, maximumBadChunks: 3)
        XCTAssertEqual(r.receiveUnchecked(chunks[0], nowMs: 0), .failure(ChunkRefusalError(.notReceiving)))
        XCTAssertEqual(r.accept(nowMs: 0), [.request([ChunkRange(first: 0, count: 4)])])
        // Taken unchecked: to be checked where it is written, with what the check needs.
        let actions = try r.receiveUnchecked(chunks[1], nowMs: 1).get()
        guard case .checkAndWrite(let index, let offset, let data, let check)? = actions.first else { return XCTFail("\(actions)") }
        XCTAssertEqual(index, 1)
        XCTAssertEqual(offset, UInt64(ChatLimits.chunkBytes))
        XCTAssertEqual(data, chunks[1].data)
        XCTAssertTrue(check.matches(data))
        XCTAssertFalse(check.matches(data.map { $0 ^ 1 }))
        XCTAssertFalse(ChunkCheck(index: 2, count: check.count, proof: check.proof, root: check.root).matches(data), "another index")
        XCTAssertFalse(r.has(1), "not held before it is checked")
        XCTAssertEqual(r.checking, [1])
        XCTAssertEqual(r.receiveUnchecked(chunks[1], nowMs: 1), .failure(ChunkRefusalError(.duplicate)), "a second copy while checking")
        XCTAssertEqual(r.receive(chunks[1], nowMs: 1), .failure(ChunkRefusalError(.duplicate)))
        XCTAssertEqual(r.receiveUnchecked(FileChunkMessage(fileID: offer.fileID, index: 2, data: [1], proof: []), nowMs: 1),
                       .failure(ChunkRefusalError(.wrongLength)))
        XCTAssertEqual(r.receiveUnchecked(FileChunkMessage(fileID: offer.fileID, index: 9, data: [1], proof: []), nowMs: 1),
                       .failure(ChunkRefusalError(.outOfRange)))
        // Checked: held. A report for a chunk not being checked changes nothing.
        XCTAssertEqual(r.chunksChecked([1, 3], nowMs: 2), [])
        XCTAssertTrue(r.has(1))
        XCTAssertFalse(r.has(3))
        XCTAssertEqual(r.verifiedChunks, 1)
        XCTAssertEqual(r.chunkFailedCheck(1), .success([]), "already held")
        // A chunk that did not match: refused, counted, missing again and asked for again.
        _ = try r.receiveUnchecked(chunks[2], nowMs: 2).get()
        XCTAssertEqual(r.chunkFailedCheck(2), .failure(ChunkRefusalError(.badHash)))
        XCTAssertEqual(r.badChunks, 1)
        XCTAssertFalse(r.has(2))
        XCTAssertTrue(r.checking.isEmpty)
        XCTAssertEqual(r.tick(nowMs: 3), [.request([ChunkRange(first: 2, count: 1)])])
        // A chunk whose job was lost: asked for again at the next tick, not counted.
        _ = try r.receiveUnchecked(chunks[2], nowMs: 3).get()
        r.chunkLost(2)
        XCTAssertEqual(r.badChunks, 1)
        XCTAssertEqual(r.tick(nowMs: 4), [.request([ChunkRange(first: 2, count: 1)])])
        // Every chunk received (some still being checked): the file is hashed once the last is checked.
        for i in [0, 2, 3] { _ = try r.receiveUnchecked(chunks[i], nowMs: 5).get() }
        XCTAssertTrue(r.everyChunkReceived)
        XCTAssertEqual(r.phase, .receiving)
        XCTAssertEqual(r.tick(nowMs: 6), [], "nothing asked again while being checked")
        XCTAssertEqual(r.chunksChecked([0, 3], nowMs: 7), [])
        XCTAssertEqual(r.chunksChecked([2], nowMs: 7), [.hashWholeFile])
        XCTAssertEqual(r.phase, .verifying)

        // Bad chunks checked off the core end the transfer as on the core.
        var s = FileReceiver(offer: offer, nowMs: 0, window: 4, maximumBadChunks: 2)
        _ = s.accept(nowMs: 0)
        _ = try s.receiveUnchecked(chunks[0], nowMs: 1).get()
        _ = try s.receiveUnchecked(chunks[1], nowMs: 1).get()
        XCTAssertEqual(s.chunkFailedCheck(0), .failure(ChunkRefusalError(.badHash)))
        XCTAssertEqual(s.chunkFailedCheck(1), .failure(ChunkRefusalError(.badHash, giveUp: true)))
        XCTAssertEqual(s.phase, .failed(.badData))
        XCTAssertTrue(s.checking.isEmpty)
    }

    func testATransferResumesFromItsBitmapAndAnOfferThatNeverEndsExpires() throws {
        let (offer, chunks, _) = file(4 * ChatLimits.chunkBytes)
        var r = FileReceiver(offer: offer, nowMs: 0, window: 2)
        _ = r.accept(nowMs: 0)
        _ = try r.receive(chunks[0], nowMs: 1).get()
        // Chunks not asked for are refused (offered, not pushed).
        XCTAssertEqual(r.receive(chunks[3], nowMs: 1), .failure(ChunkRefusalError(.notRequested)))
        // Restart: the stored bitmap says chunk 0 is on disk.
        var resumed = FileReceiver(resuming: offer, bitmap: r.bitmap, nowMs: 100, deadlineMs: 10_000, window: 2, requestTimeoutMs: 50)
        XCTAssertTrue(resumed.has(0))
        XCTAssertEqual(resumed.verifiedChunks, 1)
        XCTAssertEqual(resumed.tick(nowMs: 100), [.request([ChunkRange(first: 1, count: 2)])])
        XCTAssertEqual(resumed.tick(nowMs: 120), [])                     // still in flight
        XCTAssertEqual(resumed.tick(nowMs: 150), [.request([ChunkRange(first: 1, count: 2)])])   // timed out: asked again
        _ = try resumed.receive(chunks[1], nowMs: 151).get()
        XCTAssertEqual(resumed.tick(nowMs: 10_000), [.cancel(.expired)])
        XCTAssertEqual(resumed.phase, .failed(.expired))
        XCTAssertEqual(resumed.tick(nowMs: 20_000), [])
        // A bitmap of the wrong length is ignored; stray bits past the last chunk are cleared.
        XCTAssertEqual(FileReceiver(resuming: offer, bitmap: [0xff, 0xff], nowMs: 0, deadlineMs: 1).verifiedChunks, 0)
        XCTAssertEqual(FileReceiver(resuming: offer, bitmap: [0xff], nowMs: 0, deadlineMs: 1).verifiedChunks, 4)
        // An offer never accepted expires too.
        var idle = FileReceiver(offer: offer, nowMs: 0, deadlineMs: 5)
        XCTAssertEqual(idle.tick(nowMs: 5), [.cancel(.expired)])
    }

    func testReadReceiptsAreReciprocal() {
        XCTAssertFalse(ReadReceiptRule.shouldSend(enabledForFriend: false, conversationIsDirect: true))
        XCTAssertTrue(ReadReceiptRule.shouldSend(enabledForFriend: true, conversationIsDirect: true))
        XCTAssertFalse(ReadReceiptRule.shouldSend(enabledForFriend: true, conversationIsDirect: false))
        XCTAssertFalse(ReadReceiptRule.shouldShow(enabledForFriend: false, conversationIsDirect: true))
        XCTAssertEqual(ReadReceiptRule.receiptDue(shownSeq: 5, lastSentSeq: 3, enabledForFriend: true), 5)
        XCTAssertNil(ReadReceiptRule.receiptDue(shownSeq: 3, lastSentSeq: 3, enabledForFriend: true))
        XCTAssertNil(ReadReceiptRule.receiptDue(shownSeq: 5, lastSentSeq: 3, enabledForFriend: false))
    }

    func testSettingsLastWriterWins() {
        XCTAssertTrue(ConversationSettingsMessage.wins(version: 1, author: a, over: nil))
        XCTAssertTrue(ConversationSettingsMessage.wins(version: 2, author: a, over: (1, b)))
        XCTAssertFalse(ConversationSettingsMessage.wins(version: 1, author: a, over: (2, b)))
        XCTAssertTrue(ConversationSettingsMessage.wins(version: 2, author: b, over: (2, a)))
        XCTAssertFalse(ConversationSettingsMessage.wins(version: 2, author: a, over: (2, b)))
        XCTAssertFalse(ConversationSettingsMessage.wins(version: 2, author: a, over: (2, a)))
    }
}
