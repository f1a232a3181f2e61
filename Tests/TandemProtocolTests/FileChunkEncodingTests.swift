import Foundation
import Sodium
import XCTest
@testable import TandemProtocol

/// FILE_CHUNK's payload is written by hand (no intermediate `Data` for 256 KiB): byte for byte what
/// SwiftProtobuf writes for the same `FileChunk`, and read back by the validating decoder.
final class FileChunkEncodingTests: XCTestCase {
    func testTheHandWrittenPayloadIsSwiftProtobufs() throws {
        let id = FileID.random()
        let indices = [0, 1, 127, 128, 300, 16_383, ChatLimits.maximumChunks - 1]
        let sizes = [1, 2, 127, 128, 16_383, 16_384, 100_000, ChatLimits.chunkBytes]
        for (n, index) in indices.enumerated() {
            let size = sizes[n % sizes.count]
            let proof = (0..<(n * 2 % (ChatLimits.maximumProofHashes + 1))).map { _ in Sodium.randomBytes(32) }
            let chunk = FileChunkMessage(fileID: id, index: index, data: Sodium.randomBytes(size), proof: proof)
            var m = Tandem_V1_FileChunk()
            m.fileID = Data(id.bytes)
            m.index = UInt32(index)
            m.data = Data(chunk.data)
            m.proof = proof.map { Data($0) }
            XCTAssertEqual(chunk.payload, try m.serializedBytes() as [UInt8], "index \(index), \(size) bytes, \(proof.count) hashes")
            XCTAssertEqual(try FileChunkMessage(payload: chunk.payload), chunk)
        }
    }
}
