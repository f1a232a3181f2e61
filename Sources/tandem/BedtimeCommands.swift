import ArgumentParser
import Foundation
import TandemNet
import TandemNodeCore
import TandemProtocol

// Bedtime, health and the timeline (issue 35, Protocol/bedtime.md). The node keeps the state and
// judges; these commands parse, ask it and print.

struct BedtimeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bedtime",
        abstract: "Lock a mode every night; leave it in the morning with a daylight photo after sunrise.",
        discussion: """
        At the bed time the node locks the mode itself (the same blocking and hooks as `tandem lock`); a node that was \
        off then locks when it starts. The lock opens only with `tandem unlock --daylight PHOTO` once it is past both \
        the wake time and sunrise at the place (`tandem sun`), with a photo of the daylight sky taken in the last 10 \
        minutes; `tandem unlock --emergency` leaves at once and costs 20 health. It then stays open until the next bed time.
        """,
        subcommands: [BedtimeSet.self, BedtimeShow.self, BedtimeOff.self], defaultSubcommand: BedtimeShow.self)
}

struct BedtimeSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "set", abstract: "Set the bedtime mode, bed and wake times, and the place.")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("The mode to lock at night.", valueName: "name")) var mode: String
    @Option(help: ArgumentHelp("When the night starts (local time).", valueName: "HH:MM")) var bed: String
    @Option(help: ArgumentHelp("The earliest the night may end (local time).", valueName: "HH:MM")) var wake: String
    @OptionGroup var place: PlaceOptions

    func validate() throws {
        if TimeOfDay(bed) == nil { throw ValidationError("--bed wants HH:MM (00:00–23:59)") }
        if TimeOfDay(wake) == nil { throw ValidationError("--wake wants HH:MM (00:00–23:59)") }
        if bed == wake { throw ValidationError("--bed and --wake must differ") }
    }

    func run() async throws {
        var p: [String: JSONValue] = ["mode": .string(mode), "bed": .string(bed), "wake": .string(wake)]
        if let l = place.location, let (lat, lon) = SunPlace.parseCoordinates(l) {
            p["latitude"] = .double(lat)
            p["longitude"] = .double(lon)
        }
        if let c = place.city { p["city"] = .string(c) }
        if let tz = place.timeZone { p["time_zone"] = .string(tz) }
        try await callNode(common, "bedtime.set", .object(p)) { output(bedtimeText($0)) }
    }
}

struct BedtimeShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "The bedtime, and when tonight's lock opens.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "bedtime.show") { output(bedtimeText($0)) }
    }
}

struct BedtimeOff: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "off", abstract: "Switch bedtime off (not while its lock is on).")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "bedtime.off") { _ in output("Bedtime is off") }
    }
}

func bedtimeText(_ s: JSONValue) -> String {
    guard s["enabled"]?.boolValue == true else { return "No bedtime (tandem bedtime set --mode M --bed 23:00 --wake 07:00 --city NAME)" }
    guard s["valid"]?.boolValue == true else { return "Bedtime for mode \(s["mode"]?.stringValue ?? "?") is damaged: set it again" }
    let place = s["place"]?["name"]?.stringValue.map { "in \($0)" } ?? "with no place (sunrise counts as 07:00)"
    var lines = ["Bedtime: mode \(s["mode"]?.stringValue ?? "?") from \(s["bed"]?.stringValue ?? "?") to \(s["wake"]?.stringValue ?? "?") \(place) (\(s["time_zone"]?.stringValue ?? "?"))"]
    if s["locked"]?.boolValue == true {
        lines.append("Locked for the night; \(s["opens"]?.stringValue ?? "")")
    } else {
        lines.append("Next bed time: \(s["next_bed_at"]?.stringValue ?? "?"); then \(s["opens"]?.stringValue ?? "")")
    }
    if s["mode_exists"]?.boolValue == false { lines.append("warning: mode \(s["mode"]?.stringValue ?? "?") does not exist any more") }
    return lines.joined(separator: "\n")
}

struct HealthCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "Today's health: 100 a day, every bypass costs, 0 keeps everything locked until midnight.",
        discussion: """
        A temporary unlock or quitting a challenge or solo session early costs 5; an emergency exit from bedtime \
        costs 20. After a bypass, the next temporary unlock waits for the cooldown. States: healthy 80–100, \
        concerned 60–79, tired 40–59, weak 1–39, dead 0. Health returns to 100 at local midnight.
        """,
        subcommands: [HealthShow.self, HealthSet.self], defaultSubcommand: HealthShow.self)
}

struct HealthShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Health, state, cooldown and the day's bypasses.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "health.show") { s in
            let h = s["health"]?.intValue ?? 0
            var line = "Health \(h) (\(s["state"]?.stringValue ?? "?"))"
            if let c = s["cooldown_seconds_left"]?.intValue, c > 0 { line += "; cooldown \((c + 59) / 60) min left" }
            output(line)
            for b in s["bypasses"]?.arrayValue ?? [] {
                output("  \(b["at"]?.stringValue ?? "?")  \(b["kind"]?.stringValue ?? "?")  −\(b["cost"]?.intValue ?? 0)")
            }
        }
    }
}

struct HealthSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "set", abstract: "Choose the cooldown after a bypass.")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("Minutes: 10, 20, 30, 45 or 60.", valueName: "minutes")) var cooldown: Int

    func validate() throws {
        if !HealthPool.cooldownChoices.contains(cooldown) { throw ValidationError("--cooldown is one of 10, 20, 30, 45 or 60") }
    }

    func run() async throws {
        try await callNode(common, "health.set", ["cooldown_minutes": .int(Int64(cooldown))]) { s in
            output("Cooldown after a bypass: \(s["cooldown_minutes"]?.intValue ?? 0) min")
        }
    }
}

struct TimelineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timeline", abstract: "The day's story: locks, unlocks, bypasses, challenges, bedtime, health.")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("The day (default: today).", valueName: "YYYY-MM-DD")) var date: String?

    func validate() throws {
        if let date, LocalDate(date) == nil { throw ValidationError("--date wants YYYY-MM-DD, a real date") }
    }

    func run() async throws {
        var p: [String: JSONValue] = [:]
        if let date { p["date"] = .string(date) }
        try await callNode(common, "timeline.day", .object(p)) { s in
            output(s["date"]?.stringValue ?? "")
            let entries = s["entries"]?.arrayValue ?? []
            if entries.isEmpty { output("  (nothing happened)") }
            for e in entries { output("  \(e["clock"]?.stringValue ?? "--:--")  \(e["line"]?.stringValue ?? "")") }
            if let sum = s["summary"], !sum.isNull { output("  \(sum["line"]?.stringValue ?? "")") }
        }
    }
}
