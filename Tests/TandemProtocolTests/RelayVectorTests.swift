import Foundation
import NIOCore
import Sodium
import TandemProtocol
import XCTest

/// Checks RelayAddress, ShareCode, TunnelJoin and MailboxSeal against Protocol/vectors/relay.json,
/// written by the independent Python generator.
final class RelayVectorTests: XCTestCase {
    struct RelayFile: Decodable {
        struct Address: Decodable {
            let name: String
            let input: String
            let public_key: String
            let host: String?
            let port: Int?
            let relay: String?
            let canonical: String
        }
        struct Invalid: Decodable { let name: String; let input: String; let reason: String }
        struct Join: Decodable {
            struct Case: Decodable { let name: String; let input: String; let kind: String; let token: String? }
            let magic: String
            let token: String
            let preamble: String
            let answers: [String: String]
            let classify: [Case]
        }
        struct Mail: Decodable {
            struct Item: Decodable {
                struct Case: Decodable { let now_ms: UInt64; let expect: String }
                let name: String
                let sealed: String
                let sealed_to: String
                let cases: [Case]
            }
            let receiver: String
            let maximum_age_ms: UInt64
            let mailable_types: [String]
            let items: [Item]
        }
        let default_port: Int
        let addresses: [Address]
        let invalid_addresses: [Invalid]
        let share_codes: [Address]
        let invalid_share_codes: [Invalid]
        let join: Join
        let mail: Mail
    }

    struct KeysFile: Decodable {
        struct Key: Decodable { let name: String; let seed: String }
        let keys: [Key]
    }

    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Protocol/vectors")

    func load<T: Decodable>(_ name: String, as: T.Type) throws -> T {
        try JSONDecoder().decode(T.self, from: Data(contentsOf: Self.directory.appendingPathComponent(name)))
    }

    func testAddresses() throws {
        let v = try load("relay.json", as: RelayFile.self)
        XCTAssertEqual(v.default_port, RelayAddress.defaultPort)
        for a in v.addresses {
            let r = try RelayAddress(parsing: a.input)
            XCTAssertEqual(hexString(r.id.publicKey), a.public_key, a.name)
            XCTAssertEqual(r.host, a.host, a.name)
            XCTAssertEqual(r.port, a.port, a.name)
            XCTAssertEqual(r.description, a.canonical, a.name)
        }
        for bad in v.invalid_addresses {
            XCTAssertThrowsError(try RelayAddress(parsing: bad.input), "\(bad.name) (\(bad.reason))")
        }
    }

    func testShareCodes() throws {
        let v = try load("relay.json", as: RelayFile.self)
        for s in v.share_codes {
            let code = try ShareCode(parsing: s.input)
            XCTAssertEqual(hexString(code.id.publicKey), s.public_key, s.name)
            XCTAssertEqual(code.relay?.description, s.relay, s.name)
            XCTAssertEqual(code.description, s.canonical, s.name)
        }
        for bad in v.invalid_share_codes {
            XCTAssertThrowsError(try ShareCode(parsing: bad.input), "\(bad.name) (\(bad.reason))")
        }
    }

    func testJoin() throws {
        let v = try load("relay.json", as: RelayFile.self).join
        XCTAssertEqual(hexString(TunnelJoin.magic), v.magic)
        XCTAssertEqual(hexString(TunnelJoin.preamble(token: parseHex(v.token)!)), v.preamble)
        XCTAssertEqual(v.answers["joined"], "00")
        XCTAssertEqual(v.answers["unknown_token"].flatMap { UInt8($0, radix: 16) }, TunnelJoin.Answer.unknownToken.rawValue)
        XCTAssertEqual(v.answers["timeout"].flatMap { UInt8($0, radix: 16) }, TunnelJoin.Answer.timeout.rawValue)
        XCTAssertEqual(v.answers["refused"].flatMap { UInt8($0, radix: 16) }, TunnelJoin.Answer.refused.rawValue)
        for c in v.classify {
            let input = parseHex(c.input)!
            var buf = ByteBufferAllocator().buffer(capacity: input.count)
            buf.writeBytes(input)
            let kind = TunnelJoin.classify(&buf)
            switch c.kind {
            case "join":
                XCTAssertEqual(kind, .join(token: parseHex(c.token ?? v.token)!), c.name)
                XCTAssertEqual(buf.readableBytes, 0, c.name)
            case "join_then_data":
                if case .join = kind {} else { XCTFail("\(c.name): \(kind)") }
                XCTAssertEqual(buf.readableBytes, input.count - TunnelJoin.length, c.name)
            case "need_more_data":
                XCTAssertEqual(kind, .needMoreData, c.name)
                XCTAssertEqual(buf.readableBytes, input.count, c.name)
            case "handshake":
                XCTAssertEqual(kind, .handshake, c.name)
                XCTAssertEqual(buf.readableBytes, input.count, c.name)
            default:
                XCTFail("unknown kind \(c.kind)")
            }
        }
    }

    func testMail() throws {
        let v = try load("relay.json", as: RelayFile.self).mail
        let keys = try load("keys.json", as: KeysFile.self).keys
        func pair(_ name: String) throws -> SigningKeyPair {
            try SigningKeyPair(seed: parseHex(keys.first { $0.name == name }!.seed)!)
        }
        let receiver = try pair(v.receiver)
        let curve = try receiver.curve25519SecretKey()
        XCTAssertEqual(Set(v.mailable_types.map { UInt16($0, radix: 16)! }),
                       Set((0...0xffff).compactMap { t -> UInt16? in MailboxSeal.isMailable(MessageType(rawValue: UInt16(t))) ? UInt16(t) : nil }))
        for item in v.items {
            for c in item.cases {
                let result = Result { try MailboxSeal.open(parseHex(item.sealed)!, identity: receiver, curveSecretKey: curve,
                                                           now: c.now_ms, maximumAge: v.maximum_age_ms) }
                switch (c.expect, result) {
                case ("accept", .success):
                    break
                case ("accept", .failure(let e)):
                    XCTFail("\(item.name) at \(c.now_ms): expected accept, got \(e)")
                case (_, .success):
                    XCTFail("\(item.name) at \(c.now_ms): expected \(c.expect), got accepted")
                case (_, .failure):
                    break
                }
            }
        }
    }
}
