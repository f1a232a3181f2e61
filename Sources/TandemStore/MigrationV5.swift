import Foundation
import GRDB
import TandemProtocol

/// Migrations `v5-focus`, `v5-backup` and `v5-vault`: the local state that store v4 kept as JSON
/// strings in the `setting` table under key prefixes gets tables of its own, and the v4 rows are
/// converted in place (Protocol/focus.md 5, backup.md 9.1, vault.md "The PIN guard").
///
/// Frozen once shipped, like every migration: the JSON is read with the structs defined here, never
/// with the app's types (they may change; what v4 wrote does not). A row that does not convert is
/// moved to `quarantine` (kind `setting`, the setting's key, its value, why) instead of failing the
/// migration; its setting row goes either way. Each setting converts in a savepoint of its own, so
/// a row that a table's constraints refuse takes nothing else with it (any other error of the
/// database fails the migration, which then runs again at the next start).
enum MigrationV5 {
    // MARK: - Focus

    static func focus(_ db: Database) throws {
        try db.execute(sql: """
            -- The configuration (FocusModes): keys by id and name ...
            CREATE TABLE focusKey (
                id TEXT NOT NULL PRIMARY KEY CHECK (typeof(id) = 'text' AND length(id) > 0),
                name TEXT NOT NULL CHECK (typeof(name) = 'text' AND length(name) > 0)
            );
            -- ... what each key is: a tag's salted keyed hash, or an object's sealed template. A key
            -- without a row here was set aside (it stays listed, unusable, until replaced).
            CREATE TABLE focusKeyMaterial (
                keyId TEXT NOT NULL PRIMARY KEY CHECK (typeof(keyId) = 'text'),
                kind TEXT NOT NULL CHECK (kind IN ('tag', 'object')),
                salt BLOB,
                hash BLOB,
                sealed BLOB,
                frames INTEGER,
                CHECK ((kind = 'tag' AND typeof(salt) = 'blob' AND typeof(hash) = 'blob' AND sealed IS NULL AND frames IS NULL)
                    OR (kind = 'object' AND typeof(sealed) = 'blob' AND typeof(frames) = 'integer' AND frames BETWEEN 1 AND 64
                        AND salt IS NULL AND hash IS NULL))
            );
            -- ... and modes, with their ordered lists.
            CREATE TABLE focusMode (
                name TEXT NOT NULL PRIMARY KEY CHECK (typeof(name) = 'text' AND length(name) > 0),
                mainKey TEXT CHECK (mainKey IS NULL OR typeof(mainKey) = 'text'),
                temporaryDurationMs INTEGER NOT NULL CHECK (typeof(temporaryDurationMs) = 'integer')
            );
            CREATE TABLE focusModeKey (
                mode TEXT NOT NULL CHECK (typeof(mode) = 'text'),
                position INTEGER NOT NULL CHECK (typeof(position) = 'integer'),
                keyId TEXT NOT NULL CHECK (typeof(keyId) = 'text'),
                PRIMARY KEY (mode, position)
            );
            CREATE TABLE focusModeItem (
                mode TEXT NOT NULL CHECK (typeof(mode) = 'text'),
                list TEXT NOT NULL CHECK (list IN ('site', 'app', 'temporary')),
                position INTEGER NOT NULL CHECK (typeof(position) = 'integer'),
                item TEXT NOT NULL CHECK (typeof(item) = 'text'),
                PRIMARY KEY (mode, list, position)
            );
            -- The lock state (FocusLock): one row, or none (unlocked, no mode chosen).
            CREATE TABLE focusLock (
                id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
                activeMode TEXT CHECK (activeMode IS NULL OR typeof(activeMode) = 'text'),
                lockedMode TEXT CHECK (lockedMode IS NULL OR typeof(lockedMode) = 'text'),
                hold TEXT CHECK (hold IN ('key', 'until', 'challenge')),
                untilMs INTEGER CHECK (untilMs IS NULL OR typeof(untilMs) = 'integer'),
                challengeId TEXT CHECK (challengeId IS NULL OR typeof(challengeId) = 'text'),
                temporaryKey TEXT CHECK (temporaryKey IS NULL OR typeof(temporaryKey) = 'text'),
                temporaryEndsAtMs INTEGER CHECK (temporaryEndsAtMs IS NULL OR typeof(temporaryEndsAtMs) = 'integer'),
                CHECK ((lockedMode IS NULL) = (hold IS NULL)),
                CHECK (hold IS NOT 'until' OR untilMs IS NOT NULL),
                CHECK (hold IS NOT 'challenge' OR challengeId IS NOT NULL),
                CHECK ((temporaryKey IS NULL) = (temporaryEndsAtMs IS NULL)),
                CHECK (lockedMode IS NOT NULL OR temporaryKey IS NULL)
            );
            -- Temporary keys used in this lock cycle.
            CREATE TABLE focusSpentKey (
                keyId TEXT NOT NULL PRIMARY KEY CHECK (typeof(keyId) = 'text')
            );
            -- The mode a challenge locks here (`--mode`), by challenge id (lowercase hex).
            CREATE TABLE focusChallenge (
                challengeId TEXT NOT NULL PRIMARY KEY CHECK (typeof(challengeId) = 'text'),
                mode TEXT NOT NULL CHECK (typeof(mode) = 'text')
            );
            -- Unfinished object enrolments, sealed: of a new key named `target`, or (replacing = 1)
            -- a re-enrolment of the key whose id is `target`.
            CREATE TABLE focusEnrolment (
                target TEXT NOT NULL CHECK (typeof(target) = 'text'),
                replacing INTEGER NOT NULL CHECK (replacing IN (0, 1)),
                sealed BLOB NOT NULL CHECK (typeof(sealed) = 'blob'),
                PRIMARY KEY (replacing, target)
            );
            """)
        let nowMs = wallClockMs()
        for (key, value) in try settings(db, prefix: "focus.") {
            try convert(db, key, value, nowMs: nowMs) {
                if key == "focus.modes" { return try focusModes(db, value) }
                if key == "focus.lock" { return try focusLock(db, value) }
                if let id = key.dropping("focus.key.") { return try focusKeyMaterial(db, id, value) }
                if let id = key.dropping("focus.challenge.") {
                    guard let mode = text(value) else { return "not text" }
                    try db.execute(sql: "INSERT INTO focusChallenge(challengeId, mode) VALUES (?, ?)", arguments: [id, mode])
                    return nil
                }
                if let hex = key.dropping("focus.enroll.") { return try focusEnrolment(db, hex, value) }
                if let rest = key.dropping("focus.quarantine.") {
                    // Set aside by a v4 node: `focus.quarantine.<ms>.<setting>` keeps its value.
                    let (ms, setting) = rest.splitOnce(".")
                    try quarantine(db, key: setting ?? rest, value: value, reason: "set aside by an earlier version (focus)",
                                   atMs: ms.flatMap { Int64($0) } ?? nowMs)
                    return nil
                }
                return "not a focus setting this version knows"
            }
        }
    }

    private struct V4FocusModes: Decodable {
        struct Key: Decodable { var id: String; var name: String }
        struct Mode: Decodable {
            var name: String
            var mainKey: String?
            var temporaryKeys: [String]
            var blockedSites: [String]
            var blockedApps: [String]
            var temporaryItems: [String]
            var temporaryDurationMs: Int64
        }
        var keys: [Key]
        var modes: [Mode]
    }

    private static func focusModes(_ db: Database, _ value: Data) throws -> String? {
        guard let m = try? JSONDecoder().decode(V4FocusModes.self, from: value) else { return "the modes and keys do not decode" }
        // A v4 node set the whole configuration aside when a key or mode was there twice.
        guard Set(m.keys.map(\.id)).count == m.keys.count, Set(m.modes.map(\.name)).count == m.modes.count else {
            return "a key or a mode is listed twice"
        }
        for k in m.keys {
            try db.execute(sql: "INSERT INTO focusKey(id, name) VALUES (?, ?)", arguments: [k.id, k.name])
        }
        for mode in m.modes {
            try db.execute(sql: "INSERT INTO focusMode(name, mainKey, temporaryDurationMs) VALUES (?, ?, ?)",
                           arguments: [mode.name, mode.mainKey, mode.temporaryDurationMs])
            for (i, k) in mode.temporaryKeys.enumerated() {
                try db.execute(sql: "INSERT INTO focusModeKey(mode, position, keyId) VALUES (?, ?, ?)", arguments: [mode.name, i, k])
            }
            for (list, items) in [("site", mode.blockedSites), ("app", mode.blockedApps), ("temporary", mode.temporaryItems)] {
                for (i, item) in items.enumerated() {
                    try db.execute(sql: "INSERT INTO focusModeItem(mode, list, position, item) VALUES (?, ?, ?, ?)",
                                   arguments: [mode.name, list, i, item])
                }
            }
        }
        return nil
    }

    /// v4's `focus.lock`, read as v4 read it: lenient about meaning (a hold that cannot be read is
    /// the key's; a temporary unlock needs both its key and its end; spent keys only while locked).
    private struct V4FocusLock: Decodable {
        var activeMode: String?
        var lockedMode: String?
        var hold: String?
        var untilMs: Int64?
        var challengeId: String?
        var temporaryKey: String?
        var temporaryEndsAtMs: Int64?
        var spent: [String]?
    }

    private static func focusLock(_ db: Database, _ value: Data) throws -> String? {
        guard let l = try? JSONDecoder().decode(V4FocusLock.self, from: value) else { return "the lock state does not decode" }
        guard let mode = l.lockedMode else {
            if let active = l.activeMode {
                try db.execute(sql: "INSERT INTO focusLock(id, activeMode) VALUES (1, ?)", arguments: [active])
            }
            return nil
        }
        var hold = "key"
        var until: Int64?
        var challenge: String?
        switch l.hold {
        case "until"?: if let t = l.untilMs { hold = "until"; until = t }
        case "challenge"?: if let c = l.challengeId { hold = "challenge"; challenge = c }
        default: break
        }
        var temporary: (String, Int64)?
        if let k = l.temporaryKey, let t = l.temporaryEndsAtMs { temporary = (k, t) }
        try db.execute(sql: """
            INSERT INTO focusLock(id, activeMode, lockedMode, hold, untilMs, challengeId, temporaryKey, temporaryEndsAtMs)
            VALUES (1, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [l.activeMode, mode, hold, until, challenge, temporary?.0, temporary?.1])
        var spent = Set(l.spent ?? [])
        if let temporary { spent.insert(temporary.0) }
        for k in spent.sorted() {
            try db.execute(sql: "INSERT INTO focusSpentKey(keyId) VALUES (?)", arguments: [k])
        }
        return nil
    }

    /// `{"kind": "tag", "salt": hex, "hash": hex}` or `{"kind": "object", "sealed": base64, "frames": n}`.
    /// Lengths are judged when the node loads the row, as v4 judged them.
    private struct V4KeyMaterial: Decodable {
        var kind: String
        var salt: String?
        var hash: String?
        var sealed: String?
        var frames: Int64?
    }

    private static func focusKeyMaterial(_ db: Database, _ id: String, _ value: Data) throws -> String? {
        guard let m = try? JSONDecoder().decode(V4KeyMaterial.self, from: value) else { return "the key's stored form is damaged" }
        switch m.kind {
        case "tag":
            guard let salt = m.salt.flatMap(hex), let hash = m.hash.flatMap(hex) else { return "the key's stored form is damaged" }
            try db.execute(sql: "INSERT INTO focusKeyMaterial(keyId, kind, salt, hash) VALUES (?, 'tag', ?, ?)",
                           arguments: [id, Data(salt), Data(hash)])
        case "object":
            guard let sealed = m.sealed.flatMap({ Data(base64Encoded: $0) }), let frames = m.frames, (1...64).contains(frames) else {
                return "the key's stored form is damaged"
            }
            try db.execute(sql: "INSERT INTO focusKeyMaterial(keyId, kind, sealed, frames) VALUES (?, 'object', ?, ?)",
                           arguments: [id, sealed, frames])
        default:
            return "the key's stored form is damaged"
        }
        return nil
    }

    /// `focus.enroll.<hex of the name, or of "replace:" + key id>` = base64 of the sealed enrolment.
    private static func focusEnrolment(_ db: Database, _ hexName: String, _ value: Data) throws -> String? {
        guard let bytes = hex(hexName), let target = String(bytes: bytes, encoding: .utf8), !target.isEmpty else {
            return "not an enrolment's name"
        }
        guard let text = text(value), let sealed = Data(base64Encoded: text) else { return "not base64" }
        let replacing = target.hasPrefix("replace:")
        let name = replacing ? String(target.dropFirst("replace:".count)) : target
        guard !name.isEmpty else { return "not an enrolment's name" }
        try db.execute(sql: "INSERT INTO focusEnrolment(target, replacing, sealed) VALUES (?, ?, ?)", arguments: [name, replacing, sealed])
        return nil
    }

    // MARK: - Backup (the owner's side: offers received, pushes)

    static func backup(_ db: Database) throws {
        try db.execute(sql: """
            -- Friends that offered to hold this node's backups (BACKUP_OFFER, the newest version).
            CREATE TABLE backupHolder (
                publicKey BLOB NOT NULL PRIMARY KEY CHECK (typeof(publicKey) = 'blob' AND length(publicKey) = 32),
                quotaBytes INTEGER NOT NULL CHECK (typeof(quotaBytes) = 'integer' AND quotaBytes BETWEEN 1 AND 1125899906842624),
                version INTEGER NOT NULL CHECK (typeof(version) = 'integer' AND version BETWEEN 0 AND 9007199254740991),
                receivedAtMs INTEGER NOT NULL CHECK (typeof(receivedAtMs) = 'integer')
            );
            -- The last complete push to each holder, and the blobs it named (verify picks among them).
            CREATE TABLE backupPush (
                holder BLOB NOT NULL PRIMARY KEY CHECK (typeof(holder) = 'blob' AND length(holder) = 32),
                snapshotId BLOB NOT NULL CHECK (typeof(snapshotId) = 'blob'),
                atMs INTEGER NOT NULL CHECK (typeof(atMs) = 'integer'),
                bytesSent INTEGER NOT NULL CHECK (typeof(bytesSent) = 'integer' AND bytesSent >= 0),
                totalBytes INTEGER NOT NULL CHECK (typeof(totalBytes) = 'integer' AND totalBytes >= 0),
                kitDigest BLOB CHECK (kitDigest IS NULL OR (typeof(kitDigest) = 'blob' AND length(kitDigest) = 32))
            );
            CREATE TABLE backupPushBlob (
                holder BLOB NOT NULL CHECK (typeof(holder) = 'blob'),
                name BLOB NOT NULL CHECK (typeof(name) = 'blob' AND length(name) = 32),
                PRIMARY KEY (holder, name)
            );
            -- Pushes asked for and not ended (resumed at start, retried every minute).
            CREATE TABLE backupPending (
                holder BLOB NOT NULL PRIMARY KEY CHECK (typeof(holder) = 'blob' AND length(holder) = 32),
                lanOnly INTEGER NOT NULL CHECK (lanOnly IN (0, 1))
            );
            """)
        let nowMs = wallClockMs()
        for (key, value) in try settings(db, prefix: "backup.") {
            try convert(db, key, value, nowMs: nowMs) {
                if let h = key.dropping("backup.offer.") {
                    guard let holder = hex(h), holder.count == 32 else { return "not a holder's key" }
                    guard let o = try? JSONDecoder().decode(V4Offer.self, from: value),
                          (1...(Int64(1) << 50)).contains(o.quotaBytes), o.version <= (UInt64(1) << 53) - 1 else {
                        return "the offer does not decode or breaks a rule"
                    }
                    try db.execute(sql: "INSERT INTO backupHolder(publicKey, quotaBytes, version, receivedAtMs) VALUES (?, ?, ?, ?)",
                                   arguments: [Data(holder), o.quotaBytes, Int64(o.version), o.receivedAtMs])
                    return nil
                }
                if let h = key.dropping("backup.pushed.") {
                    guard let holder = hex(h), holder.count == 32 else { return "not a holder's key" }
                    return try backupPush(db, holder, value)
                }
                if let h = key.dropping("backup.pending.") {
                    guard let holder = hex(h), holder.count == 32 else { return "not a holder's key" }
                    // v4 read anything but "lan" as "any".
                    try db.execute(sql: "INSERT INTO backupPending(holder, lanOnly) VALUES (?, ?)", arguments: [Data(holder), text(value) == "lan"])
                    return nil
                }
                return "not a backup setting this version knows"
            }
        }
    }

    private struct V4Offer: Decodable {
        var quotaBytes: Int64
        var version: UInt64
        var receivedAtMs: Int64
    }

    private struct V4Pushed: Decodable {
        var snapshotID: String
        var atMs: Int64
        var bytesSent: Int64
        var totalBytes: Int64
        var blobs: [String]
        var kitDigest: String?
    }

    private static func backupPush(_ db: Database, _ holder: [UInt8], _ value: Data) throws -> String? {
        guard let r = try? JSONDecoder().decode(V4Pushed.self, from: value), let snapshot = hex(r.snapshotID), !snapshot.isEmpty,
              r.blobs.count <= 16_384, r.bytesSent >= 0, r.totalBytes >= 0 else {
            return "the push record does not decode or breaks a rule"
        }
        let blobs = r.blobs.compactMap(hex)
        guard blobs.count == r.blobs.count, blobs.allSatisfy({ $0.count == 32 }) else { return "a blob name is not 64 hex digits" }
        // A digest that cannot be read only means the kit is sent again.
        let digest = r.kitDigest.flatMap(hex).flatMap { $0.count == 32 ? Data($0) : nil }
        try db.execute(sql: "INSERT INTO backupPush(holder, snapshotId, atMs, bytesSent, totalBytes, kitDigest) VALUES (?, ?, ?, ?, ?, ?)",
                       arguments: [Data(holder), Data(snapshot), r.atMs, r.bytesSent, r.totalBytes, digest])
        for b in Set(blobs.map { Data($0) }) {
            try db.execute(sql: "INSERT INTO backupPushBlob(holder, name) VALUES (?, ?)", arguments: [Data(holder), b])
        }
        return nil
    }

    // MARK: - Vault (the PIN guard; the auto-lock stays a scalar setting)

    static func vault(_ db: Database) throws {
        try db.execute(sql: """
            -- Wrong PINs in a row and the wait they earned: one row, or none (no wrong PIN yet).
            CREATE TABLE vaultPinGuard (
                id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
                failures INTEGER NOT NULL CHECK (typeof(failures) = 'integer' AND failures BETWEEN 0 AND 1000000),
                lockedUntilMs INTEGER NOT NULL CHECK (typeof(lockedUntilMs) = 'integer' AND lockedUntilMs >= 0)
            );
            -- The break-in log, oldest first (the guard keeps the last 20).
            CREATE TABLE vaultBreakIn (
                seq INTEGER PRIMARY KEY,
                atMs INTEGER NOT NULL CHECK (typeof(atMs) = 'integer'),
                masked TEXT NOT NULL CHECK (typeof(masked) = 'text')
            );
            """)
        let nowMs = wallClockMs()
        guard let value = try Data.fetchOne(db, sql: "SELECT value FROM setting WHERE key = 'vault.pinGuard'") else { return }
        let converted = try convert(db, "vault.pinGuard", value, nowMs: nowMs) {
            guard let g = try? JSONDecoder().decode(V4PinGuard.self, from: value) else { return "the PIN guard does not decode" }
            try db.execute(sql: "INSERT INTO vaultPinGuard(id, failures, lockedUntilMs) VALUES (1, ?, ?)",
                           arguments: [min(max(0, g.failures), 1_000_000), max(0, g.lockedUntilMs)])
            for b in g.breakIns.suffix(20) {
                try db.execute(sql: "INSERT INTO vaultBreakIn(atMs, masked) VALUES (?, ?)", arguments: [b.atMs, b.masked])
            }
            return nil
        }
        if !converted {
            // v4 counted a guard it could not read as three wrong PINs (a damaged row is never a way
            // around a wait): so does the converted store, the wait running from now.
            try db.execute(sql: "INSERT INTO vaultPinGuard(id, failures, lockedUntilMs) VALUES (1, 3, ?)",
                           arguments: [nowMs.addingReportingOverflow(30_000).overflow ? Int64.max : nowMs + 30_000])
        }
    }

    private struct V4PinGuard: Decodable {
        struct BreakIn: Decodable { var atMs: Int64; var masked: String }
        var failures: Int64
        var lockedUntilMs: Int64
        var breakIns: [BreakIn]
    }

    // MARK: - Helpers (frozen with the migrations)

    /// The setting rows under `prefix`, by key; a value as its bytes (TEXT or BLOB).
    private static func settings(_ db: Database, prefix: String) throws -> [(String, Data)] {
        try Row.fetchAll(db, sql: "SELECT key, value FROM setting WHERE substr(key, 1, ?) = ? ORDER BY key",
                         arguments: [prefix.count, prefix]).map { row in
            let value: DatabaseValue = row["value"]
            switch value.storage {
            case .string(let s): return (row["key"], Data(s.utf8))
            case .blob(let d): return (row["key"], d)
            case .int64(let i): return (row["key"], Data(String(i).utf8))
            case .double(let d): return (row["key"], Data(String(d).utf8))
            case .null: return (row["key"], Data())
            }
        }
    }

    /// Converts one setting in a savepoint: `body` returns nil when the setting became rows, or why
    /// not; a refusal (or an error of the database, a CHECK say) rolls its rows back and puts the
    /// setting in quarantine. The setting row goes either way. True when it converted.
    @discardableResult
    private static func convert(_ db: Database, _ key: String, _ value: Data, nowMs: Int64, _ body: () throws -> String?) throws -> Bool {
        var why: String?
        do {
            try db.inSavepoint {
                why = try body()
                return why == nil ? .commit : .rollback
            }
        } catch let e as DatabaseError where e.resultCode == .SQLITE_CONSTRAINT {
            why = "refused by the table: \(e.message ?? "\(e.resultCode)")"
        }
        if let why { try quarantine(db, key: key, value: value, reason: "v5 migration: \(why)", atMs: nowMs) }
        try db.execute(sql: "DELETE FROM setting WHERE key = ?", arguments: [key])
        return why == nil
    }

    private static func quarantine(_ db: Database, key: String, value: Data, reason: String, atMs: Int64) throws {
        try db.execute(sql: "INSERT INTO quarantine(kind, rowKey, data, reason, atMs) VALUES ('setting', ?, ?, ?, ?)",
                       arguments: [Data(key.utf8), value, reason, atMs])
    }

    private static func text(_ value: Data) -> String? { String(data: value, encoding: .utf8) }

    /// The wall clock in milliseconds (when a row was set aside); 0 for a clock no Int64 holds.
    private static func wallClockMs() -> Int64 {
        let ms = (Date().timeIntervalSince1970 * 1000).rounded(.down)
        return ms.isFinite && ms >= 0 && ms < 9.2e18 ? Int64(ms) : 0
    }

    /// Lowercase or uppercase hex to bytes; nil for anything else (an odd length included).
    private static func hex(_ s: String) -> [UInt8]? { parseHex(s) }
}

private extension String {
    /// The rest after `prefix`, or nil when the string does not start with it.
    func dropping(_ prefix: String) -> String? {
        hasPrefix(prefix) ? String(dropFirst(prefix.count)) : nil
    }

    /// Before and after the first `separator` (nil after when there is none).
    func splitOnce(_ separator: Character) -> (String?, String?) {
        guard let i = firstIndex(of: separator) else { return (self, nil) }
        return (String(self[..<i]), String(self[index(after: i)...]))
    }
}
