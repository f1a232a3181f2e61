import GRDB

/// Migrations `v9-bedtime` and `v9-health` (Protocol/bedtime.md): the bedtime rule with its place
/// and the night it last released, and the health pool's bypasses and cooldown. Frozen once
/// shipped: string names only, no app types.
enum MigrationV9Bedtime {
    static func bedtime(_ db: Database) throws {
        // The lock state learns the hold `bedtime` (FocusLock.Hold.bedtime): the table is rebuilt
        // with the wider CHECK (SQLite cannot change a CHECK in place); its one row is copied.
        try db.execute(sql: """
            CREATE TABLE focusLockV9 (
                id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
                activeMode TEXT CHECK (activeMode IS NULL OR typeof(activeMode) = 'text'),
                lockedMode TEXT CHECK (lockedMode IS NULL OR typeof(lockedMode) = 'text'),
                hold TEXT CHECK (hold IN ('key', 'until', 'challenge', 'bedtime')),
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
            INSERT INTO focusLockV9 SELECT id, activeMode, lockedMode, hold, untilMs, challengeId, temporaryKey, temporaryEndsAtMs FROM focusLock;
            DROP TABLE focusLock;
            ALTER TABLE focusLockV9 RENAME TO focusLock;
            """)
        try db.execute(sql: """
            CREATE TABLE bedtime (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                mode TEXT NOT NULL CHECK (length(mode) BETWEEN 1 AND 64),
                bedMinutes INTEGER NOT NULL CHECK (bedMinutes BETWEEN 0 AND 1439),
                wakeMinutes INTEGER NOT NULL CHECK (wakeMinutes BETWEEN 0 AND 1439),
                placeName TEXT CHECK (placeName IS NULL OR length(placeName) <= 128),
                country TEXT CHECK (country IS NULL OR length(country) <= 8),
                latitude REAL CHECK (latitude IS NULL OR latitude BETWEEN -90 AND 90),
                longitude REAL CHECK (longitude IS NULL OR longitude BETWEEN -180 AND 180),
                timeZone TEXT NOT NULL CHECK (length(timeZone) BETWEEN 1 AND 64),
                armedAtMs INTEGER NOT NULL,
                releasedAtMs INTEGER
            );
            """)
    }

    static func health(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE healthBypass (
                seq INTEGER PRIMARY KEY,
                atMs INTEGER NOT NULL,
                kind TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 32),
                cost INTEGER NOT NULL CHECK (cost BETWEEN 0 AND 100),
                detail TEXT CHECK (detail IS NULL OR length(detail) <= 200)
            );
            CREATE INDEX healthBypassAt ON healthBypass(atMs);
            CREATE TABLE healthSettings (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                cooldownMinutes INTEGER NOT NULL CHECK (cooldownMinutes IN (10, 20, 30, 45, 60))
            );
            """)
    }
}
