import Foundation
import XCTest
@testable import TandemProtocol

/// The sun (Protocol/bedtime.md "The sun"): SolarCalculator against an independent reference —
/// the PyPI package astral 3.2, every day of 2026 at 14 places (Tests/fixtures/sun-astral-2026.csv,
/// written by make_sun_fixture.py) — plus the polar rule, dates and DST-safe wall-clock instants.
final class SunTests: XCTestCase {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures/sun-astral-2026.csv")

    struct Place {
        var name: String
        var latitude: Double
        var longitude: Double
        var timeZone: TimeZone
    }

    func testAgainstAstralEveryDayOf2026() throws {
        let text = try String(contentsOf: Self.fixture, encoding: .utf8)
        var places: [String: Place] = [:]
        var worst: [String: Double] = [:]
        var compared = 0
        var polarAgreements = 0
        for line in text.split(separator: "\n") {
            let f = line.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            if f[0] == "#place" {
                places[f[1]] = Place(name: f[1], latitude: Double(f[2])!, longitude: Double(f[3])!, timeZone: TimeZone(identifier: f[4])!)
                continue
            }
            let p = try XCTUnwrap(places[f[0]])
            let date = try XCTUnwrap(LocalDate(f[1]))
            let base = Double(date.daysSinceEpoch) * 86_400
            let day = SolarCalculator.day(date, latitude: p.latitude, longitude: p.longitude, timeZone: p.timeZone)
            let mine = [day.civilDawn, day.sunrise, day.sunset, day.civilDusk]
            for (i, ref) in f[2...5].enumerated() {
                if ref == "-" {
                    if mine[i] == nil { polarAgreements += 1 }
                    // Beyond ±65° the two may disagree on a day at the edge of the polar season.
                    if abs(p.latitude) <= 65 { XCTAssertNil(mine[i], "\(p.name) \(date) event \(i): astral has none") }
                    continue
                }
                let refInstant = base + Double(ref)!
                guard let m = mine[i] else {
                    if abs(p.latitude) <= 65 { XCTFail("\(p.name) \(date) event \(i): astral has \(ref), we have none") }
                    continue
                }
                let diff = abs(m.timeIntervalSince1970 - refInstant)
                if abs(p.latitude) <= 65 {
                    XCTAssertLessThanOrEqual(diff, 60, "\(p.name) \(date) event \(i)")
                    compared += 1
                }
                worst[p.name] = max(worst[p.name] ?? 0, diff)
            }
        }
        XCTAssertGreaterThanOrEqual(places.count, 12)
        XCTAssertGreaterThan(compared, 17_000)
        XCTAssertGreaterThan(polarAgreements, 100, "Tromsø and Longyearbyen have polar days and nights")
        let report = worst.sorted { $0.key < $1.key }.map { "\($0.key) \(String(format: "%.1f", $0.value)) s" }.joined(separator: ", ")
        print("sun vs astral 2026, largest difference per place: \(report)")
    }

    func testPolarRule() throws {
        let oslo = TimeZone(identifier: "Europe/Oslo")!
        // Tromsø: polar night in December, midnight sun in June.
        let winter = SolarCalculator.day(LocalDate(year: 2026, month: 12, day: 21)!, latitude: 69.6492, longitude: 18.9553, timeZone: oslo)
        XCTAssertNil(winter.sunrise)
        XCTAssertNil(winter.sunset)
        XCTAssertEqual(winter.polar, .night)
        XCTAssertNotNil(winter.civilDawn, "Tromsø still has civil twilight at midwinter")
        let summer = SolarCalculator.day(LocalDate(year: 2026, month: 6, day: 21)!, latitude: 69.6492, longitude: 18.9553, timeZone: oslo)
        XCTAssertNil(summer.sunrise)
        XCTAssertEqual(summer.polar, .day)
        XCTAssertEqual(summer.civilPolar, .day)
        // Solar noon is always there, near 11:45 local (CET) in Tromsø at midwinter.
        XCTAssertEqual(LocalDate(winter.solarNoon, in: oslo), winter.date)
        // The south: Antarctic station at the June solstice.
        let mcmurdo = SolarCalculator.day(LocalDate(year: 2026, month: 6, day: 21)!, latitude: -77.85, longitude: 166.67,
                                          timeZone: TimeZone(identifier: "Pacific/Auckland")!)
        XCTAssertEqual(mcmurdo.polar, .night)
        XCTAssertEqual(mcmurdo.civilPolar, .night)
        // The poles themselves do not trap (latitude clamped to ±89.8°).
        _ = SolarCalculator.day(LocalDate(year: 2026, month: 3, day: 20)!, latitude: 90, longitude: 0, timeZone: TimeZone(identifier: "UTC")!)
        _ = SolarCalculator.day(LocalDate(year: 2026, month: 3, day: 20)!, latitude: -90, longitude: 180, timeZone: TimeZone(identifier: "UTC")!)
    }

    func testEventsFallOnTheirLocalDate() throws {
        // Far from the zone's meridian and across the date line: each event lies on the asked date.
        let cases: [(Double, Double, String)] = [(-14.27, -170.70, "Pacific/Pago_Pago"), (1.87, -157.4, "Pacific/Kiritimati"),
                                                  (43.0, -8.5, "Europe/Madrid"), (29.0, 92.0, "Asia/Shanghai")]
        for (lat, lon, zone) in cases {
            let tz = TimeZone(identifier: zone)!
            var d = LocalDate(year: 2026, month: 1, day: 1)!
            for _ in 0..<365 {
                let s = SolarCalculator.day(d, latitude: lat, longitude: lon, timeZone: tz)
                for e in [s.civilDawn, s.sunrise, s.sunset, s.civilDusk].compactMap({ $0 }) {
                    XCTAssertEqual(LocalDate(e, in: tz), d, "\(zone) \(d)")
                }
                d = d.adding(days: 1)
            }
        }
    }

    func testLocalDateArithmetic() {
        XCTAssertEqual(LocalDate(daysSinceEpoch: 0).description, "1970-01-01")
        XCTAssertEqual(LocalDate("2024-02-29")?.adding(days: 1).description, "2024-03-01")
        XCTAssertNil(LocalDate("2026-02-29"))
        XCTAssertNil(LocalDate("2026-13-01"))
        XCTAssertNil(LocalDate("26-01-01"))
        XCTAssertNil(LocalDate("2026-1-01"))
        var rng = SplitMix64(seed: 35)
        for _ in 0..<2000 {
            let n = Int.random(in: -800_000...2_900_000, using: &rng)
            XCTAssertEqual(LocalDate(daysSinceEpoch: n).daysSinceEpoch, n)
        }
        XCTAssertEqual(TimeOfDay("7:05")?.minutes, 425)
        XCTAssertNil(TimeOfDay("24:00"))
        XCTAssertNil(TimeOfDay("12:5"))
        XCTAssertNil(TimeOfDay("-1:00"))
        XCTAssertNil(TimeOfDay("+1:00"))
    }

    func testWallClockInstantsAcrossDST() throws {
        let oslo = TimeZone(identifier: "Europe/Oslo")!
        let iso = ISO8601DateFormatter()
        // Spring forward 2026-03-29 02:00 → 03:00: 02:30 does not exist and moves on by the gap.
        XCTAssertEqual(iso.string(from: oslo.instant(on: LocalDate("2026-03-29")!, at: TimeOfDay("02:30")!)), "2026-03-29T01:30:00Z")
        XCTAssertEqual(iso.string(from: oslo.instant(on: LocalDate("2026-03-29")!, at: TimeOfDay("01:30")!)), "2026-03-29T00:30:00Z")
        XCTAssertEqual(iso.string(from: oslo.instant(on: LocalDate("2026-03-29")!, at: TimeOfDay("23:00")!)), "2026-03-29T21:00:00Z")
        // Fall back 2026-10-25 03:00 → 02:00: 02:30 happens twice; the first one counts.
        XCTAssertEqual(iso.string(from: oslo.instant(on: LocalDate("2026-10-25")!, at: TimeOfDay("02:30")!)), "2026-10-25T00:30:00Z")
        XCTAssertEqual(iso.string(from: oslo.instant(on: LocalDate("2026-10-25")!, at: TimeOfDay("07:00")!)), "2026-10-25T06:00:00Z")
        // A zone whose midnight is skipped on a DST day (Santiago, 2026-09-06 00:00 → 01:00).
        let santiago = TimeZone(identifier: "America/Santiago")!
        let m = santiago.instant(on: LocalDate("2026-09-06")!, at: TimeOfDay(minutes: 0)!)
        XCTAssertEqual(LocalDate(m, in: santiago).description, "2026-09-06")
    }

    func testPlaceTable() throws {
        XCTAssertGreaterThanOrEqual(PlaceTable.all.count, 400)
        XCTAssertEqual(PlaceTable.city("oslo")?.timeZoneID, "Europe/Oslo")
        XCTAssertEqual(PlaceTable.city("Sao Paulo")?.country, "BR")
        XCTAssertEqual(PlaceTable.city("New York, us")?.timeZoneID, "America/New_York")
        XCTAssertEqual(PlaceTable.city("Europe/Oslo")?.name, "Oslo")
        XCTAssertNil(PlaceTable.city("Nowhere-on-earth"))
        XCTAssertEqual(PlaceTable.representative(ofTimeZone: "Australia/Sydney")?.name, "Sydney")
        for p in PlaceTable.all {
            XCTAssertNotNil(TimeZone(identifier: p.timeZoneID), "\(p.name): \(p.timeZoneID)")
            XCTAssertTrue((-90...90).contains(p.latitude) && (-180...180).contains(p.longitude))
        }
        XCTAssertNotNil(SunPlace.parseCoordinates("59.91, 10.75"))
        XCTAssertNil(SunPlace.parseCoordinates("91,0"))
        XCTAssertNil(SunPlace.parseCoordinates("nan,0"))
        XCTAssertNil(SunPlace.parseCoordinates("1,2,3"))
    }
}
