import ArgumentParser
import Foundation
import TandemNet
import TandemProtocol

// `tandem sun` (issue 35): the day's civil dawn, sunrise, sunset and civil dusk at a place, computed
// here with the NOAA equations (TandemProtocol/Sun); needs no node.

/// Where the sun is computed: --location or --city, else the system time zone's representative city.
struct PlaceOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Coordinates in decimal degrees, north and east positive.", valueName: "lat,lon"))
    var location: String?

    @Option(help: ArgumentHelp("A city from the built-in table (`Oslo`, `Oslo, NO`, or a tz id such as Europe/Oslo).", valueName: "name"))
    var city: String?

    @Option(name: .customLong("tz"), help: ArgumentHelp("The time zone of --location (default: the system's).", valueName: "id"))
    var timeZone: String?

    func validate() throws {
        if location != nil && city != nil { throw ValidationError("give --location or --city, not both") }
        if let location, SunPlace.parseCoordinates(location) == nil {
            throw ValidationError("--location wants LAT,LON in decimal degrees (-90..90, -180..180), e.g. 59.91,10.75")
        }
        if let timeZone, TimeZone(identifier: timeZone) == nil { throw ValidationError("--tz \(timeZone): no such time zone") }
    }

    /// The place asked for; nil when none was given and the system zone has no representative city.
    func resolve() throws -> SunPlace? {
        let systemZone = TimeZone.current.identifier
        if let location, let (lat, lon) = SunPlace.parseCoordinates(location) {
            return SunPlace.coordinates(lat, lon, timeZoneID: timeZone ?? systemZone)
        }
        if let city {
            guard let p = PlaceTable.city(city) else {
                throw TandemError(PlaceTable.refusal(city) ?? "no city \(city)", exitCode: TandemError.usageExitCode)
            }
            return p
        }
        return PlaceTable.representative(ofTimeZone: timeZone ?? systemZone)
    }
}

/// ISO 8601 with the place's UTC offset (`2026-11-29T08:41:07+01:00`).
func isoWithOffset(_ d: Date, _ tz: TimeZone) -> String {
    let f = ISO8601DateFormatter()
    f.formatOptions = [.withInternetDateTime]
    f.timeZone = tz
    return f.string(from: d)
}

/// `HH:MM` in the place's time zone.
func localClock(_ d: Date, _ tz: TimeZone) -> String {
    let local = d.timeIntervalSince1970 + Double(tz.secondsFromGMT(for: d))
    let minutes = Int(((local / 60).rounded(.down)).truncatingRemainder(dividingBy: 1440) + 1440) % 1440
    return String(format: "%02d:%02d", minutes / 60, minutes % 60)
}

struct SunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sun", abstract: "Civil dawn, sunrise, sunset and civil dusk at a place on a day.",
        discussion: """
        Computed here with the NOAA solar equations (Protocol/bedtime.md): civil dawn and dusk are the sun 6° below \
        the horizon, sunrise and sunset 0.833° below (its upper edge with standard refraction). Times are in the \
        place's time zone (the system's tz database). When the sun does not rise or set that day, the times are \
        absent and `polar` says day (midnight sun) or night. Without --location or --city: the system time zone's \
        own city from the built-in table.
        """)
    @OptionGroup var place: PlaceOptions
    @Option(help: ArgumentHelp("The day (default: today at the place).", valueName: "YYYY-MM-DD")) var date: String?
    @Flag(help: "Print JSON: civil_dawn, sunrise, sunset, civil_dusk (ISO 8601 with offset, or null) and polar.") var json = false

    func validate() throws {
        if let date, LocalDate(date) == nil { throw ValidationError("--date wants YYYY-MM-DD, a real date") }
    }

    func run() throws {
        guard let p = try place.resolve() else {
            throw TandemError("no place: give --location LAT,LON or --city NAME (the system time zone \(TimeZone.current.identifier) has no city in the table)",
                              exitCode: TandemError.usageExitCode)
        }
        let tz = p.timeZone
        let day = date.flatMap(LocalDate.init) ?? LocalDate(Date(), in: tz)
        let s = SolarCalculator.day(day, latitude: p.latitude, longitude: p.longitude, timeZone: tz)
        if json {
            var o: [String: Any] = [
                "place": p.name, "country": p.country, "latitude": p.latitude, "longitude": p.longitude,
                "time_zone": p.timeZoneID, "date": day.description,
                "civil_dawn": s.civilDawn.map { isoWithOffset($0, tz) } ?? NSNull(),
                "sunrise": s.sunrise.map { isoWithOffset($0, tz) } ?? NSNull(),
                "sunset": s.sunset.map { isoWithOffset($0, tz) } ?? NSNull(),
                "civil_dusk": s.civilDusk.map { isoWithOffset($0, tz) } ?? NSNull(),
                "solar_noon": isoWithOffset(s.solarNoon, tz),
            ]
            if let polar = s.polar { o["polar"] = polar.rawValue }
            if let c = s.civilPolar { o["civil_polar"] = c.rawValue }
            printJSON(o)
            return
        }
        func line(_ label: String, _ d: Date?, _ polar: SolarDay.Polar?) -> String {
            let value = d.map { localClock($0, tz) } ?? (polar == .day ? "none (the sun stays up)" : "none (the sun stays down)")
            return "\(label.padding(toLength: 12, withPad: " ", startingAt: 0))\(value)"
        }
        output("\(p.name)\(p.country.isEmpty ? "" : ", \(p.country)") on \(day) (\(p.timeZoneID))")
        output(line("civil dawn", s.civilDawn, s.civilPolar))
        output(line("sunrise", s.sunrise, s.polar))
        output(line("sunset", s.sunset, s.polar))
        output(line("civil dusk", s.civilDusk, s.civilPolar))
        if let polar = s.polar { output("polar \(polar.rawValue): the sun does not \(polar == .day ? "set" : "rise") today") }
    }
}
