import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// The friends flow is the router's last: it takes every frame no other flow owns (requests,
/// answers, contact records, presence, acknowledgements) and drops a blocked contact's.
extension FriendService: FrameFlow, OwnContactRecord {
    package nonisolated func owns(_ type: MessageType) -> Bool { false }
}
