import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
import Sodium
import TandemNet
import TandemProtocol
import XCTest
@testable import TandemNode
@testable import TandemNodeCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The control socket in-process: a real server and client over a socket in a temporary directory.
final class ControlTests: XCTestCase {
    let logger: Logger = {
        var l = Logger(label: "test")
        l.logLevel = .critical
        return l
    }()

    private var tempDirs: [URL] = []

    override func tearDown() {
        for dir in tempDirs { try? FileManager.default.removeItem(at: dir) }
        tempDirs = []
        super.tearDown()
    }

    /// A short path (Unix socket paths are limited to ~107 bytes).
    private func makeDir() -> DataDirectory {
        let url = URL(fileURLWithPath: "/tmp/tdm-ctl-\(UInt32.random(in: 0...UInt32.max))")
        tempDirs.append(url)
        return DataDirectory(url: url)
    }

    private func withServer<R>(_ dir: DataDirectory? = nil, router: ControlRouter = ControlRouter(),
                               configuration: ControlServer.Configuration = .init(),
                               _ body: (ControlServer, DataDirectory) async throws -> R) async throws -> R {
        let dir = dir ?? makeDir()
        let server = ControlServer(directory: dir, router: router, configuration: configuration, logger: logger)
        let task = Task { try await server.run() }
        defer { task.cancel() }
        _ = try await server.waitUntilReady()
        let result = try await body(server, dir)
        task.cancel()
        _ = await task.result
        return result
    }

    // MARK: - Calls

    func testPingAndUnknownMethod() async throws {
        try await withServer { _, dir in
            let client = try await ControlClient.connect(dataDirectory: dir)
            defer { client.close() }
            let pong = try await client.call(method: "ping")
            XCTAssertEqual(pong, ["pong": true])
            do {
                _ = try await client.call(method: "no.such.method")
                XCTFail("expected an error")
            } catch let error as ControlError {
                XCTAssertTrue(error.message.contains("no.such.method"), error.message)
                XCTAssertEqual(error.exitCode, 1)
            }
            // The connection stays usable.
            try await assertPong(client)
        }
    }

    func testHandlerErrorsBecomeErrorResponses() async throws {
        let router = ControlRouter()
        router.register("fail.control") { _ in throw ControlError.notFound("no friend called bob") }
        router.register("fail.tandem") { _ in throw TandemError("not allowed", exitCode: 5) }
        router.register("fail.other") { _ in throw CocoaError(.fileNoSuchFile) }
        router.register("echo") { params in params }
        try await withServer(router: router) { _, dir in
            let raw = try RawConnection(path: dir.controlSocket.path)
            defer { raw.close() }
            let control = try raw.request(#"{"id":1,"method":"fail.control"}"#)
            XCTAssertEqual(control["ok"], false)
            XCTAssertEqual(control["error"]?["code"], "not_found")
            XCTAssertEqual(control["error"]?["message"], "no friend called bob")
            XCTAssertEqual(control["error"]?["exit"], 1)
            let tandem = try raw.request(#"{"id":2,"method":"fail.tandem"}"#)
            XCTAssertEqual(tandem["error"]?["exit"], 5)
            XCTAssertEqual(tandem["error"]?["message"], "not allowed")
            let other = try raw.request(#"{"id":3,"method":"fail.other"}"#)
            XCTAssertEqual(other["error"]?["code"], "internal")
            XCTAssertFalse(other["error"]?["message"]?.stringValue?.contains("\n") ?? true)
            let echo = try raw.request(#"{"id":4,"method":"echo","params":{"a":[1,2.5,"x",null,true]}}"#)
            XCTAssertEqual(echo, ["id": 4, "ok": true, "result": ["a": [1, 2.5, "x", nil, true]]])

            let client = try await ControlClient.connect(dataDirectory: dir)
            defer { client.close() }
            do {
                _ = try await client.call(method: "fail.tandem")
                XCTFail("expected an error")
            } catch let error as ControlError {
                XCTAssertEqual(error.exitCode, 5)
                XCTAssertEqual(error.message, "not allowed")
            }
        }
    }

    func testMalformedLinesGetErrorsAndTheConnectionStaysUsable() async throws {
        try await withServer { _, dir in
            let raw = try RawConnection(path: dir.controlSocket.path)
            defer { raw.close() }
            for bad in ["{not json", "[1,2]", #"{"method":"ping"}"#, "\u{1}\u{2}garbage\u{ff}", #"{"id":"x","method":"ping"}"#] {
                let response = try raw.request(bad)
                XCTAssertEqual(response["ok"], false, bad)
                XCTAssertEqual(response["id"], .null, bad)
                XCTAssertEqual(response["error"]?["code"], "bad_request", bad)
            }
            let noMethod = try raw.request(#"{"id":7}"#)
            XCTAssertEqual(noMethod["id"], 7)
            XCTAssertEqual(noMethod["error"]?["code"], "bad_request")
            let badParams = try raw.request(#"{"id":8,"method":"ping","params":[1]}"#)
            XCTAssertEqual(badParams["error"]?["code"], "bad_request")
            try raw.send("\n  \n")  // blank lines are ignored
            XCTAssertEqual(try raw.request("{\"id\":9,\"method\":\"ping\"}\r"), ["id": 9, "ok": true, "result": ["pong": true]])
        }
    }

    func testTooLongLineIsRefusedAndClosed() async throws {
        try await withServer { _, dir in
            let raw = try RawConnection(path: dir.controlSocket.path)
            defer { raw.close() }
            // Well past the limit, with no newline: the server must answer without waiting for one.
            try raw.send(String(repeating: "x", count: ControlProtocol.maximumLineLength + 10), newline: false)
            let response = try raw.readLine()
            XCTAssertEqual(response?["error"]?["code"], "line_too_long")
            XCTAssertNil(try raw.readLine(), "the server closes the connection")
            // Others are unaffected.
            let client = try await ControlClient.connect(dataDirectory: dir)
            defer { client.close() }
            try await assertPong(client)
        }
    }

    func testLineAtTheLimitIsAccepted() async throws {
        let router = ControlRouter()
        router.register("len") { params in .int(Int64(params["pad"]?.stringValue?.count ?? 0)) }
        try await withServer(router: router) { _, dir in
            let raw = try RawConnection(path: dir.controlSocket.path)
            defer { raw.close() }
            let prefix = #"{"id":1,"method":"len","params":{"pad":""#
            let suffix = #""}}"#
            let pad = String(repeating: "a", count: ControlProtocol.maximumLineLength - prefix.count - suffix.count)
            let response = try raw.request(prefix + pad + suffix)
            XCTAssertEqual(response["result"], .int(Int64(pad.count)))
        }
    }

    func testSlowHandlerDoesNotBlockOthersAndClientsRunConcurrently() async throws {
        let router = ControlRouter()
        router.register("slow") { _ in
            try await Task.sleep(for: .milliseconds(300))
            return "done"
        }
        try await withServer(router: router) { _, dir in
            let clock = ContinuousClock()
            let started = clock.now
            try await withThrowingTaskGroup(of: JSONValue.self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        let client = try await ControlClient.connect(dataDirectory: dir)
                        defer { client.close() }
                        return try await client.call(method: "slow")
                    }
                }
                // A ping on another connection answers while the slow calls run.
                let client = try await ControlClient.connect(dataDirectory: dir)
                defer { client.close() }
                let pingStart = clock.now
                try await assertPong(client)
                XCTAssertLessThan(clock.now - pingStart, .milliseconds(250))
                for try await result in group { XCTAssertEqual(result, "done") }
            }
            XCTAssertLessThan(clock.now - started, .seconds(3), "20 × 300 ms ran concurrently")
        }
    }

    func testRequestsOnOneConnectionRunConcurrently() async throws {
        let router = ControlRouter()
        router.register("sleep") { params in
            try await Task.sleep(for: .milliseconds(params["ms"]?.intValue ?? 0))
            return params["ms"] ?? nil
        }
        try await withServer(router: router) { _, dir in
            let raw = try RawConnection(path: dir.controlSocket.path)
            defer { raw.close() }
            try raw.send(#"{"id":1,"method":"sleep","params":{"ms":400}}"#)
            try raw.send(#"{"id":2,"method":"sleep","params":{"ms":0}}"#)
            XCTAssertEqual(try raw.readLine()?["id"], 2, "the quick answer comes first")
            XCTAssertEqual(try raw.readLine()?["id"], 1)
        }
    }

    func testConnectionLimit() async throws {
        var configuration = ControlServer.Configuration()
        configuration.maximumConnections = 2
        try await withServer(configuration: configuration) { server, dir in
            let a = try RawConnection(path: dir.controlSocket.path)
            let b = try RawConnection(path: dir.controlSocket.path)
            defer { a.close(); b.close() }
            XCTAssertEqual(try a.request(#"{"id":1,"method":"ping"}"#)["ok"], true)
            XCTAssertEqual(try b.request(#"{"id":1,"method":"ping"}"#)["ok"], true)
            let c = try RawConnection(path: dir.controlSocket.path)
            defer { c.close() }
            XCTAssertEqual(try c.readLine()?["error"]?["code"], "busy")
            XCTAssertNil(try c.readLine())
            a.close()
            let freed = await eventually { server.connectionCount < 2 }
            XCTAssertTrue(freed)
            let d = try RawConnection(path: dir.controlSocket.path)
            defer { d.close() }
            XCTAssertEqual(try d.request(#"{"id":1,"method":"ping"}"#)["ok"], true)
        }
    }

    func testHalfClosedClientStillGetsItsAnswers() async throws {
        try await withServer { _, dir in
            let raw = try RawConnection(path: dir.controlSocket.path)
            defer { raw.close() }
            try raw.send(#"{"id":1,"method":"ping"}"#)
            raw.shutdownWrite()
            XCTAssertEqual(try raw.readLine()?["result"], ["pong": true])
            XCTAssertNil(try raw.readLine())
        }
    }

    // MARK: - The socket file

    func testSocketModeIsPrivateAndRemovedOnShutdown() async throws {
        let dir = makeDir()
        try await withServer(dir) { _, dir in
            var st = stat()
            XCTAssertEqual(lstat(dir.controlSocket.path, &st), 0)
            XCTAssertEqual(st.st_mode & S_IFMT, S_IFSOCK)
            XCTAssertEqual(st.st_mode & 0o777, 0o600)
            // No temporary directory is left behind.
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(".c") && $0 != "control.sock" }
            XCTAssertEqual(leftovers, [])
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.controlSocket.path))
        do {
            _ = try await ControlClient.connect(dataDirectory: dir)
            XCTFail("expected no node")
        } catch let error as NodeError {
            XCTAssertEqual(error.exitCode, ControlError.noNodeExitCode)
            XCTAssertTrue(error.message.hasPrefix("no node is running for \(dir.path)"), error.message)
            XCTAssertTrue(error.message.contains("tandem node --data-dir \(dir.path)"), error.message)
        }
    }

    func testStaleSocketFileIsReplaced() async throws {
        let dir = makeDir()
        try dir.create()
        // A socket file nobody listens on, as a crashed node leaves it.
        let fd = try bindUnixSocket(dir.controlSocket.path, listening: false)
        close(fd)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir.controlSocket.path))
        try await withServer(dir) { _, dir in
            let client = try await ControlClient.connect(dataDirectory: dir)
            defer { client.close() }
            try await assertPong(client)
        }
    }

    func testSecondServerOnTheSameDirectoryIsRefused() async throws {
        try await withServer { _, dir in
            let second = ControlServer(directory: dir, router: ControlRouter(), logger: logger)
            do {
                try await second.run()
                XCTFail("expected a refusal")
            } catch let error as NodeError {
                XCTAssertEqual(error.message, "another node is already running with data dir \(dir.path)")
            }
            // The first one is untouched.
            let client = try await ControlClient.connect(dataDirectory: dir)
            defer { client.close() }
            try await assertPong(client)
        }
    }

    func testALiveListenerWithoutTheLockIsNotReplaced() async throws {
        let dir = makeDir()
        try dir.create()
        let fd = try bindUnixSocket(dir.controlSocket.path, listening: true)
        defer { close(fd) }
        let server = ControlServer(directory: dir, router: ControlRouter(), logger: logger)
        do {
            try await server.run()
            XCTFail("expected a refusal")
        } catch let error as NodeError {
            XCTAssertTrue(error.message.hasPrefix("another node is already running"), error.message)
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir.controlSocket.path))
    }

    func testANonSocketFileIsNotRemoved() async throws {
        let dir = makeDir()
        try dir.create()
        XCTAssertTrue(FileManager.default.createFile(atPath: dir.controlSocket.path, contents: Data("keep".utf8)))
        let server = ControlServer(directory: dir, router: ControlRouter(), logger: logger)
        do {
            try await server.run()
            XCTFail("expected a refusal")
        } catch let error as NodeError {
            XCTAssertTrue(error.message.contains("is not a socket"), error.message)
        }
        XCTAssertEqual(FileManager.default.contents(atPath: dir.controlSocket.path), Data("keep".utf8))
    }

    func testTooLongDataDirectoryIsOneClearError() async throws {
        let dir = DataDirectory(url: URL(fileURLWithPath: "/tmp/" + String(repeating: "d", count: 100)))
        tempDirs.append(dir.url)
        let server = ControlServer(directory: dir, router: ControlRouter(), logger: logger)
        do {
            try await server.run()
            XCTFail("expected an error")
        } catch let error as NodeError {
            XCTAssertTrue(error.message.contains("too long for a Unix socket"), error.message)
        }
        do {
            _ = try await ControlClient.connect(dataDirectory: dir)
            XCTFail("expected an error")
        } catch let error as NodeError {
            XCTAssertTrue(error.message.contains("too long for a Unix socket"), error.message)
        }
        // The lock was released: nothing is left claiming the directory.
        let again = ControlServer(directory: dir, router: ControlRouter(), logger: logger)
        XCTAssertNoThrow(try again.claimDataDirectory())
    }

    func testRestartAfterShutdown() async throws {
        let dir = makeDir()
        for _ in 0..<3 {
            try await withServer(dir) { _, dir in
                let client = try await ControlClient.connect(dataDirectory: dir)
                defer { client.close() }
                try await assertPong(client)
            }
        }
    }

    // MARK: - Streams

    func testStreamEndsWhenTheHandlerReturnsAndIsCancelledWhenTheClientLeaves() async throws {
        let router = ControlRouter()
        router.registerStream("count") { params, writer in
            for i in 0..<(params["n"]?.intValue ?? 0) { try await writer.send(.int(i)) }
        }
        let bus = EventBus(log: InMemoryEventLog())
        bus.registerControlMethods(on: router)
        try await withServer(router: router) { _, dir in
            let client = try await ControlClient.connect(dataDirectory: dir)
            var items: [JSONValue] = []
            for try await item in client.stream(method: "count", params: ["n": 5]) { items.append(item) }
            XCTAssertEqual(items, [0, 1, 2, 3, 4])
            try await assertPong(client)
            client.close()

            // A subscriber whose client goes away is unsubscribed.
            let raw = try RawConnection(path: dir.controlSocket.path)
            try raw.send(#"{"id":1,"method":"events.subscribe","params":{}}"#)
            let subscribed = await eventually { bus.subscriberCount == 1 }
            XCTAssertTrue(subscribed)
            await bus.emit("x.test", ["n": 1])
            let event = try raw.readLine()
            XCTAssertEqual(event?["id"], 1)
            XCTAssertEqual(event?["event"]?["type"], "x.test")
            XCTAssertEqual(event?["event"]?["fields"], ["n": 1])
            raw.close()
            let gone = await eventually { bus.subscriberCount == 0 }
            XCTAssertTrue(gone)
        }
    }

    func testEventsOverTheSocket() async throws {
        let router = ControlRouter()
        let bus = EventBus(log: InMemoryEventLog())
        bus.registerControlMethods(on: router)
        for i in 1...5 { await bus.emit(i % 2 == 0 ? "friend.added" : "other", ["i": .int(Int64(i))]) }
        try await withServer(router: router) { _, dir in
            let client = try await ControlClient.connect(dataDirectory: dir)
            defer { client.close() }
            let all = try await client.call(method: "events.list")
            XCTAssertEqual(all["last_seq"], 5)
            XCTAssertEqual(all["events"]?.arrayValue?.count, 5)
            let page = try await client.call(method: "events.list", params: ["since": 1, "limit": 2])
            XCTAssertEqual(page["events"]?.arrayValue?.compactMap { $0["seq"]?.intValue }, [2, 3])
            XCTAssertEqual(page["more"], true)
            XCTAssertEqual(page["next_since"], 3)
            let friends = try await client.call(method: "events.list", params: ["types": ["friend.*"]])
            XCTAssertEqual(friends["events"]?.arrayValue?.compactMap { $0["seq"]?.intValue }, [2, 4])
            do {
                _ = try await client.call(method: "events.list", params: ["limit": 100_000])
                XCTFail("expected invalid")
            } catch let error as ControlError {
                XCTAssertEqual(error.exitCode, ControlError.usageExitCode)
            }

            // Replay from 3, then live.
            var received: [Int64] = []
            let stream = client.stream(method: "events.subscribe", params: ["since": 3])
            for try await item in stream {
                let event = try XCTUnwrap(NodeEvent(json: item))
                received.append(event.seq)
                if event.seq == 5 { await bus.emit("later") }
                if event.seq == 6 { break }
            }
            XCTAssertEqual(received, [4, 5, 6])
        }
    }

    // MARK: - Event bus

    func testReplayThenLiveWithoutGapsOrDuplicatesUnderConcurrentEmits() async throws {
        // Several rounds: the race this guards against (an emit overtaken by a replay page) is rare.
        for _ in 0..<8 { try await replayThenLiveRound() }
    }

    private func replayThenLiveRound() async throws {
        let bus = EventBus(log: InMemoryEventLog(capacity: 100_000))
        for i in 0..<500 { await bus.emit("before", ["i": .int(Int64(i))]) }
        let emitters = 4, perEmitter = 500
        let total = 500 + emitters * perEmitter
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var seqs: [Int64] = []
                for await event in bus.subscribe(since: 0) {
                    seqs.append(event.seq)
                    if seqs.count == total { break }
                }
                XCTAssertEqual(seqs, Array(1...Int64(total)))
            }
            group.addTask {
                // Starts mid-way: gets exactly the events after 250.
                var seqs: [Int64] = []
                for await event in bus.subscribe(since: 250) {
                    seqs.append(event.seq)
                    if seqs.count == total - 250 { break }
                }
                XCTAssertEqual(seqs, Array(251...Int64(total)))
            }
            for e in 0..<emitters {
                group.addTask {
                    for i in 0..<perEmitter {
                        await bus.emit("during", ["e": .int(Int64(e)), "i": .int(Int64(i))])
                        if i % 50 == 0 { await Task.yield() }
                    }
                }
            }
            try await group.waitForAll()
        }
        let settled = await eventually { bus.subscriberCount == 0 }
        XCTAssertTrue(settled, "finished subscribers are removed")
    }

    func testLiveOnlySubscriptionStartsNow() async throws {
        let bus = EventBus(log: InMemoryEventLog())
        await bus.emit("old")
        let stream = bus.subscribe(since: nil)
        await bus.emit("new")
        var iterator = stream.makeAsyncIterator()
        let event = await iterator.next()
        XCTAssertEqual(event?.type, "new")
        XCTAssertEqual(event?.seq, 2)
    }

    func testSlowSubscriberOverflowIsBounded() async throws {
        let bus = EventBus(log: InMemoryEventLog(capacity: 100_000), subscriberBuffer: 100)
        let stream = bus.subscribe(since: nil)
        for i in 0..<5000 { await bus.emit("flood", ["i": .int(Int64(i))]) }
        XCTAssertEqual(bus.subscriberCount, 0, "the overflowing subscriber was dropped at once")
        var events: [NodeEvent] = []
        for await event in stream { events.append(event) }
        XCTAssertEqual(events.count, 101)
        XCTAssertEqual(events.dropLast().map(\.seq), Array(1...100))
        let marker = try XCTUnwrap(events.last)
        XCTAssertEqual(marker.type, NodeEvent.overflowType)
        XCTAssertEqual(marker.seq, 100, "the marker's seq is where to resume")
        XCTAssertEqual(marker.fields["resume_since"], 100)
        // Resuming from the marker continues without a gap.
        var iterator = bus.subscribe(since: marker.seq).makeAsyncIterator()
        let next = await iterator.next()
        XCTAssertEqual(next?.seq, 101)
    }

    func testALaggingSubscriberGetsEveryEventOnceInOrder() async throws {
        // The buffer grows and shrinks in turn (a subscriber hundreds of events behind, then taking
        // some, while more come): each event once, in seq order, and no overflow below the bound.
        let bus = EventBus(log: InMemoryEventLog(capacity: 100_000), subscriberBuffer: 1_000)
        var iterator = bus.subscribe(since: nil).makeAsyncIterator()
        var seqs: [Int64] = []
        for round in 0..<6 {
            for _ in 0..<300 { await bus.emit("burst") }
            for _ in 0..<(round % 2 == 0 ? 150 : 400) {
                guard let event = await iterator.next() else { break }
                XCTAssertEqual(event.type, "burst")
                seqs.append(event.seq)
            }
        }
        while seqs.count < 1_800, let event = await iterator.next() { seqs.append(event.seq) }
        XCTAssertEqual(seqs, Array(1...1_800))
        XCTAssertEqual(bus.subscriberCount, 1, "never more than the buffer behind: still subscribed")
    }

    func testOverflowWhileReplaying() async throws {
        let bus = EventBus(log: InMemoryEventLog(capacity: 100_000), subscriberBuffer: 10)
        for _ in 0..<1000 { await bus.emit("stored") }
        var iterator = bus.subscribe(since: 0).makeAsyncIterator()
        let first = await iterator.next()
        XCTAssertEqual(first?.seq, 1)
        // Replay pages come from the log, so stored events do not count; live ones do.
        for _ in 0..<50 { await bus.emit("live") }
        var seqs: [Int64] = []
        var marker: NodeEvent?
        while let event = await iterator.next() {
            if event.type == NodeEvent.overflowType { marker = event } else { seqs.append(event.seq) }
        }
        let m = try XCTUnwrap(marker)
        XCTAssertEqual(seqs, Array(2...m.seq))
        XCTAssertLessThan(m.seq, 1050)
    }

    func testCancellingASubscriberEndsIt() async throws {
        let bus = EventBus(log: InMemoryEventLog())
        let task = Task {
            var n = 0
            for await _ in bus.subscribe(since: nil) { n += 1 }
            return n
        }
        let subscribed = await eventually { bus.subscriberCount == 1 }
        XCTAssertTrue(subscribed)
        task.cancel()
        _ = await task.value
        let gone = await eventually { bus.subscriberCount == 0 }
        XCTAssertTrue(gone)
    }

    func testInMemoryLogIsBounded() throws {
        let log = InMemoryEventLog(capacity: 10)
        try NodeCore.blocking { for _ in 0..<25 { _ = try log.append(type: "t", timeMs: 1, fields: [:]) } }
        XCTAssertEqual(try log.lastSeq(), 25)
        XCTAssertEqual(try log.events(since: 0, limit: 100).map(\.seq), Array(16...25))
        XCTAssertEqual(try log.events(since: 20, limit: 3).map(\.seq), [21, 22, 23])
        XCTAssertEqual(try log.events(since: 25, limit: 3), [])
        XCTAssertEqual(try log.events(since: 0, limit: 0), [])
    }

    func testNodeRuntimeServesControlAndAnnouncesItself() async throws {
        let dir = makeDir()
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let node = try NodeRuntime(identity: .generate(), configuration: config, dataDirectory: dir, logger: logger)
        let task = Task { try await node.run(signals: false) }
        defer { task.cancel() }
        _ = try await node.controlServer?.waitUntilReady()
        let port = try await node.listener.boundAddress.port!
        let client = try await ControlClient.connect(dataDirectory: dir)
        var iterator = client.stream(method: "events.subscribe", params: ["since": 0, "types": ["node.started"]]).makeAsyncIterator()
        let first = try await iterator.next()
        let started = first.flatMap(NodeEvent.init(json:))
        XCTAssertEqual(started?.fields["address"], .string("127.0.0.1:\(port)"))
        XCTAssertEqual(started?.fields["id"], .string(node.id.canonical))
        client.close()
        task.cancel()
        _ = await task.result
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.controlSocket.path))

        // Without a data directory there is no control server (the old initializer still works).
        let plain = try NodeRuntime(identity: .generate(), configuration: config, logger: logger)
        XCTAssertNil(plain.controlServer)
    }

    // MARK: - Codecs and parsing

    func testLineDecoderInAllSplits() throws {
        let input = Array("{\"a\":1}\n\r\nxy\r\n\nlast".utf8)
        let expected: [ControlInbound] = [.line(ByteBuffer(string: "{\"a\":1}")), .line(ByteBuffer(string: "")),
                                          .line(ByteBuffer(string: "xy")), .line(ByteBuffer(string: ""))]
        for split in 0...input.count {
            for split2 in split...input.count {
                var decoder = ControlLineDecoder(maximumLineLength: 16)
                var buffer = ByteBuffer()
                var out: [ControlInbound] = []
                for chunk in [input[..<split], input[split..<split2], input[split2...]] {
                    buffer.writeBytes(chunk)
                    while let item = decoder.next(&buffer) { out.append(item) }
                }
                XCTAssertEqual(out, expected, "splits at \(split), \(split2)")
            }
        }
    }

    func testLineDecoderLimit() throws {
        var decoder = ControlLineDecoder(maximumLineLength: 4)
        var buffer = ByteBuffer(string: "abcd\nabcd\r\nabcde")
        XCTAssertEqual(decoder.next(&buffer), .line(ByteBuffer(string: "abcd")))
        XCTAssertEqual(decoder.next(&buffer), .line(ByteBuffer(string: "abcd")))
        // "abcde" has no newline yet but already exceeds 4 (+1 for a possible \r)? Not yet: 5 bytes.
        XCTAssertNil(decoder.next(&buffer))
        buffer.writeString("f")
        XCTAssertEqual(decoder.next(&buffer), .tooLong)
        buffer.writeString("\n{\"ok\":1}\n")
        XCTAssertNil(decoder.next(&buffer), "everything after an overlong line is dropped")
        XCTAssertEqual(buffer.readableBytes, 0)

        var d2 = ControlLineDecoder(maximumLineLength: 4)
        var b2 = ByteBuffer(string: "abcde\n")
        XCTAssertEqual(d2.next(&b2), .tooLong)
    }

    func testLineDecoderInAPipeline() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(ControlLineDecoder(maximumLineLength: 8)))
        try channel.writeInbound(ByteBuffer(string: "one\ntw"))
        try channel.writeInbound(ByteBuffer(string: "o\n"))
        XCTAssertEqual(try channel.readInbound(as: ControlInbound.self), .line(ByteBuffer(string: "one")))
        XCTAssertEqual(try channel.readInbound(as: ControlInbound.self), .line(ByteBuffer(string: "two")))
        try channel.writeInbound(ByteBuffer(string: String(repeating: "z", count: 100)))
        XCTAssertEqual(try channel.readInbound(as: ControlInbound.self), .tooLong)
        XCTAssertNil(try channel.readInbound(as: ControlInbound.self))
        _ = try channel.finish()
    }

    func testJSONValueRoundTripKeepsTypes() throws {
        let text = #"{"a":true,"b":1,"c":1.5,"d":"s","e":null,"f":[false,0,-7],"g":{"h":9007199254740993}}"#
        let value = try JSONValue.parse(text)
        XCTAssertEqual(value["a"], .bool(true))
        XCTAssertEqual(value["b"], .int(1))
        XCTAssertEqual(value["c"], .double(1.5))
        XCTAssertEqual(value["e"], .null)
        XCTAssertEqual(value["f"], [false, 0, -7])
        XCTAssertEqual(value["g"]?["h"]?.intValue, 9_007_199_254_740_993)
        XCTAssertEqual(try JSONValue.parse(value.compactJSON), value)
        XCTAssertEqual(JSONValue.double(.nan).compactJSON, "null")
        XCTAssertEqual(JSONValue.string("a/b").compactJSON, #""a/b""#)
        XCTAssertEqual(value["f"]?[2]?.intValue, -7)
        XCTAssertNil(value["f"]?[3])
        XCTAssertEqual(JSONValue.int(12).textValue, "12")
        XCTAssertEqual(JSONValue.bool(true).textValue, "true")
        XCTAssertEqual(JSONValue.string("x y").textValue, "x y")
    }

    func testRequestParsing() throws {
        guard case .success(let request) = ControlRequest.parse(ByteBuffer(string: #"{"id":3,"method":"friend.request","params":{"id":"tdm1x"}}"#)) else {
            return XCTFail("expected a request")
        }
        XCTAssertEqual(request, ControlRequest(id: 3, method: "friend.request", params: ["id": "tdm1x"]))
        guard case .success(let noParams) = ControlRequest.parse(ByteBuffer(string: #"{"id":4,"method":"ping"}"#)) else {
            return XCTFail("expected a request")
        }
        XCTAssertEqual(noParams.params, [:])
        let line = ControlResponse.error(id: 5, .notFound("gone")).encoded(allocator: .init())
        XCTAssertEqual(String(buffer: line), #"{"error":{"code":"not_found","exit":1,"message":"gone"},"id":5,"ok":false}"# + "\n")
        XCTAssertEqual(try ControlResponse.parse(line.getSlice(at: 0, length: line.readableBytes - 1)!), .error(id: 5, .notFound("gone")))
    }

    func testDurationParsing() throws {
        XCTAssertEqual(try DurationText.parse("500ms"), .milliseconds(500))
        XCTAssertEqual(try DurationText.parse("30s"), .seconds(30))
        XCTAssertEqual(try DurationText.parse("2m"), .seconds(120))
        XCTAssertEqual(try DurationText.parse("1h"), .seconds(3600))
        XCTAssertEqual(try DurationText.parse("1d"), .seconds(86_400))
        XCTAssertEqual(try DurationText.parse("1m30s"), .seconds(90))
        XCTAssertEqual(try DurationText.parse("45"), .seconds(45))
        XCTAssertEqual(try DurationText.parse("0s"), .zero)
        XCTAssertEqual(try DurationText.parse(" 2H "), .seconds(7200))
        for bad in ["", "s", "10x", "1.5s", "-1s", "ms", "10 s", "99999999999999h", "400d", "1h-2m"] {
            XCTAssertThrowsError(try DurationText.parse(bad), bad) { error in
                XCTAssertEqual((error as? TandemError)?.exitCode, TandemError.usageExitCode, bad)
            }
        }
        XCTAssertEqual(DurationText.format(.milliseconds(500)), "500ms")
        XCTAssertEqual(DurationText.format(.milliseconds(1500)), "1.5s")
        XCTAssertEqual(DurationText.format(.seconds(30)), "30s")
        XCTAssertEqual(DurationText.format(.seconds(90)), "1m30s")
        XCTAssertEqual(DurationText.format(.seconds(3600)), "1h")
    }

    func testEventFormsAndMatching() throws {
        let event = NodeEvent(seq: 12, type: "friend.accepted", timeMs: 1_700_000_000_123,
                              fields: ["name": "bob", "n": 3, "seq": "ignored", "note": "two words"])
        XCTAssertEqual(event.flatJSON["seq"], 12)
        XCTAssertEqual(event.flatJSON["time"], "2023-11-14T22:13:20.123Z")
        XCTAssertEqual(event.flatJSON["time_ms"], .int(1_700_000_000_123))
        XCTAssertEqual(event.flatJSON["name"], "bob")
        XCTAssertEqual(event.textLine(zone: TimeZone(identifier: "UTC")!),
                       #"#12 2023-11-14 22:13:20.123+00:00 friend.accepted n=3 name=bob note="two words" seq=ignored"#)
        // People read local time: the same instant in Oslo (UTC+1 in November).
        XCTAssertTrue(event.textLine(zone: TimeZone(identifier: "Europe/Oslo")!).hasPrefix("#12 2023-11-14 23:13:20.123+01:00 "))
        XCTAssertTrue(event.matches([try FieldCondition(parsing: "name=bob"), try FieldCondition(parsing: "n=3")]))
        XCTAssertFalse(event.matches([try FieldCondition(parsing: "name=alice")]))
        XCTAssertFalse(event.matches([try FieldCondition(parsing: "missing=")]))
        XCTAssertEqual(try FieldCondition(parsing: "a=b=c"), FieldCondition(key: "a", value: "b=c"))
        XCTAssertThrowsError(try FieldCondition(parsing: "=x"))
        XCTAssertThrowsError(try FieldCondition(parsing: "novalue"))
        XCTAssertEqual(NodeEvent(json: event.jsonValue), event)
        XCTAssertTrue(EventTypeFilter(["friend.*"]).matches("friend.accepted"))
        XCTAssertFalse(EventTypeFilter(["friend.*"]).matches("friendship"))
        XCTAssertTrue(EventTypeFilter([]).matches("anything"))
    }

    // MARK: - Helpers

    private func assertPong(_ client: ControlClient, file: StaticString = #filePath, line: UInt = #line) async throws {
        let pong = try await client.call(method: "ping")
        XCTAssertEqual(pong, ["pong": true], file: file, line: line)
    }

    private func eventually(_ seconds: Double = 5, _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }
}

/// Binds a Unix socket at `path` (listening or not) and returns its descriptor.
func bindUnixSocket(_ path: String, listening: Bool) throws -> Int32 {
    #if canImport(Glibc)
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_UNIX, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw TandemError("socket failed") }
    var address = unixAddress(path)
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0 else { close(fd); throw TandemError("bind failed: \(String(cString: strerror(errno)))") }
    if listening { listen(fd, 4) }
    return fd
}

private func posixClose(_ fd: Int32) { close(fd) }
private func posixSend(_ fd: Int32, _ bytes: UnsafeRawPointer?, _ count: Int, _ flags: Int32) -> Int { send(fd, bytes, count, flags) }

func unixAddress(_ path: String) -> sockaddr_un {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    return address
}

/// A blocking client speaking raw lines, for what the real client never sends. Reads time out after 5 s.
final class RawConnection {
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var closed = false

    init(path: String) throws {
        #if canImport(Glibc)
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #else
        fd = socket(AF_UNIX, SOCK_STREAM, 0)
        #endif
        var address = unixAddress(path)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { posixClose(fd); throw TandemError("connect failed: \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    func send(_ text: String, newline: Bool = true) throws {
        let bytes = Array((newline ? text + "\n" : text).utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { posixSend(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw TandemError("send failed: \(String(cString: strerror(errno)))") }
            offset += n
        }
    }

    /// The next line as JSON; nil at end of stream.
    func readLine() throws -> JSONValue? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return try JSONValue.parse(Data(line))
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return nil }
            if n < 0 {
                if errno == ECONNRESET { return nil }
                throw TandemError("recv failed: \(String(cString: strerror(errno)))")
            }
            buffer += chunk[..<n]
        }
    }

    func request(_ line: String) throws -> JSONValue {
        try send(line)
        guard let response = try readLine() else { throw TandemError("connection closed") }
        return response
    }

    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    func close() {
        if !closed {
            closed = true
            posixClose(fd)
        }
    }

    deinit { close() }
}
