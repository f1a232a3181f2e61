import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemNode
import TandemProtocol

/// `tandem dev flood`: a hostile stranger for tests. Over one authenticated link it sends friend
/// requests signed by many throwaway identities (frames stay valid when someone else carries them),
/// and reports how many the node acknowledged.
struct DevFlood: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flood",
        abstract: "Send many friend requests from throwaway identities to a node (abuse testing).")

    @Argument(help: ArgumentHelp("The node's address.", valueName: "host:port")) var address: String
    @Argument(help: ArgumentHelp("The node's Tandem ID.", valueName: "ID")) var id: String
    @Option(help: "How many requests (each from a new identity).") var count: Int = 10_000
    @Option(help: "Bytes of message text in each request.") var messageBytes: Int = 100
    @Option(help: ArgumentHelp("After sending, wait until this many seconds pass without an acknowledgement (at most 60 s).", valueName: "seconds")) var settle: Double = 2

    func validate() throws {
        guard (1...1_000_000).contains(count) else { throw ValidationError("--count must be between 1 and 1000000") }
        guard (0...60).contains(settle) else { throw ValidationError("--settle must be between 0 and 60 seconds") }
    }

    func run() async throws {
        let remote = try parseID(id)
        let (host, port) = try NodeConfiguration.parseHostPort(address, defaultHost: "127.0.0.1")
        var logger = Logger(label: "tandem.flood")
        logger.logLevel = .critical
        let carrier = SigningKeyPair.generate()
        let counter = AckCounter()
        let gate = FrameGate(localPublicKey: carrier.publicKey, metrics: TransportMetrics())
        let (link, _) = try await PeerConnector.connect(host: host, port: port, remote: remote.publicKey, identity: carrier,
                                                        gate: gate, delegate: counter, group: MultiThreadedEventLoopGroup.singleton,
                                                        logger: logger)
        let start = ContinuousClock.now
        var contact = Tandem_V1_ContactRecord()
        var request = Tandem_V1_FriendRequest()
        request.message = String(repeating: "x", count: messageBytes)
        for i in 0..<count {
            let throwaway = SigningKeyPair.generate()
            contact.publicKey = Data(throwaway.publicKey)
            contact.displayName = "flood-\(i)"
            contact.version = 1
            request.contact = contact
            let env = Envelope.sign(type: .friendRequest, author: throwaway, recipient: remote.publicKey,
                                    createdAt: wallClockMilliseconds(), payload: try request.serializedBytes())
            link.send(env, flush: i % 64 == 63)
        }
        link.channel.flush()
        let sent = ContinuousClock.now - start
        // Until `settle` seconds pass with no ACK or ERROR (a loaded node acknowledges late), at most a minute.
        var last = (counter.acks, counter.errors), quiet = ContinuousClock.now
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now - quiet < .milliseconds(Int(settle * 1000)), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            let now = (counter.acks, counter.errors)
            if now != last { last = now; quiet = ContinuousClock.now }
        }
        link.close()
        printJSON(["sent": count, "acknowledged": counter.acks, "errors": counter.errors,
                   "send_seconds": Double(sent.components.seconds) + Double(sent.components.attoseconds) / 1e18])
    }
}

/// Counts ACK frames (requests the node accepted) and ERROR frames.
final class AckCounter: PeerLinkDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var ackCount = 0
    private var errorCount = 0
    var acks: Int { lock.withLock { ackCount } }
    var errors: Int { lock.withLock { errorCount } }

    func link(_ link: PeerLink, received envelope: Envelope) {
        if envelope.type == .ack { lock.withLock { ackCount += 1 } }
    }

    func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {
        lock.withLock { errorCount += 1 }
    }
}
