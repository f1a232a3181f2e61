import TandemNet
import TandemProtocol

/// Sends every frame to the flow it belongs to: clock sync, challenges, or friends (the rest).
/// Frames from blocked IDs go to the friends flow, which drops them.
final class NodeFrameRouter: FrameHandler, @unchecked Sendable {
    let friends: FriendService
    let clock: ClockSync
    let challenges: ChallengeService

    init(friends: FriendService, clock: ClockSync, challenges: ChallengeService) {
        self.friends = friends
        self.clock = clock
        self.challenges = challenges
    }

    func handle(_ envelope: Envelope, from link: PeerLink) {
        if envelope.type == .clockProbe || envelope.type == .clockReply {
            // Timestamped first. A blocked peer has no link (blocking closes it), and answering a
            // probe costs one signature.
            clock.handle(envelope, from: link, receivedAt: wallClockMicros())
            challenges.heard(envelope.author)
            return
        }
        challenges.heard(envelope.author)
        let blocked = (try? friends.store.contact(envelope.author))?.relationship == .blocked
        switch envelope.type.rawValue {
        case 0x0200...0x02ff where !blocked:
            challenges.handle(envelope, from: link)
        default:
            friends.handle(envelope, from: link)
        }
    }

    /// A frame that came as mail from a relay (opened and checked): the same flows, with no
    /// link to answer on (the relay client acknowledges the item to the relay).
    /// Mail does not count as hearing from its author (it may be hours old).
    func handleMail(_ envelope: Envelope) {
        let blocked = (try? friends.store.contact(envelope.author))?.relationship == .blocked
        switch envelope.type.rawValue {
        case 0x0200...0x02ff where !blocked:
            challenges.handle(envelope, from: nil)
        default:
            friends.handle(envelope, from: nil)
        }
    }

    func peerConnected(_ key: [UInt8], link: PeerLink) {
        friends.peerConnected(key, link: link)
        challenges.peerConnected(key)
    }

    func peerDisconnected(_ key: [UInt8]) {
        friends.peerDisconnected(key)
    }

    func peerReportedError(_ error: Tandem_V1_Error, from key: [UInt8]) {
        friends.peerReportedError(error, from: key)
    }
}
