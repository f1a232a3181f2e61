import Foundation
import XCTest
@testable import TandemProtocol

/// The built-in place table: the 1,000 largest cities (Natural Earth, public domain) and the tz zone
/// cities (issue 35).
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
        XCTAssertEqual(PlaceTable.cities.count, 1000)
        XCTAssertEqual(PlaceTable.cities.first?.name, "Tokyo")
    }

    func testZonesOfNaturalEarthCitiesAreTheirCountrys() throws {
        // Natural Earth 4.0.0 has no zone for Houston and Moscow, another country's for Lagos and
        // Prague, and zones older than the tz database's splits for Saratov, Barnaul and Ciudad Juárez.
        let expected = ["Houston": "America/Chicago", "Moscow": "Europe/Moscow", "Lagos": "Africa/Lagos",
                        "Prague": "Europe/Prague", "Montevideo": "America/Montevideo", "Saratov": "Europe/Saratov",
                        "Barnaul": "Asia/Barnaul", "Ciudad Juarez": "America/Ciudad_Juarez", "Reynosa": "America/Matamoros",
                        "Sydney": "Australia/Sydney", "Denver": "America/Denver", "Odessa, UA": "Europe/Kyiv",
                        "Santiago, CL": "America/Santiago", "Macau": "Asia/Macau"]
        for (query, zone) in expected {
            XCTAssertEqual(PlaceTable.city(query)?.timeZoneID, zone, query)
        }
        // A name with a comma keeps the part before it: `--city NAME, CC` stays unambiguous.
        let washington = try XCTUnwrap(PlaceTable.city("Washington"))
        XCTAssertEqual(washington.country, "US")
        XCTAssertEqual(washington.latitude, 38.9, accuracy: 0.1)
        XCTAssertTrue(PlaceTable.all.allSatisfy { !$0.name.contains(",") && !$0.name.contains("|") })
        // Cities the data repeats far from where they are, without a zone: the real one is kept.
        XCTAssertEqual(try XCTUnwrap(PlaceTable.city("Natal")).longitude, -35.24, accuracy: 0.1)
        XCTAssertEqual(try XCTUnwrap(PlaceTable.city("Vila Velha")).latitude, -20.37, accuracy: 0.1)
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
        guard case .ambiguous(let santiagos) = PlaceTable.lookup("santiago") else { return XCTFail("Santiago is in Chile and the Dominican Republic") }
        XCTAssertEqual(santiagos.map(\.country), ["CL", "DO"])
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
