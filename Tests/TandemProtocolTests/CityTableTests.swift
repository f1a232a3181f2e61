import Foundation
import XCTest
@testable import TandemProtocol

/// The built-in place table: the 1,000 largest cities (GeoNames) and the tz zone cities (issue 35).
final class CityTableTests: XCTestCase {
    func testLargestCitiesAreThere() {
        XCTAssertGreaterThanOrEqual(PlaceTable.cities.count, 500)
        XCTAssertGreaterThanOrEqual(PlaceTable.zoneCities.count, 400)
        for name in ["Shanghai", "Lagos", "Mumbai", "Karachi", "Jakarta", "Cairo", "Mexico City", "Seoul", "Chennai"] {
            XCTAssertNotNil(PlaceTable.city(name), name)
        }
        // Cities that are no time zone's own city, found by name.
        XCTAssertEqual(PlaceTable.city("Guangzhou")?.timeZoneID, "Asia/Shanghai")
        XCTAssertEqual(PlaceTable.city("Rio de Janeiro")?.timeZoneID, "America/Sao_Paulo")
        XCTAssertEqual(PlaceTable.city("Osaka")?.country, "JP")
    }

    func testAccentsCaseAndCountry() throws {
        let sp = try XCTUnwrap(PlaceTable.city("São Paulo"))
        XCTAssertEqual(sp.country, "BR")
        XCTAssertEqual(sp.timeZoneID, "America/Sao_Paulo")
        XCTAssertEqual(sp.latitude, -23.55, accuracy: 0.1)
        XCTAssertEqual(PlaceTable.city("sao paulo"), sp)
        XCTAssertEqual(PlaceTable.city("SÃO PAULO, br"), sp)
        XCTAssertNil(PlaceTable.city("São Paulo, AR"))
    }

    func testAmbiguousNamesAskForACountry() throws {
        guard case .ambiguous(let ps) = PlaceTable.lookup("Valencia") else { return XCTFail("Valencia is in Spain and Venezuela") }
        XCTAssertEqual(Set(ps.map(\.country)), ["ES", "VE"])
        XCTAssertNil(PlaceTable.city("Valencia"))
        let line = try XCTUnwrap(PlaceTable.refusal("Valencia"))
        XCTAssertTrue(line.contains("Valencia, ES") && line.contains("Valencia, VE"), line)
        XCTAssertEqual(PlaceTable.city("Valencia, ES")?.timeZoneID, "Europe/Madrid")
        XCTAssertEqual(PlaceTable.city("valencia, ve")?.timeZoneID, "America/Caracas")
        XCTAssertEqual(PlaceTable.city("Hyderabad, PK")?.timeZoneID, "Asia/Karachi")
        XCTAssertEqual(PlaceTable.lookup("Atlantis"), .unknown)
        XCTAssertEqual(PlaceTable.lookup(""), .unknown)
        XCTAssertEqual(PlaceTable.lookup(","), .unknown)
    }

    func testTimeZoneFallbackKeepsZoneCities() {
        // The tz fallback answers the zone's own city, never a larger city in the same zone.
        XCTAssertEqual(PlaceTable.representative(ofTimeZone: "Asia/Shanghai")?.name, "Shanghai")
        XCTAssertEqual(PlaceTable.representative(ofTimeZone: "America/Sao_Paulo")?.name, "Sao Paulo")
        XCTAssertEqual(PlaceTable.representative(ofTimeZone: "Asia/Kolkata")?.name, "Kolkata")
        XCTAssertNil(PlaceTable.representative(ofTimeZone: "Mars/Olympus"))
        // No place twice (same name and country).
        let keys = PlaceTable.all.map { PlaceTable.fold($0.name) + "|" + $0.country }
        XCTAssertEqual(keys.count, Set(keys).count)
    }
}
