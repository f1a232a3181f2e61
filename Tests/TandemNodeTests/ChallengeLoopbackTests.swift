import Logging
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore

/// Two in-process nodes on loopback become friends and run challenges through their control
/// methods: the whole path from invite to co-signed ledger entry, with real links and timers.
final class ChallengeLoopbackTests: XCTestCase {
    func start() async throws -> RunningNode { try await RunningNode.start() }

    func call(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue] = [:]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    func event(_ node: NodeRuntime, _ type: String, seconds: Double = 10,
               where match: @escaping @Sendable (NodeEvent) -> Bool = { _ in true }) async throws -> NodeEvent {
        try await TestSupport.event(node, type, seconds: seconds, where: match)
    }

    func befriend(_ a: RunningNode, _ b: RunningNode) async throws {
        _ = try await a.node.friends.request(b.node.identity.publicKey, message: "", address: ("127.0.0.1", b.port))
        _ = try await event(b.node, "friend.request.received")
        _ = try await b.node.friends.accept(a.node.identity.publicKey)
        _ = try await event(a.node, "friend.accepted")
    }

    func mono(_ e: NodeEvent) -> Int64 { e.fields["mono_us"]?.intValue ?? 0 }

    func testInviteAcceptRunAndCoSign() async throws {
        let a = try await start(), b = try await start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let invited = try await call(a.node, "challenge.invite", ["ids": [.string(b.node.id.canonical)], "duration_ms": 1500,
                                                                 "message": "focus?"])
        let id = try XCTUnwrap(invited["id"]?.stringValue)
        let received = try await event(b.node, "challenge.invited")
        XCTAssertEqual(received.fields["id"]?.stringValue, id)
        XCTAssertEqual(received.fields["message"]?.stringValue, "focus?")
        _ = try await call(b.node, "challenge.accept", ["id": .string(String(id.prefix(6)))])
        let startA = try await event(a.node, "challenge.started"), startB = try await event(b.node, "challenge.started")
        let endA = try await event(a.node, "challenge.ended"), endB = try await event(b.node, "challenge.ended")
        // Generous bounds for a loaded test machine; tandem-bench countdown measures the real skew.
        XCTAssertLessThan(abs(mono(startA) - mono(startB)), 50_000)
        XCTAssertLessThan(abs(mono(endA) - mono(endB)), 50_000)
        XCTAssertEqual(mono(endA) - mono(startA), 1_500_000, accuracy: 50_000)
        XCTAssertEqual(endA.fields["result"]?.stringValue, "completed")
        let ledgerA = try await event(a.node, "ledger.appended"), ledgerB = try await event(b.node, "ledger.appended")
        XCTAssertEqual(ledgerA.fields["hash"], ledgerB.fields["hash"])
        XCTAssertEqual(ledgerA.fields["signers"]?.intValue, 2)
        let verify = try await call(b.node, "ledger.verify")
        XCTAssertEqual(verify["ok"]?.boolValue, true)
        let stats = try await call(a.node, "stats")
        XCTAssertEqual(stats["challenges_completed"]?.intValue, 1)
    }

    func testQuitReachesThePartnerAndIsRecorded() async throws {
        let a = try await start(), b = try await start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let invited = try await call(a.node, "challenge.invite", ["ids": [.string(b.node.id.canonical)], "duration_ms": 3000])
        let id = try XCTUnwrap(invited["id"]?.stringValue)
        _ = try await event(b.node, "challenge.invited")
        _ = try await call(b.node, "challenge.accept", ["id": .string(id)])
        _ = try await event(b.node, "challenge.started")
        let quit = try await call(b.node, "challenge.quit", ["id": .string(id), "reason": "fire alarm"])
        XCTAssertEqual(quit["result"]?.stringValue, "quit")
        let told = try await event(a.node, "challenge.partner.quit", seconds: 1)
        XCTAssertEqual(told.fields["reason"]?.stringValue, "fire alarm")
        XCTAssertEqual(told.fields["who"]?.stringValue, b.node.id.canonical)
        // The quitter cannot quit twice; the inviter goes on to the end.
        do {
            _ = try await call(b.node, "challenge.quit", ["id": .string(id)])
            XCTFail("quit twice")
        } catch let e as NodeError {
            XCTAssertEqual(e.exitCode, 1)
        }
        let endA = try await event(a.node, "challenge.ended")
        XCTAssertEqual(endA.fields["result"]?.stringValue, "completed")
        let endB = try await event(b.node, "challenge.ended")
        XCTAssertEqual(endB.fields["result"]?.stringValue, "quit")
        let la = try await event(a.node, "ledger.appended"), lb = try await event(b.node, "ledger.appended")
        XCTAssertEqual(la.fields["hash"], lb.fields["hash"])
        let entries = try await call(a.node, "ledger.list")["entries"]?.arrayValue ?? []
        let outcomes = entries.first?["outcomes"]?.arrayValue ?? []
        XCTAssertEqual(outcomes.first { $0["id"]?.stringValue == b.node.id.canonical }?["result"]?.stringValue, "quit")
    }

    func testDeclineAndCancelAndBadRequests() async throws {
        let a = try await start(), b = try await start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let first = try await call(a.node, "challenge.invite", ["ids": [.string(b.node.id.canonical)], "duration_ms": 60_000])
        _ = try await event(b.node, "challenge.invited")
        _ = try await call(b.node, "challenge.decline", ["id": .string(first["id"]!.stringValue!)])
        let declined = try await event(a.node, "challenge.declined")
        XCTAssertEqual(declined.fields["by"]?.stringValue, b.node.id.canonical)

        let second = try await call(a.node, "challenge.invite", ["ids": [.string(b.node.id.canonical)], "duration_ms": 60_000,
                                                                "start_in_ms": 600_000])
        let secondID = second["id"]!.stringValue!
        _ = try await event(b.node, "challenge.invited", where: { $0.fields["id"]?.stringValue == secondID })
        _ = try await call(a.node, "challenge.cancel", ["id": .string(secondID)])
        _ = try await event(b.node, "challenge.cancelled")
        let shown = try await call(b.node, "challenge.show", ["id": .string(secondID)])
        XCTAssertEqual(shown["phase"]?.stringValue, "cancelled")

        let stranger = NodeID(publicKey: SigningKeyPair.generate().publicKey).canonical
        for (method, params, code) in [
            ("challenge.invite", ["ids": [.string(stranger)], "duration_ms": 60_000] as [String: JSONValue], Int32(1)),
            ("challenge.invite", ["ids": [.string(b.node.id.canonical)], "duration_ms": 10], TandemError.usageExitCode),
            ("challenge.accept", ["id": "zz"], TandemError.usageExitCode),
            ("challenge.accept", ["id": "abcdef01"], TandemError.nothingToActOnExitCode),
            ("challenge.quit", ["id": .string(secondID)], 1),
        ] {
            do {
                _ = try await call(a.node, method, params)
                XCTFail("\(method) \(params) succeeded")
            } catch let e as NodeError {
                XCTAssertEqual(e.exitCode, code, "\(method) \(params): \(e.message)")
            }
        }
    }
}
