import Foundation
import XCTest
@testable import TandemProtocol

/// The focus configuration and the lock machine (Protocol/focus.md): each rule, then random
/// operation sequences against the invariants of issue 14, with simulated crashes.
final class FocusLockTests: XCTestCase {
    let t0: Int64 = 1_800_000_000_000
    let minute: Int64 = 60_000

    /// "work": main key `house`, temporary keys `mug`, `pen`, `book`.
    /// "study": main key `mug` (a temporary key of work), temporary key `house` (work's main key).
    /// "draft": no main key yet.
    func config() throws -> FocusModes {
        try FocusModes(
            keys: [FocusKey(id: "house", name: "House key"), FocusKey(id: "mug", name: "Blue mug"),
                   FocusKey(id: "pen", name: "Pen"), FocusKey(id: "book", name: "Book"), FocusKey(id: "coin", name: "Coin")],
            modes: [FocusMode(name: "work", mainKey: "house", temporaryKeys: ["mug", "pen", "book"],
                              blockedSites: ["news.example", "video.example"], blockedApps: ["game"],
                              temporaryItems: ["news.example"], temporaryDurationMs: 10 * 60_000),
                    FocusMode(name: "study", mainKey: "mug", temporaryKeys: ["house"], blockedSites: ["chat.example"],
                              temporaryItems: ["chat.example"], temporaryDurationMs: 5 * 60_000),
                    FocusMode(name: "draft", mainKey: nil, temporaryKeys: ["coin"])])
    }

    func locked(_ mode: String = "work", key: String = "house", until: Int64? = nil) throws -> (FocusLock, FocusModes) {
        let modes = try config()
        var lock = FocusLock()
        let step = lock.lock(mode: mode, presentedKey: key, untilMs: until, modes: modes, nowMs: t0)
        XCTAssertNil(step.refusal)
        return (lock, modes)
    }

    // MARK: configuration

    func testConfigurationRules() throws {
        let k = [FocusKey(id: "a", name: "A"), FocusKey(id: "b", name: "B")]
        XCTAssertNoThrow(try FocusModes(keys: k, modes: [FocusMode(name: "m", mainKey: "a", temporaryKeys: ["b"])]))
        func reason(_ keys: [FocusKey], _ modes: [FocusMode]) -> FocusRefusal.Reason? {
            do { _ = try FocusModes(keys: keys, modes: modes); return nil } catch { return error.reason }
        }
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "zz")]), .unknownKey)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a", temporaryKeys: ["zz"])]), .unknownKey)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a", temporaryKeys: ["a"])]), .invalid)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a", temporaryKeys: ["b", "b"])]), .duplicate)
        XCTAssertEqual(reason(k, [FocusMode(name: "Bad Name", mainKey: "a")]), .invalid)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a"), FocusMode(name: "m", mainKey: "b")]), .duplicate)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a", temporaryDurationMs: 9_999)]), .invalid)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a", temporaryDurationMs: 86_400_001)]), .invalid)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a", blockedSites: ["x.example"], temporaryItems: ["y.example"])]), .invalid)
        XCTAssertEqual(reason(k, [FocusMode(name: "m", mainKey: "a", blockedSites: ["has space"])]), .invalid)
        XCTAssertEqual(reason(k + [FocusKey(id: "a", name: "C")], []), .duplicate)
        XCTAssertEqual(reason(k + [FocusKey(id: "c", name: "A")], []), .duplicate)
        XCTAssertEqual(reason([FocusKey(id: "a", name: "bell\u{7}")], []), .invalid)
        XCTAssertEqual(reason([FocusKey(id: "a", name: "   ")], []), .invalid)
        XCTAssertEqual(reason([FocusKey(id: "", name: "x")], []), .invalid)
        // A mode without a main key is a valid configuration; it just cannot lock.
        XCTAssertNil(reason(k, [FocusMode(name: "m", mainKey: nil, temporaryKeys: ["a"])]))
    }

    func testKeyDeletionAndRenaming() throws {
        var modes = try config()
        XCTAssertThrowsError(try modes.deleteKey(id: "house")) { XCTAssertEqual(($0 as? FocusRefusal)?.reason, .keyIsMainKey) }
        // mug is study's main key and a temporary key of work: refused too.
        XCTAssertThrowsError(try modes.deleteKey(id: "mug"))
        try modes.deleteKey(id: "pen")
        XCTAssertNil(modes.key("pen"))
        XCTAssertEqual(modes.mode("work")?.temporaryKeys, ["mug", "book"])
        XCTAssertThrowsError(try modes.deleteKey(id: "pen")) { XCTAssertEqual(($0 as? FocusRefusal)?.reason, .unknownKey) }
        XCTAssertThrowsError(try modes.renameKey(id: "book", to: "Blue mug")) { XCTAssertEqual(($0 as? FocusRefusal)?.reason, .duplicate) }
        try modes.renameKey(id: "book", to: "Red book")
        XCTAssertEqual(modes.key(named: "Red book")?.id, "book")
        XCTAssertThrowsError(try modes.addKey(id: "book", name: "Other")) { XCTAssertEqual(($0 as? FocusRefusal)?.reason, .duplicate) }
        // A failed edit changes nothing.
        let before = modes
        XCTAssertThrowsError(try modes.setMode(FocusMode(name: "work", mainKey: "nope")))
        XCTAssertEqual(modes, before)
    }

    func testConfigurationDecodingValidates() throws {
        let modes = try config()
        let data = try JSONEncoder().encode(modes)
        XCTAssertEqual(try JSONDecoder().decode(FocusModes.self, from: data), modes)
        let bad = Data(#"{"keys":[{"id":"a","name":"A"}],"modes":[{"name":"m","mainKey":"b","temporaryKeys":[],"blockedSites":[],"blockedApps":[],"temporaryItems":[],"temporaryDurationMs":60000}]}"#.utf8)
        XCTAssertThrowsError(try JSONDecoder().decode(FocusModes.self, from: bad))
    }

    // MARK: locking

    func testLockNeedsTheModesMainKey() throws {
        let modes = try config()
        var lock = FocusLock()
        XCTAssertEqual(lock.lock(mode: nil, presentedKey: "house", modes: modes, nowMs: t0).refusal?.reason, .noModeSelected)
        XCTAssertEqual(lock.lock(mode: "nope", presentedKey: "house", modes: modes, nowMs: t0).refusal?.reason, .unknownMode)
        XCTAssertEqual(lock.lock(mode: "draft", presentedKey: "coin", modes: modes, nowMs: t0).refusal?.reason, .noMainKey)
        let wrong = lock.lock(mode: "work", presentedKey: "mug", modes: modes, nowMs: t0)
        XCTAssertEqual(wrong.refusal?.reason, .wrongKey)
        XCTAssertEqual(wrong.events, [.keyRefused(mode: "work", key: "mug", reason: .wrongKey)])
        XCTAssertEqual(lock.lock(mode: "work", presentedKey: nil, modes: modes, nowMs: t0).refusal?.reason, .noKeyMatched)
        XCTAssertFalse(lock.isLocked)
        let ok = lock.lock(mode: "work", presentedKey: "house", modes: modes, nowMs: t0)
        XCTAssertNil(ok.refusal)
        XCTAssertEqual(ok.effects, [.block(mode: "work"), .emit(.locked(mode: "work", hold: .key))])
        XCTAssertEqual(lock.activeMode, "work")
        XCTAssertEqual(ok.events.map(\.name), ["focus.locked"])
        XCTAssertEqual(lock.lock(mode: "study", presentedKey: "mug", modes: modes, nowMs: t0).refusal?.reason, .alreadyLocked)
        // With the mode active, `lock` without --mode uses it.
        _ = lock.unlock(presentedKey: "house", modes: modes, nowMs: t0)
        XCTAssertNil(lock.lock(mode: nil, presentedKey: "house", modes: modes, nowMs: t0).refusal)
    }

    func testOnlyTheMainKeyUnlocks() throws {
        var (lock, modes) = try locked()
        for k in ["mug", "pen", "coin"] {
            let s = lock.unlock(presentedKey: k, modes: modes, nowMs: t0 + 1)
            XCTAssertEqual(s.refusal?.reason, .wrongKey)
            XCTAssertEqual(s.events.map(\.name), ["focus.key_refused"])
        }
        XCTAssertEqual(lock.unlock(presentedKey: nil, modes: modes, nowMs: t0 + 1).refusal?.reason, .noKeyMatched)
        XCTAssertTrue(lock.isLocked)
        let ok = lock.unlock(presentedKey: "house", modes: modes, nowMs: t0 + 2)
        XCTAssertEqual(ok.effects, [.unblock(mode: "work"), .emit(.unlocked(mode: "work", reason: .mainKey))])
        XCTAssertEqual(lock.phase, .unlocked)
        XCTAssertEqual(lock.unlock(presentedKey: "house", modes: modes, nowMs: t0 + 3).refusal?.reason, .notLocked)
    }

    func testTemporaryKeysOncePerCycleAndRelock() throws {
        var (lock, modes) = try locked()
        let ten = 10 * minute
        let s = lock.temporaryUnlock(presentedKey: "mug", modes: modes, nowMs: t0 + minute)
        XCTAssertNil(s.refusal)
        XCTAssertEqual(s.effects, [.allowTemporary(mode: "work", untilMs: t0 + minute + ten),
                                   .emit(.temporaryUnlocked(mode: "work", key: "mug", untilMs: t0 + minute + ten))])
        XCTAssertEqual(lock.nextDeadlineMs, t0 + minute + ten)
        XCTAssertEqual(lock.enforcement, .blocked(mode: "work", temporaryUntilMs: t0 + minute + ten))
        XCTAssertEqual(lock.temporaryUnlock(presentedKey: "pen", modes: modes, nowMs: t0 + 2 * minute).refusal?.reason,
                       .temporaryUnlockRunning)
        XCTAssertEqual(lock.tick(nowMs: t0 + minute + ten - 1).effects, [])
        XCTAssertEqual(lock.tick(nowMs: t0 + minute + ten).effects,
                       [.endTemporary(mode: "work"), .emit(.relocked(mode: "work", reason: .expired))])
        XCTAssertNil(lock.locked?.temporary)
        // Spent until the next full unlock; the others stay usable.
        let again = lock.temporaryUnlock(presentedKey: "mug", modes: modes, nowMs: t0 + 20 * minute)
        XCTAssertEqual(again.refusal?.reason, .keySpent)
        XCTAssertEqual(again.events, [.keyRefused(mode: "work", key: "mug", reason: .keySpent)])
        XCTAssertEqual(lock.temporaryUnlock(presentedKey: "house", modes: modes, nowMs: t0 + 20 * minute).refusal?.reason, .notATemporaryKey)
        XCTAssertEqual(lock.temporaryUnlock(presentedKey: "coin", modes: modes, nowMs: t0 + 20 * minute).refusal?.reason, .notATemporaryKey)
        XCTAssertNil(lock.temporaryUnlock(presentedKey: "pen", modes: modes, nowMs: t0 + 20 * minute).refusal)
        // An input after the end re-locks first, then is handled.
        let late = lock.temporaryUnlock(presentedKey: "book", modes: modes, nowMs: t0 + 40 * minute)
        XCTAssertEqual(late.effects.first, .endTemporary(mode: "work"))
        XCTAssertNil(late.refusal)
        XCTAssertEqual(lock.locked?.spent, ["mug", "pen", "book"])
        // A full unlock resets them all.
        XCTAssertNil(lock.unlock(presentedKey: "house", modes: modes, nowMs: t0 + 41 * minute).refusal)
        XCTAssertNil(lock.lock(mode: "work", presentedKey: "house", modes: modes, nowMs: t0 + 42 * minute).refusal)
        XCTAssertEqual(lock.locked?.spent, [])
        XCTAssertNil(lock.temporaryUnlock(presentedKey: "mug", modes: modes, nowMs: t0 + 43 * minute).refusal)
    }

    func testOneKeyMainOfOneModeTemporaryOfAnother() throws {
        var (lock, modes) = try locked("study", key: "mug")
        XCTAssertEqual(lock.unlock(presentedKey: "house", modes: modes, nowMs: t0).refusal?.reason, .wrongKey)
        XCTAssertNil(lock.temporaryUnlock(presentedKey: "house", modes: modes, nowMs: t0).refusal)
        XCTAssertNil(lock.unlock(presentedKey: "mug", modes: modes, nowMs: t0 + 1).refusal)
    }

    func testTimedLock() throws {
        let modes = try config()
        var lock = FocusLock()
        XCTAssertEqual(lock.lock(mode: "work", presentedKey: "house", untilMs: t0, modes: modes, nowMs: t0).refusal?.reason, .badUntil)
        XCTAssertEqual(lock.lock(mode: "work", presentedKey: "house", untilMs: t0 + FocusLock.maximumTimedLockMs + 1,
                                 modes: modes, nowMs: t0).refusal?.reason, .badUntil)
        XCTAssertNil(lock.lock(mode: "work", presentedKey: "house", untilMs: t0 + 60 * minute, modes: modes, nowMs: t0).refusal)
        XCTAssertEqual(lock.locked?.hold, .until(t0 + 60 * minute))
        // A temporary unlock running past the end goes with the lock.
        XCTAssertNil(lock.temporaryUnlock(presentedKey: "mug", modes: modes, nowMs: t0 + 55 * minute).refusal)
        XCTAssertEqual(lock.nextDeadlineMs, t0 + 60 * minute)
        XCTAssertEqual(lock.tick(nowMs: t0 + 60 * minute).effects,
                       [.unblock(mode: "work"), .emit(.unlocked(mode: "work", reason: .expired))])
        XCTAssertEqual(lock.phase, .unlocked)
        // The main key still ends it early.
        XCTAssertNil(lock.lock(mode: "work", presentedKey: "house", untilMs: t0 + 120 * minute, modes: modes, nowMs: t0 + 61 * minute).refusal)
        XCTAssertNil(lock.unlock(presentedKey: "house", modes: modes, nowMs: t0 + 62 * minute).refusal)
    }

    func testModeSwitchRefusedWhileLocked() throws {
        var (lock, modes) = try locked()
        let s = lock.switchMode(to: "study", modes: modes, nowMs: t0)
        XCTAssertEqual(s.refusal?.reason, .lockedCannotSwitch)
        XCTAssertTrue(s.refusal!.description.contains("work"))
        XCTAssertThrowsError(try lock.checkEditable(mode: "work"))
        XCTAssertNoThrow(try lock.checkEditable(mode: "study"))
        _ = lock.unlock(presentedKey: "house", modes: modes, nowMs: t0)
        XCTAssertEqual(lock.switchMode(to: "study", modes: modes, nowMs: t0).events, [.modeSwitched(from: "work", to: "study")])
        XCTAssertEqual(lock.switchMode(to: "nope", modes: modes, nowMs: t0).refusal?.reason, .unknownMode)
        XCTAssertEqual(lock.activeMode, "study")
    }

    func testChallengeLock() throws {
        let modes = try config()
        var lock = FocusLock()
        XCTAssertEqual(lock.challengeStarted(id: "NOT HEX", mode: "work", modes: modes, nowMs: t0).refusal?.reason, .badChallengeID)
        XCTAssertEqual(lock.challengeStarted(id: "c0ffee", mode: "draft", modes: modes, nowMs: t0).refusal?.reason, .noMainKey)
        XCTAssertNil(lock.challengeStarted(id: "c0ffee", mode: "work", modes: modes, nowMs: t0).refusal)
        XCTAssertEqual(lock.locked?.hold, .challenge(id: "c0ffee"))
        // Another challenge's end changes nothing; the main key is a quit.
        XCTAssertEqual(lock.challengeEnded(id: "beef", nowMs: t0 + 1).effects, [])
        XCTAssertEqual(lock.unlock(presentedKey: "house", modes: modes, nowMs: t0 + 2).effects,
                       [.unblock(mode: "work"), .emit(.unlocked(mode: "work", reason: .mainKey)),
                        .quitChallenge(id: "c0ffee", reason: "unlocked")])
        XCTAssertEqual(lock.challengeEnded(id: "c0ffee", nowMs: t0 + 3).effects, [])
        // Held to the end: the end opens it, no quit.
        XCTAssertNil(lock.challengeStarted(id: "beef", mode: "work", modes: modes, nowMs: t0 + 4).refusal)
        XCTAssertEqual(lock.challengeStarted(id: "f00d", mode: "study", modes: modes, nowMs: t0 + 5).refusal?.reason, .alreadyLocked)
        XCTAssertEqual(lock.challengeEnded(id: "beef", nowMs: t0 + 6).effects,
                       [.unblock(mode: "work"), .emit(.unlocked(mode: "work", reason: .challengeEnded))])
    }

    // MARK: restart

    func roundTrip(_ lock: FocusLock) throws -> FocusLock {
        try JSONDecoder().decode(FocusLock.self, from: JSONEncoder().encode(lock))
    }

    func testStoredFormat() throws {
        var (lock, modes) = try locked(until: t0 + 60 * minute)
        _ = lock.temporaryUnlock(presentedKey: "pen", modes: modes, nowMs: t0 + 1)
        let enc = JSONEncoder()
        enc.outputFormatting = .sortedKeys
        XCTAssertEqual(String(decoding: try enc.encode(lock), as: UTF8.self),
                       #"{"activeMode":"work","hold":"until","lockedMode":"work","spent":["pen"],"temporaryEndsAtMs":1800000600001,"temporaryKey":"pen","untilMs":1800003600000,"v":1}"#)
        XCTAssertEqual(try roundTrip(lock), lock)
        XCTAssertEqual(try roundTrip(FocusLock()), FocusLock())
        // A hold that cannot be read fails closed: key only.
        let odd = try JSONDecoder().decode(FocusLock.self, from: Data(#"{"v":1,"lockedMode":"work","hold":"until"}"#.utf8))
        XCTAssertEqual(odd.locked?.hold, .key)
    }

    func testRestartAppliesExpiriesThatPassed() throws {
        var (lock, modes) = try locked(until: t0 + 60 * minute)
        _ = lock.temporaryUnlock(presentedKey: "pen", modes: modes, nowMs: t0)
        let stored = try roundTrip(lock)
        let (a, sa) = FocusLock.validated(loaded: stored, modes: modes, nowMs: t0 + 5 * minute)
        XCTAssertEqual(a, lock)
        XCTAssertEqual(sa.effects, [])
        let (b, sb) = FocusLock.validated(loaded: stored, modes: modes, nowMs: t0 + 30 * minute)
        XCTAssertNil(b.locked?.temporary)
        XCTAssertEqual(b.locked?.spent, ["pen"])
        XCTAssertEqual(sb.events, [.relocked(mode: "work", reason: .expired)])
        let (c, sc) = FocusLock.validated(loaded: stored, modes: modes, nowMs: t0 + 90 * minute)
        XCTAssertEqual(c.phase, .unlocked)
        XCTAssertEqual(sc.events, [.unlocked(mode: "work", reason: .expired)])
    }

    func testRestartWithVanishedModeOrKeys() throws {
        var (lock, modes) = try locked()
        _ = lock.temporaryUnlock(presentedKey: "pen", modes: modes, nowMs: t0)
        let stored = try roundTrip(lock)
        // The locked mode is gone: open, nothing to enforce.
        let noWork = try FocusModes(keys: modes.keys, modes: modes.modes.filter { $0.name != "work" })
        let (a, sa) = FocusLock.validated(loaded: stored, modes: noWork, nowMs: t0 + 1)
        XCTAssertEqual(a.phase, .unlocked)
        XCTAssertNil(a.activeMode)
        XCTAssertEqual(sa.events, [.unlocked(mode: "work", reason: .modeRemoved)])
        // The running temporary key is gone: re-lock, forget it.
        var noPen = modes
        try noPen.deleteKey(id: "pen")
        let (b, sb) = FocusLock.validated(loaded: stored, modes: noPen, nowMs: t0 + 1)
        XCTAssertNil(b.locked?.temporary)
        XCTAssertEqual(b.locked?.spent, [])
        XCTAssertEqual(sb.events, [.relocked(mode: "work", reason: .keyRemoved)])
        // The main key is gone (only an edit of the file does that): a key-only lock opens, a
        // timed one keeps its end.
        var mainless = try config()
        var work = mainless.mode("work")!
        work.mainKey = nil
        try mainless.setMode(work)
        XCTAssertEqual(FocusLock.validated(loaded: stored, modes: mainless, nowMs: t0 + 1).0.phase, .unlocked)
        let (timed, _) = try locked(until: t0 + 60 * minute)
        XCTAssertEqual(FocusLock.validated(loaded: timed, modes: mainless, nowMs: t0 + 1).0, timed)
        // A temporary end too far ahead (the clock went back) is cut to now + duration.
        let (d, _) = FocusLock.validated(loaded: stored, modes: modes, nowMs: t0 - 60 * minute)
        XCTAssertEqual(d.locked?.temporary?.endsAtMs, t0 - 50 * minute)
    }

    // MARK: property-based

    enum Op: CustomStringConvertible {
        case lock(String?, String?, Int64?)
        case unlock(String?)
        case temporary(String?)
        case tick
        case switchMode(String)
        case challengeStarted(String, String)
        case challengeEnded(String)
        case crash

        var description: String {
            switch self {
            case .lock(let m, let k, let u): return "lock(\(m ?? "-"), \(k ?? "-"), \(u.map(String.init) ?? "-"))"
            case .unlock(let k): return "unlock(\(k ?? "-"))"
            case .temporary(let k): return "temp(\(k ?? "-"))"
            case .tick: return "tick"
            case .switchMode(let m): return "switch(\(m))"
            case .challengeStarted(let id, let m): return "challengeStarted(\(id), \(m))"
            case .challengeEnded(let id): return "challengeEnded(\(id))"
            case .crash: return "crash"
            }
        }
    }

    func randomOp(_ rng: inout SplitMix64, nowMs: Int64) -> Op {
        let keys: [String?] = ["house", "mug", "pen", "book", "coin", nil]
        let modeNames = ["work", "study", "draft", "gone"]
        switch Int.random(in: 0..<16, using: &rng) {
        case 0, 1:
            let until: Int64? = Bool.random(using: &rng) ? nil : nowMs + Int64.random(in: -minute...(90 * minute), using: &rng)
            return .lock(Bool.random(using: &rng) ? nil : modeNames.randomElement(using: &rng)!, keys.randomElement(using: &rng)!, until)
        case 2, 3: return .unlock(keys.randomElement(using: &rng)!)
        case 4, 5, 6, 7: return .temporary(keys.randomElement(using: &rng)!)
        case 8, 9: return .tick
        case 10: return .switchMode(modeNames.randomElement(using: &rng)!)
        case 11: return .challengeStarted(["c1", "c2"].randomElement(using: &rng)!, modeNames.randomElement(using: &rng)!)
        case 12: return .challengeEnded(["c1", "c2"].randomElement(using: &rng)!)
        default: return .crash
        }
    }

    /// Random operation sequences at random times. After each step:
    /// - the machine never opens a lock without the main key, except by a timed lock's end or the
    ///   holding challenge's end;
    /// - a temporary key succeeds at most once per lock cycle, and an unspent one always succeeds
    ///   while locked and no temporary unlock runs;
    /// - a temporary unlock never outlives its period (every input re-locks first);
    /// - a full unlock resets every temporary key;
    /// - a crash (encode, decode, validate at a later time) equals a run without it.
    func testRandomSequencesKeepTheInvariants() throws {
        let modes = try config()
        var successes = [String: Int]()
        for seed in 0..<3_000 {
            var rng = SplitMix64(seed: UInt64(seed))
            var lock = FocusLock()
            var now = t0
            var usedThisCycle = Set<String>()
            var trace: [String] = []
            for _ in 0..<60 {
                now += Int64.random(in: 0...(12 * minute), using: &rng)
                let op = randomOp(&rng, nowMs: now)
                trace.append("\(now - t0): \(op)")
                let before = lock
                // The state `tick` leaves at `now`: every input is judged after it.
                var ticked = before
                let tickEffects = ticked.tick(nowMs: now).effects
                let step: FocusLock.Step
                switch op {
                case .lock(let m, let k, let u): step = lock.lock(mode: m, presentedKey: k, untilMs: u, modes: modes, nowMs: now)
                case .unlock(let k): step = lock.unlock(presentedKey: k, modes: modes, nowMs: now)
                case .temporary(let k): step = lock.temporaryUnlock(presentedKey: k, modes: modes, nowMs: now)
                case .tick: step = lock.tick(nowMs: now)
                case .switchMode(let m): step = lock.switchMode(to: m, modes: modes, nowMs: now)
                case .challengeStarted(let id, let m): step = lock.challengeStarted(id: id, mode: m, modes: modes, nowMs: now)
                case .challengeEnded(let id): step = lock.challengeEnded(id: id, nowMs: now)
                case .crash:
                    let later = now
                    let (restored, s) = FocusLock.validated(loaded: try roundTrip(lock), modes: modes, nowMs: later)
                    XCTAssertEqual(restored, ticked, "seed \(seed): restart differs\n\(trace.joined(separator: "\n"))")
                    XCTAssertEqual(s.effects, tickEffects, "seed \(seed)")
                    lock = restored
                    step = s
                }
                let where_ = { "seed \(seed)\n\(trace.joined(separator: "\n"))" }
                if case .crash = op {} else if case .tick = op {} else {
                    XCTAssertEqual(Array(step.effects.prefix(tickEffects.count)), tickEffects, where_())
                }
                successes[String("\(op)".prefix(while: { $0 != "(" })), default: 0] += step.refusal == nil ? 1 : 0

                // Never open without the main key.
                if let l = ticked.locked, !lock.isLocked {
                    let main = modes.mode(l.mode)?.mainKey
                    switch op {
                    case .unlock(let k): XCTAssertEqual(k, main, where_())
                    case .challengeEnded(let id): XCTAssertEqual(l.hold, .challenge(id: id), where_())
                    default: XCTFail("opened by \(op)\n\(where_())")
                    }
                    if case .challenge(let id) = l.hold, case .unlock = op {
                        XCTAssertEqual(step.effects.last, .quitChallenge(id: id, reason: "unlocked"), where_())
                    }
                }
                if ticked.isLocked != before.isLocked, case .until(let t) = before.locked!.hold { XCTAssertLessThanOrEqual(t, now, where_()) }
                // The main key always opens; nothing else does.
                if let l = ticked.locked, case .unlock(let k) = op {
                    XCTAssertEqual(lock.isLocked, k != modes.mode(l.mode)!.mainKey, where_())
                }
                // Temporary keys: once per cycle, and an unspent one always works.
                if !ticked.isLocked { usedThisCycle = [] }
                if case .temporary(let k) = op, let l = ticked.locked {
                    let m = modes.mode(l.mode)!
                    let usable = k.map { m.temporaryKeys.contains($0) && !usedThisCycle.contains($0) } ?? false
                    XCTAssertEqual(step.refusal == nil, usable && l.temporary == nil, where_())
                    if step.refusal == nil, let k {
                        usedThisCycle.insert(k)
                        XCTAssertEqual(lock.locked?.temporary?.key, k, where_())
                        XCTAssertEqual(lock.locked?.temporary?.endsAtMs, now + m.temporaryDurationMs, where_())
                    }
                }
                if !lock.isLocked { usedThisCycle = [] }
                // A running temporary unlock has not outlived its period.
                if let temp = lock.locked?.temporary {
                    XCTAssertGreaterThan(temp.endsAtMs, now, where_())
                    XCTAssertLessThanOrEqual(temp.endsAtMs - now, modes.mode(lock.locked!.mode)!.temporaryDurationMs, where_())
                }
                // Spent keys are exactly those used in this cycle; a new lock starts with none.
                XCTAssertEqual(lock.locked?.spent ?? [], usedThisCycle, where_())
                if !ticked.isLocked, lock.isLocked { XCTAssertEqual(lock.locked?.spent, [], where_()) }
                // Refusals change nothing beyond the time.
                if step.refusal != nil { XCTAssertEqual(lock, ticked, where_()) }
                // Events and blocking agree.
                XCTAssertEqual(step.events.count, step.effects.filter { if case .emit = $0 { return true } else { return false } }.count)
            }
        }
        // The generator reaches every kind of success.
        for name in ["lock", "unlock", "temp", "switch", "challengeStarted", "challengeEnded", "tick", "crash"] {
            XCTAssertGreaterThan(successes[name, default: 0], 100, name)
        }
    }

    /// Ticking at t1 then t2 leaves the state that ticking at t2 leaves.
    func testTicksCompose() throws {
        let modes = try config()
        var rng = SplitMix64(seed: 14)
        for _ in 0..<2_000 {
            var lock = FocusLock()
            _ = lock.lock(mode: "work", presentedKey: "house", untilMs: t0 + Int64.random(in: 1...(60 * minute), using: &rng), modes: modes, nowMs: t0)
            _ = lock.temporaryUnlock(presentedKey: "mug", modes: modes, nowMs: t0 + Int64.random(in: 0...(30 * minute), using: &rng))
            let t1 = t0 + Int64.random(in: 0...(90 * minute), using: &rng)
            let t2 = t1 + Int64.random(in: 0...(90 * minute), using: &rng)
            var a = lock, b = lock
            a.tick(nowMs: t1)
            a.tick(nowMs: t2)
            b.tick(nowMs: t2)
            XCTAssertEqual(a, b)
        }
    }
}
