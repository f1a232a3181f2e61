import TandemProtocol
import TandemStore
import TandemNodeCore

/// What a challenge started with `--mode` asks of local focus (the core's declared interface).
extension FocusService: ChallengeModeLocks {
    /// Dead (health 0): no early quit until midnight, when health is 100 again. Said before the
    /// quit, never charged after it.
    @NodeCore package func earlyQuitRefusal(nowMs: Int64, _ reader: StoreReading) -> String? {
        let pool = healthPool(nowMs: nowMs, reader)
        switch pool.check(.quitEarly, nowMs: nowMs) {
        case nil, .cooldown: return nil   // the cooldown holds back temporary unlocks only
        case .dead(let until):
            let minutes = max(1, (until - nowMs + 59_999) / 60_000)
            return "health is 0 (dead): quitting early is a bypass, and none is allowed until health returns to 100 " +
                "at midnight (\(clockText(until)) local, in \(minutes / 60) h \(minutes % 60) min); the challenge goes on"
        }
    }
}
