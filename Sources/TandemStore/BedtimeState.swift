import Foundation
import GRDB

// Bedtime and the health pool (Protocol/bedtime.md). Migrations v9-bedtime and v9-health made
// these tables (MigrationV9Bedtime.swift).

/// The bedtime rule's one row (`id` 1); no row: no bedtime.
public struct BedtimeRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "bedtime"
    public var id: Int64 = 1
    public var mode: String
    public var bedMinutes: Int64
    public var wakeMinutes: Int64
    public var placeName: String?
    public var country: String?
    public var latitude: Double?
    public var longitude: Double?
    public var timeZone: String
    public var armedAtMs: Int64
    public var releasedAtMs: Int64?

    public enum Columns {
        public static let releasedAtMs = Column(CodingKeys.releasedAtMs)
    }

    public init(mode: String, bedMinutes: Int64, wakeMinutes: Int64, placeName: String?, country: String?,
                latitude: Double?, longitude: Double?, timeZone: String, armedAtMs: Int64, releasedAtMs: Int64?) {
        self.mode = mode
        self.bedMinutes = bedMinutes
        self.wakeMinutes = wakeMinutes
        self.placeName = placeName
        self.country = country
        self.latitude = latitude
        self.longitude = longitude
        self.timeZone = timeZone
        self.armedAtMs = armedAtMs
        self.releasedAtMs = releasedAtMs
    }
}

/// One bypass that cost health.
public struct HealthBypassRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "healthBypass"
    public var seq: Int64?
    public var atMs: Int64
    public var kind: String
    public var cost: Int64
    public var detail: String?

    public enum Columns {
        public static let seq = Column(CodingKeys.seq)
        public static let atMs = Column(CodingKeys.atMs)
    }

    public init(atMs: Int64, kind: String, cost: Int64, detail: String?) {
        self.atMs = atMs
        self.kind = kind
        self.cost = cost
        self.detail = detail
    }
}

extension StoreReading {
    public func bedtime() throws -> BedtimeRecord? {
        try read { db in try BedtimeRecord.fetchOne(db, key: 1) }
    }

    /// Bypasses at or after `sinceMs`, and every one recorded later than the newest (a clock set
    /// back) — all of them from `sinceMs` on, oldest first.
    public func healthBypasses(sinceMs: Int64) throws -> [HealthBypassRecord] {
        try read { db in
            try HealthBypassRecord.filter(HealthBypassRecord.Columns.atMs >= sinceMs).order(HealthBypassRecord.Columns.atMs).fetchAll(db)
        }
    }

    /// The chosen cooldown in minutes; nil: the default.
    public func healthCooldownMinutes() throws -> Int64? {
        try read { db in try Int64.fetchOne(db, sql: "SELECT cooldownMinutes FROM healthSettings WHERE id = 1") }
    }
}

extension StoreStep {
    public func saveBedtime(_ r: BedtimeRecord) throws {
        try write { db in try r.save(db) }
    }

    public func deleteBedtime() throws {
        try write { db in _ = try BedtimeRecord.deleteOne(db, key: 1) }
    }

    public func setBedtimeReleased(atMs: Int64) throws {
        try write { db in try db.execute(sql: "UPDATE bedtime SET releasedAtMs = ? WHERE id = 1", arguments: [atMs]) }
    }

    /// Records a bypass; bypasses older than `pruneBeforeMs` go (the pool only reads today's).
    public func addHealthBypass(_ r: HealthBypassRecord, pruneBeforeMs: Int64) throws {
        try write { db in
            try r.insert(db)
            try db.execute(sql: "DELETE FROM healthBypass WHERE atMs < ?", arguments: [pruneBeforeMs])
        }
    }

    public func setHealthCooldown(minutes: Int64) throws {
        try write { db in
            try db.execute(sql: "INSERT INTO healthSettings(id, cooldownMinutes) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET cooldownMinutes = excluded.cooldownMinutes",
                           arguments: [minutes])
        }
    }
}
