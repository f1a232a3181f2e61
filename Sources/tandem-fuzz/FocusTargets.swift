import Foundation
import TandemNode
import NodeFocus
import TandemStore
import TandemBlocking

/// What a node's focus service reads that it did not just write itself: its stored focus rows
/// (keys, modes and their lists, key material, the lock, challenges' modes) as a damaged or
/// hand-edited store would hold them, judged as at a start and then driven through the lock
/// machine; and, for an input that starts with "TKF1", a key frame as a client sends it. Never a
/// trap, whatever the bytes.
///
/// Rows are drawn from the input: a word is one of a few names the rows share (so keys, modes and
/// references meet) or, one time in four, up to 80 bytes of the input as text; numbers and blobs
/// are the input's bytes.
extension FuzzTarget {
    static let focus = FuzzTarget(name: "focus", summary: "stored focus state and key frames into the node's focus service",
                                  maximumLength: 40_000, shortRunShare: 2, run: { outer in
        let all = outer.rest()
        if all.starts(with: Array("TKF1".utf8)) {
            FocusFuzzing.keyFrame(all)
            return
        }
        if all.starts(with: Array("DNS1".utf8)) {
            // A query a client sent the node's resolver (--dns): read, judged against a block list,
            // answered; an answer always echoes the id and the question.
            let packet = Array(all.dropFirst(4))
            guard let q = try? DNSQuery(packet: packet) else { return }
            let zones = DNSBlockList(sites: ["news.example", "example.com", String(decoding: packet.prefix(40), as: UTF8.self)])
            _ = zones.blocks(q.labels)
            let answer = q.blockedAnswer()
            precondition(answer.count >= 12 + q.question.count && Array(answer[12..<(12 + q.question.count)]) == q.question,
                         "a blocked answer that does not echo the question")
            return
        }
        all.withUnsafeBufferPointer { buffer in
            var input = FuzzInput(buffer)
            let stored = FocusRowsInput.draw(&input)
            var steps: [(UInt8, UInt8, Int64)] = []
            while !input.isExhausted && steps.count < 64 {
                steps.append((input.u8(), input.u8(), Int64(bitPattern: input.u64()) % 100_000_000))
            }
            FocusFuzzing.storedState(stored, nowMs: 1_800_000_000_000, inputs: steps)
        }
    })
}

enum FocusRowsInput {
    static let words = ["pen", "card", "coin", "deep", "work", "abcd", "example.com", "focus-victim", "", "Pen", "a b", "0123456789abcdef"]

    static func draw(_ input: inout FuzzInput) -> StoredFocusState {
        func word() -> String {
            let w = input.u8()
            if w & 3 == 3 { return String(decoding: input.take(Int(w >> 2) % 81), as: UTF8.self) }
            return words[Int(w >> 2) % words.count]
        }
        func maybeWord() -> String? { input.bool() ? word() : nil }
        func maybeInt() -> Int64? { input.bool() ? input.int64() : nil }
        func blob() -> Data? { input.bool() ? Data(input.take(input.pick(50))) : nil }

        var c = FocusConfigurationRows()
        for _ in 0..<input.pick(6) { c.keys.append(FocusKeyRecord(id: word(), name: word())) }
        for _ in 0..<input.pick(4) {
            let name = word()
            c.modes.append(FocusModeRecord(name: name, mainKey: maybeWord(),
                                           temporaryDurationMs: input.bool() ? 300_000 : input.int64()))
            for i in 0..<input.pick(4) {
                c.modeKeys.append(FocusModeKeyRecord(mode: input.pick(8) == 0 ? word() : name, position: Int64(i), keyId: word()))
            }
            for i in 0..<input.pick(6) {
                let list = ["site", "app", "temporary", "other"][input.pick(4)]
                c.modeItems.append(FocusModeItemRecord(mode: input.pick(8) == 0 ? word() : name, list: list,
                                                       position: input.pick(4) == 0 ? input.int64() : Int64(i), item: word()))
            }
        }
        var materials: [FocusKeyMaterialRecord] = []
        for _ in 0..<input.pick(5) {
            let kind = ["tag", "object", "qr"][input.pick(3)]
            let tagLike = kind == "tag" && input.pick(4) != 0
            materials.append(FocusKeyMaterialRecord(keyId: word(), kind: kind,
                                                    salt: tagLike ? Data(input.exactly(16)) : blob(),
                                                    hash: tagLike ? Data(input.exactly(32)) : blob(),
                                                    sealed: blob(), frames: maybeInt()))
        }
        var lock: FocusLockRows?
        if input.bool() {
            let record = FocusLockRecord(activeMode: maybeWord(), lockedMode: maybeWord(),
                                         hold: [nil, "key", "until", "challenge", "other"][input.pick(5)],
                                         untilMs: maybeInt(), challengeId: maybeWord(), temporaryKey: maybeWord(),
                                         temporaryEndsAtMs: maybeInt())
            lock = FocusLockRows(lock: record, spent: (0..<input.pick(4)).map { _ in FocusSpentKeyRecord(keyId: word()) })
        }
        let challenges = (0..<input.pick(3)).map { _ in FocusChallengeRecord(challengeId: word(), mode: word()) }
        return StoredFocusState(configuration: c, materials: materials, lock: lock, challenges: challenges)
    }
}
