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

    /// The usual layout is read in place, every other through SwiftProtobuf: both read each input
    /// alike — the same chunk, or both refuse it.
    func testThePayloadIsReadInPlaceAsSwiftProtobufReadsIt() throws {
        let id = FileID.random()
        let proof = (0..<3).map { _ in Sodium.randomBytes(32) }
        let chunk = FileChunkMessage(fileID: id, index: 300, data: Sodium.randomBytes(1000), proof: proof)
        let canonical = chunk.payload
        XCTAssertNotNil(FileChunkMessage.inOrderFields(canonical), "the usual layout is read in place")
        func field(_ n: UInt8, _ bytes: [UInt8]) -> [UInt8] { [n << 3 | 2, UInt8(bytes.count)] + bytes }
        var variants: [[UInt8]] = [
            canonical,
            [],                                                        // nothing: no file id
            field(1, id.bytes) + [0x10, 0x05] + field(3, [1, 2, 3]),   // no path
            field(3, [1, 2, 3]) + field(1, id.bytes),                  // another order
            field(1, id.bytes) + field(1, id.bytes) + field(3, [9]),   // a field twice (the last counts)
            field(1, id.bytes) + field(3, [9]) + field(5, [1]),        // an unknown field
            field(1, id.bytes) + [0x10, 0x80, 0x00] + field(3, [9]),   // a varint longer than it needs
            field(1, id.bytes) + [0x10, 0xff, 0xff, 0xff, 0xff, 0x0f] + field(3, [9]),   // index 2^32 - 1
            field(1, id.bytes) + [0x10, 0xff, 0xff, 0xff, 0xff, 0x7f] + field(3, [9]),   // more than 32 bits
            field(1, id.bytes) + [0x12, 0x01, 0x05] + field(3, [9]),   // index as bytes
            field(1, id.bytes) + [0x18, 0x01],                         // data as a varint
            field(1, id.bytes) + field(3, [9]) + field(4, [1, 2]),     // a path hash not 32 bytes
            field(1, Array(id.bytes.prefix(15))) + field(3, [9]),      // a short file id
            [0x0a, 0x20] + id.bytes,                                   // a length past the end
            [0x00, 0x01],                                              // field 0
        ]
        var rng = SplitMix64(seed: 33)
        for _ in 0..<300 {
            var v = canonical
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let at = Int.random(in: 0..<v.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: v[at] ^= UInt8.random(in: 1...255, using: &rng)
                case 1: v.removeSubrange(at..<min(v.count, at + Int.random(in: 1...40, using: &rng)))
                default: v.insert(UInt8.random(in: 0...255, using: &rng), at: at)
                }
                if v.isEmpty { break }
            }
            variants.append(v)
        }
        for v in variants {
            let inPlace = try? FileChunkMessage(payload: v)
            let swiftProtobuf = try? FileChunkMessage.decodedBySwiftProtobuf(v)
            XCTAssertEqual(inPlace, swiftProtobuf, hexString(Array(v.prefix(48))))
        }
        XCTAssertEqual(try FileChunkMessage(payload: canonical), chunk)
    }
}
