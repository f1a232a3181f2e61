import Foundation
import Logging
import Sodium
import TandemNet
import TandemNodeCore
import TandemProtocol

extension DemoScenario {
    /// Carol writes to Dave while his node is stopped: the message waits, durable, in her outbox;
    /// when Dave's node starts again it reaches him once, and Carol sees it delivered.
    static func offlineMessageDemo(root: URL, logger: Logger, say: @escaping @Sendable (String) -> Void) async throws {
        let carolDir = DataDirectory(url: root.appendingPathComponent("carol"))
        let daveDir = DataDirectory(url: root.appendingPathComponent("dave"))
        try IdentityFile.create(in: carolDir)
        try IdentityFile.create(in: daveDir)
        let carol = try IdentityFile.load(from: carolDir), dave = try IdentityFile.load(from: daveDir)
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        // A node that comes back dials its friends at once (and again every 200 ms while they are away).
        config.friends.retryTick = .milliseconds(200)
        let carolNode = try NodeRuntime(identity: carol, configuration: config, dataDirectory: carolDir, logger: logger)
        try await carolNode.friends.setName("Carol")
        let carolEvents = carolNode.eventBus.subscribe(since: nil)
        let c = DemoNode(name: "Carol", node: carolNode, events: carolEvents)
        let daveID = NodeID(publicKey: dave.publicKey)

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await carolNode.run(signals: false) }
            let carolPort = try await carolNode.listener.boundAddress.port ?? 0

            // Dave's first run: he and Carol become friends, then his node stops.
            do {
                let daveNode = try NodeRuntime(identity: dave, configuration: config, dataDirectory: daveDir, logger: logger)
                try await daveNode.friends.setName("Dave")
                let daveEvents = daveNode.eventBus.subscribe(since: nil)
                try await withThrowingTaskGroup(of: Void.self) { daveTasks in
                    daveTasks.addTask { try await daveNode.run(signals: false) }
                    _ = try await daveNode.listener.boundAddress
                    _ = try await daveNode.friends.request(carol.publicKey, message: "", address: ("127.0.0.1", carolPort))
                    _ = try await next(carolEvents, "friend.request.received", ["id": daveID.canonical])
                    _ = try await carolNode.friends.accept(dave.publicKey)
                    _ = try await next(daveEvents, "friend.accepted", [:])
                    daveTasks.cancelAll()
                }
            }
            say("12. Two more friends, Carol and Dave. Dave's node stops (his laptop is closed).")
            let text = "are you in for tomorrow 7:00?"
            let sent = try await c.call("message.send", .object(["to": .string(daveID.canonical), "text": .string(text)]))
            let id = sent["id"]?.stringValue ?? ""
            let state = try await c.call("message.list", .object(["friend": .string(daveID.canonical)]))["messages"]?.arrayValue?
                .first { $0["id"]?.stringValue == id }?["state"]?.stringValue ?? "?"
            say("    Carol writes to him anyway (`tandem message send Dave \"\(text)\"`): the command returns at once,")
            say("    the message is durable in her outbox, state \(state).")

            // Dave's node starts again, from the same data directory.
            let daveNode = try NodeRuntime(identity: dave, configuration: config, dataDirectory: daveDir, logger: logger)
            let daveEvents = daveNode.eventBus.subscribe(since: nil)
            let d = DemoNode(name: "Dave", node: daveNode, events: daveEvents)
            try await withThrowingTaskGroup(of: Void.self) { daveTasks in
                daveTasks.addTask { try await daveNode.run(signals: false) }
                _ = try await next(daveEvents, "message.received", ["id": id])
                _ = try await next(carolEvents, "message.delivered", ["id": id])
                let shown = try await d.call("message.list", .object(["friend": .string(NodeID(publicKey: carol.publicKey).canonical)]))
                let messages = shown["messages"]?.arrayValue ?? []
                let received = try await d.call("events.list", .object(["types": ["message.received"], "limit": 100]))["events"]?
                    .arrayValue?.count ?? 0
                say("    Dave's node starts; it reaches Carol's, her outbox sends the message, and Dave reads it (`tandem message list Carol`):")
                for m in messages {
                    say("      Carol: “\(ChatText.terminalSafe(m["text"]?.stringValue ?? ""))”")
                }
                say("    once: \(messages.count) message shown, \(received) message.received event; Carol's copy is now delivered.")
                daveTasks.cancelAll()
            }
            tasks.cancelAll()
        }
    }
}
