import ArgumentParser
import Foundation
import TandemMedia
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

// Local focus (issue 14): modes, keys, lock / unlock / temp-unlock. The node owns the state; these
// commands parse, read key inputs (a tag, a QR photo, point-cloud frames) and ask it.

/// The key input every command that takes one accepts.
struct KeyInputOptions: ParsableArguments {
    @Option(name: .long, parsing: .upToNextOption,
            help: ArgumentHelp("Point-cloud frames of an object key: PLY (ASCII or binary) or XYZ files, or - for frames streamed on stdin.",
                               valueName: "frame"))
    var object: [String] = []

    @Option(help: ArgumentHelp("A tag key's payload: an NFC tag's text, or a typed token.", valueName: "text"))
    var tag: String?

    @Flag(help: "Read the tag's payload from stdin (pipe an NFC reader's output; one trailing newline is dropped).")
    var tagStdin = false

    @Option(help: ArgumentHelp("A photo of a QR code (JPEG, PNG or HEIC): its payload is the tag.", valueName: "image"))
    var qr: String?

    @Option(help: ArgumentHelp("Object keys: keep only points inside this box, in metres.", valueName: "minX,minY,minZ,maxX,maxY,maxZ"))
    var roi: String?

    var given: Int { (object.isEmpty ? 0 : 1) + (tag == nil ? 0 : 1) + (tagStdin ? 1 : 0) + (qr == nil ? 0 : 1) }

    func validate() throws {
        if given > 1 { throw ValidationError("give one key input: --object, --tag, --tag-stdin or --qr") }
        if object.filter({ $0 == "-" }).count > 1 { throw ValidationError("--object - (stdin) can be given once") }
    }

    /// The tag payload, when the input is a tag (typed, piped or from a QR photo); nil for objects.
    func tagPayload() throws -> [UInt8]? {
        if let tag {
            guard !tag.isEmpty else { throw TandemError("--tag is empty", exitCode: TandemError.usageExitCode) }
            return Array(tag.utf8)
        }
        if tagStdin {
            var data = FileHandle.standardInput.readDataToEndOfFile()
            if data.last == 0x0A { data.removeLast() }
            if data.last == 0x0D { data.removeLast() }
            guard !data.isEmpty else { throw TandemError("no tag on stdin", exitCode: TandemError.usageExitCode) }
            guard data.count <= 4096 else { throw TandemError("the tag on stdin is longer than 4096 bytes", exitCode: TandemError.usageExitCode) }
            return Array(data)
        }
        if let qr {
            let codes: [[UInt8]]
            do {
                codes = try QRDecoder.payloads(inImageAt: qr)
            } catch let e as MediaError {
                throw TandemError("cannot read the QR photo: \(e)", exitCode: 1)
            }
            guard let first = codes.first else {
                throw TandemError("no QR code found in \(qr) (fill more of the photo with the code, in focus and lit evenly)", exitCode: 1)
            }
            if codes.count > 1 { FileHandle.standardError.write(Data("tandem: note: \(codes.count) QR codes in the photo; using the first\n".utf8)) }
            return first
        }
        return nil
    }

    func requireSome() throws {
        if given == 0 { throw TandemError("give a key: --tag TEXT, --tag-stdin, --qr IMAGE or --object FRAME…", exitCode: TandemError.usageExitCode) }
    }
}

/// Sends a key input to `method` with `params`: one request for a tag, one per frame for an object
/// (printing each frame's verdict as it comes). Returns the node's final answer.
func presentKey(_ common: CommonOptions, _ input: KeyInputOptions, _ method: String, _ params: [String: JSONValue],
                finish: Bool = false, restart: Bool = false, quiet: Bool = false) async throws -> JSONValue {
    if !(input.given == 0 && (finish || restart)) { try input.requireSome() }
    let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
    if let payload = try input.tagPayload() {
        var p = params
        p["tag_b64"] = .string(Data(payload).base64EncodedString())
        return try await client.call(method: method, params: .object(p))
    }
    return try await presentObject(client, common, input, method, params, finish: finish, restart: restart, quiet: quiet)
}

struct ModeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mode",
        abstract: "Focus modes: what a lock blocks, and which key locks and opens it.",
        discussion: """
        A mode lists sites (blocked in the hosts file while locked, with their www. forms) and apps (stopped while \
        locked). It needs one main key before it can lock: only that key locks it and opens it again. Temporary keys \
        open the mode's temporary items (--temp-allow) for --temp-duration, each once per lock cycle.
        """,
        subcommands: [ModeCreate.self, ModeEdit.self, ModeDelete.self, ModeList.self, ModeShow.self, ModeSwitch.self, ModeStatus.self])
}

/// The fields `mode create` and `mode edit` share.
struct ModeFields: ParsableArguments {
    @Option(name: .customLong("block-site"), parsing: .upToNextOption, help: ArgumentHelp("Sites to block (example.com).", valueName: "domain"))
    var blockSites: [String] = []
    @Option(name: .customLong("block-app"), parsing: .upToNextOption, help: ArgumentHelp("Apps to stop: an executable's name, or its absolute path.", valueName: "name|path"))
    var blockApps: [String] = []
    @Option(name: .customLong("temp-allow"), parsing: .upToNextOption, help: ArgumentHelp("Blocked sites or apps a temporary key opens.", valueName: "site|app"))
    var tempAllow: [String] = []
    @Option(help: ArgumentHelp("How long a temporary unlock lasts (10s to 24h; default 5m).", valueName: "duration"))
    var tempDuration: String?
    @Option(help: ArgumentHelp("The key that locks and opens the mode.", valueName: "key"))
    var mainKey: String?
    @Option(name: .customLong("temp-key"), help: ArgumentHelp("A temporary key (repeatable).", valueName: "key"))
    var tempKeys: [String] = []

    func params(_ name: String) throws -> [String: JSONValue] {
        var p: [String: JSONValue] = ["name": .string(name)]
        p["block_sites"] = .array(blockSites.map(JSONValue.string))
        p["block_apps"] = .array(blockApps.map(JSONValue.string))
        p["temp_allow"] = .array(tempAllow.map(JSONValue.string))
        p["temp_keys"] = .array(tempKeys.map(JSONValue.string))
        if let d = tempDuration { p["temp_duration_ms"] = .int(try durationMs(d, what: "--temp-duration")) }
        if let k = mainKey { p["main_key"] = .string(k) }
        return p
    }
}

func modeLines(_ m: JSONValue) -> [String] {
    func key(_ k: JSONValue) -> String {
        let n = k["name"]?.stringValue ?? "?"
        return k["usable"]?.boolValue == false ? "\(n) (unusable: re-enrol with tandem key replace)" : n
    }
    func list(_ v: JSONValue?) -> String {
        let a = (v?.arrayValue ?? []).compactMap(\.stringValue)
        return a.isEmpty ? "-" : a.joined(separator: " ")
    }
    var head = m["name"]?.stringValue ?? "?"
    if m["locked"]?.boolValue == true { head += "  LOCKED" } else if m["active"]?.boolValue == true { head += "  (active)" }
    var lines = [head]
    lines.append("  main key:   \(m["main_key"].flatMap { $0.isNull ? nil : key($0) } ?? "none (it cannot lock yet: tandem mode edit NAME --main-key KEY)")")
    let temps = (m["temp_keys"]?.arrayValue ?? []).map(key)
    lines.append("  temp keys:  \(temps.isEmpty ? "-" : temps.joined(separator: ", "))")
    lines.append("  sites:      \(list(m["block_sites"]))")
    lines.append("  apps:       \(list(m["block_apps"]))")
    lines.append("  temp allow: \(list(m["temp_allow"])) for \(clockText(m["temp_duration_ms"]?.intValue ?? 0))")
    return lines
}

struct ModeCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "create", abstract: "Create a mode.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Its name (a-z 0-9 . _ -).", valueName: "name")) var name: String
    @OptionGroup var fields: ModeFields

    func run() async throws {
        try await callNode(common, "mode.create", .object(try fields.params(name))) { m in
            output("Mode created:")
            for l in modeLines(m) { output(l) }
        }
    }
}

struct ModeEdit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "edit", abstract: "Change a mode (refused while it is locked).",
        discussion: "--block-site, --block-app, --temp-allow and --temp-key add; the --remove-… options take away.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The mode.", valueName: "name")) var name: String
    @OptionGroup var fields: ModeFields
    @Option(name: .customLong("remove-site"), parsing: .upToNextOption, help: ArgumentHelp("Sites to unblock.", valueName: "domain"))
    var removeSites: [String] = []
    @Option(name: .customLong("remove-app"), parsing: .upToNextOption, help: ArgumentHelp("Apps to stop blocking.", valueName: "app"))
    var removeApps: [String] = []
    @Option(name: .customLong("remove-temp-allow"), parsing: .upToNextOption, help: ArgumentHelp("Items temporary keys no longer open.", valueName: "item"))
    var removeTempAllow: [String] = []
    @Option(name: .customLong("remove-temp-key"), help: ArgumentHelp("A temporary key to take away (repeatable).", valueName: "key"))
    var removeTempKeys: [String] = []

    func run() async throws {
        var p = try fields.params(name)
        p["remove_sites"] = .array(removeSites.map(JSONValue.string))
        p["remove_apps"] = .array(removeApps.map(JSONValue.string))
        p["remove_temp_allow"] = .array(removeTempAllow.map(JSONValue.string))
        p["remove_temp_keys"] = .array(removeTempKeys.map(JSONValue.string))
        try await callNode(common, "mode.edit", .object(p)) { m in
            output("Mode changed:")
            for l in modeLines(m) { output(l) }
        }
    }
}

struct ModeDelete: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a mode (refused while it is locked).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The mode.", valueName: "name")) var name: String
    @Flag(help: "Do not ask for confirmation.") var yes = false

    func run() async throws {
        if !yes {
            guard isatty(STDIN_FILENO) == 1 else {
                throw TandemError("deleting mode \(name) needs confirmation: add --yes", exitCode: TandemError.usageExitCode)
            }
            FileHandle.standardError.write(Data("Delete mode \(name)? Type its name to confirm: ".utf8))
            guard readLine()?.trimmingCharacters(in: .whitespaces) == name else {
                throw TandemError("not deleted", exitCode: 1)
            }
        }
        try await callNode(common, "mode.delete", .object(["name": .string(name)])) { _ in output("Mode \(name) deleted.") }
    }
}

struct ModeList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "Every mode.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "mode.list") { r in
            let modes = r["modes"]?.arrayValue ?? []
            if modes.isEmpty { output("No modes yet: tandem mode create NAME --block-site example.com --main-key KEY") }
            for m in modes { for l in modeLines(m) { output(l) } }
        }
    }
}

struct ModeShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "One mode.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The mode.", valueName: "name")) var name: String

    func run() async throws {
        try await callNode(common, "mode.show", .object(["name": .string(name)])) { m in for l in modeLines(m) { output(l) } }
    }
}

struct ModeSwitch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "switch", abstract: "Make a mode the one `tandem lock` locks (refused while locked).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The mode.", valueName: "name")) var name: String

    func run() async throws {
        try await callNode(common, "mode.switch", .object(["name": .string(name)])) { _ in output("Active mode: \(name)") }
    }
}

func lockStatusLine(_ s: JSONValue) -> String {
    guard s["locked"]?.boolValue == true, let mode = s["mode"]?.stringValue else {
        return "Unlocked" + (s["active_mode"]?.stringValue.map { "; active mode \($0)" } ?? "")
    }
    var line = "Locked in mode \(mode)"
    switch s["hold"]?.stringValue {
    case "until": line += " until \(PeopleText.until(s["until"]?.stringValue)) (or its main key)"
    case "challenge": line += " for challenge \(String((s["challenge"]?.stringValue ?? "?").prefix(8))) (its main key quits it)"
    case "bedtime": line += " for the night (bedtime: a daylight photo after sunrise opens it, tandem unlock --daylight PHOTO)"
    default: line += " until its main key is presented"
    }
    if let t = s["temporary"], !t.isNull { line += "; temporarily open until \(PeopleText.until(t["until"]?.stringValue))" }
    // What is blocked right now, on lines of their own.
    if let b = s["blocked"] {
        func list(_ key: String) -> String { (b[key]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ", ") }
        let sites = list("sites"), apps = list("apps"), open = list("open_now")
        line += "\n  blocked sites: " + (sites.isEmpty ? "none" : sites + " (and their www. names)")
        line += "\n  blocked apps: " + (apps.isEmpty ? "none" : apps)
        if !open.isEmpty { line += "\n  open for now: " + open }
    }
    return line
}

struct ModeStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Whether a mode is locked, how, and until when.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "lock.status") { s in output(lockStatusLine(s)) }
    }
}

// MARK: - Keys

struct KeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key",
        abstract: "Physical keys: tags (NFC, QR, typed) and objects (point-cloud scans).",
        discussion: """
        A tag key stores only a salted keyed hash of its payload. An object key is enrolled from 8 to 12 good frames \
        of the object from different sides (PLY or XYZ, metres); its template is encrypted at rest. Test a key with \
        `tandem key check` before you rely on it.
        """,
        subcommands: [KeyEnroll.self, KeyCheck.self, KeyList.self, KeyRename.self, KeyReplace.self, KeyDelete.self])
}

func keyLine(_ k: JSONValue) -> String {
    var line = "\(k["name"]?.stringValue ?? "?")  [\(k["id"]?.stringValue ?? "?")]  \(k["kind"]?.stringValue ?? "unusable")"
    let main = (k["main_key_of"]?.arrayValue ?? []).compactMap(\.stringValue)
    let temp = (k["temp_key_of"]?.arrayValue ?? []).compactMap(\.stringValue)
    if !main.isEmpty { line += "  main key of \(main.joined(separator: ", "))" }
    if !temp.isEmpty { line += "  temporary key of \(temp.joined(separator: ", "))" }
    if k["usable"]?.boolValue == false { line += "  (unusable: tandem key replace)" }
    return line
}

struct KeyEnroll: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enroll", abstract: "Enrol a new key.",
        discussion: """
        An object needs at least 8 good frames from different viewpoints (at most 12); given them in one command it \
        completes at once. Fewer are kept until the next `key enroll NAME --object …` adds more; --finish ends with \
        what there is (at least 3 frames, less reliable), --restart starts over.
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The key's name.", valueName: "name")) var name: String
    @OptionGroup var input: KeyInputOptions
    @Flag(help: "Object keys: finish with the good frames so far.") var finish = false
    @Flag(help: "Object keys: drop an unfinished enrolment of this name and start over.") var restart = false

    func run() async throws {
        let r = try await presentKey(common, input, "key.enroll", ["name": .string(name)], finish: finish, restart: restart, quiet: common.json)
        if common.json { outputJSON(r.compactJSON); return }
        let s = r.terminalSafe
        if s["complete"]?.boolValue == true {
            output("Key enrolled: \(keyLine(s["key"] ?? .null))")
            for w in s["warnings"]?.arrayValue ?? [] { output("warning: \(w.stringValue ?? "")") }
        } else if restart && (s["good_frames"]?.intValue ?? 0) == 0 {
            output("The unfinished enrolment of \(name) was dropped.")
        } else {
            output("Enrolment of \(name) continues: \(s["good_frames"]?.intValue ?? 0) good frames of \(s["needed_frames"]?.intValue ?? 8); "
                   + "add more with `tandem key enroll \(name) --object …`, or --finish.")
        }
    }
}

struct KeyCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check", abstract: "Whether a key input matches a key (exit 0 yes, 1 no); changes nothing.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The key (name or id).", valueName: "key")) var key: String
    @OptionGroup var input: KeyInputOptions

    func run() async throws {
        let r = try await presentKey(common, input, "key.check", ["key": .string(key)], quiet: common.json)
        let match = r["match"]?.boolValue == true
        if common.json {
            let frames: JSONValue = r["frames"] ?? .array([])
            outputJSON(JSONValue.object(["match": .bool(match), "key": r["key"] ?? .null, "frames": frames]).compactJSON)
        } else {
            if match { output("Match: this is key \(key).") }
        }
        if !match {
            let frames = r["frames"]?.arrayValue ?? []
            let why = frames.isEmpty ? "the input is not key \(key)" : "the input is not key \(key) (no 3 frames in a row passed)"
            throw TandemError("no match: \(why)", exitCode: 1)
        }
    }
}

struct KeyList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "Every key.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "key.list") { r in
            let keys = r["keys"]?.arrayValue ?? []
            if keys.isEmpty { output("No keys yet: tandem key enroll NAME --tag TEXT | --qr PHOTO | --object FRAMES…") }
            for k in keys { output(keyLine(k)) }
        }
    }
}

struct KeyRename: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rename", abstract: "Rename a key (its id and uses stay).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The key (name or id).", valueName: "key")) var key: String
    @Argument(help: ArgumentHelp("Its new name.", valueName: "new-name")) var newName: String

    func run() async throws {
        try await callNode(common, "key.rename", .object(["key": .string(key), "new_name": .string(newName)])) { k in output("Renamed: \(keyLine(k))") }
    }
}

struct KeyReplace: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replace", abstract: "Re-enrol a lost or unreliable key (its name, id and uses stay).",
        discussion: "Refused while a mode that uses the key is locked, unless the key is unusable.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The key (name or id).", valueName: "key")) var key: String
    @OptionGroup var input: KeyInputOptions
    @Flag(help: "Object keys: finish with the good frames so far.") var finish = false
    @Flag(help: "Object keys: start over.") var restart = false

    func run() async throws {
        let r = try await presentKey(common, input, "key.replace", ["key": .string(key)], finish: finish, restart: restart, quiet: common.json)
        if common.json { outputJSON(r.compactJSON); return }
        let s = r.terminalSafe
        if s["complete"]?.boolValue == true { output("Key replaced: \(keyLine(s["key"] ?? .null))") } else {
            output("Re-enrolment continues: \(s["good_frames"]?.intValue ?? 0) good frames of \(s["needed_frames"]?.intValue ?? 8).")
        }
    }
}

struct KeyDelete: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a key (refused while it is some mode's main key).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The key (name or id).", valueName: "key")) var key: String

    func run() async throws {
        try await callNode(common, "key.delete", .object(["key": .string(key)])) { _ in output("Key \(key) deleted.") }
    }
}

// MARK: - Lock

struct LockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock", abstract: "Lock a mode with its main key.",
        discussion: """
        Only the mode's main key locks it, and only that key opens it again (tandem unlock). --until / --for make a \
        timed lock that also opens by itself; the main key still ends it early. While locked, the mode's sites are \
        blocked in the hosts file and its apps are stopped. See the lock with `tandem mode status`.
        """)
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("The mode (default: the active mode).", valueName: "name")) var mode: String?
    @Option(help: ArgumentHelp("Open by itself at this time: HH:MM[:SS] today (or tomorrow if past) or ISO 8601.", valueName: "time")) var until: String?
    @Option(name: .customLong("for"), help: ArgumentHelp("Open by itself after this long (e.g. 2h).", valueName: "duration")) var duration: String?
    @OptionGroup var input: KeyInputOptions

    func validate() throws {
        if until != nil && duration != nil { throw ValidationError("give --until or --for, not both") }
    }

    func run() async throws {
        var p: [String: JSONValue] = [:]
        if let mode { p["mode"] = .string(mode) }
        if let until { p["until_ms"] = .int(try parseClockTime(until)) }
        if let duration { p["for_ms"] = .int(try durationMs(duration, what: "--for")) }
        let r = try await presentKey(common, input, "lock.lock", p, quiet: common.json)
        printLockResult(common, r)
    }
}

func printLockResult(_ common: CommonOptions, _ r: JSONValue) {
    if common.json { outputJSON(r.compactJSON); return }
    let s = r.terminalSafe
    output(lockStatusLine(s))
    for p in s["blocking_problems"]?.arrayValue ?? [] { FileHandle.standardError.write(Data("tandem: warning: \(p.stringValue ?? "")\n".utf8)) }
}

struct UnlockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock", abstract: "Open the locked mode with its main key (bedtime: with a daylight photo).",
        discussion: """
        During a challenge that locked the mode, this quits the challenge (reason "unlocked") and your partners are told at once: on a terminal it asks first; elsewhere (a script) it needs --yes.         A bedtime lock opens only with --daylight PHOTO (after sunrise and the wake time; a photo of the sky taken in         the last 10 minutes) or --emergency (costs 20 health).
        """)
    @OptionGroup var common: CommonOptions
    @OptionGroup var input: KeyInputOptions
    @Option(help: ArgumentHelp("Leave bedtime with this photo of the daylight sky (JPEG, PNG or HEIC).", valueName: "photo")) var daylight: String?
    @Flag(help: "Leave bedtime now, before the morning: costs 20 health.") var emergency = false
    @Flag(name: .shortAndLong, help: "During a challenge: quit it without asking (your partners are told).") var yes = false

    func validate() throws {
        let bedtimeWays = (daylight == nil ? 0 : 1) + (emergency ? 1 : 0)
        if bedtimeWays > 1 || (bedtimeWays == 1 && input.given > 0) {
            throw ValidationError("give one of: a key, --daylight PHOTO, --emergency")
        }
    }

    func run() async throws {
        if let daylight {
            let path = URL(fileURLWithPath: daylight).standardizedFileURL.path
            let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
            printLockResult(common, try await client.call(method: "bedtime.daylight", params: ["photo": .string(path)]))
            return
        }
        if emergency {
            let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
            printLockResult(common, try await client.call(method: "bedtime.emergency", params: [:]))
            return
        }
        if !yes { try await confirmChallengeQuit(common) }
        printLockResult(common, try await presentKey(common, input, "lock.unlock", [:], quiet: common.json))
    }
}

/// Before an unlock that would quit a challenge: asks on a terminal, refuses without --yes
/// elsewhere, so nobody quits a challenge (and tells their partners) by accident.
func confirmChallengeQuit(_ common: CommonOptions) async throws {
    let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
    defer { client.close() }
    let focus = try await client.call(method: "node.status")["focus"]
    guard focus?["locked"]?.boolValue == true, focus?["hold"]?.stringValue == "challenge" else { return }
    let mode = (focus?["mode"]?.stringValue ?? "?").terminalSafe
    let challenge = String((focus?["challenge"]?.stringValue ?? "?").prefix(8)).terminalSafe
    let what = "mode \(mode) is locked for challenge \(challenge): unlocking quits the challenge and your partners are told"
    guard isatty(STDIN_FILENO) == 1 else {
        throw NodeError.refused("\(what); add --yes to go on")
    }
    FileHandle.standardError.write(Data("The \(what). Quit the challenge? [y/N] ".utf8))
    let answer = readLine(strippingNewline: true)?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
    guard answer == "y" || answer == "yes" else { throw TandemError("not unlocked; the challenge goes on", exitCode: 1) }
}

struct TempUnlockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "temp-unlock", abstract: "Open the locked mode's temporary items for a while with a temporary key.",
        discussion: "Each temporary key works once per lock cycle; the mode re-locks by itself when the time is up.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var input: KeyInputOptions

    func run() async throws {
        printLockResult(common, try await presentKey(common, input, "lock.temp_unlock", [:], quiet: common.json))
    }
}
