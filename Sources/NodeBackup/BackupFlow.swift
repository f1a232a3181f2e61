import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Backup frames (0x04xx): the holder's side and the pusher's answers (the holder keeps its own
/// friend rules: a stranger's offer is refused with a reason, not dropped).
extension BackupService: FrameFlow {
    package nonisolated func owns(_ type: MessageType) -> Bool { type.isBackup }
}
