import Foundation
import Logging
import NIOCore
import Sodium
import TandemProtocol
import TandemStore
import TandemNodeCore
import NodeFriends
import NodeChallenges
import NodeBackup
import NodeVault
import NodeFocus

/// A node with no sockets: its real services over an in-memory store, fed frames as if they came
/// from a relay mailbox (the same handlers as a link, without a link to answer on). What the
/// structure-aware fuzz target (`tandem-fuzz -target=node`) and in-process tests drive: every
/// message handler, the store writes they make, and the challenge tick, with nothing listening.
public final class NodeHarness: Sendable {
    public let identity: SigningKeyPair
    public let runtime: NodeRuntime

    public init(identity: SigningKeyPair) throws {
        self.identity = identity
        var configuration = NodeConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.discovery = nil
        var logger = Logger(label: "tandem.harness")
        logger.logLevel = .critical
        runtime = try NodeRuntime(identity: identity, configuration: configuration, dataDirectory: nil, logger: logger)
    }

    /// Forgets everything stored (a fresh node with the same identity and services), so one
    /// harness can serve many short runs.
    public func reset() throws {
        try runtime.store.stepWaiting { step in try step.eraseAll() }
    }

    /// Makes `key` a friend, as if a request and its acceptance had gone through.
    public func befriend(_ key: [UInt8], name: String = "friend") throws {
        let runtime = self.runtime
        try NodeCore.blocking {
            let store = runtime.store
            let now = runtime.outbox.now()
            var request = Tandem_V1_FriendRequest()
            request.contact = runtime.friends.contactRecord(store)
            let frame = runtime.outbox.frame(.friendRequest, to: key, payload: try request.serializedBytes(), in: store)
            try store.step { step in
                _ = try step.requestFriend(key, message: nil, frame: frame, nowMs: now)
                _ = try step.receiveFriendAccept(from: key, displayName: name, record: [], recordVersion: 1, nowMs: now)
            }
        }
    }

    /// A frame that passed the link rules, handed to the flows (as relay mail is), on the core,
    /// while the calling thread waits.
    public func deliver(_ envelope: Envelope) {
        let relay = RelayAddress(id: NodeID(publicKey: identity.publicKey), host: "127.0.0.1", port: 1)
        let router = runtime.frameRouter
        NodeCore.blocking { router.handle([.mail(envelope, relay: relay, done: {})]) }
    }

    /// One round of the challenge loop (expiries, starts, commits).
    public func tick() {
        let challenges = runtime.challenges
        NodeCore.blocking { challenges.inStep { step in challenges.tick(step) } }
    }

    /// Our invites and challenges, as the user would act on them.
    public func acceptFirstInvite() {
        let (store, challenges) = (runtime.store, runtime.challenges)
        NodeCore.blocking {
            // The fuzz target drives hostile input: a step refused is an expected outcome here.
            guard let c = try? store.challenges(phases: [.invited]).first(where: { !$0.isInviter }) else { return }  // fuzzing: a failed read is no challenge
            challenges.inStep { step in _ = try? challenges.mutate(c.id, step) { try $0.accept() } }  // fuzzing: a refused step is an outcome
        }
    }

    public func quitRunning(elapsedMs: Int64) {
        let (store, challenges) = (runtime.store, runtime.challenges)
        NodeCore.blocking {
            // As above: refusals are expected outcomes of hostile input.
            for c in (try? store.challenges(phases: [.scheduled, .running])) ?? [] {  // fuzzing: a failed read is no challenge
                challenges.inStep { step in _ = try? challenges.mutate(c.id, step) { try $0.quit(elapsedMs: elapsedMs, reason: "fuzz") } }  // fuzzing: a refused step is an outcome
            }
        }
    }

    /// Ends every scheduled or running challenge now (what its end timer would do).
    public func endAll() {
        let (store, challenges) = (runtime.store, runtime.challenges)
        NodeCore.blocking {
            for c in (try? store.challenges(phases: [.scheduled, .running])) ?? [] { challenges.inStep { step in challenges.endNow(c.id, step) } }  // fuzzing: a failed read is no challenge
        }
    }

    /// Rows the node itself stored that its own start-up validation would set aside: always none,
    /// whatever peers sent (the fuzz target's invariant). Read-only: reports, moves nothing.
    public func invalidStoredRows() throws -> [String] {
        try runtime.store.challengeRowsFailingValidation()
    }

    /// Rows in the store's contact, outbox and handled-id tables (to check that strangers are bounded).
    public func counts() throws -> (contacts: Int, outbox: Int, handled: Int) {
        let store = runtime.store
        return (try store.contactCount(), try store.outboxCount(), try store.handledCounts().all)
    }
}
