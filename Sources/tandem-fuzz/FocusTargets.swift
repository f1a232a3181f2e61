import Foundation
import TandemNode

/// What a node's focus service reads that it did not just write itself: its stored focus state
/// (modes and keys, the lock, key material, challenge modes) as a damaged or hand-edited store would
/// hold it, judged as at a start and then driven through the lock machine; and, for an input that
/// starts with "TKF1", a key frame as a client sends it. Never a trap, whatever the bytes.
extension FuzzTarget {
    static let focus = FuzzTarget(name: "focus", summary: "stored focus state and key frames into the node's focus service",
                                  maximumLength: 40_000, shortRunShare: 2, run: { outer in
        let all = outer.rest()
        if all.starts(with: Array("TKF1".utf8)) {
            FocusFuzzing.keyFrame(all)
            return
        }
        all.withUnsafeBufferPointer { buffer in
            var input = FuzzInput(buffer)
            let names = ["focus.modes", "focus.lock", "focus.key.pen", "focus.key.card", "focus.challenge.abcd", "focus.key.x"]
            var rows: [(key: String, value: String)] = []
            let count = input.pick(6) + 1
            for _ in 0..<count {
                let name = names[input.pick(names.count)]
                let length = input.u16() % 2048
                rows.append((name, String(decoding: input.take(length), as: UTF8.self)))
            }
            var steps: [(UInt8, UInt8, Int64)] = []
            while !input.isExhausted && steps.count < 64 {
                steps.append((input.u8(), input.u8(), Int64(bitPattern: input.u64()) % 100_000_000))
            }
            FocusFuzzing.storedState(rows, nowMs: 1_800_000_000_000, inputs: steps)
        }
    })
}
