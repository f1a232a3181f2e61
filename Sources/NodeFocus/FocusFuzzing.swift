import Foundation
import TandemKeys
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Entry points for the fuzz target `focus` (Sources/tandem-fuzz/FocusTargets.swift): what a node
/// reads that it did not just write itself: its stored focus rows (a damaged or hand-edited store)
/// and the key inputs clients send. Each must be judged, never trap.
public enum FocusFuzzing {
    /// Stored rows (keys, modes and their lists, key material, the lock, challenges' modes) judged
    /// as at a start, the lock brought up to `nowMs`, then the lock machine stepped with `inputs`
    /// (each: 0 lock, 1 unlock, 2 temporary unlock, 3 tick, 4 switch; an index into the keys or modes).
    public static func storedState(_ stored: StoredFocusState, nowMs: Int64, inputs: [(UInt8, UInt8, Int64)]) {
        let (state, aside) = FocusService.judge(stored)
        // What is judged sound is what the rows said, and reads back from its own rows the same.
        precondition(FocusService.judge(StoredFocusState(configuration: state.modes.rows, lock: state.lock.rows)).0.modes == state.modes,
                     "the judged configuration does not survive its own rows")
        precondition(aside.count <= stored.configuration.keys.count + stored.configuration.modes.count + stored.configuration.modeKeys.count
                     + stored.configuration.modeItems.count + stored.materials.count + stored.challenges.count)
        var (lock, _) = FocusLock.validated(loaded: state.lock, modes: state.modes, nowMs: nowMs)
        let keys = state.modes.keys.map(\.id)
        let modes = state.modes.modes.map(\.name)
        var now = nowMs
        for (op, index, dt) in inputs {
            now = now.addingSaturated(dt)
            let key = keys.isEmpty ? nil : keys[Int(index) % keys.count]
            let mode = modes.isEmpty ? nil : modes[Int(index) % modes.count]
            switch op % 5 {
            case 0: _ = lock.lock(mode: mode, presentedKey: key, untilMs: dt > 0 ? now.addingSaturated(dt) : nil, modes: state.modes, nowMs: now)
            case 1: _ = lock.unlock(presentedKey: key, modes: state.modes, nowMs: now)
            case 2: _ = lock.temporaryUnlock(presentedKey: key, modes: state.modes, nowMs: now)
            case 3: lock.tick(nowMs: now)
            default: if let mode { _ = lock.switchMode(to: mode, modes: state.modes, nowMs: now) }
            }
            // Whatever happened, the stored rows read back as the same state.
            precondition(FocusLock(rows: lock.rows) == lock, "the lock state does not survive its own rows")
        }
    }

    /// A key frame as a client sends it: decoded (or refused with a reason), then judged as a frame.
    public static func keyFrame(_ bytes: [UInt8]) {
        guard let frame = try? KeyFrameWire.decode(bytes) else { return }  // fuzzing: malformed input is rejected
        precondition(frame.points.count <= KeyFrameWire.maximumPoints)
        _ = FrameCheck.assess(frame)
    }
}
