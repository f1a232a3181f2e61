import Foundation
import GRDB
import TandemProtocol
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// Migrations v5-focus, v5-backup and v5-vault: the JSON that store v4 kept in `setting` under key
/// prefixes becomes rows of real tables; what does not convert goes to `quarantine`; no such setting
/// stays. Checked on a v4 database written here and on the fixture a v4 node wrote through its CLI
/// (Tests/fixtures/store-v4-state, Tests/fixtures/make_state_fixture.py).
final class StateMigrationTests: XCTestCase {
    /// The settings that may stay: single scalars.
    static let scalars: Set<String> = ["display_name", "advertised_port", "record_version", "discoverable", "vault.autoLockMs"]

    private var directories: [URL] = []

    override func tearDown() {
        for d in directories { try? FileManager.default.removeItem(at: d) }
        directories = []
        super.tearDown()
    }

    private func scratch() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("v5-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        directories.append(dir)
        return dir.appendingPathComponent("node.sqlite").path
    }

    /// A database as store v4 left it, holding `settings`.
    private func v4Database(_ settings: [String: String]) throws -> String {
        let path = try scratch()
        let queue = try DatabaseQueue(path: path)
        try NodeStore.migrator.migrate(queue, upTo: "v4-hardening")
        try queue.write { db in
            for (k, v) in settings { try db.execute(sql: "INSERT INTO setting(key, value) VALUES (?, ?)", arguments: [k, v]) }
        }
        try queue.close()
        return path
    }

    private func settingKeys(_ store: NodeStore) throws -> Set<String> {
        try store.read { db in Set(try String.fetchAll(db, sql: "SELECT key FROM setting")) }
    }

    private func quarantined(_ store: NodeStore) throws -> [String: (data: String, reason: String)] {
        try store.read { db in
            var out: [String: (String, String)] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT kind, rowKey, data, reason FROM quarantine") {
                XCTAssertEqual(row["kind"] as String, "setting")
                out[String(decoding: row["rowKey"] as Data, as: UTF8.self)] = (String(decoding: row["data"] as Data, as: UTF8.self), row["reason"])
            }
            return out
        }
    }

    static let alice = String(repeating: "a1", count: 32)
    static let bob = String(repeating: "b2", count: 32)
    static let carol = String(repeating: "c3", count: 32)
    static let blob1 = String(repeating: "01", count: 32)
    static let blob2 = String(repeating: "02", count: 32)
    static let salt = "000102030405060708090a0b0c0d0e0f"
    static let hash = String(repeating: "ab", count: 32)

    static let v4Settings: [String: String] = [
        "display_name": "Alice",
        "advertised_port": "4100",
        "vault.autoLockMs": "600000",
        "focus.modes": #"{"keys":[{"id":"pen","name":"pen"},{"id":"card","name":"Blue card"}],"modes":[{"name":"deep","mainKey":"pen","temporaryKeys":["card"],"blockedSites":["example.com","news.example.org"],"blockedApps":["victim"],"temporaryItems":["news.example.org"],"temporaryDurationMs":600000},{"name":"open","temporaryKeys":[],"blockedSites":[],"blockedApps":[],"temporaryItems":[],"temporaryDurationMs":300000}]}"#,
        "focus.lock": #"{"v":1,"activeMode":"deep","lockedMode":"deep","hold":"until","untilMs":1900000000000,"temporaryKey":"card","temporaryEndsAtMs":1800000600000,"spent":[]}"#,
        "focus.key.pen": #"{"kind":"tag","salt":"\#(salt)","hash":"\#(hash)"}"#,
        "focus.key.card": #"{"kind":"object","sealed":"\#(Data(repeating: 7, count: 64).base64EncodedString())","frames":9}"#,
        "focus.challenge.abcd": "deep",
        "focus.enroll.6d7567": Data([1, 2, 3, 4]).base64EncodedString(),                              // "mug"
        "focus.enroll.7265706c6163653a70656e": Data([5, 6]).base64EncodedString(),                    // "replace:pen"
        "focus.quarantine.1700000000000.focus.key.ghost": #"{"kind":"tag"}"#,
        "backup.offer.\(bob)": #"{"quotaBytes":1073741824,"version":1795891335119,"receivedAtMs":1795891335264}"#,
        "backup.pushed.\(bob)": #"{"snapshotID":"60aeb9e8d8e3f0d4cfdf35bcd61fa3fd","atMs":1795891337203,"bytesSent":1656,"totalBytes":434,"blobs":["\#(blob1)","\#(blob2)"],"kitDigest":"\#(hash)"}"#,
        "backup.pending.\(carol)": "lan",
        "backup.pending.\(bob)": "any",
        "vault.pinGuard": #"{"failures":4,"lockedUntilMs":1795891369944,"breakIns":[{"atMs":1795891339944,"masked":"••1•"},{"atMs":1795891349944,"masked":"•2••"}]}"#,
    ]

    func testEveryV4JSONSettingBecomesRowsAndNoneStays() throws {
        let store = try NodeStore(path: try v4Database(Self.v4Settings))
        XCTAssertEqual(try settingKeys(store), ["display_name", "advertised_port", "vault.autoLockMs"])
        XCTAssertEqual(try store.setting("vault.autoLockMs"), "600000")

        let focus = try store.focusState()
        XCTAssertEqual(focus.configuration.keys, [FocusKeyRecord(id: "card", name: "Blue card"), FocusKeyRecord(id: "pen", name: "pen")])
        XCTAssertEqual(focus.configuration.modes, [FocusModeRecord(name: "deep", mainKey: "pen", temporaryDurationMs: 600_000),
                                                   FocusModeRecord(name: "open", mainKey: nil, temporaryDurationMs: 300_000)])
        XCTAssertEqual(focus.configuration.modeKeys, [FocusModeKeyRecord(mode: "deep", position: 0, keyId: "card")])
        XCTAssertEqual(focus.configuration.modeItems.map { "\($0.mode)/\($0.list)/\($0.position)/\($0.item)" },
                       ["deep/app/0/victim", "deep/site/0/example.com", "deep/site/1/news.example.org", "deep/temporary/0/news.example.org"])
        XCTAssertEqual(focus.materials, [
            FocusKeyMaterialRecord(keyId: "card", kind: "object", sealed: Data(repeating: 7, count: 64), frames: 9),
            FocusKeyMaterialRecord(keyId: "pen", kind: "tag", salt: Data(try XCTUnwrap(parseHex(Self.salt))), hash: Data(repeating: 0xAB, count: 32)),
        ])
        XCTAssertEqual(focus.lock, FocusLockRows(lock: FocusLockRecord(activeMode: "deep", lockedMode: "deep", hold: "until", untilMs: 1_900_000_000_000,
                                                                       temporaryKey: "card", temporaryEndsAtMs: 1_800_000_600_000),
                                                 spent: [FocusSpentKeyRecord(keyId: "card")]))
        XCTAssertEqual(focus.challenges, [FocusChallengeRecord(challengeId: "abcd", mode: "deep")])
        XCTAssertEqual(try store.focusEnrolments(), [FocusEnrolmentRecord(target: "mug", replacing: false, sealed: Data([1, 2, 3, 4])),
                                                     FocusEnrolmentRecord(target: "pen", replacing: true, sealed: Data([5, 6]))])

        XCTAssertEqual(try store.backupHolders(), [BackupHolderRecord(publicKey: try XCTUnwrap(parseHex(Self.bob)), quotaBytes: 1 << 30,
                                                                      version: 1_795_891_335_119, receivedAtMs: 1_795_891_335_264)])
        let push = try XCTUnwrap(try store.lastBackupPush(to: try XCTUnwrap(parseHex(Self.bob))))
        XCTAssertEqual(push.record, BackupPushRecord(holder: try XCTUnwrap(parseHex(Self.bob)), snapshotId: try XCTUnwrap(parseHex("60aeb9e8d8e3f0d4cfdf35bcd61fa3fd")),
                                                     atMs: 1_795_891_337_203, bytesSent: 1656, totalBytes: 434, kitDigest: [UInt8](repeating: 0xAB, count: 32)))
        XCTAssertEqual(push.blobs, [[UInt8](repeating: 1, count: 32), [UInt8](repeating: 2, count: 32)])
        XCTAssertEqual(try store.pendingBackupPushes().map { hexString(Array($0.holder)) + ($0.lanOnly ? " lan" : " any") },
                       ["\(Self.bob) any", "\(Self.carol) lan"])

        let pin = try XCTUnwrap(try store.vaultPinGuard())
        // v8: of each logged wrong PIN only its time is left (in the migration's clear form, until
        // the vault service seals it), no digit.
        func clearEntry(_ atMs: Int64) -> Data {
            var d = Data([0])
            withUnsafeBytes(of: UInt64(atMs).bigEndian) { d.append(contentsOf: $0) }
            return d + Data([0, 0, 0, 0])
        }
        XCTAssertEqual(pin, StoredPinGuard(failures: 4, lockedUntilMs: 1_795_891_369_944,
                                           breakIns: [VaultBreakInRecord(entry: clearEntry(1_795_891_339_944)),
                                                      VaultBreakInRecord(entry: clearEntry(1_795_891_349_944))].enumerated().map {
                                                          var b = $0.element
                                                          b.seq = Int64($0.offset + 1)
                                                          return b
                                                      }))
        XCTAssertNil(try store.read { db in try String.fetchOne(db, sql: "SELECT name FROM sqlite_master WHERE name = 'vaultBreakIn'") },
                     "the table with the masked PINs is gone")

        // The one row a v4 node had already set aside stays set aside, with its time.
        let q = try quarantined(store)
        XCTAssertEqual(Array(q.keys), ["focus.key.ghost"])
        XCTAssertEqual(q["focus.key.ghost"]?.data, #"{"kind":"tag"}"#)
        XCTAssertEqual(try store.quarantined().first?.atMs, 1_700_000_000_000)
    }

    func testRowsThatDoNotConvertAreQuarantinedAndTheRestStays() throws {
        var settings = Self.v4Settings
        settings["focus.key.card"] = #"{"kind":"tag","salt":"zz","hash":"11"}"#                  // not hex
        settings["focus.key.pen"] = "{"                                                        // not JSON
        settings["focus.enroll.6d7567"] = "not base64!"
        settings["focus.enroll.zz"] = Data([1]).base64EncodedString()                         // not an enrolment's name
        settings["focus.strange"] = "1"                                                      // unknown
        settings["backup.offer.\(Self.alice)"] = #"{"quotaBytes":0,"version":1,"receivedAtMs":1}"#   // a quota of 0 is no offer
        settings["backup.offer.abcd"] = #"{"quotaBytes":5,"version":1,"receivedAtMs":1}"#           // not a key
        settings["backup.pushed.\(Self.carol)"] = #"{"snapshotID":"01","atMs":1,"bytesSent":1,"totalBytes":1,"blobs":["0102"]}"#
        let store = try NodeStore(path: try v4Database(settings))
        let q = try quarantined(store)
        XCTAssertEqual(Set(q.keys), ["focus.key.ghost", "focus.key.card", "focus.key.pen", "focus.enroll.6d7567", "focus.enroll.zz",
                                     "focus.strange", "backup.offer.\(Self.alice)", "backup.offer.abcd", "backup.pushed.\(Self.carol)"])
        XCTAssertEqual(q["focus.key.pen"]?.data, "{", "the value is kept as it was")
        XCTAssertTrue(q["focus.key.card"]?.reason.hasPrefix("v5 migration: ") ?? false)
        XCTAssertEqual(try settingKeys(store), ["display_name", "advertised_port", "vault.autoLockMs"])
        // What did convert is there.
        let focus = try store.focusState()
        XCTAssertEqual(focus.configuration.keys.count, 2)
        XCTAssertEqual(focus.materials, [])
        XCTAssertEqual(try store.focusEnrolments().map(\.target), ["pen"])
        XCTAssertEqual(try store.backupHolders().map { hexString(Array($0.publicKey)) }, [Self.bob])
        XCTAssertNotNil(try store.lastBackupPush(to: try XCTUnwrap(parseHex(Self.bob))))
        XCTAssertNil(try store.lastBackupPush(to: try XCTUnwrap(parseHex(Self.carol))))
    }

    func testAConfigurationATableRefusesIsQuarantinedWhole() throws {
        // An empty key id: v4 set such a configuration aside at load; the table's CHECK refuses it.
        let store = try NodeStore(path: try v4Database([
            "focus.modes": #"{"keys":[{"id":"","name":"x"}],"modes":[{"name":"deep","temporaryKeys":[],"blockedSites":["a.example"],"blockedApps":[],"temporaryItems":[],"temporaryDurationMs":300000}]}"#,
            "focus.lock": #"{"v":1,"activeMode":"deep"}"#,
        ]))
        let q = try quarantined(store)
        XCTAssertEqual(Array(q.keys), ["focus.modes"])
        XCTAssertTrue(q["focus.modes"]?.reason.contains("refused by the table") ?? false, "\(q)")
        let focus = try store.focusState()
        XCTAssertEqual(focus.configuration, FocusConfigurationRows(), "none of its rows stays")
        XCTAssertEqual(focus.lock, FocusLockRows(lock: FocusLockRecord(activeMode: "deep")), "the lock converts on its own")
        // A key listed twice: set aside whole too (as v4 did).
        let twice = try NodeStore(path: try v4Database([
            "focus.modes": #"{"keys":[{"id":"a","name":"x"},{"id":"a","name":"y"}],"modes":[]}"#,
        ]))
        XCTAssertEqual(Array(try quarantined(twice).keys), ["focus.modes"])
    }

    func testADamagedPinGuardIsQuarantinedAndCountsAsThreeWrongPins() throws {
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let store = try NodeStore(path: try v4Database(["vault.pinGuard": #"{"failures":"many"}"#]))
        let q = try quarantined(store)
        XCTAssertEqual(q["vault.pinGuard"]?.data, #"{"failures":"many"}"#)
        let g = try XCTUnwrap(try store.vaultPinGuard())
        XCTAssertEqual(g.guardRow.failures, 3)
        XCTAssertGreaterThanOrEqual(g.guardRow.lockedUntilMs, before + 30_000)
        XCTAssertEqual(g.breakIns, [])
        XCTAssertEqual(try settingKeys(store), [])
    }

    func testALockV4ReadLenientlyConvertsTheSameWay() throws {
        // A hold that cannot be read is the key's; a temporary unlock without its end is none.
        let store = try NodeStore(path: try v4Database([
            "focus.lock": #"{"v":1,"lockedMode":"work","hold":"until","temporaryKey":"x","spent":["y","y"]}"#,
        ]))
        XCTAssertEqual(try store.focusState().lock, FocusLockRows(lock: FocusLockRecord(lockedMode: "work", hold: "key"),
                                                                  spent: [FocusSpentKeyRecord(keyId: "y")]))
        let old = try JSONDecoder().decode(FocusLock.self, from: Data(#"{"v":1,"lockedMode":"work","hold":"until","temporaryKey":"x","spent":["y","y"]}"#.utf8))
        XCTAssertEqual(old.stored, FocusLock.StoredForm(lockedMode: "work", hold: "key", spent: ["y"]), "what v4 read from the same JSON")
    }

    // MARK: - The fixture a v4 node wrote

    private func fixture() throws -> (path: String, expected: [String: Any]) {
        let dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("fixtures/store-v4-state")
        let path = try scratch()
        try FileManager.default.copyItem(atPath: dir.appendingPathComponent("node.sqlite").path, toPath: path)
        let expected = try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent("expected.json"))) as? [String: Any]
        return (path, try XCTUnwrap(expected))
    }

    private func json(_ text: String) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    func testTheV4StateFixtureConvertsRowForRow() throws {
        let (path, expected) = try fixture()
        // What the v4 node stored, read before the migration runs.
        let queue = try DatabaseQueue(path: path)
        let settings = try queue.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT key, value FROM setting").map { ($0["key"] as String, $0["value"] as String) })
        }
        try queue.close()
        XCTAssertEqual(Set(settings.keys), Set((try XCTUnwrap(expected["settings"] as? [String: Any])).keys), "the fixture is the one expected.json describes")

        let store = try NodeStore(path: path)
        XCTAssertEqual(try settingKeys(store), Set(settings.keys).intersection(Self.scalars))
        for k in Self.scalars where settings[k] != nil { XCTAssertEqual(try store.setting(k), settings[k]) }
        let focus = try store.focusState()
        var checked: Set<String> = []

        // focus.modes: every key, mode and list entry, in order.
        let modes = try json(try XCTUnwrap(settings["focus.modes"]))
        let keys = try XCTUnwrap(modes["keys"] as? [[String: Any]])
        XCTAssertEqual(focus.configuration.keys, keys.map { FocusKeyRecord(id: $0["id"] as! String, name: $0["name"] as! String) }.sorted { $0.id < $1.id })
        let modeList = try XCTUnwrap(modes["modes"] as? [[String: Any]])
        XCTAssertEqual(focus.configuration.modes.count, modeList.count)
        for m in modeList {
            let name = m["name"] as! String
            XCTAssertEqual(focus.configuration.modes.first { $0.name == name },
                           FocusModeRecord(name: name, mainKey: m["mainKey"] as? String, temporaryDurationMs: (m["temporaryDurationMs"] as! NSNumber).int64Value))
            XCTAssertEqual(focus.configuration.modeKeys.filter { $0.mode == name }.sorted { $0.position < $1.position }.map(\.keyId),
                           m["temporaryKeys"] as! [String])
            for (list, field) in [("site", "blockedSites"), ("app", "blockedApps"), ("temporary", "temporaryItems")] {
                XCTAssertEqual(focus.configuration.modeItems.filter { $0.mode == name && $0.list == list }.sorted { $0.position < $1.position }.map(\.item),
                               m[field] as! [String], "\(name) \(field)")
            }
        }
        checked.insert("focus.modes")
        // focus.key.ID: the tag keys' salts and hashes.
        for (k, v) in settings where k.hasPrefix("focus.key.") {
            let id = String(k.dropFirst("focus.key.".count))
            let m = try json(v)
            XCTAssertEqual(focus.materials.first { $0.keyId == id },
                           FocusKeyMaterialRecord(keyId: id, kind: "tag", salt: Data(try XCTUnwrap(parseHex(m["salt"] as! String))),
                                                  hash: Data(try XCTUnwrap(parseHex(m["hash"] as! String)))))
            checked.insert(k)
        }
        XCTAssertEqual(focus.materials.count, checked.count - 1)
        // focus.lock: deep locked by its key, blue-card's temporary unlock running (so spent).
        let lock = try json(try XCTUnwrap(settings["focus.lock"]))
        XCTAssertEqual(focus.lock, FocusLockRows(lock: FocusLockRecord(activeMode: lock["activeMode"] as? String, lockedMode: lock["lockedMode"] as? String,
                                                                       hold: lock["hold"] as? String, temporaryKey: lock["temporaryKey"] as? String,
                                                                       temporaryEndsAtMs: (lock["temporaryEndsAtMs"] as? NSNumber)?.int64Value),
                                                 spent: (lock["spent"] as! [String]).map(FocusSpentKeyRecord.init(keyId:))))
        XCTAssertEqual(focus.lock?.lock.lockedMode, "deep")
        checked.insert("focus.lock")
        // focus.challenge.ID: the never-answered invite's mode.
        let challenge = try XCTUnwrap(expected["challenge_with_mode"] as? String)
        XCTAssertEqual(focus.challenges, [FocusChallengeRecord(challengeId: challenge, mode: try XCTUnwrap(settings["focus.challenge." + challenge]))])
        checked.insert("focus.challenge." + challenge)
        // focus.enroll.HEX: the unfinished enrolment of "mug", its sealed bytes as they were.
        let enrolment = try XCTUnwrap(settings["focus.enroll.6d7567"])
        XCTAssertEqual(try store.focusEnrolments(), [FocusEnrolmentRecord(target: "mug", replacing: false, sealed: try XCTUnwrap(Data(base64Encoded: enrolment)))])
        checked.insert("focus.enroll.6d7567")
        // focus.quarantine.MS.SETTING: set aside already, it stays so.
        let aside = try XCTUnwrap(settings.keys.first { $0.hasPrefix("focus.quarantine.") })
        let q = try quarantined(store)
        XCTAssertEqual(Array(q.keys), ["focus.key.ghost"])
        XCTAssertEqual(q["focus.key.ghost"]?.data, settings[aside])
        checked.insert(aside)

        // backup.offer.KEY, backup.pushed.KEY, backup.pending.KEY.
        for (k, v) in settings where k.hasPrefix("backup.offer.") {
            let o = try json(v)
            let key = try XCTUnwrap(parseHex(String(k.dropFirst("backup.offer.".count))))
            XCTAssertEqual(try store.backupHolder(key), BackupHolderRecord(publicKey: key, quotaBytes: (o["quotaBytes"] as! NSNumber).int64Value,
                                                                          version: (o["version"] as! NSNumber).int64Value,
                                                                          receivedAtMs: (o["receivedAtMs"] as! NSNumber).int64Value))
            checked.insert(k)
        }
        XCTAssertEqual(try store.backupHolders().count, 2)
        for (k, v) in settings where k.hasPrefix("backup.pushed.") {
            let r = try json(v)
            let key = try XCTUnwrap(parseHex(String(k.dropFirst("backup.pushed.".count))))
            let push = try XCTUnwrap(try store.lastBackupPush(to: key))
            XCTAssertEqual(push.record, BackupPushRecord(holder: key, snapshotId: try XCTUnwrap(parseHex(r["snapshotID"] as! String)),
                                                         atMs: (r["atMs"] as! NSNumber).int64Value, bytesSent: (r["bytesSent"] as! NSNumber).int64Value,
                                                         totalBytes: (r["totalBytes"] as! NSNumber).int64Value,
                                                         kitDigest: try XCTUnwrap(parseHex(r["kitDigest"] as! String))))
            XCTAssertEqual(push.blobs.map(hexString), (r["blobs"] as! [String]).sorted())
            checked.insert(k)
        }
        for (k, v) in settings where k.hasPrefix("backup.pending.") {
            XCTAssertEqual(try store.pendingBackupPushes().map { hexString(Array($0.holder)) }, [String(k.dropFirst("backup.pending.".count))])
            XCTAssertEqual(try store.pendingBackupPushes().first?.lanOnly, v == "lan")
            checked.insert(k)
        }
        // vault.pinGuard: three wrong PINs, the third logged.
        let g = try json(try XCTUnwrap(settings["vault.pinGuard"]))
        let stored = try XCTUnwrap(try store.vaultPinGuard())
        XCTAssertEqual(stored.guardRow.failures, 3)
        XCTAssertEqual(stored.guardRow.failures, (g["failures"] as! NSNumber).int64Value)
        XCTAssertEqual(stored.guardRow.lockedUntilMs, (g["lockedUntilMs"] as! NSNumber).int64Value)
        // Of each logged wrong PIN only its time is left (v8): byte 0 = 0, atMs big-endian, attempt 0.
        XCTAssertEqual(stored.breakIns.map { Array($0.entry) },
                       (g["breakIns"] as! [[String: Any]]).map {
                           [0] + withUnsafeBytes(of: UInt64(($0["atMs"] as! NSNumber).int64Value).bigEndian) { Array($0) } + [0, 0, 0, 0]
                       })
        checked.insert("vault.pinGuard")

        XCTAssertEqual(checked.union(Self.scalars.intersection(settings.keys)), Set(settings.keys), "every setting of the fixture was checked")
    }

    // MARK: - The intents

    func testFocusChangesWriteTheirRowsInOneTransaction() throws {
        let store = try NodeStore.inMemory()
        let config = FocusConfigurationRows(keys: [FocusKeyRecord(id: "pen", name: "pen")],
                                            modes: [FocusModeRecord(name: "deep", mainKey: "pen", temporaryDurationMs: 300_000)],
                                            modeItems: [FocusModeItemRecord(mode: "deep", list: "site", position: 0, item: "example.com")])
        let lock = FocusLockRows(lock: FocusLockRecord(activeMode: "deep", lockedMode: "deep", hold: "key"))
        let tag = FocusKeyMaterialRecord(keyId: "pen", kind: "tag", salt: Data(count: 16), hash: Data(count: 32))
        try store.batch { step in
            try step.saveFocus([.configuration(config), .lock(lock), .material(tag), .challengeMode(FocusChallengeRecord(challengeId: "ab", mode: "deep")),
                                .enrolment(FocusEnrolmentRecord(target: "mug", replacing: false, sealed: Data([1])))],
                               events: [PendingEvent(type: "focus.test", timeMs: 1, fields: "{}")])
        }
        XCTAssertEqual(try store.focusState(), StoredFocusState(configuration: config, materials: [tag], lock: lock,
                                                                challenges: [FocusChallengeRecord(challengeId: "ab", mode: "deep")]))
        XCTAssertEqual(try store.events(since: 0, limit: 10).map(\.type), ["focus.test"])
        // A configuration replaces the one before whole; an unlocked lock with no mode leaves no row.
        try store.batch { step in
            try step.saveFocus([.configuration(FocusConfigurationRows()), .lock(nil), .removeMaterial(keyId: "pen"),
                                .removeChallengeMode(challengeId: "ab"), .removeEnrolment(target: "mug", replacing: false)])
        }
        XCTAssertEqual(try store.focusState(), StoredFocusState())
        XCTAssertEqual(try store.focusEnrolments(), [])
        // A change the table refuses rolls the whole list back.
        XCTAssertThrowsError(try store.batch { try $0.saveFocus([.material(tag), .material(FocusKeyMaterialRecord(keyId: "x", kind: "qr"))]) })
        XCTAssertEqual(try store.focusState().materials, [])
        // Quarantine moves a row (a mode with its lists) aside with its copy and reason.
        try store.batch { try $0.saveFocus([.configuration(config)]) }
        try store.batch { try $0.saveFocus([.quarantine(.mode(name: "deep"), data: "{copy}", reason: "broken", atMs: 9)]) }
        XCTAssertEqual(try store.focusState().configuration, FocusConfigurationRows(keys: config.keys))
        XCTAssertEqual(try store.quarantined(), [QuarantinedRow(kind: "focusMode", rowKey: Array("deep".utf8), reason: "broken", atMs: 9)])
    }

    func testBackupAndVaultIntents() throws {
        let store = try NodeStore.inMemory()
        let bob = [UInt8](repeating: 2, count: 32)
        try store.batch { try $0.keepBackupOffer(BackupHolderRecord(publicKey: bob, quotaBytes: 10, version: 1, receivedAtMs: 5)) }
        try store.batch { try $0.keepBackupOffer(BackupHolderRecord(publicKey: bob, quotaBytes: 20, version: 2, receivedAtMs: 6)) }
        XCTAssertEqual(try store.backupHolders().map(\.quotaBytes), [20])
        XCTAssertThrowsError(try store.batch { try $0.keepBackupOffer(BackupHolderRecord(publicKey: [1], quotaBytes: 1, version: 1, receivedAtMs: 1)) }, "not a key")
        XCTAssertThrowsError(try store.batch { try $0.keepBackupOffer(BackupHolderRecord(publicKey: bob, quotaBytes: 0, version: 1, receivedAtMs: 1)) }, "no quota")
        try store.batch { try $0.forgetBackupOffer(from: bob) }
        XCTAssertEqual(try store.backupHolders(), [])

        let first = StoredBackupPush(record: BackupPushRecord(holder: bob, snapshotId: [1], atMs: 1, bytesSent: 2, totalBytes: 3, kitDigest: nil),
                                     blobs: [[UInt8](repeating: 9, count: 32), [UInt8](repeating: 8, count: 32)])
        try store.batch { try $0.recordBackupPush(first) }
        XCTAssertEqual(try store.lastBackupPush(to: bob)?.blobs, [[UInt8](repeating: 8, count: 32), [UInt8](repeating: 9, count: 32)])
        let second = StoredBackupPush(record: BackupPushRecord(holder: bob, snapshotId: [2], atMs: 4, bytesSent: 5, totalBytes: 6,
                                                               kitDigest: [UInt8](repeating: 7, count: 32)),
                                      blobs: [[UInt8](repeating: 7, count: 32)])
        try store.batch { try $0.recordBackupPush(second) }
        XCTAssertEqual(try store.lastBackupPush(to: bob), second)
        XCTAssertEqual(try store.lastBackupPushes(), [second])

        try store.batch { try $0.markBackupPending(bob, lanOnly: true) }
        try store.batch { try $0.markBackupPending(bob, lanOnly: false) }
        XCTAssertEqual(try store.pendingBackupPushes(), [BackupPendingRecord(holder: bob, lanOnly: false)])
        try store.batch { try $0.clearBackupPending(bob) }
        XCTAssertEqual(try store.pendingBackupPushes(), [])

        XCTAssertNil(try store.vaultPinGuard())
        let log = (0..<3).map { VaultBreakInRecord(entry: Data([1, UInt8($0)])) }
        try store.batch { try $0.saveVaultPinGuard(StoredPinGuard(failures: 5, lockedUntilMs: 120_000, breakIns: log)) }
        try store.batch { try $0.saveVaultPinGuard(StoredPinGuard(failures: 6, lockedUntilMs: 130_000, breakIns: Array(log.suffix(2)))) }
        let g = try XCTUnwrap(try store.vaultPinGuard())
        XCTAssertEqual(g.guardRow.failures, 6)
        XCTAssertEqual(g.breakIns.map(\.entry), [Data([1, 1]), Data([1, 2])])
        XCTAssertThrowsError(try store.batch { try $0.saveVaultPinGuard(StoredPinGuard(failures: -1, lockedUntilMs: 0, breakIns: [])) })
    }
}
