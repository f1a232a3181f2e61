import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Challenge frames (0x02xx) reach this flow unless their author is blocked; every frame that
/// arrives over a link counts as hearing from its author (out-of-contact detection), and a new
/// link to a partner gets its clock measured at once.
extension ChallengeService: FrameFlow {
    package nonisolated func owns(_ type: MessageType) -> Bool { type.isChallenge }
    package nonisolated var dropsBlockedAuthors: Bool { true }
    package func linkUp(_ key: [UInt8], _ step: StoreStep) { peerConnected(key, step) }
}
