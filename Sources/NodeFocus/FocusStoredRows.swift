import Foundation
import TandemProtocol
import TandemStore
import TandemNodeCore

// The focus values as the store's rows (Sources/TandemStore/FocusState.swift), and back. Going to
// rows never fails; coming back is `FocusService.judge`'s business (every row judged like a peer's
// message), except for the lock, whose stored form is read leniently and judged by
// `FocusLock.validated`.

extension FocusModes {
    /// The configuration as rows: keys, modes, and each mode's lists in their order.
    var rows: FocusConfigurationRows {
        var r = FocusConfigurationRows(keys: keys.map { FocusKeyRecord(id: $0.id, name: $0.name) })
        for m in modes {
            r.modes.append(FocusModeRecord(name: m.name, mainKey: m.mainKey, temporaryDurationMs: m.temporaryDurationMs))
            r.modeKeys += m.temporaryKeys.enumerated().map { FocusModeKeyRecord(mode: m.name, position: Int64($0.offset), keyId: $0.element) }
            for (list, items) in [("site", m.blockedSites), ("app", m.blockedApps), ("temporary", m.temporaryItems)] {
                r.modeItems += items.enumerated().map { FocusModeItemRecord(mode: m.name, list: list, position: Int64($0.offset), item: $0.element) }
            }
        }
        return r
    }
}

extension FocusMode {
    /// A mode from its row and its lists' rows (those of this mode, any order); not yet judged.
    init(row: FocusModeRecord, keys: [FocusModeKeyRecord], items: [FocusModeItemRecord]) {
        func list(_ name: String) -> [String] {
            items.filter { $0.list == name }.sorted { $0.position < $1.position }.map(\.item)
        }
        self.init(name: row.name, mainKey: row.mainKey, temporaryKeys: keys.sorted { $0.position < $1.position }.map(\.keyId),
                  blockedSites: list("site"), blockedApps: list("app"), temporaryItems: list("temporary"),
                  temporaryDurationMs: row.temporaryDurationMs)
    }
}

extension FocusLock {
    /// The lock state as rows; nil when there is nothing to keep (unlocked, no mode chosen).
    var rows: FocusLockRows? {
        let s = stored
        guard s.activeMode != nil || s.lockedMode != nil else { return nil }
        return FocusLockRows(lock: FocusLockRecord(activeMode: s.activeMode, lockedMode: s.lockedMode, hold: s.hold, untilMs: s.untilMs,
                                                   challengeId: s.challengeID, temporaryKey: s.temporaryKey,
                                                   temporaryEndsAtMs: s.temporaryEndsAtMs),
                             spent: s.spent.map(FocusSpentKeyRecord.init(keyId:)))
    }

    /// The stored rows read back as `init(stored:)` reads them (no rows: the initial state).
    init(rows: FocusLockRows?) {
        guard let rows else {
            self.init()
            return
        }
        let l = rows.lock
        self.init(stored: StoredForm(activeMode: l.activeMode, lockedMode: l.lockedMode, hold: l.hold, untilMs: l.untilMs,
                                     challengeID: l.challengeId, temporaryKey: l.temporaryKey, temporaryEndsAtMs: l.temporaryEndsAtMs,
                                     spent: rows.spent.map(\.keyId)))
    }
}

extension FocusKeyMaterial {
    /// What key `keyId` is, as its row.
    func record(keyId: String) -> FocusKeyMaterialRecord {
        switch self {
        case .tag(let salt, let hash):
            return FocusKeyMaterialRecord(keyId: keyId, kind: "tag", salt: Data(salt), hash: Data(hash))
        case .object(let sealed, let frames):
            return FocusKeyMaterialRecord(keyId: keyId, kind: "object", sealed: Data(sealed), frames: Int64(frames))
        }
    }

    /// Validating: nil for a row that breaks a rule (a length, the frame count, the kind).
    init?(record r: FocusKeyMaterialRecord) {
        switch r.kind {
        case "tag":
            guard let salt = r.salt, salt.count == Self.saltBytes, let hash = r.hash, hash.count == Self.hashBytes,
                  r.sealed == nil, r.frames == nil else { return nil }
            self = .tag(salt: Array(salt), hash: Array(hash))
        case "object":
            guard let sealed = r.sealed, sealed.count > 40, sealed.count <= Self.maximumSealedBytes,
                  let frames = r.frames, (1...64).contains(frames), r.salt == nil, r.hash == nil else { return nil }
            self = .object(sealed: Array(sealed), frames: Int(frames))
        default:
            return nil
        }
    }
}

extension FocusService {
    /// A stored row the judgement at start sets aside: which, a readable copy, and why.
    struct SetAside: Equatable, Sendable {
        let row: FocusRow
        let data: String
        let reason: String
    }

    /// Where an unfinished enrolment of `name` (or re-enrolment of key `replacing`) is kept.
    func enrolment(name: String, replacing: String?) -> (target: String, replacing: Bool) {
        (replacing ?? name, replacing != nil)
    }

    /// A row as readable JSON, for the quarantine table.
    static func copy(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        do {
            return String(decoding: try encoder.encode(value), as: UTF8.self)
        } catch {
            return "\(value)"
        }
    }
}
