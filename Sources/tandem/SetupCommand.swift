import ArgumentParser
import Foundation
import Logging
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

// `tandem setup` (issue 35): a guided walk-through for a new person on a plain terminal — identity,
// display name, a first mode and what it blocks, its main key (a tag: shown to the reader or its
// text typed), optional temporary keys, bedtime and its place, the health cooldown, sharing and a
// hook. Every answer is also a flag; `--non-interactive` takes the flags alone. Run again, it
// offers the current values as defaults and changes only what differs. It talks to the running
// node over the control socket, or, when none runs for the data directory, to the node's services
// in this process (the same control methods; nothing is listening).

struct SetupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "setup",
        abstract: "A guided set-up: identity, name, a first mode and its key, bedtime, health, sharing, a hook.",
        discussion: """
        Asks one question at a time on the terminal (Enter keeps the value in brackets; Ctrl-D stops, keeping what \
        was already answered). Every answer can be given as a flag instead, and a question whose flag is given is \
        not asked; with --non-interactive nothing is asked and what no flag names stays as it is. Run it again to \
        change answers. A node running for the data directory is used; otherwise setup opens the node's data \
        itself (start the node afterwards with `tandem node`).
        """)

    @OptionGroup var common: CommonOptions
    @Flag(help: "Ask nothing: apply the flags given, keep everything else.") var nonInteractive = false
    @Option(help: ArgumentHelp("Your display name, as friends see it.", valueName: "name")) var name: String?
    @Option(help: ArgumentHelp("The first mode's name (default: the active mode, else `focus`).", valueName: "name")) var mode: String?
    @Option(help: ArgumentHelp("Sites the mode blocks, comma-separated (replaces the list).", valueName: "a.com,b.org")) var blockSites: String?
    @Option(help: ArgumentHelp("Apps the mode stops, comma-separated (replaces the list).", valueName: "app,…")) var blockApps: String?
    @Option(help: ArgumentHelp("The main key's tag text (a QR code's text or an NFC tag's payload).", valueName: "text")) var mainKeyTag: String?
    @Option(help: ArgumentHelp("The main key's name (default `main key`).", valueName: "name")) var mainKeyName: String?
    @Option(name: .customLong("temp-key-tag"), help: ArgumentHelp("A temporary key's tag text (repeatable).", valueName: "text")) var tempKeyTags: [String] = []
    @Option(help: ArgumentHelp("Sites or apps a temporary key opens, comma-separated.", valueName: "site,…")) var tempAllow: String?
    @Option(help: ArgumentHelp("Bedtime, or `off`.", valueName: "HH:MM|off")) var bed: String?
    @Option(help: ArgumentHelp("Wake time.", valueName: "HH:MM")) var wake: String?
    @Option(help: ArgumentHelp("Where sunrise is computed: a city of the built-in table, or LAT,LON.", valueName: "city|lat,lon")) var place: String?
    @Option(help: ArgumentHelp("Minutes of cooldown after a bypass: 10, 20, 30, 45 or 60.", valueName: "minutes")) var cooldown: Int?
    @Option(help: ArgumentHelp("Share your health with friends: on or off.", valueName: "on|off")) var shareHealth: String?
    @Option(help: ArgumentHelp("A shell command to run when the mode locks, or `none`.", valueName: "command")) var hookLocked: String?

    func validate() throws {
        if let b = bed, b != "off", TimeOfDay(b) == nil { throw ValidationError("--bed wants HH:MM or off") }
        if let w = wake, TimeOfDay(w) == nil { throw ValidationError("--wake wants HH:MM") }
        if let c = cooldown, !HealthPool.cooldownChoices.contains(c) { throw ValidationError("--cooldown is one of 10, 20, 30, 45 or 60") }
        if let s = shareHealth, s != "on", s != "off" { throw ValidationError("--share-health is on or off") }
        if let p = place, let refusal = SetupAnswers.placeRefusal(p) { throw ValidationError(refusal) }
        if let n = name, n.trimmingCharacters(in: .whitespaces).isEmpty { throw ValidationError("--name is empty") }
        for t in [mainKeyTag].compactMap({ $0 }) + tempKeyTags where !SetupAnswers.tagOK(t) {
            throw ValidationError("a tag's text is 1 to 4096 bytes")
        }
    }

    func run() async throws {
        let ask = Prompter(interactive: !nonInteractive)
        ask.say("Tandem set-up" + (nonInteractive ? "" : " — Enter keeps the value in [brackets], Ctrl-D stops (what is answered stays)."))
        // 1. Identity.
        let dir = common.dataDirectory
        if IdentityFile.exists(in: dir) {
            ask.say("Identity: \(NodeID(publicKey: try IdentityFile.publicKey(in: dir)).display) (kept)")
        } else {
            let create = try ask.yesNo("No identity in \(dir.path) yet. Create one now?", default: true)
            guard create else { throw TandemError("setup needs an identity: run tandem setup again, or tandem init", exitCode: 1) }
            let pair = try IdentityFile.create(in: dir)
            ask.say("Identity created: \(NodeID(publicKey: pair.publicKey).display) — share it with friends.")
        }
        let node = try await SetupNode.open(dir, passphraseFile: nil)
        defer { node.close() }
        if !node.remote { ask.say("(No node runs for \(dir.path): setup writes its data directly; start it later with `tandem node`.)") }

        // 2. Display name.
        let currentName = try await node.call("name.get")["name"]?.stringValue ?? ""
        let newName = nonInteractive && name == nil ? currentName : try ask.text("Your display name (friends see it)", default: currentName.isEmpty ? nil : currentName, flag: name) { t in
            t.trimmingCharacters(in: .whitespaces).isEmpty ? "a name is needed" : nil
        }
        if newName != currentName, !newName.isEmpty {
            try await ask.attempt { _ = try await node.call("name.set", ["name": .string(newName)]) }
            ask.say("  Name: \(newName.terminalSafe)")
        }

        // 3. The first mode and what it blocks.
        let modes = try await node.call("mode.list")
        let active = modes["active"]?.stringValue
        let modeName = try ask.text("Your first mode's name", default: active ?? "focus", flag: mode) { t in
            t.isEmpty || t.count > 64 || t.contains("/") ? "a mode's name is 1 to 64 characters, no /" : nil
        }
        let existing = (modes["modes"]?.arrayValue ?? []).first { $0["name"]?.stringValue == modeName }
        let oldSites = existing?["block_sites"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let oldApps = existing?["block_apps"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let sites = SetupAnswers.list(try ask.text("Sites \(modeName) blocks (comma-separated; `-` for none)",
                                                   default: oldSites.isEmpty ? "-" : oldSites.joined(separator: ","), flag: blockSites))
        let apps = SetupAnswers.list(try ask.text("Apps \(modeName) stops (names or paths, comma-separated; `-` for none)",
                                                  default: oldApps.isEmpty ? "-" : oldApps.joined(separator: ","), flag: blockApps))
        if existing == nil {
            try await ask.attempt {
                _ = try await node.call("mode.create", ["name": .string(modeName), "block_sites": .array(sites.map(JSONValue.string)),
                                                        "block_apps": .array(apps.map(JSONValue.string))])
            }
            ask.say("  Mode \(modeName) created.")
        } else if sites != oldSites || apps != oldApps {
            try await ask.attempt {
                _ = try await node.call("mode.edit", [
                    "name": .string(modeName),
                    "block_sites": .array(sites.filter { !oldSites.contains($0) }.map(JSONValue.string)),
                    "remove_sites": .array(oldSites.filter { !sites.contains($0) }.map(JSONValue.string)),
                    "block_apps": .array(apps.filter { !oldApps.contains($0) }.map(JSONValue.string)),
                    "remove_apps": .array(oldApps.filter { !apps.contains($0) }.map(JSONValue.string)),
                ])
            }
            ask.say("  Mode \(modeName) updated.")
        }
        if active == nil { _ = try? await node.call("mode.switch", ["name": .string(modeName)]) }

        // 4. The main key, with live guidance.
        var shown = try await node.call("mode.show", ["name": .string(modeName)])
        let mainKey = shown["main_key"]
        let keyName = mainKeyName ?? mainKey?["name"]?.stringValue ?? "main key"
        if let id = mainKey?["id"]?.stringValue, mainKey?["usable"]?.boolValue == true {
            let tag = try ask.optional("Main key: \(keyName) (kept). To replace it, show the new tag to your reader or type its text; Enter keeps it",
                                       flag: mainKeyTag, check: SetupAnswers.tagProblem)
            if let tag {
                try await enrol(ask, node, tag: tag, method: "key.replace", params: ["key": .string(id)])
                ask.say("  Main key replaced.")
            }
        } else {
            ask.say("The main key locks \(modeName) and is the only thing that opens it early. Use a tag you keep out of reach: " +
                    "a QR code (its text) or an NFC tag (its payload). Object keys: tandem key enroll NAME --frames-from …")
            guard let tag = try ask.optional("Show the tag to your reader now, or type its text (Enter: later)", flag: mainKeyTag, check: SetupAnswers.tagProblem) else {
                ask.say("  No main key yet: \(modeName) cannot lock until it has one (tandem key enroll NAME --tag TEXT; tandem mode edit \(modeName) --main-key NAME).")
                return try await rest(ask, node, modeName: modeName, dir: dir)
            }
            let id = try await enrol(ask, node, tag: tag, method: "key.enroll", params: ["name": .string(await freeKeyName(node, keyName))])
            try await ask.attempt { _ = try await node.call("mode.edit", ["name": .string(modeName), "main_key": .string(id)]) }
            ask.say("  Main key enrolled: it locks and opens \(modeName).")
        }

        // 5. Temporary keys (optional).
        shown = try await node.call("mode.show", ["name": .string(modeName)])
        let tempCount = shown["temp_keys"]?.arrayValue?.count ?? 0
        var tags = tempKeyTags
        if tags.isEmpty && !nonInteractive {
            while let t = try ask.optional("A temporary key opens a few items for a while, once per lock (\(tempCount + tags.count) now). Its tag or text to add one (Enter: no more)",
                                           flag: nil, check: SetupAnswers.tagProblem) {
                tags.append(t)
            }
        }
        for (i, t) in tags.enumerated() {
            let id = try await enrol(ask, node, tag: t, method: "key.enroll",
                                     params: ["name": .string(await freeKeyName(node, "temporary key \(tempCount + i + 1)"))], check: false)
            try await ask.attempt { _ = try await node.call("mode.edit", ["name": .string(modeName), "temp_keys": .array([.string(id)])]) }
            ask.say("  Temporary key added.")
        }
        if tempCount + tags.count > 0 {
            let oldAllow = shown["temp_allow"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let allow = SetupAnswers.list(try ask.text("What a temporary key opens (blocked sites or apps, comma-separated; `-` for nothing)",
                                                       default: oldAllow.isEmpty ? "-" : oldAllow.joined(separator: ","), flag: tempAllow))
            if allow != oldAllow {
                try await ask.attempt {
                    _ = try await node.call("mode.edit", ["name": .string(modeName), "temp_allow": .array(allow.filter { !oldAllow.contains($0) }.map(JSONValue.string)),
                                                          "remove_temp_allow": .array(oldAllow.filter { !allow.contains($0) }.map(JSONValue.string))])
                }
            }
        }
        try await rest(ask, node, modeName: modeName, dir: dir)
    }

    /// Bedtime and its place, then the rest (`finish`).
    func rest(_ ask: Prompter, _ node: SetupNode, modeName: String, dir: DataDirectory) async throws {
        // 6. Bedtime and its place.
        let bt = try await node.call("bedtime.show")
        let on = bt["enabled"]?.boolValue == true
        let bedAnswer = try ask.text("Bedtime: \(modeName) locks at this time and opens after sunrise with a daylight photo (HH:MM, or off)",
                                     default: on ? bt["bed"]?.stringValue : "off", flag: bed) { t in
            t == "off" || TimeOfDay(t) != nil ? nil : "a time is HH:MM (24 h), or off"
        }
        if bedAnswer == "off" {
            if on { try await ask.attempt { _ = try await node.call("bedtime.off") }; ask.say("  Bedtime off.") }
        } else {
            let wakeAnswer = try ask.text("Wake time (HH:MM)", default: bt["wake"]?.stringValue ?? "07:00", flag: wake) { t in
                TimeOfDay(t) != nil ? nil : "a time is HH:MM (24 h)"
            }
            // The stored place as an answer: `NAME, CC` (a name alone may be ambiguous), or its coordinates.
            let currentPlace = bt["place"]?["name"]?.stringValue.map { name in
                let cc = bt["place"]?["country"]?.stringValue ?? ""
                return cc.isEmpty ? name : "\(name), \(cc)"
            }
            let placeAnswer = try ask.text("Where you live, for sunrise (a city such as `Oslo` or `Valencia, ES`, or LAT,LON)",
                                           default: currentPlace ?? PlaceTable.representative(ofTimeZone: TimeZone.current.identifier)?.name,
                                           flag: place, check: SetupAnswers.placeRefusal)
            // Unchanged answers leave the rule alone (setting it again would start tonight's state afresh).
            guard !on || bedAnswer != bt["bed"]?.stringValue || wakeAnswer != bt["wake"]?.stringValue || placeAnswer != currentPlace
                    || modeName != bt["mode"]?.stringValue else {
                return try await finish(ask, node, modeName: modeName, dir: dir)
            }
            var p: [String: JSONValue] = ["mode": .string(modeName), "bed": .string(bedAnswer), "wake": .string(wakeAnswer)]
            if let (lat, lon) = SunPlace.parseCoordinates(placeAnswer) {
                p["latitude"] = .double(lat); p["longitude"] = .double(lon)
            } else {
                p["city"] = .string(placeAnswer)
            }
            try await ask.attempt { _ = try await node.call("bedtime.set", .object(p)) }
            ask.say("  Bedtime \(bedAnswer)–\(wakeAnswer) at \(placeAnswer.terminalSafe).")
        }
        try await finish(ask, node, modeName: modeName, dir: dir)
    }

    /// The health cooldown, sharing, the hook, and the summary.
    func finish(_ ask: Prompter, _ node: SetupNode, modeName: String, dir: DataDirectory) async throws {

        // 7. The health cooldown.
        let health = try await node.call("health.show")
        let currentCooldown = health["cooldown_minutes"]?.intValue.map { Int($0) } ?? HealthPool.defaultCooldownMinutes
        let cd = try ask.text("Cooldown after a bypass, in minutes (10, 20, 30, 45 or 60)", default: "\(currentCooldown)", flag: cooldown.map { "\($0)" }) { t in
            Int(t).map { HealthPool.cooldownChoices.contains($0) } == true ? nil : "one of 10, 20, 30, 45 or 60"
        }
        if Int(cd) != currentCooldown {
            try await ask.attempt { _ = try await node.call("health.set", ["cooldown_minutes": .int(Int64(cd) ?? 20)]) }
            ask.say("  Cooldown: \(cd) min.")
        }

        // 8. Sharing.
        let sharing = try await node.call("share.show")
        let shared = sharing["health"]?.boolValue == true
        let share = try ask.yesNo("Share your health (0–100) and state with your friends?", default: shared, flag: shareHealth.map { $0 == "on" })
        if share != shared {
            try await ask.attempt { _ = try await node.call("share.set", ["what": "health", "on": .bool(share)]) }
            ask.say("  Health \(share ? "shared with" : "no longer shared with") friends.")
        }

        // 9. A hook when the mode locks.
        let hook = SetupHook(directory: dir, mode: modeName)
        let currentHook = hook.command()
        let hookAnswer = try ask.text("A shell command to run when \(modeName) locks (`none` for none)", default: currentHook ?? "none", flag: hookLocked) { t in
            t.contains("\n") ? "one line" : nil
        }
        if hookAnswer != (currentHook ?? "none") {
            if hookAnswer == "none" {
                if hook.isOurs { try hook.remove(); ask.say("  Hook removed.") }
            } else {
                guard hook.isOurs || currentHook == nil else {
                    throw TandemError("\(hook.path) was not written by tandem setup: edit it yourself", exitCode: 1)
                }
                try hook.write(hookAnswer)
                ask.say("  Hook: \(hook.path) runs it when \(modeName) locks.")
            }
        }

        // Summary.
        ask.say("")
        ask.say("Done. Start your node with `tandem node` (if it is not running), then:")
        ask.say("  tandem lock --mode \(modeName) --tag TEXT     lock now; tandem unlock --tag TEXT opens it")
        ask.say("  tandem health · tandem bedtime show · tandem friend add ID · tandem setup (to change any answer)")
    }

    /// Enrols a tag key (or replaces one) and, interactively, checks it by a second showing: the
    /// live guidance a tag can have. Returns the key's id.
    @discardableResult
    func enrol(_ ask: Prompter, _ node: SetupNode, tag: String, method: String, params: [String: JSONValue], check: Bool = true) async throws -> String {
        var p = params
        p["tag_b64"] = .string(Data(tag.utf8).base64EncodedString())
        let r = try await ask.attempt { try await node.call(method, .object(p)) }
        guard let id = r["key"]?.stringValue ?? r["key"]?["id"]?.stringValue else { throw TandemError("the node did not name the enrolled key", exitCode: 1) }
        guard check, ask.interactive, mainKeyTag == nil else { return id }
        for attempt in 1...3 {
            guard let again = try ask.optional("Show it once more (or type it again) to check it reads the same (Enter: skip)", flag: nil, check: SetupAnswers.tagProblem) else {
                return id
            }
            let c = try await node.call("key.check", ["key": .string(id), "tag_b64": .string(Data(again.utf8).base64EncodedString())])
            if c["match"]?.boolValue == true { ask.say("  ✓ It reads the same: this tag is your key."); return id }
            ask.say(attempt < 3 ? "  ✗ That is not the same text (a different tag, or a typo): try again." :
                        "  ✗ Still not the same. The key keeps the first text; replace it later with tandem key replace.")
        }
        return id
    }

    /// `base`, or `base 2`, `base 3`… when a key of that name exists.
    func freeKeyName(_ node: SetupNode, _ base: String) async -> String {
        let names = Set(((try? await node.call("key.list"))?["keys"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue?.lowercased() })
        if !names.contains(base.lowercased()) { return base }
        var n = 2
        while names.contains("\(base) \(n)".lowercased()) { n += 1 }
        return "\(base) \(n)"
    }
}

/// Checks the answers share with the flags.
enum SetupAnswers {
    static func tagOK(_ t: String) -> Bool { (1...4096).contains(t.utf8.count) }
    static func tagProblem(_ t: String) -> String? { tagOK(t) ? nil : "a tag's text is 1 to 4096 bytes" }
    /// nil when `text` is coordinates or names exactly one city of the table.
    static func placeRefusal(_ text: String) -> String? {
        if SunPlace.parseCoordinates(text) != nil { return nil }
        if text.contains(","), text.split(separator: ",").allSatisfy({ Double($0.trimmingCharacters(in: .whitespaces)) != nil }) {
            return "a location is LAT,LON in decimal degrees (-90..90, -180..180)"
        }
        return PlaceTable.refusal(text)
    }
    /// A comma-separated answer as a list; `-` (or nothing) is the empty list.
    static func list(_ text: String) -> [String] {
        let t = text.trimmingCharacters(in: .whitespaces)
        if t == "-" || t.isEmpty { return [] }
        return t.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}

/// Questions on a plain terminal: a line each, the default in brackets, a wrong answer explained
/// and asked again, end of input a clean stop.
final class Prompter {
    let interactive: Bool
    init(interactive: Bool) { self.interactive = interactive }

    func say(_ line: String) { write(line + "\n") }

    /// To the terminal; a closed stdout (the terminal went away, a pipe's reader ended) ends setup
    /// quietly, never with a trap.
    private func write(_ text: String) {
        do { try FileHandle.standardOutput.write(contentsOf: Data(text.utf8)) } catch { Foundation.exit(1) }
    }

    private func readAnswer(_ question: String, _ def: String?) throws -> String {
        write(question + (def.map { " [\($0.terminalSafe)]" } ?? "") + ": ")
        guard let line = readLine(strippingNewline: true) else {
            say("")
            throw TandemError("setup stopped at the end of input (Ctrl-D); the answers before this question are saved — run tandem setup again to go on",
                              exitCode: 1)
        }
        let t = line.trimmingCharacters(in: .whitespaces)
        return t.isEmpty ? (def ?? "") : t
    }

    /// An answer: the flag's value when given (checked), else asked (interactive) or the default.
    func text(_ question: String, default def: String?, flag: String?, check: (String) -> String? = { _ in nil }) throws -> String {
        if let flag {
            if let problem = check(flag) { throw TandemError(problem, exitCode: TandemError.usageExitCode) }
            return flag
        }
        guard interactive else {
            guard let def else { throw TandemError("\(question): give it as a flag (--non-interactive asks nothing)", exitCode: TandemError.usageExitCode) }
            return def
        }
        for _ in 0..<8 {
            let a = try readAnswer(question, def)
            if a.isEmpty { say("  ✗ an answer is needed"); continue }
            if let problem = check(a) { say("  ✗ \(problem)"); continue }
            return a
        }
        throw TandemError("no usable answer to “\(question)”", exitCode: TandemError.usageExitCode)
    }

    /// An answer that may be left empty (nil).
    func optional(_ question: String, flag: String?, check: (String) -> String?) throws -> String? {
        if let flag { return flag }
        guard interactive else { return nil }
        for _ in 0..<8 {
            let a = try readAnswer(question, nil)
            if a.isEmpty { return nil }
            if let problem = check(a) { say("  ✗ \(problem)"); continue }
            return a
        }
        throw TandemError("no usable answer to “\(question)”", exitCode: TandemError.usageExitCode)
    }

    func yesNo(_ question: String, default def: Bool, flag: Bool? = nil) throws -> Bool {
        if let flag { return flag }
        guard interactive else { return def }
        for _ in 0..<8 {
            let a = try readAnswer(question + (def ? " (Y/n)" : " (y/N)"), nil).lowercased()
            if a.isEmpty { return def }
            if ["y", "yes"].contains(a) { return true }
            if ["n", "no"].contains(a) { return false }
            say("  ✗ answer y or n")
        }
        throw TandemError("no usable answer to “\(question)”", exitCode: TandemError.usageExitCode)
    }

    /// A node call; its refusal is one line and ends setup (what was applied before stays).
    func attempt<T>(_ body: () async throws -> T) async throws -> T {
        try await body()
    }
}

/// The node setup talks to: the running one over its control socket, else the node's services in
/// this process over the same control methods.
final class SetupNode {
    private let client: ControlClient?
    private let runtime: NodeRuntime?
    var remote: Bool { client != nil }

    private init(client: ControlClient?, runtime: NodeRuntime?) { (self.client, self.runtime) = (client, runtime) }

    static func open(_ dir: DataDirectory, passphraseFile: String?) async throws -> SetupNode {
        do {
            return SetupNode(client: try await ControlClient.connect(dataDirectory: dir), runtime: nil)
        } catch let e as NodeError where e.kind == .noNode {
            _ = e
            let identity = try IdentityFile.load(from: dir, passphrase: try Passphrase.forLoading(dir, file: passphraseFile))
            var logger = Logger(label: "tandem.setup")
            logger.logLevel = .critical
            let node = try NodeRuntime(identity: identity, configuration: NodeConfiguration(), dataDirectory: dir, logger: logger)
            return SetupNode(client: nil, runtime: node)
        }
    }

    func call(_ method: String, _ params: JSONValue = [:]) async throws -> JSONValue {
        if let client { return try await client.call(method: method, params: params) }
        guard let runtime else { throw NodeError.failed("no node") }
        return try await runtime.router.call(method, params)
    }

    func close() { client?.close() }
}

/// The hook setup writes: `DATA-DIR/hooks/MODE/locked`, a shell script marked as setup's.
struct SetupHook {
    static let marker = "# written by tandem setup; tandem setup changes or removes it"
    let path: String

    init(directory: DataDirectory, mode: String) {
        path = directory.url.appendingPathComponent("hooks").appendingPathComponent(mode).appendingPathComponent("locked").path
    }

    private var text: String? { try? String(contentsOfFile: path, encoding: .utf8) }
    var isOurs: Bool { text?.contains(Self.marker) == true }

    /// The command in setup's hook; nil when there is no hook, the file's first line when it is not ours.
    func command() -> String? {
        guard let t = text else { return nil }
        let lines = t.split(separator: "\n").map(String.init)
        guard isOurs else { return lines.first(where: { !$0.hasPrefix("#") }) ?? "(a hook of your own)" }
        return lines.last { !$0.hasPrefix("#") && !$0.isEmpty }
    }

    func write(_ command: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("#!/bin/sh\n\(Self.marker)\n\(command)\n".utf8).write(to: url, options: .atomic)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
    }

    func remove() throws { try FileManager.default.removeItem(atPath: path) }
}
