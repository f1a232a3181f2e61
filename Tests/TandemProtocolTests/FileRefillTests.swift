import TandemProtocol
import XCTest

/// The receiver's window refilled in steps (Protocol/messages.md 7.3): a FILE_REQUEST for `refill`
/// chunks goes out each time that many of the window arrived, so the sender always has most of the
/// window asked for; no request is larger than a sender serves whole; a sender that pushes past what
/// was asked is refused.
final class FileRefillTests: XCTestCase {
    let id = FileID(bytes: [UInt8](repeating: 7, count: 16))!

    func offer(chunks: Int) -> FileOfferMessage {
        FileOfferMessage(fileID: id, name: "f.bin", size: UInt64(chunks * ChatLimits.chunkBytes),
                         fileHash: [UInt8](repeating: 1, count: 32), chunkRoot: [UInt8](repeating: 2, count: 32))
    }

    /// Chunk `i` as a sender would send it (the path is not looked at by `receiveUnchecked`: the
    /// writing lane checks it).
    func chunk(_ i: Int, _ data: [UInt8]) -> FileChunkMessage { FileChunkMessage(fileID: id, index: i, data: data, proof: []) }

    static func asked(_ actions: [FileReceiver.Action]) -> [Int] {
        actions.flatMap { a -> [Int] in
            guard case .request(let ranges) = a else { return [] }
            XCTAssertLessThanOrEqual(ranges.reduce(0) { $0 + $1.count }, FileReceiver.chunksPerRequest, "a request a sender serves whole")
            return ranges.flatMap { Array($0.first..<$0.end) }
        }
    }

    func testTheWindowIsRefilledInStepsAndTheSenderAlwaysHasMostOfItAskedFor() throws {
        let n = 200
        var r = FileReceiver(offer: offer(chunks: n), nowMs: 0, window: 64, refill: 16)
        XCTAssertEqual(r.refill, 16)
        var outstanding = Self.asked(r.accept(nowMs: 0))
        XCTAssertEqual(outstanding, Array(0..<64), "the whole window at once, in two requests")
        let data = [UInt8](repeating: 0, count: ChatLimits.chunkBytes)
        // A sender that pushes a chunk nobody asked for yet, or one twice, is refused.
        XCTAssertEqual(r.receiveUnchecked(chunk(64, data), nowMs: 1), .failure(ChunkRefusalError(.notRequested)))
        var everAsked = Set(outstanding)
        var arrived = 0
        while let next = outstanding.first {
            outstanding.removeFirst()
            let actions = try r.receiveUnchecked(chunk(next, data), nowMs: 1).get()
            XCTAssertEqual(r.receiveUnchecked(chunk(next, data), nowMs: 1), .failure(ChunkRefusalError(.duplicate)))
            arrived += 1
            let more = Self.asked(actions)
            if !more.isEmpty {
                XCTAssertEqual(arrived % 16, 0, "a request each time 16 chunks arrived")
                XCTAssertEqual(more.count, min(16, n - everAsked.count))
            }
            XCTAssertTrue(everAsked.isDisjoint(with: more), "nothing asked twice")
            everAsked.formUnion(more)
            outstanding += more
            XCTAssertLessThanOrEqual(outstanding.count, 64, "never more than the window")
            if everAsked.count < n { XCTAssertGreaterThanOrEqual(outstanding.count, 48, "the sender always has 48 or more asked for") }
        }
        XCTAssertEqual(everAsked.count, n)
        XCTAssertTrue(r.everyChunkReceived)
        XCTAssertEqual(r.chunksChecked(Array(0..<n), nowMs: 2), [.hashWholeFile])
    }

    func testTheRefillDefaultsToHalfTheWindowAndStaysWithinIt() throws {
        let data = [UInt8](repeating: 0, count: ChatLimits.chunkBytes)
        XCTAssertEqual(FileReceiver(offer: offer(chunks: 40), nowMs: 0, window: 32).refill, 16, "as before: half the window")
        XCTAssertEqual(FileReceiver(offer: offer(chunks: 40), nowMs: 0, window: 5).refill, 3)
        XCTAssertEqual(FileReceiver(offer: offer(chunks: 40), nowMs: 0, window: 8, refill: 0).refill, 1)
        XCTAssertEqual(FileReceiver(offer: offer(chunks: 40), nowMs: 0, window: 8, refill: 100).refill, 8)
        // A refill of the whole window: the next request only once every chunk asked for arrived.
        var r = FileReceiver(offer: offer(chunks: 40), nowMs: 0, window: 8, refill: 8)
        XCTAssertEqual(Self.asked(r.accept(nowMs: 0)), Array(0..<8))
        for i in 0..<7 { XCTAssertEqual(Self.asked(try r.receiveUnchecked(chunk(i, data), nowMs: 1).get()), []) }
        XCTAssertEqual(Self.asked(try r.receiveUnchecked(chunk(7, data), nowMs: 1).get()), Array(8..<16))
        // Unanswered requests time out and are asked again, within the window.
        XCTAssertEqual(Self.asked(r.tick(nowMs: 1 + r.requestTimeoutMs)), Array(8..<16))
    }
}
