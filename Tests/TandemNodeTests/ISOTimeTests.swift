import Foundation
import TandemNodeCore
import XCTest

/// `ISOTime` writes what `ISO8601DateFormatter` wrote before it (the control API's and the event
/// lines' timestamps), without a formatter object per call.
final class ISOTimeTests: XCTestCase {
    func testUTCMatchesTheFoundationFormatter() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for ms: Int64 in [0, 1, 999, 1_000, 1_764_387_061_123, 1_709_164_800_000, 4_102_444_799_999, 951_782_400_500] {
            XCTAssertEqual(ISOTime.utc(ms), f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)), "\(ms)")
        }
        XCTAssertEqual(ISOTime.utc(-1), "1969-12-31T23:59:59.999Z", "before 1970: the millisecond counts up")
        XCTAssertEqual(JSONValue.iso(1_764_387_061_123), .string("2025-11-29T03:31:01.123Z"))
    }

    func testLocalTimeCarriesTheZonesOffset() throws {
        let ms: Int64 = 1_764_387_061_123
        let text = ISOTime.local(ms)
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let parsed = try XCTUnwrap(f.date(from: text), text)
        XCTAssertEqual(Int64((parsed.timeIntervalSince1970 * 1000).rounded()), ms, "the same instant, whatever the zone")
        let offset = TimeZone.current.secondsFromGMT(for: Date(timeIntervalSince1970: Double(ms) / 1000))
        XCTAssertEqual(text.hasSuffix("Z"), offset == 0, text)
    }

    /// Zones with half-hour and negative offsets, against the Foundation formatter in that zone.
    func testOffsetsOfOtherZones() throws {
        let saved = getenv("TZ").map { String(cString: $0) }
        defer {
            if let saved { setenv("TZ", saved, 1) } else { unsetenv("TZ") }
            tzset()
        }
        for zone in ["Asia/Kolkata", "America/St_Johns", "America/Los_Angeles", "Australia/Lord_Howe"] {
            setenv("TZ", zone, 1)
            tzset()
            let f = ISO8601DateFormatter()
            f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            f.timeZone = try XCTUnwrap(TimeZone(identifier: zone))
            for ms: Int64 in [0, 1_764_387_061_123, 1_709_164_800_007, 1_719_792_000_999, 4_102_444_799_999] {
                XCTAssertEqual(ISOTime.local(ms), f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)), "\(zone) \(ms)")
            }
        }
    }
}
