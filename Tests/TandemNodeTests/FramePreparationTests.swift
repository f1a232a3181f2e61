import NIOConcurrencyHelpers
import NIOEmbedded
import Sodium
import TandemProtocol
import XCTest
@testable import TandemNet
@testable import TandemNodeCore
@testable import NodeMessages

/// Work done on the event loop before a frame waits for the core (`FramePreparation`): only for the
/// types it names and only on a trusted (a friend's) link; the result reaches the consumer with the
/// frame, and a frame from anyone else arrives unprepared (its flow does the work on the core).
final class FramePreparationTests: XCTestCase {
    /// Records each frame's type and what was prepared for it.
    final class Recorder: InboundConsumer, @unchecked Sendable {
        let seen = NIOLockedValueBox<[(MessageType, FileChunkMessage?)]>([])
        @NodeCore func handle(_ events: [InboundEvent]) {
            for case .frame(let envelope, _, _, let prepared) in events {
                seen.withLockedValue { $0.append((envelope.type, prepared as? FileChunkMessage)) }
            }
        }
    }

    func testAFriendsFileChunkIsDecodedOnTheEventLoopAndNoOneElses() async throws {
        let lane = InboundLane(preparing: [MessageFiles.chunkPreparation])
        let me = SigningKeyPair.generate(), friend = SigningKeyPair.generate()
        let link = PeerLink(channel: EmbeddedChannel(), identity: me)
        link.setRemote(friend.publicKey)
        let chunk = FileChunkMessage(fileID: FileID.random(), index: 3, data: Sodium.randomBytes(1000), proof: [Sodium.randomBytes(32)])
        func frame(_ type: MessageType, _ payload: [UInt8]) -> Envelope {
            Envelope.sign(type: type, author: friend, recipient: me.publicKey, createdAt: 1, payload: payload)
        }
        lane.handle(frame(.fileChunk, chunk.payload), from: link)   // not trusted (yet): unprepared
        link.setTrusted(true)
        lane.handle(frame(.fileChunk, chunk.payload), from: link)   // a friend's: decoded
        lane.handle(frame(.fileChunk, [0xff, 0x01]), from: link)    // malformed: unprepared (the core drops it)
        lane.handle(frame(.fileRequest, chunk.payload), from: link) // another type: unprepared
        let recorder = Recorder()
        let task = Task { await lane.consume(with: recorder) }
        var seen: [(MessageType, FileChunkMessage?)] = []
        for _ in 0..<250 {
            seen = recorder.seen.withLockedValue { $0 }
            if seen.count == 4 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        task.cancel()
        await task.value
        XCTAssertEqual(seen.map(\.0), [.fileChunk, .fileChunk, .fileChunk, .fileRequest])
        XCTAssertEqual(seen.map(\.1), [nil, chunk, nil, nil])
    }
}
