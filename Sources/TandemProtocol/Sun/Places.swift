import Foundation

/// A place the sun is computed for: a name to show, coordinates, and the time zone whose clock the
/// person reads (the tz database's, through Foundation).
public struct SunPlace: Sendable, Equatable {
    public var name: String
    /// ISO 3166 code, or "" for a place given as coordinates.
    public var country: String
    public var latitude: Double
    public var longitude: Double
    public var timeZoneID: String

    public init(name: String, country: String, latitude: Double, longitude: Double, timeZoneID: String) {
        self.name = name
        self.country = country
        self.latitude = latitude
        self.longitude = longitude
        self.timeZoneID = timeZoneID
    }

    public var timeZone: TimeZone { TimeZone(identifier: timeZoneID) ?? TimeZone(secondsFromGMT: 0)! }

    /// `LAT,LON` in decimal degrees (−90…90, −180…180); nil for anything else.
    public static func parseCoordinates(_ text: String) -> (Double, Double)? {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.count == 2, let lat = Double(parts[0]), let lon = Double(parts[1]),
              lat.isFinite, lon.isFinite, (-90...90).contains(lat), (-180...180).contains(lon) else { return nil }
        return (lat, lon)
    }

    /// A place from coordinates, in `timeZoneID` (the node's zone when the person gives none).
    public static func coordinates(_ lat: Double, _ lon: Double, timeZoneID: String) -> SunPlace {
        SunPlace(name: String(format: "%.4f,%.4f", lat, lon), country: "", latitude: lat, longitude: lon, timeZoneID: timeZoneID)
    }
}

/// The built-in place table (`CityTable.swift`, generated from the tz database's zone.tab: each
/// time zone's representative city, public domain) and the lookups `--city` and the fallbacks use.
public enum PlaceTable {
    public static let all: [SunPlace] = builtInRows.split(separator: "\n").compactMap { line in
        let f = line.trimmingCharacters(in: .whitespaces).split(separator: "|", omittingEmptySubsequences: false).map(String.init)
        guard f.count == 6, let lat = Double(f[3]), let lon = Double(f[4]) else { return nil }
        return SunPlace(name: f[0], country: f[1], latitude: lat, longitude: lon, timeZoneID: f[5])
    }

    static func fold(_ s: String) -> String {
        s.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil)
            .replacingOccurrences(of: "_", with: " ").trimmingCharacters(in: .whitespaces)
    }

    /// `NAME`, `NAME, CC` or a tz id (`Europe/Oslo`); case and accents do not matter. nil: unknown;
    /// a name in several countries without a country code answers the first in table order.
    public static func city(_ query: String) -> SunPlace? {
        if query.contains("/"), let p = all.first(where: { $0.timeZoneID == query }) { return p }
        var name = query
        var country: String?
        if let comma = query.lastIndex(of: ",") {
            name = String(query[..<comma])
            country = fold(String(query[query.index(after: comma)...])).uppercased()
        }
        let key = fold(name)
        return all.first { fold($0.name) == key && (country == nil || $0.country == country) }
    }

    /// The representative city of time zone `id` (the zone's own city in zone.tab), if the table has it.
    public static func representative(ofTimeZone id: String) -> SunPlace? {
        all.first { $0.timeZoneID == id }
    }
}
