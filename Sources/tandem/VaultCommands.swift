import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

struct VaultCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault",
        abstract: "Your encrypted vault: private photos, videos and documents behind a PIN.",
        discussion: """
        The vault lives in your node's data directory, encrypted: names, albums, dates and thumbnails included. \
        A PIN (4 or more digits) or a passphrase (4 to 256 characters) opens it; it locks itself after --auto-lock of idle time (default 5m) and when the \
        node stops. Wrong PINs in a row make you wait: 3 → 30 s, 5 → 2 min, 8 → 15 min, 10 → 1 h.

        Commands that need the vault open ask for the PIN when it is locked (--pin-stdin: read one line from stdin).
        Items are named by the id `tandem vault list` shows, or by a name only one item has.
        """,
        subcommands: [VaultInit.self, VaultUnlock.self, VaultLock.self, VaultStatus.self, VaultImport.self, VaultList.self,
                      VaultExport.self, VaultThumbnail.self, VaultRemove.self, VaultFavorite.self, VaultMove.self, VaultAlbum.self,
                      VaultStats.self, VaultCheck.self, VaultBreakIns.self, VaultChangePIN.self, VaultDecoy.self, VaultSettings.self])
}

/// Options every vault command that may need the PIN shares.
struct PINOptions: ParsableArguments {
    @Flag(name: .long, help: "Read the PIN from the first line of stdin instead of asking (for scripts).")
    var pinStdin = false
}

/// PIN input: a line of stdin, or the terminal without echo.
enum PINInput {
    /// Lines of stdin read so far (a command may need two: the PIN, then a new one).
    nonisolated(unsafe) static var stdinLines: [String]?

    static func line(_ n: Int) throws -> String {
        if stdinLines == nil {
            let data = FileHandle.standardInput.readDataToEndOfFile()
            stdinLines = String(decoding: data.prefix(4096), as: UTF8.self)
                .split(separator: "\n", omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\r")) }
        }
        guard let lines = stdinLines, n < lines.count, !lines[n].isEmpty else {
            throw TandemError("--pin-stdin: expected \(n + 1) line\(n == 0 ? "" : "s") on stdin", exitCode: TandemError.usageExitCode)
        }
        return lines[n]
    }

    /// From the terminal, without echo (twice, when `confirm`).
    static func prompt(_ text: String, confirm: Bool = false) throws -> String {
        guard isatty(STDIN_FILENO) == 1 else {
            throw TandemError("no terminal to ask for the PIN: pass --pin-stdin", exitCode: TandemError.usageExitCode)
        }
        func ask(_ p: String) -> String {
            guard let raw = getpass(p) else { return "" }
            let s = String(cString: raw)
            memset(raw, 0, strlen(raw))
            return s
        }
        let first = ask(text)
        if confirm {
            guard ask("Again: ") == first else { throw TandemError("the PINs do not match", exitCode: TandemError.usageExitCode) }
        }
        return first
    }

    /// The `n`th secret: stdin line `n` with --pin-stdin, else a prompt.
    static func obtain(_ options: PINOptions, line n: Int = 0, prompt text: String = "Vault PIN: ", confirm: Bool = false) throws -> String {
        try options.pinStdin ? line(n) : prompt(text, confirm: confirm)
    }
}

/// Calls a vault method; when the node says the vault is locked, asks for the PIN and calls again.
func callVault(_ common: CommonOptions, _ pinOptions: PINOptions, _ method: String, _ params: [String: JSONValue] = [:],
               render: (JSONValue) -> Void) async throws {
    let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
    var p = params
    if pinOptions.pinStdin { p["pin"] = .string(try PINInput.line(0)) }
    let result: JSONValue
    do {
        result = try await client.call(method: method, params: .object(p), timeout: .seconds(600))
    } catch let error as ControlError where (error.code == "vault_locked" || error.code == "pin_required") && p["pin"] == nil {
        p["pin"] = .string(try PINInput.prompt("Vault PIN: "))
        result = try await client.call(method: method, params: .object(p), timeout: .seconds(600))
    }
    if common.json { outputJSON(result.compactJSON) } else { render(result.terminalSafe) }
}

/// Runs a streaming vault method (import, export) with a progress bar on a terminal (or JSON
/// progress lines with --json), asking for the PIN when the vault is locked.
func streamVault(_ common: CommonOptions, _ pinOptions: PINOptions, _ method: String, _ params: [String: JSONValue],
                 verb: String, render: (JSONValue) -> Void) async throws {
    var p = params
    if pinOptions.pinStdin { p["pin"] = .string(try PINInput.line(0)) }
    for attempt in 0..<2 {
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let bar = ProgressBar(verb: verb, enabled: !common.json && isatty(STDERR_FILENO) == 1)
        do {
            for try await item in client.stream(method: method, params: .object(p)) {
                if let progress = item["progress"] {
                    if common.json { outputJSON(JSONValue.object(["progress": progress]).compactJSON) } else { bar.show(progress) }
                } else if let result = item["result"] {
                    bar.finish()
                    if common.json { outputJSON(result.compactJSON) } else { render(result.terminalSafe) }
                }
            }
            return
        } catch let error as ControlError where error.code == "vault_locked" && p["pin"] == nil && attempt == 0 {
            bar.finish()
            p["pin"] = .string(try PINInput.prompt("Vault PIN: "))
        } catch {
            bar.finish()
            throw error
        }
    }
}

/// One line on stderr, redrawn: "Importing  42% [########............] 420 MB of 1.0 GB, 180 MB/s, ETA 3 s".
final class ProgressBar {
    let verb: String
    let enabled: Bool
    private var drawn = false

    init(verb: String, enabled: Bool) {
        self.verb = verb
        self.enabled = enabled
    }

    func show(_ p: JSONValue) {
        guard enabled else { return }
        let done = p["done"]?.intValue ?? 0, total = max(1, p["total"]?.intValue ?? 1)
        let rate = p["bytes_per_second"]?.intValue ?? 0
        let fraction = min(1, Double(done) / Double(total))
        let width = 20
        let filled = Int(fraction * Double(width))
        var line = String(format: "%@ %3d%% [%@%@] %@ of %@", verb, Int(fraction * 100), String(repeating: "#", count: filled),
                          String(repeating: ".", count: width - filled), bytesText(done), bytesText(total))
        if rate > 0 {
            line += ", \(bytesText(rate))/s"
            let eta = Double(total - done) / Double(rate)
            if eta >= 0.5 { line += ", ETA \(Int(eta.rounded())) s" }
        }
        FileHandle.standardError.write(Data(("\r" + line + "\u{1B}[K").utf8))
        drawn = true
    }

    func finish() {
        if drawn { FileHandle.standardError.write(Data("\n".utf8)) }
        drawn = false
    }
}

/// A size for people, in the unit it was most likely given in: binary units (KiB, MiB, GiB) for a
/// whole number of KiB (`--quota 10GiB` reads back as "10 GiB"), decimal ones otherwise ("1.0 MB").
func bytesText(_ n: Int64) -> String {
    let binary = n >= 1024 && n % 1024 == 0
    let units = binary ? ["B", "KiB", "MiB", "GiB", "TiB"] : ["B", "kB", "MB", "GB", "TB"]
    let step: Double = binary ? 1024 : 1000
    var v = Double(n)
    var i = 0
    while v >= step, i < units.count - 1 {
        v /= step
        i += 1
    }
    if i == 0 { return "\(n) B" }
    if v == v.rounded() { return String(format: "%.0f %@", v, units[i]) }
    return String(format: v < 10 ? "%.1f %@" : "%.0f %@", v, units[i])
}

func itemLine(_ item: JSONValue) -> String {
    var line = "\(item["id"]?.stringValue ?? "?")  \(item["type"]?.stringValue ?? "?")  \(bytesText(item["size"]?.intValue ?? 0))  \(item["name"]?.stringValue ?? "")"
    if let album = item["album"]?.stringValue { line += "  [\(album)]" }
    if item["favorite"]?.boolValue == true { line += "  ★" }
    return line
}

struct VaultInit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "init", abstract: "Create the vault and choose its PIN.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Option(help: ArgumentHelp("Lock after this idle time (0: after every command).", valueName: "duration")) var autoLock: String?

    func run() async throws {
        let autoLockMs = try autoLock.map { try durationMs($0) }
        let secret = try PINInput.obtain(pin, prompt: "New vault PIN or passphrase (at least 4 characters): ", confirm: true)
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        var result = try await client.call(method: "vault.init", params: ["pin": .string(secret)], timeout: .seconds(120))
        if let autoLockMs {
            let settings = try await client.call(method: "vault.settings", params: ["auto_lock_ms": .int(autoLockMs)])
            if case .object(var o) = result {
                o["auto_lock_ms"] = settings["auto_lock_ms"] ?? .null
                result = .object(o)
            }
        }
        if common.json { outputJSON(result.compactJSON) } else {
            output("Vault created and unlocked. It locks after \(durationText(result["auto_lock_ms"]?.intValue ?? 0)) idle.")
            if let code = result["recovery_code"]?.stringValue {
                output("Your recovery code (write it down, keep it away from this machine): \(code)")
            }
        }
    }
}

/// "2.2 hours", "9 days", "3 years".
func guessTime(_ s: Double) -> String {
    if s < 3_600 { return String(format: "%.0f minutes", s / 60) }
    if s < 2 * 86_400 { return String(format: "%.1f hours", s / 3_600) }
    if s < 365 * 86_400 { return String(format: "%.0f days", s / 86_400) }
    let years = s / (365.25 * 86_400)
    return years < 1e6 ? String(format: "%.0f years", years) : String(format: "%.1e years", years)
}

func durationMs(_ text: String) throws -> Int64 {
    let d = try DurationText.parse(text)
    return d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
}

func durationText(_ ms: Int64) -> String {
    ms == 0 ? "every command" : DurationText.format(.milliseconds(ms))
}

struct VaultUnlock: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "unlock", abstract: "Open the vault with its PIN.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions

    func run() async throws {
        let secret = try PINInput.obtain(pin)
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let result = try await client.call(method: "vault.unlock", params: ["pin": .string(secret)], timeout: .seconds(120))
        if common.json { outputJSON(result.compactJSON) } else {
            output("Vault unlocked: \(result["items"]?.intValue ?? 0) items. It locks after \(durationText(result["auto_lock_ms"]?.intValue ?? 0)) idle.")
        }
    }
}

struct VaultLock: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "lock", abstract: "Lock the vault now.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "vault.lock") { _ in output("Vault locked.") }
    }
}

struct VaultStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Whether the vault exists and is open.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "vault.status") { r in
            guard r["initialized"]?.boolValue == true else { return output("No vault yet: create one with `tandem vault init`.") }
            if r["locked"]?.boolValue == true {
                output("Vault locked.")
            } else {
                output("Vault unlocked: \(r["items"]?.intValue ?? 0) items, \(bytesText(r["bytes"]?.intValue ?? 0)).")
            }
            output("Auto-lock: \(durationText(r["auto_lock_ms"]?.intValue ?? 0)).")
            if let wait = r["retry_in_ms"]?.intValue {
                output("Too many wrong PINs: the next try is allowed in \((wait + 999) / 1000) s.")
            }
            if let g = r["guessing"], let seconds = g["seconds_per_guess"]?.doubleValue, let spaces = g["one_core_exhausts_in_s"] {
                output(String(format: "Guessing: one try costs %.2f CPU seconds of Argon2id here (%lld passes over %lld MiB).", seconds,
                              g["opslimit"]?.intValue ?? 0, g["memlimit_mib"]?.intValue ?? 0))
                output("  Someone with this whole data directory (the identity key too) tries every secret, one core:")
                for (key, label) in [("pin_4_digits", "4-digit PIN"), ("pin_6_digits", "6-digit PIN"), ("pin_8_digits", "8-digit PIN"),
                                     ("passphrase_10_random_lowercase", "10 random letters"),
                                     ("passphrase_5_diceware_words", "5 random words")] {
                    if let seconds = spaces[key]?.doubleValue { output("    \(label): \(guessTime(seconds))") }
                }
                output("  (n cores: n times faster, each needing the memory above.) A copy of vault/ alone, or a friend's backup: no PIN can be tried.")
            }
        }
    }
}

struct VaultImport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import", abstract: "Encrypt files into the vault.",
        discussion: "Directories are imported with everything in them (hidden files skipped). Identical content is stored once. "
            + "Photos (JPEG, PNG, HEIC) are stored without their location and device data (GPS, camera make and serial, "
            + "editing software, embedded thumbnails, leftover bytes); the capture date and orientation are kept. "
            + "--keep-metadata stores the original bytes instead.",
        aliases: ["add"])
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Argument(help: ArgumentHelp("Files or directories.", valueName: "path")) var paths: [String]
    @Option(help: "Put the items in this album (created if needed).") var album: String?
    @Flag(help: "Delete each original once it is safely in the vault.") var removeOriginals = false
    @Flag(help: "Store photos byte for byte, location and device data included (default: stripped, capture date kept).")
    var keepMetadata = false

    func run() async throws {
        let cwd = FileManager.default.currentDirectoryPath
        let absolute = paths.map { $0.hasPrefix("/") ? $0 : (cwd as NSString).appendingPathComponent($0) }
        var params: [String: JSONValue] = ["paths": .array(absolute.map(JSONValue.string)), "remove_originals": .bool(removeOriginals)]
        if keepMetadata { params["keep_metadata"] = .bool(true) }
        if let album { params["album"] = .string(album) }
        try await streamVault(common, pin, "vault.import", params, verb: "Importing") { r in
            let items = r["items"]?.arrayValue ?? []
            for item in items { output(itemLine(item)) }
            output("Imported \(items.count) item\(items.count == 1 ? "" : "s"), \(bytesText(r["bytes"]?.intValue ?? 0)).")
        }
    }
}

struct VaultList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the vault's items.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Option(help: "Only this album.") var album: String?
    @Option(help: "Only photo, video or document.") var type: String?
    @Flag(help: "Only favourites.") var favorites = false
    @Option(help: "imported (newest first, default), created, size (largest first) or name.") var sort: String = "imported"

    func run() async throws {
        var params: [String: JSONValue] = ["favorites": .bool(favorites), "sort": .string(sort)]
        if let album { params["album"] = .string(album) }
        if let type { params["type"] = .string(type) }
        try await callVault(common, pin, "vault.list", params) { r in
            let items = r["items"]?.arrayValue ?? []
            if items.isEmpty { output("No items.") }
            for item in items { output(itemLine(item)) }
        }
    }
}

struct VaultExport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "export", abstract: "Decrypt items into a directory (never over existing files).")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Argument(help: ArgumentHelp("Items (ids or names), then the directory.", valueName: "item… dir")) var arguments: [String]

    func validate() throws {
        guard arguments.count >= 2 else { throw ValidationError("name at least one item and a directory") }
    }

    func run() async throws {
        let cwd = FileManager.default.currentDirectoryPath
        let dir = arguments.last!
        let absolute = dir.hasPrefix("/") ? dir : (cwd as NSString).appendingPathComponent(dir)
        let params: [String: JSONValue] = ["items": .array(arguments.dropLast().map(JSONValue.string)), "dir": .string(absolute)]
        try await streamVault(common, pin, "vault.export", params, verb: "Exporting") { r in
            for f in r["files"]?.arrayValue ?? [] { output("\(f["id"]?.stringValue ?? "?") → \(f["file"]?.stringValue ?? "?")") }
        }
    }
}

struct VaultThumbnail: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "thumbnail", abstract: "Write an item's thumbnail (JPEG) to a file.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Argument(help: "The item (id or name).") var item: String
    @Argument(help: "The file to write (must not exist).") var file: String

    func run() async throws {
        let path = file.hasPrefix("/") ? file : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(file)
        try await callVault(common, pin, "vault.thumbnail", ["item": .string(item), "file": .string(path)]) { r in
            output("Thumbnail of \(r["id"]?.stringValue ?? item) written to \(r["file"]?.stringValue ?? path).")
        }
    }
}

struct VaultRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rm", abstract: "Remove items from the vault.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Argument(help: ArgumentHelp("Items (ids or names).", valueName: "item")) var items: [String]

    func run() async throws {
        try await callVault(common, pin, "vault.rm", ["items": .array(items.map(JSONValue.string))]) { r in
            let n = r["removed"]?.arrayValue?.count ?? 0
            output("Removed \(n) item\(n == 1 ? "" : "s").")
        }
    }
}

struct VaultFavorite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "favorite", abstract: "Mark items as favourites (--off: unmark).")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Argument(help: ArgumentHelp("Items (ids or names).", valueName: "item")) var items: [String]
    @Flag(help: "Unmark instead.") var off = false

    func run() async throws {
        try await callVault(common, pin, "vault.favorite", ["items": .array(items.map(JSONValue.string)), "off": .bool(off)]) { r in
            for item in r["items"]?.arrayValue ?? [] { output(itemLine(item)) }
        }
    }
}

struct VaultMove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "move", abstract: "Move items to an album (created if needed).")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Argument(help: ArgumentHelp("Items (ids or names).", valueName: "item")) var items: [String]
    @Option(help: "The album.") var album: String

    func run() async throws {
        try await callVault(common, pin, "vault.move", ["items": .array(items.map(JSONValue.string)), "album": .string(album)]) { r in
            for item in r["items"]?.arrayValue ?? [] { output(itemLine(item)) }
        }
    }
}

struct VaultAlbum: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "album", abstract: "Albums: create, rename, delete, cover, list.",
        discussion: """
        tandem vault album list
        tandem vault album create NAME
        tandem vault album rename NAME NEW-NAME
        tandem vault album delete NAME        (its items stay, in no album)
        tandem vault album cover NAME ITEM
        """)
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Argument(help: "list, create, rename, delete or cover.") var action: String
    @Argument(help: "The album, then the new name (rename) or the item (cover).") var arguments: [String] = []

    func run() async throws {
        var params: [String: JSONValue] = ["action": .string(action)]
        let needed = ["list": 0, "create": 1, "delete": 1, "rename": 2, "cover": 2]
        guard let count = needed[action] else {
            throw TandemError("album actions: list, create, rename, delete, cover", exitCode: TandemError.usageExitCode)
        }
        guard arguments.count == count else {
            throw TandemError("`vault album \(action)` takes \(count) argument\(count == 1 ? "" : "s")", exitCode: TandemError.usageExitCode)
        }
        if count >= 1 { params["name"] = .string(arguments[0]) }
        if action == "rename" { params["new_name"] = .string(arguments[1]) }
        if action == "cover" { params["item"] = .string(arguments[1]) }
        try await callVault(common, pin, "vault.album", params) { r in
            if action == "list" {
                let albums = r["albums"]?.arrayValue ?? []
                if albums.isEmpty { output("No albums.") }
                for a in albums { output("\(a["name"]?.stringValue ?? "?")  \(a["items"]?.intValue ?? 0) items") }
            } else {
                output("Done.")
            }
        }
    }
}

struct VaultStats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "stats", abstract: "Sizes: what you stored, what it takes on disk.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions

    func run() async throws {
        try await callVault(common, pin, "vault.stats") { r in
            output("\(r["items"]?.intValue ?? 0) items in \(r["albums"]?.intValue ?? 0) albums, \(bytesText(r["bytes"]?.intValue ?? 0)).")
            output("On disk: \(bytesText(r["stored_bytes"]?.intValue ?? 0)) in \(r["packs"]?.intValue ?? 0) packs (\(r["chunks"]?.intValue ?? 0) chunks, \(r["compressed_chunks"]?.intValue ?? 0) compressed).")
        }
    }
}

struct VaultCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check", abstract: "Verify every pack (--read-data: every chunk too).")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Flag(help: "Decrypt and verify every chunk.") var readData = false

    func run() async throws {
        var healthy = true
        try await callVault(common, pin, "vault.check", ["read_data": .bool(readData)]) { r in
            healthy = r["ok"]?.boolValue == true
            for p in r["problems"]?.arrayValue ?? [] { output("problem: \(p.stringValue ?? "?")") }
            output("\(r["packs_checked"]?.intValue ?? 0) packs, \(r["blobs_checked"]?.intValue ?? 0) chunks checked: \(healthy ? "no problems" : "PROBLEMS FOUND").")
        }
        if !healthy { throw ExitCode(1) }
    }
}

struct VaultBreakIns: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "break-ins", abstract: "When wrong PINs were tried, from the third in a row on (the last 20; nothing of what was tried is kept).")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions

    func run() async throws {
        try await callVault(common, pin, "vault.break_ins") { r in
            let log = r["break_ins"]?.arrayValue ?? []
            if log.isEmpty { output("No break-in attempts.") }
            for e in log {
                let attempt = e["attempt"]?.intValue ?? 0
                output("\(e["at"]?.stringValue ?? "?")  wrong PIN\(attempt > 0 ? " (\(attempt) in a row)" : "")")
            }
        }
    }
}

struct VaultChangePIN: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "change-pin", abstract: "Change the PIN (content is not re-encrypted).",
        discussion: "With --pin-stdin: the current PIN on the first line, the new one on the second.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions

    func run() async throws {
        let old = try PINInput.obtain(pin, line: 0, prompt: "Current PIN: ")
        let new = try PINInput.obtain(pin, line: 1, prompt: "New PIN or passphrase (at least 4 characters): ", confirm: true)
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let r = try await client.call(method: "vault.change_pin", params: ["pin": .string(old), "new_pin": .string(new)], timeout: .seconds(120))
        if common.json { outputJSON(r.compactJSON) } else { output("PIN changed.") }
    }
}

struct VaultDecoy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decoy", abstract: "Set a decoy PIN: it opens a second vault that looks like the real one.",
        discussion: "With --pin-stdin: the real PIN on the first line, the decoy PIN on the second.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions

    func run() async throws {
        let real = try PINInput.obtain(pin, line: 0, prompt: "Vault PIN: ")
        let decoy = try PINInput.obtain(pin, line: 1, prompt: "Decoy PIN (at least 4 characters, not the PIN): ", confirm: true)
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let r = try await client.call(method: "vault.decoy", params: ["pin": .string(real), "decoy_pin": .string(decoy)], timeout: .seconds(120))
        if common.json { outputJSON(r.compactJSON) } else { output("Decoy PIN set.") }
    }
}

struct VaultSettings: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "settings", abstract: "Show or change the auto-lock time.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Option(help: ArgumentHelp("Lock after this idle time (0: after every command).", valueName: "duration")) var autoLock: String?

    func run() async throws {
        var params: [String: JSONValue] = [:]
        if let autoLock { params["auto_lock_ms"] = .int(try durationMs(autoLock)) }
        try await callVault(common, pin, "vault.settings", params) { r in
            output("Auto-lock: \(durationText(r["auto_lock_ms"]?.intValue ?? 0)).")
        }
    }
}

struct RecoveryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recovery",
        abstract: "Your node's recovery code: with it and one friend a lost node can be restored.",
        subcommands: [RecoveryShow.self, RecoverySheet.self])
}

struct RecoveryShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "Print the recovery code (asks for the vault PIN once a vault exists, even when it is open).",
        discussion: "Write it down and keep it away from this machine. Anyone with it and one of your friends can become you.")
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions

    func run() async throws {
        try await callVault(common, pin, "recovery.show") { r in
            output("Recovery code: \(r["code"]?.stringValue ?? "?")")
            output("Write it down and keep it away from this machine: with it and one friend, a lost node can be restored.")
        }
    }
}
