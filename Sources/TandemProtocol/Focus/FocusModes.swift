/// Why the focus configuration or the lock machine said no (Protocol/focus.md). One type for both,
/// so the CLI prints `description` and scripts switch on `reason`.
public struct FocusRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: String, Sendable, Equatable {
        // The lock machine.
        case noKeyMatched = "no_key_matched"
        case wrongKey = "wrong_key"
        case notATemporaryKey = "not_a_temporary_key"
        case keySpent = "key_spent"
        case notLocked = "not_locked"
        case alreadyLocked = "already_locked"
        case temporaryUnlockRunning = "temporary_unlock_running"
        case noModeSelected = "no_mode_selected"
        case unknownMode = "unknown_mode"
        case noMainKey = "no_main_key"
        case badUntil = "bad_until"
        case badChallengeID = "bad_challenge_id"
        case lockedCannotSwitch = "locked_cannot_switch"
        case lockedCannotEdit = "locked_cannot_edit"
        case bedtimeHold = "bedtime_hold"
        // The configuration.
        case invalid = "invalid"
        case unknownKey = "unknown_key"
        case duplicate = "duplicate"
        case keyIsMainKey = "key_is_main_key"
    }

    public let reason: Reason
    public let description: String

    public init(_ reason: Reason, _ description: String) {
        self.reason = reason
        self.description = description
    }
}

/// A physical key as the configuration knows it: an id (what modes and the lock state reference)
/// and a name people see. What the key *is* (point cloud, tag payload) is stored elsewhere; the
/// matcher turns a key input into one of these ids.
public struct FocusKey: Codable, Sendable, Equatable {
    public let id: String
    public internal(set) var name: String

    public init(id: String, name: String) {
        self.id = id
        self.name = name
    }

    enum CodingKeys: String, CodingKey {
        case id = "id"
        case name = "name"
    }
}

/// What a mode blocks, which key locks and opens it, and what its temporary keys open.
public struct FocusMode: Codable, Sendable, Equatable {
    public var name: String
    /// The one key that locks and fully unlocks the mode; nil: the mode cannot lock yet.
    public var mainKey: String?
    /// Each opens `temporaryItems` for `temporaryDurationMs`, once per lock cycle.
    public var temporaryKeys: [String]
    public var blockedSites: [String]
    public var blockedApps: [String]
    /// Opened by a temporary unlock; each is one of the blocked sites or apps.
    public var temporaryItems: [String]
    public var temporaryDurationMs: Int64

    public init(name: String, mainKey: String?, temporaryKeys: [String] = [], blockedSites: [String] = [],
                blockedApps: [String] = [], temporaryItems: [String] = [],
                temporaryDurationMs: Int64 = FocusModes.defaultTemporaryDurationMs) {
        self.name = name
        self.mainKey = mainKey
        self.temporaryKeys = temporaryKeys
        self.blockedSites = blockedSites
        self.blockedApps = blockedApps
        self.temporaryItems = temporaryItems
        self.temporaryDurationMs = temporaryDurationMs
    }

    enum CodingKeys: String, CodingKey {
        case name = "name"
        case mainKey = "mainKey"
        case temporaryKeys = "temporaryKeys"
        case blockedSites = "blockedSites"
        case blockedApps = "blockedApps"
        case temporaryItems = "temporaryItems"
        case temporaryDurationMs = "temporaryDurationMs"
    }
}

/// The focus configuration: keys by id and name, and modes. Every value of this type satisfies the
/// rules of `validate` (the initialiser, decoding and every edit check them), so the lock machine
/// may trust it. Pure: the node stores it and asks the lock machine whether an edit is allowed now
/// (`FocusLock.checkEditable`).
public struct FocusModes: Codable, Sendable, Equatable {
    public static let maximumKeys = 256
    public static let maximumModes = 64
    public static let maximumTemporaryKeys = 32
    public static let maximumItems = 512
    public static let maximumNameBytes = 64
    public static let maximumItemBytes = 253
    public static let temporaryDurationRangeMs: ClosedRange<Int64> = 10_000...86_400_000
    public static let defaultTemporaryDurationMs: Int64 = 300_000

    /// Sorted by id.
    public private(set) var keys: [FocusKey]
    /// Sorted by name.
    public private(set) var modes: [FocusMode]

    enum CodingKeys: String, CodingKey {
        case keys = "keys"
        case modes = "modes"
    }

    public init() {
        keys = []
        modes = []
    }

    /// Validating: anything loaded from storage or built from user input comes through here.
    public init(keys: [FocusKey], modes: [FocusMode]) throws(FocusRefusal) {
        self.keys = keys.sorted { $0.id < $1.id }
        self.modes = modes.sorted { $0.name < $1.name }
        try validate()
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let keys = try c.decode([FocusKey].self, forKey: .keys)
        let modes = try c.decode([FocusMode].self, forKey: .modes)
        do {
            try self.init(keys: keys, modes: modes)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\(error)"))
        }
    }

    public func key(_ id: String) -> FocusKey? { keys.first { $0.id == id } }
    public func key(named name: String) -> FocusKey? { keys.first { $0.name == name } }
    public func mode(_ name: String) -> FocusMode? { modes.first { $0.name == name } }

    // MARK: rules

    /// Ids and mode names: 1–64 bytes of `a-z 0-9 . _ -` (they appear on command lines and in paths).
    public static func isValidID(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= maximumNameBytes
            && s.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
    }

    /// Key names people read: 1–64 bytes, no control characters, not only spaces.
    public static func isValidKeyName(_ s: String) -> Bool {
        s.utf8.count <= maximumNameBytes && s.contains(where: { !$0.isWhitespace })
            && !s.unicodeScalars.contains { $0.properties.generalCategory == .control || $0.properties.generalCategory == .format }
    }

    /// A site (host name) or an app (executable name or bundle id): 1–253 bytes, printable ASCII, no spaces.
    public static func isValidItem(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= maximumItemBytes && s.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    private func validate() throws(FocusRefusal) {
        guard keys.count <= Self.maximumKeys else { throw FocusRefusal(.invalid, "at most \(Self.maximumKeys) keys") }
        guard modes.count <= Self.maximumModes else { throw FocusRefusal(.invalid, "at most \(Self.maximumModes) modes") }
        for k in keys {
            guard Self.isValidID(k.id) else { throw FocusRefusal(.invalid, "a key id is 1–64 characters of a-z 0-9 . _ -") }
            guard Self.isValidKeyName(k.name) else { throw FocusRefusal(.invalid, "key \(k.id): a name is 1–64 bytes without control characters") }
        }
        guard Set(keys.map(\.id)).count == keys.count else { throw FocusRefusal(.duplicate, "two keys have the same id") }
        guard Set(keys.map(\.name)).count == keys.count else { throw FocusRefusal(.duplicate, "two keys have the same name") }
        guard Set(modes.map(\.name)).count == modes.count else { throw FocusRefusal(.duplicate, "two modes have the same name") }
        let ids = Set(keys.map(\.id))
        for m in modes {
            let n = m.name
            guard Self.isValidID(n) else { throw FocusRefusal(.invalid, "a mode name is 1–64 characters of a-z 0-9 . _ -") }
            if let main = m.mainKey, !ids.contains(main) { throw FocusRefusal(.unknownKey, "mode \(n): no key \(main)") }
            guard m.temporaryKeys.count <= Self.maximumTemporaryKeys else {
                throw FocusRefusal(.invalid, "mode \(n): at most \(Self.maximumTemporaryKeys) temporary keys")
            }
            for t in m.temporaryKeys where !ids.contains(t) { throw FocusRefusal(.unknownKey, "mode \(n): no key \(t)") }
            guard Set(m.temporaryKeys).count == m.temporaryKeys.count else { throw FocusRefusal(.duplicate, "mode \(n): a temporary key is listed twice") }
            if let main = m.mainKey, m.temporaryKeys.contains(main) {
                throw FocusRefusal(.invalid, "mode \(n): its main key cannot also be one of its temporary keys")
            }
            for list in [m.blockedSites, m.blockedApps, m.temporaryItems] {
                guard list.count <= Self.maximumItems else { throw FocusRefusal(.invalid, "mode \(n): at most \(Self.maximumItems) items in a list") }
                guard list.allSatisfy(Self.isValidItem) else { throw FocusRefusal(.invalid, "mode \(n): an item is 1–253 printable characters without spaces") }
            }
            let blocked = Set(m.blockedSites).union(m.blockedApps)
            guard m.temporaryItems.allSatisfy(blocked.contains) else {
                throw FocusRefusal(.invalid, "mode \(n): a temporary item must be one of the mode's blocked sites or apps")
            }
            guard Self.temporaryDurationRangeMs.contains(m.temporaryDurationMs) else {
                throw FocusRefusal(.invalid, "mode \(n): a temporary unlock lasts from 10 seconds to 24 hours")
            }
        }
    }

    // MARK: edits (each leaves the configuration valid or throws and changes nothing)

    public mutating func addKey(id: String, name: String) throws(FocusRefusal) {
        guard key(id) == nil else { throw FocusRefusal(.duplicate, "there is already a key \(id)") }
        self = try FocusModes(keys: keys + [FocusKey(id: id, name: name)], modes: modes)
    }

    /// Names are unique; the id (and so every mode and the lock state) stays.
    public mutating func renameKey(id: String, to name: String) throws(FocusRefusal) {
        guard let i = keys.firstIndex(where: { $0.id == id }) else { throw FocusRefusal(.unknownKey, "no key \(id)") }
        var k = keys
        k[i].name = name
        self = try FocusModes(keys: k, modes: modes)
    }

    /// Refused while the key is some mode's main key (that mode could never be opened again).
    /// Otherwise it also leaves every mode's temporary keys.
    public mutating func deleteKey(id: String) throws(FocusRefusal) {
        guard key(id) != nil else { throw FocusRefusal(.unknownKey, "no key \(id)") }
        if let m = modes.first(where: { $0.mainKey == id }) {
            throw FocusRefusal(.keyIsMainKey, "key \(id) is the main key of mode \(m.name): give that mode another main key first")
        }
        var ms = modes
        for i in ms.indices { ms[i].temporaryKeys.removeAll { $0 == id } }
        self = try FocusModes(keys: keys.filter { $0.id != id }, modes: ms)
    }

    /// Adds a mode or replaces the one with the same name. Ask `FocusLock.checkEditable` first.
    public mutating func setMode(_ mode: FocusMode) throws(FocusRefusal) {
        self = try FocusModes(keys: keys, modes: modes.filter { $0.name != mode.name } + [mode])
    }

    /// Ask `FocusLock.checkEditable` first.
    public mutating func deleteMode(_ name: String) throws(FocusRefusal) {
        guard mode(name) != nil else { throw FocusRefusal(.unknownMode, "no mode \(name)") }
        self = try FocusModes(keys: keys, modes: modes.filter { $0.name != name })
    }
}
