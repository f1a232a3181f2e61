import Foundation
import TandemProtocol
import TandemStore
import TandemNodeCore

// Bedtime on the node (Protocol/bedtime.md): the rule in the `bedtime` table (migration
// v9-bedtime), the night's lock through the lock machine (`FocusLock.bedtimeStarted`, hold
// `bedtime`: the same blocking, hooks and events as any lock), and leaving it — after the later of
// sunrise at the place and the wake time, with a photo the daylight check accepts, or by an
// emergency unlock that costs health.
extension FocusService {
    /// The largest age of a daylight photo's capture time.
    nonisolated static let photoMaximumAgeMs: Int64 = 10 * 60_000
    /// How far a capture time may lie ahead of the node's clock (camera clocks drift a little).
    nonisolated static let photoClockSlackMs: Int64 = 2 * 60_000

    /// The stored rule; nil when there is none, or its row does not make a rule (reported in `bedtime.show`).
    @NodeCore func bedtimeBook(_ r: StoreReading? = nil) -> BedtimeBook? {
        let reader: StoreReading = r ?? store
        guard let row = health.read("read the bedtime", or: nil, { try reader.bedtime() }) else { return nil }
        return Self.book(from: row)
    }

    nonisolated static func book(from row: BedtimeRecord) -> BedtimeBook? {
        guard let bed = TimeOfDay(minutes: Int(clamping: row.bedMinutes)), let wake = TimeOfDay(minutes: Int(clamping: row.wakeMinutes)),
              TimeZone(identifier: row.timeZone) != nil else { return nil }
        var place: SunPlace?
        if let lat = row.latitude, let lon = row.longitude, (-90...90).contains(lat), (-180...180).contains(lon) {
            place = SunPlace(name: row.placeName ?? String(format: "%.4f,%.4f", lat, lon), country: row.country ?? "",
                             latitude: lat, longitude: lon, timeZoneID: row.timeZone)
        }
        let rule = BedtimeRule(mode: row.mode, bed: bed, wake: wake, place: place, timeZoneID: row.timeZone)
        return BedtimeBook(rule: rule, armedAtMs: row.armedAtMs, releasedAtMs: row.releasedAtMs)
    }

    nonisolated static func record(_ b: BedtimeBook) -> BedtimeRecord {
        BedtimeRecord(mode: b.rule.mode, bedMinutes: Int64(b.rule.bed.minutes), wakeMinutes: Int64(b.rule.wake.minutes),
                      placeName: b.rule.place?.name, country: b.rule.place?.country, latitude: b.rule.place?.latitude,
                      longitude: b.rule.place?.longitude, timeZone: b.rule.timeZoneID, armedAtMs: b.armedAtMs, releasedAtMs: b.releasedAtMs)
    }

    /// On the core, at every tick and at the start: inside a night that holds, the bedtime mode
    /// locks (unless it already is, or another lock is on: then at a later tick, once it opened).
    @NodeCore func bedtimeTick(nowMs: Int64) {
        guard let book = bedtimeBook(), let night = book.holdingNight(nowMs: nowMs) else { return }
        var (lock, modes) = state.withLockedValue { ($0.lock, $0.modes) }
        if lock.locked?.hold == .bedtime, lock.locked?.mode == book.rule.mode { return }
        let step = lock.bedtimeStarted(mode: book.rule.mode, modes: modes, nowMs: nowMs)
        guard step.refusal == nil else { return }
        let o = book.rule.opening(forNightStarting: night)
        let now = Date(timeIntervalSince1970: Double(nowMs) / 1000)
        health.attempt("lock for bedtime") {
            try store.step { tx in
                commit(lock, step, in: tx)
                _ = events.emit("bedtime.started", ["mode": .string(book.rule.mode), "night_start": JSONValue.iso(ms(night)),
                                                    "opens_at": JSONValue.iso(ms(o.at)), "opens": .string(book.rule.explain(o, now: now))], in: tx)
            }
        }
        events.published()
    }

    nonisolated func ms(_ d: Date) -> Int64 { Int64((d.timeIntervalSince1970 * 1000).rounded()) }

    /// Refuses while a bedtime lock is on (changing or switching off the rule would be a way out).
    @NodeCore func checkBedtimeNotHolding(_ what: String) throws {
        if let l = state.withLockedValue({ $0.lock.locked }), l.hold == .bedtime {
            throw ControlError(code: "bedtime_hold", message: "bedtime holds mode \(l.mode) now: \(what) after leaving bedtime (tandem unlock --daylight PHOTO)", exitCode: 1)
        }
    }

    /// The place for `bedtime set`: --location (in --tz or the node's zone), --city, else the node
    /// zone's own city, else none (sunrise counts as 07:00).
    nonisolated func bedtimePlace(_ params: JSONValue) throws -> (SunPlace?, String) {
        let zone = try params.optionalString("time_zone") ?? TimeZone.current.identifier
        guard TimeZone(identifier: zone) != nil else { throw NodeError.invalidArgument("no time zone \(zone)") }
        let lat = params["latitude"]?.doubleValue, lon = params["longitude"]?.doubleValue
        if lat != nil || lon != nil {
            guard let lat, let lon, lat.isFinite, lon.isFinite, (-90...90).contains(lat), (-180...180).contains(lon) else {
                throw NodeError.invalidArgument("a location is a latitude in -90…90 and a longitude in -180…180")
            }
            return (SunPlace.coordinates(lat, lon, timeZoneID: zone), zone)
        }
        if let city = try params.optionalString("city") {
            guard let p = PlaceTable.city(city) else { throw NodeError.invalidArgument(PlaceTable.refusal(city) ?? "no city \(city)") }
            return (p, p.timeZoneID)
        }
        let p = PlaceTable.representative(ofTimeZone: zone)
        return (p, p?.timeZoneID ?? zone)
    }

    @NodeCore func bedtimeJSON(nowMs: Int64) -> JSONValue {
        guard let row = health.read("read the bedtime", or: nil, { try store.bedtime() }) else { return ["enabled": false] }
        guard let book = Self.book(from: row) else { return ["enabled": true, "valid": false, "mode": .string(row.mode)] }
        let now = Date(timeIntervalSince1970: Double(nowMs) / 1000)
        let r = book.rule
        let holding = book.holdingNight(nowMs: nowMs)
        let night = holding ?? r.nightStart(atOrBefore: now)
        let o = r.opening(forNightStarting: holding ?? r.nextNightStart(after: now))
        let lock = state.withLockedValue { $0.lock }
        var out: [String: JSONValue] = [
            "enabled": true, "valid": true, "mode": .string(r.mode), "bed": .string(r.bed.description), "wake": .string(r.wake.description),
            "time_zone": .string(r.timeZoneID),
            "place": r.place.map { ["name": .string($0.name), "country": .string($0.country), "latitude": .double($0.latitude),
                                    "longitude": .double($0.longitude)] } ?? .null,
            "sunrise_fixed": .bool(r.place == nil),
            "holding": .bool(holding != nil),
            "locked": .bool(lock.locked?.hold == .bedtime),
            "mode_exists": .bool(state.withLockedValue { $0.modes.mode(r.mode) != nil }),
            "night_start": JSONValue.iso(ms(night)),
            "next_bed_at": JSONValue.iso(ms(r.nextNightStart(after: now))),
            "opens_at": JSONValue.iso(ms(o.at)),
            "opens": .string(r.explain(o, now: now)),
            "released_at": JSONValue.iso(book.releasedAtMs),
        ]
        if let s = o.sunrise { out["sunrise"] = JSONValue.iso(ms(s)) }
        if let p = o.polar { out["polar"] = .string(p.rawValue) }
        return .object(out)
    }

    nonisolated func registerBedtimeMethods(on router: ControlRouter) {
        registerHealthMethods(on: router)
        registerTimelineMethods(on: router)
        registerSharingMethods(on: router)
        router.registerOnCore("bedtime.show") { [self] _ in bedtimeJSON(nowMs: Int64(clamping: wallClockMilliseconds())) }
        router.registerOnCore("bedtime.set") { [self] params in try setBedtime(params, nowMs: Int64(clamping: wallClockMilliseconds())) }
        router.registerOnCore("bedtime.off") { [self] _ in
            try checkBedtimeNotHolding("switch bedtime off")
            guard bedtimeBook() != nil || health.read("read the bedtime", or: nil, { try store.bedtime() }) != nil else {
                throw NodeError.nothingToActOn("no bedtime is set")
            }
            try store.step { tx in
                try tx.deleteBedtime()
                _ = events.emit("bedtime.off", [:], in: tx)
            }
            events.published()
            return ["enabled": false]
        }
        router.register("bedtime.daylight") { [self] params in
            try await finishLockStep(try await leaveWithDaylight(photo: try params.requiredString("photo")))
        }
        router.register("bedtime.emergency") { [self] _ in
            let step = try await NodeCore.perform { try self.leaveBedtime(.emergency, nowMs: Int64(clamping: wallClockMilliseconds()), photo: nil) }
            return try await finishLockStep(step)
        }
    }

    /// `tandem bedtime set`: refused while a bedtime lock is on; inside the night it locks at once.
    @NodeCore func setBedtime(_ params: JSONValue, nowMs now: Int64) throws -> JSONValue {
        try checkBedtimeNotHolding("change bedtime")
        let mode = try params.requiredString("mode")
        guard state.withLockedValue({ $0.modes.mode(mode) }) != nil else { throw NodeError.nothingToActOn("no mode \(mode) (tandem mode list)") }
        guard let bed = TimeOfDay(try params.requiredString("bed")) else { throw NodeError.invalidArgument("--bed wants HH:MM") }
        guard let wake = TimeOfDay(try params.requiredString("wake")) else { throw NodeError.invalidArgument("--wake wants HH:MM") }
        guard bed != wake else { throw NodeError.invalidArgument("the bed time and the wake time must differ") }
        let (place, zone) = try bedtimePlace(params)
        let book = BedtimeBook.set(BedtimeRule(mode: mode, bed: bed, wake: wake, place: place, timeZoneID: zone), nowMs: now)
        try store.step { tx in
            try tx.saveBedtime(Self.record(book))
            _ = events.emit("bedtime.set", ["mode": .string(mode), "bed": .string(bed.description), "wake": .string(wake.description),
                                            "place": place.map { .string($0.name) } ?? .null, "time_zone": .string(book.rule.timeZoneID)], in: tx)
        }
        events.published()
        bedtimeTick(nowMs: now)
        return bedtimeJSON(nowMs: now)
    }

    /// `tandem unlock --daylight PHOTO`: what needs no photo first (a bedtime lock on, the sun and
    /// the wake time past), then the check (off the core), then the photo's verdict and capture
    /// time, and the release. `clock` is the node's wall clock (tests inject one).
    func leaveWithDaylight(photo path: String, clock: @escaping @Sendable () -> Int64 = { Int64(clamping: wallClockMilliseconds()) }) async throws -> FocusLock.Step {
        try await NodeCore.perform { try self.leavePreflight(nowMs: clock()) }
        let result: DaylightCheckResult
        do {
            result = try await daylight.check(photoAt: path)
        } catch {
            let text = (error as? NodeError)?.message ?? (error as? ControlError)?.message ?? "\(error)"
            await NodeCore.run { _ = self.events.emit("bedtime.unlock_refused", ["reason": "check_failed", "message": .string(text)]) }
            throw error
        }
        return try await NodeCore.perform { try self.leaveBedtime(.daylight, nowMs: clock(), photo: result) }
    }

    @NodeCore func refuseLeaving(_ code: String, _ message: String) -> ControlError {
        _ = events.emit("bedtime.unlock_refused", ["reason": .string(code), "message": .string(message)])
        return ControlError(code: code, message: message, exitCode: 1)
    }

    /// The checks that need no photo: a bedtime lock is on, and now is past the night's opening.
    @NodeCore func leavePreflight(nowMs: Int64) throws {
        guard let l = state.withLockedValue({ $0.lock.locked }), l.hold == .bedtime else {
            throw ControlError(code: "not_locked", message: "no bedtime lock is on", exitCode: 1)
        }
        if let book = bedtimeBook(), let (_, why) = book.tooEarly(nowMs: nowMs) {
            throw refuseLeaving("too_early", "too early to leave bedtime: \(why)")
        }
    }

    /// Leaves bedtime with a daylight photo (checked against the sun and its capture time) or as an
    /// emergency (refused at health 0; costs 20). Stores the release with the lock change.
    @NodeCore func leaveBedtime(_ reason: FocusLock.UnlockReason, nowMs: Int64, photo: DaylightCheckResult?) throws -> FocusLock.Step {
        guard let l = state.withLockedValue({ $0.lock.locked }), l.hold == .bedtime else {
            throw ControlError(code: "not_locked", message: "no bedtime lock is on", exitCode: 1)
        }
        let book = bedtimeBook()
        var fields: [String: JSONValue] = ["mode": .string(l.mode), "reason": .string(reason.rawValue)]
        if reason == .daylight {
            try leavePreflight(nowMs: nowMs)
            guard let photo else { throw refuseLeaving("no_photo", "leaving bedtime needs a daylight photo") }
            guard photo.verdict == .daylight else {
                throw refuseLeaving("not_daylight", "the photo was not judged daylight (\(photo.verdict.rawValue)): \(photo.reason)")
            }
            guard let taken = photo.capturedAt else {
                throw refuseLeaving("no_capture_time", "the photo has no capture time (EXIF): take a new photo with the camera")
            }
            let takenMs = ms(taken)
            if takenMs > nowMs + Self.photoClockSlackMs {
                throw refuseLeaving("photo_in_future", "the photo's capture time \(clockText(takenMs)) lies ahead of this machine's clock")
            }
            if nowMs - takenMs > Self.photoMaximumAgeMs {
                throw refuseLeaving("photo_too_old", "the photo was taken at \(clockText(takenMs)), more than 10 minutes ago: take a new one")
            }
            if let book, let night = book.holdingNight(nowMs: nowMs) ?? Optional(book.rule.nightStart(atOrBefore: Date(timeIntervalSince1970: Double(nowMs) / 1000))),
               let rise = book.rule.opening(forNightStarting: night).sunrise, takenMs < ms(rise) {
                throw refuseLeaving("photo_before_sunrise", "the photo was taken at \(clockText(takenMs)), before sunrise (\(clockText(ms(rise))))")
            }
            fields["verdict"] = .string(photo.reason)
            fields["captured_at"] = JSONValue.iso(takenMs)
        } else {
            try healthGate(.emergency, nowMs: nowMs)
        }
        var lock = state.withLockedValue { $0.lock }
        let step = lock.bedtimeEnded(reason: reason, nowMs: nowMs)
        if let r = step.refusal { throw refusal(r) }
        try store.step { tx in
            commit(lock, step, in: tx)
            if book != nil { try tx.setBedtimeReleased(atMs: nowMs) }
            _ = events.emit("bedtime.left", fields, in: tx)
        }
        events.published()
        if reason == .emergency { recordBypass(.emergency, nowMs: nowMs, detail: l.mode) }
        return step
    }
}
