import Foundation
import GRDB

// Local focus (Protocol/focus.md 5): the configuration, the key material, the lock, the modes
// challenges lock, unfinished enrolments. Plain rows: the focus service turns them into its values
// and judges every one at start like a peer's message (FocusService.judge); the store checks only
// the shape its tables' constraints give (migration v5-focus).

/// A key of the configuration: its id (what modes and the lock name) and the name people see.
public struct FocusKeyRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusKey"
    public var id: String
    public var name: String

    public enum Columns {
        public static let id = Column(CodingKeys.id)
        public static let name = Column(CodingKeys.name)
    }

    public init(id: String, name: String) {
        self.id = id
        self.name = name
    }
}

/// What a key is: `tag` (salt and keyed hash of the payload) or `object` (sealed template, frames).
public struct FocusKeyMaterialRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusKeyMaterial"
    public var keyId: String
    public var kind: String
    public var salt: Data?
    public var hash: Data?
    public var sealed: Data?
    public var frames: Int64?

    public enum Columns {
        public static let keyId = Column(CodingKeys.keyId)
        public static let kind = Column(CodingKeys.kind)
        public static let salt = Column(CodingKeys.salt)
        public static let hash = Column(CodingKeys.hash)
        public static let sealed = Column(CodingKeys.sealed)
        public static let frames = Column(CodingKeys.frames)
    }

    public init(keyId: String, kind: String, salt: Data? = nil, hash: Data? = nil, sealed: Data? = nil, frames: Int64? = nil) {
        self.keyId = keyId
        self.kind = kind
        self.salt = salt
        self.hash = hash
        self.sealed = sealed
        self.frames = frames
    }
}

public struct FocusModeRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusMode"
    public var name: String
    public var mainKey: String?
    public var temporaryDurationMs: Int64

    public enum Columns {
        public static let name = Column(CodingKeys.name)
        public static let mainKey = Column(CodingKeys.mainKey)
        public static let temporaryDurationMs = Column(CodingKeys.temporaryDurationMs)
    }

    public init(name: String, mainKey: String?, temporaryDurationMs: Int64) {
        self.name = name
        self.mainKey = mainKey
        self.temporaryDurationMs = temporaryDurationMs
    }
}

/// One of a mode's temporary keys, at its place in the mode's list.
public struct FocusModeKeyRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusModeKey"
    public var mode: String
    public var position: Int64
    public var keyId: String

    public enum Columns {
        public static let mode = Column(CodingKeys.mode)
        public static let position = Column(CodingKeys.position)
        public static let keyId = Column(CodingKeys.keyId)
    }

    public init(mode: String, position: Int64, keyId: String) {
        self.mode = mode
        self.position = position
        self.keyId = keyId
    }
}

/// One entry of a mode's lists: a blocked `site` or `app`, or a `temporary` item.
public struct FocusModeItemRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusModeItem"
    public static let lists = ["site", "app", "temporary"]
    public var mode: String
    public var list: String
    public var position: Int64
    public var item: String

    public enum Columns {
        public static let mode = Column(CodingKeys.mode)
        public static let list = Column(CodingKeys.list)
        public static let position = Column(CodingKeys.position)
        public static let item = Column(CodingKeys.item)
    }

    public init(mode: String, list: String, position: Int64, item: String) {
        self.mode = mode
        self.list = list
        self.position = position
        self.item = item
    }
}

/// The lock state's one row (`id` 1); no row: unlocked, no mode chosen. `hold` is `key`, `until`
/// (with `untilMs`) or `challenge` (with `challengeId`) while `lockedMode` is set, nil otherwise.
public struct FocusLockRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusLock"
    public var id: Int64 = 1
    public var activeMode: String?
    public var lockedMode: String?
    public var hold: String?
    public var untilMs: Int64?
    public var challengeId: String?
    public var temporaryKey: String?
    public var temporaryEndsAtMs: Int64?

    public enum Columns {
        public static let id = Column(CodingKeys.id)
        public static let activeMode = Column(CodingKeys.activeMode)
        public static let lockedMode = Column(CodingKeys.lockedMode)
        public static let hold = Column(CodingKeys.hold)
        public static let untilMs = Column(CodingKeys.untilMs)
        public static let challengeId = Column(CodingKeys.challengeId)
        public static let temporaryKey = Column(CodingKeys.temporaryKey)
        public static let temporaryEndsAtMs = Column(CodingKeys.temporaryEndsAtMs)
    }

    public init(activeMode: String? = nil, lockedMode: String? = nil, hold: String? = nil, untilMs: Int64? = nil,
                challengeId: String? = nil, temporaryKey: String? = nil, temporaryEndsAtMs: Int64? = nil) {
        self.activeMode = activeMode
        self.lockedMode = lockedMode
        self.hold = hold
        self.untilMs = untilMs
        self.challengeId = challengeId
        self.temporaryKey = temporaryKey
        self.temporaryEndsAtMs = temporaryEndsAtMs
    }
}

/// A temporary key used in the current lock cycle.
public struct FocusSpentKeyRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusSpentKey"
    public var keyId: String

    public enum Columns {
        public static let keyId = Column(CodingKeys.keyId)
    }

    public init(keyId: String) { self.keyId = keyId }
}

/// The mode a challenge (`--mode`) locks here.
public struct FocusChallengeRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusChallenge"
    public var challengeId: String
    public var mode: String

    public enum Columns {
        public static let challengeId = Column(CodingKeys.challengeId)
        public static let mode = Column(CodingKeys.mode)
    }

    public init(challengeId: String, mode: String) {
        self.challengeId = challengeId
        self.mode = mode
    }
}

/// An unfinished object enrolment, sealed: of a new key named `target`, or (`replacing`) of the
/// key whose id is `target`.
public struct FocusEnrolmentRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "focusEnrolment"
    public var target: String
    public var replacing: Bool
    public var sealed: Data

    public enum Columns {
        public static let target = Column(CodingKeys.target)
        public static let replacing = Column(CodingKeys.replacing)
        public static let sealed = Column(CodingKeys.sealed)
    }

    public init(target: String, replacing: Bool, sealed: Data) {
        self.target = target
        self.replacing = replacing
        self.sealed = sealed
    }
}

/// The configuration as rows: keys, modes and the modes' lists. Written whole (`.configuration`).
public struct FocusConfigurationRows: Sendable, Equatable {
    public var keys: [FocusKeyRecord]
    public var modes: [FocusModeRecord]
    public var modeKeys: [FocusModeKeyRecord]
    public var modeItems: [FocusModeItemRecord]

    public init(keys: [FocusKeyRecord] = [], modes: [FocusModeRecord] = [], modeKeys: [FocusModeKeyRecord] = [],
                modeItems: [FocusModeItemRecord] = []) {
        self.keys = keys
        self.modes = modes
        self.modeKeys = modeKeys
        self.modeItems = modeItems
    }
}

/// The lock state as rows: its row and the keys spent in this cycle.
public struct FocusLockRows: Sendable, Equatable {
    public var lock: FocusLockRecord
    public var spent: [FocusSpentKeyRecord]

    public init(lock: FocusLockRecord, spent: [FocusSpentKeyRecord] = []) {
        self.lock = lock
        self.spent = spent
    }
}

/// Everything the focus service loads at start (enrolments are read when a session needs them).
public struct StoredFocusState: Sendable, Equatable {
    public var configuration: FocusConfigurationRows
    public var materials: [FocusKeyMaterialRecord]
    public var lock: FocusLockRows?
    public var challenges: [FocusChallengeRecord]

    public init(configuration: FocusConfigurationRows = FocusConfigurationRows(), materials: [FocusKeyMaterialRecord] = [],
                lock: FocusLockRows? = nil, challenges: [FocusChallengeRecord] = []) {
        self.configuration = configuration
        self.materials = materials
        self.lock = lock
        self.challenges = challenges
    }
}

/// A stored focus row, as the judgement at start names what it sets aside.
public enum FocusRow: Sendable, Equatable, Hashable {
    case key(id: String)
    case material(keyId: String)
    /// The mode and its lists (also lists whose mode row is missing).
    case mode(name: String)
    case challenge(id: String)
    case enrolment(target: String, replacing: Bool)

    /// The table, as `quarantine.kind` names it.
    public var kind: String {
        switch self {
        case .key: return FocusKeyRecord.databaseTableName
        case .material: return FocusKeyMaterialRecord.databaseTableName
        case .mode: return FocusModeRecord.databaseTableName
        case .challenge: return FocusChallengeRecord.databaseTableName
        case .enrolment: return FocusEnrolmentRecord.databaseTableName
        }
    }

    /// The row's key as text (`quarantine.rowKey` holds its UTF-8).
    public var key: String {
        switch self {
        case .key(let id), .material(let id): return id
        case .mode(let name): return name
        case .challenge(let id): return id
        case .enrolment(let target, let replacing): return replacing ? "replace:" + target : target
        }
    }
}

/// One change of the focus state; a list of them is written in one transaction (`saveFocus`).
public enum FocusChange: Sendable, Equatable {
    /// Keys, modes and their lists, replaced whole.
    case configuration(FocusConfigurationRows)
    /// The lock state replaced whole; nil: unlocked with no mode chosen (no row).
    case lock(FocusLockRows?)
    case material(FocusKeyMaterialRecord)
    case removeMaterial(keyId: String)
    case enrolment(FocusEnrolmentRecord)
    case removeEnrolment(target: String, replacing: Bool)
    case challengeMode(FocusChallengeRecord)
    case removeChallengeMode(challengeId: String)
    /// Moves a row that failed the judgement at start to `quarantine` (`data`: a readable copy).
    case quarantine(FocusRow, data: String, reason: String, atMs: Int64)
}

extension NodeStore {
    fileprivate static func apply(_ change: FocusChange, _ db: Database) throws {
        switch change {
        case .configuration(let rows):
            _ = try FocusKeyRecord.deleteAll(db)
            _ = try FocusModeRecord.deleteAll(db)
            _ = try FocusModeKeyRecord.deleteAll(db)
            _ = try FocusModeItemRecord.deleteAll(db)
            for r in rows.keys { try r.insert(db) }
            for r in rows.modes { try r.insert(db) }
            for r in rows.modeKeys { try r.insert(db) }
            for r in rows.modeItems { try r.insert(db) }
        case .lock(let rows):
            _ = try FocusLockRecord.deleteAll(db)
            _ = try FocusSpentKeyRecord.deleteAll(db)
            if let rows {
                var lock = rows.lock
                lock.id = 1
                try lock.insert(db)
                for k in rows.spent { try k.insert(db) }
            }
        case .material(let m):
            try m.save(db)
        case .removeMaterial(let id):
            _ = try FocusKeyMaterialRecord.deleteOne(db, key: id)
        case .enrolment(let e):
            try e.save(db)
        case .removeEnrolment(let target, let replacing):
            _ = try FocusEnrolmentRecord.deleteOne(db, key: ["target": target, "replacing": replacing])
        case .challengeMode(let c):
            try c.save(db)
        case .removeChallengeMode(let id):
            _ = try FocusChallengeRecord.deleteOne(db, key: id)
        case .quarantine(let row, let data, let reason, let atMs):
            try db.execute(sql: "INSERT INTO quarantine(kind, rowKey, data, reason, atMs) VALUES (?, ?, ?, ?, ?)",
                           arguments: [row.kind, Data(row.key.utf8), Data(data.utf8), reason, atMs])
            try delete(row, db)
        }
    }

    private static func delete(_ row: FocusRow, _ db: Database) throws {
        switch row {
        case .key(let id):
            _ = try FocusKeyRecord.deleteOne(db, key: id)
        case .material(let id):
            _ = try FocusKeyMaterialRecord.deleteOne(db, key: id)
        case .mode(let name):
            _ = try FocusModeRecord.deleteOne(db, key: name)
            _ = try FocusModeKeyRecord.filter(FocusModeKeyRecord.Columns.mode == name).deleteAll(db)
            _ = try FocusModeItemRecord.filter(FocusModeItemRecord.Columns.mode == name).deleteAll(db)
        case .challenge(let id):
            _ = try FocusChallengeRecord.deleteOne(db, key: id)
        case .enrolment(let target, let replacing):
            _ = try FocusEnrolmentRecord.deleteOne(db, key: ["target": target, "replacing": replacing])
        }
    }
}
extension StoreReading {
    /// The focus state as stored, in one read.
    public func focusState() throws -> StoredFocusState {
        try read { db in
            let lock = try FocusLockRecord.fetchOne(db, key: 1)
            return StoredFocusState(
                configuration: FocusConfigurationRows(
                    keys: try FocusKeyRecord.order(FocusKeyRecord.Columns.id).fetchAll(db),
                    modes: try FocusModeRecord.order(FocusModeRecord.Columns.name).fetchAll(db),
                    modeKeys: try FocusModeKeyRecord.order(FocusModeKeyRecord.Columns.mode, FocusModeKeyRecord.Columns.position).fetchAll(db),
                    modeItems: try FocusModeItemRecord.order(FocusModeItemRecord.Columns.mode, FocusModeItemRecord.Columns.list,
                                                             FocusModeItemRecord.Columns.position).fetchAll(db)),
                materials: try FocusKeyMaterialRecord.order(FocusKeyMaterialRecord.Columns.keyId).fetchAll(db),
                lock: try lock.map { FocusLockRows(lock: $0, spent: try FocusSpentKeyRecord.order(FocusSpentKeyRecord.Columns.keyId).fetchAll(db)) },
                challenges: try FocusChallengeRecord.order(FocusChallengeRecord.Columns.challengeId).fetchAll(db))
        }
    }

    /// Unfinished object enrolments.
    public func focusEnrolments() throws -> [FocusEnrolmentRecord] {
        try read { db in
            try FocusEnrolmentRecord.order(FocusEnrolmentRecord.Columns.replacing, FocusEnrolmentRecord.Columns.target).fetchAll(db)
        }
    }
}
extension StoreStep {
    /// Local focus (issue 14): `changes` in order, and the events that report them, in one transaction.
    public func saveFocus(_ changes: [FocusChange], events: [PendingEvent] = []) throws {
        try write { db in
            for change in changes { try NodeStore.apply(change, db) }
            try insertEvents(events, db)
        }
    }
}
