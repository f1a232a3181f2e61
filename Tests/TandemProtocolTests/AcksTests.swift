import Foundation
import Sodium
import XCTest
@testable import TandemProtocol

/// ACKS (0x0108, Protocol/README.md 12.5): its one validating decoder, the PRESENCE field that
/// announces it, its vector in frames.json; and the delivery book's free places (messages.md 11.6).
final class AcksTests: XCTestCase {
    func acks(_ ids: [Data]) -> [UInt8] {
        var m = Tandem_V1_Acks()
        m.messageIds = ids
        return (try? m.serializedBytes()) ?? []
    }

    func ids(_ n: Int) -> [Data] { (0..<n).map { _ in Data(Sodium.randomBytes(16)) } }

    func testValidListsDecodeInOrderAndEncodeBack() throws {
        for n in [1, 2, 32, AcksMessage.maximumIDs] {
            let list = ids(n)
            let m = try AcksMessage(payload: acks(list))
            XCTAssertEqual(m.messageIDs, list.map { Array($0) })
            XCTAssertEqual(m.payload, acks(list))
            XCTAssertEqual(try AcksMessage(messageIDs: m.messageIDs), m)
        }
    }

    func testMalformedListsAreRefusedWhole() {
        let one = ids(1)[0]
        let cases: [(String, [UInt8])] = [
            ("empty", acks([])),
            ("257 ids", acks(ids(257))),
            ("an id twice", acks([one] + ids(3) + [one])),
            ("an id of 15 bytes", acks(ids(2) + [Data(one.prefix(15))])),
            ("an id of 17 bytes", acks([one + Data([0])])),
            ("not protobuf", [0xff, 0xff, 0xff]),
            ("over the payload limit", [UInt8](repeating: 0, count: PayloadLimits.maximumPayloadBytes + 1)),
        ]
        for (name, payload) in cases {
            XCTAssertThrowsError(try AcksMessage(payload: payload), name) { error in
                XCTAssertEqual((error as? PayloadError)?.type, .acks, name)
            }
        }
        XCTAssertThrowsError(try AcksMessage(messageIDs: []))
        XCTAssertThrowsError(try AcksMessage(messageIDs: [Array(one), Array(one)]))
    }

    func testPresenceAnnouncesAcksAndOlderPresenceDoesNot() throws {
        var p = Tandem_V1_Presence()
        p.heartbeatSeconds = 10
        XCTAssertFalse(try PresenceMessage(payload: try p.serializedBytes()).takesAcks, "an older node's PRESENCE")
        p.takesAcks = true
        XCTAssertTrue(try PresenceMessage(payload: try p.serializedBytes()).takesAcks)
        XCTAssertEqual(MessageType.acks.description, "ACKS")
        XCTAssertTrue(MessageType.known.contains(.acks))
    }

    func testTheFrameVectorDecodes() throws {
        struct File: Decodable {
            struct Valid: Decodable { let type: Int; let payload: String; let payload_fields: [String: Field] }
            enum Field: Decodable {
                case string(String), other
                init(from decoder: Decoder) throws {
                    let c = try decoder.singleValueContainer()
                    self = (try? c.decode(String.self)).map { .string($0) } ?? .other
                }
            }
            let valid: [Valid]
        }
        let url = VectorTests.vectorDirectory.appendingPathComponent("frames.json")
        let file = try JSONDecoder().decode(File.self, from: Data(contentsOf: url))
        let vectors = file.valid.filter { $0.type == 0x0108 }
        XCTAssertFalse(vectors.isEmpty, "frames.json has an ACKS")
        for v in vectors {
            let m = try AcksMessage(payload: try XCTUnwrap(parseHex(v.payload)))
            guard case .string(let want)? = v.payload_fields["message_ids"] else { return XCTFail("no message_ids") }
            XCTAssertEqual(m.messageIDs.map(hexString).joined(separator: ","), want)
        }
    }

    /// A write finds no free place while the window is full of fresh frames on this link; frames
    /// on another link or past the resend time hold none.
    func testFreePlacesCountWhatToWriteWouldFind() {
        var book = DeliveryBook(resendAfterMs: 1000, window: 4)
        let peer = [UInt8](repeating: 7, count: 32)
        let keys = (0..<6).map { [UInt8(0), UInt8($0)] }
        XCTAssertEqual(book.freePlaces(peer, link: 1, nowMs: 0), 4)
        XCTAssertEqual(book.toWrite(keys, to: peer, link: 1, nowMs: 0).count, 4)
        XCTAssertEqual(book.freePlaces(peer, link: 1, nowMs: 10), 0)
        XCTAssertEqual(book.toWrite(keys, to: peer, link: 1, nowMs: 10), [], "none free: nothing written")
        XCTAssertEqual(book.freePlaces(peer, link: 2, nowMs: 10), 4, "a new link: the old one's frames are written again")
        XCTAssertEqual(book.freePlaces(peer, link: 1, nowMs: 1000), 4, "past the resend time")
        book.done(keys[0], recipient: peer)
        XCTAssertEqual(book.freePlaces(peer, link: 1, nowMs: 10), 1)
        var held = DeliveryBook(window: 1)
        XCTAssertFalse(held.isHolding(peer))
        held.hold(peer)
        XCTAssertTrue(held.isHolding(peer))
    }
}
