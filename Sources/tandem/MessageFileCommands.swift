import ArgumentParser
import Foundation
import TandemNet
import TandemNodeCore
import TandemProtocol

// Files between friends (Protocol/messages.md 7): `message send --file`, `message save`,
// `message accept`, `message cancel-file`, `message file-settings`, and `/file` in `tandem chat`.

private func fileUsage(_ text: String) -> TandemError { TandemError(text, exitCode: TandemError.usageExitCode) }

/// `path` made absolute against the working directory (the node reads it, not this process).
func absoluteFilePath(_ path: String) throws -> String {
    guard !path.isEmpty else { throw fileUsage("the file path is empty") }
    let url = path.hasPrefix("/") ? URL(fileURLWithPath: path)
        : URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(path)
    let abs = url.standardizedFileURL.path
    var isDir: ObjCBool = false
    guard FileManager.default.fileExists(atPath: abs, isDirectory: &isDir) else { throw fileUsage("no file \(path.terminalSafe)") }
    guard !isDir.boolValue else { throw fileUsage("\(path.terminalSafe) is a directory; send a file") }
    return abs
}

/// Offers a file to a friend (or in a challenge's thread); returns the node's answer (`id`, `file_id`, `name`, `size`).
func sendFile(_ client: ControlClient, to friend: String?, challenge: String? = nil, path: String, caption: String?) async throws -> JSONValue {
    var params: [String: JSONValue] = ["path": .string(try absoluteFilePath(path))]
    if let challenge { params["challenge"] = .string(challenge) } else { params["to"] = .string(friend ?? "") }
    if let caption { params["text"] = .string(caption) }
    return try await client.call(method: "message.send_file", params: .object(params))
}

/// Bytes for people: "812 B", "3.4 MiB".
func byteText(_ n: Int64) -> String {
    if n < 1024 { return "\(n) B" }
    let units = ["KiB", "MiB", "GiB", "TiB"]
    var v = Double(n) / 1024
    var i = 0
    while v >= 1024, i < units.count - 1 {
        v /= 1024
        i += 1
    }
    return String(format: "%.1f %@", v, units[i])
}

/// The file part of a `message list` line: "[file desk.jpg, 3.4 MiB, receiving 42 %]".
func fileSummary(_ f: JSONValue) -> String? {
    guard let name = f["name"]?.stringValue else { return nil }
    let state = f["state"]?.stringValue ?? "?"
    let percent = f["percent"]?.intValue ?? 0
    let shown = (state == "receiving" || state == "sending") ? "\(state) \(percent) %" : state
    return "[file \(ChatText.terminalSafe(name)), \(byteText(f["size"]?.intValue ?? 0)), \(shown.terminalSafe)]"
}

/// Follows a transfer until it is in state `until` (`sent`, `received`): a progress bar on a
/// terminal's stderr (`bar`), fed from `message.file_info` four times a second. A failed transfer
/// or the time limit ends it with one line and a non-zero exit.
func followFile(_ client: ControlClient, id: String, verb: String, until: String, timeout: Duration, bar: Bool) async throws -> JSONValue {
    let progress = ProgressBar(verb: verb, enabled: bar && isatty(STDERR_FILENO) == 1)
    defer { progress.finish() }
    let deadline = ContinuousClock.now + timeout
    var last: (at: ContinuousClock.Instant, done: Int64)?
    var rate: Int64 = 0
    while true {
        let info = try await client.call(method: "message.file_info", params: ["id": .string(id)])
        let state = info["state"]?.stringValue ?? "?"
        let size = info["size"]?.intValue ?? 0
        let done = state == until ? size : size / 100 * (info["percent"]?.intValue ?? 0)
        let now = ContinuousClock.now
        if let last, now - last.at >= .seconds(1) {
            let seconds = Double((now - last.at).components.seconds) + Double((now - last.at).components.attoseconds) / 1e18
            rate = Int64(Double(max(0, done - last.done)) / max(seconds, 0.001))
        }
        if last == nil || now - last!.at >= .seconds(1) { last = (now, done) }
        progress.show(.object(["done": .int(done), "total": .int(size), "bytes_per_second": .int(rate)]))
        if state == until { return info }
        if state == "failed" {
            throw TandemError("the file transfer failed: \((info["failure"]?.stringValue ?? "?").terminalSafe)")
        }
        guard now < deadline else {
            throw TandemError("the file is \(state.terminalSafe) (\(info["percent"]?.intValue ?? 0) %), not \(until) within \(DurationText.format(timeout))",
                              exitCode: TandemError.timeoutExitCode)
        }
        try await Task.sleep(for: .milliseconds(250))
    }
}

/// What `--to-vault` did: imported now (the item), or the file goes there when complete.
func printVaultAnswer(_ r: JSONValue, json: Bool) {
    if json { return outputJSON(r.compactJSON) }
    let name = ChatText.terminalSafe(r["name"]?.stringValue ?? "the file")
    if let item = r["vault_item"]?.stringValue {
        output("\(name) is in the vault (item \(item.terminalSafe)); the downloaded copy is removed.")
    } else {
        output("\(name) goes into the vault when it is complete (keep the vault open until then).")
    }
}

struct MessageSave: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "save",
        abstract: "Copy a received file out (to a path, or into a folder under its name), or move it into the vault.",
        discussion: """
        --to-vault imports the file into your vault (it must be open: tandem vault unlock) the way \
        `tandem vault import` does, then removes the downloaded copy; a file still coming goes there when complete.
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The message (or file) id, or a unique prefix.", valueName: "id")) var id: String
    @Argument(help: ArgumentHelp("Where to put the copy: a new file, or an existing folder.", valueName: "path")) var path: String?
    @Flag(help: "Into the vault (open) instead of a path; the downloaded copy is removed.") var toVault = false
    @Option(help: ArgumentHelp("A file still coming: wait up to this long for it (a progress bar on a terminal), then copy it.",
                               valueName: "duration")) var wait: String?

    func validate() throws {
        if toVault, path != nil { throw ValidationError("give a path or --to-vault, not both") }
        if !toVault, path == nil { throw ValidationError("say where: a path, or --to-vault") }
        if let wait { _ = try DurationText.parse(wait) }
        if toVault, wait != nil { throw ValidationError("--to-vault does not wait: a file still coming goes into the vault when complete") }
    }

    func run() async throws {
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer { client.close() }
        if toVault {
            let r = try await client.call(method: "message.file_to_vault", params: ["id": .string(id)])
            printVaultAnswer(r, json: common.json)
            return
        }
        guard let path else { return }  // validate() asked for one
        var info = try await client.call(method: "message.file_info", params: ["id": .string(id)])
        guard info["direction"]?.stringValue == "in" else { throw fileUsage("that file is one you sent; it is where you sent it from") }
        if let wait, info["state"]?.stringValue == "receiving" || info["state"]?.stringValue == "offered" {
            // Still coming: followed (a bar on a terminal) until it is received, then copied.
            info = try await followFile(client, id: id, verb: "Receiving", until: "received", timeout: try DurationText.parse(wait), bar: !common.json)
        }
        guard info["state"]?.stringValue == "received", let source = info["path"]?.stringValue else {
            throw TandemError("that file is \(info["state"]?.stringValue ?? "?") and not received yet", exitCode: TandemError.nothingToActOnExitCode)
        }
        var dest = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)).standardizedFileURL
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: dest.path, isDirectory: &isDir), isDir.boolValue {
            dest = dest.appendingPathComponent(info["name"]?.stringValue ?? (source as NSString).lastPathComponent)
        }
        guard !FileManager.default.fileExists(atPath: dest.path) else { throw fileUsage("\(dest.path.terminalSafe) exists; not overwritten") }
        do {
            try FileManager.default.copyItem(atPath: source, toPath: dest.path)
        } catch {
            throw TandemError("cannot copy to \(dest.path.terminalSafe): \(error.localizedDescription.terminalSafe)")
        }
        if common.json {
            outputJSON(JSONValue.object(["path": .string(dest.path), "size": info["size"] ?? .null]).compactJSON)
        } else {
            output("Saved \(ChatText.terminalSafe(info["name"]?.stringValue ?? "")) to \(dest.path.terminalSafe).")
        }
    }
}

struct MessageAcceptFile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accept", abstract: "Fetch a file a friend offered (one over your auto-accept limit).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The message (or file) id, or a unique prefix.", valueName: "id")) var id: String
    @Flag(help: "Straight into the vault (it must be open): imported when complete, no copy kept in the downloads folder.")
    var toVault = false

    func run() async throws {
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer { client.close() }
        if toVault {
            let r = try await client.call(method: "message.file_to_vault", params: ["id": .string(id)])
            printVaultAnswer(r, json: common.json)
            return
        }
        let r = try await client.call(method: "message.file_accept", params: ["id": .string(id)])
        if common.json { outputJSON(r.compactJSON) } else { output("Accepted \(fileSummary(r) ?? "the file").") }
    }
}

struct MessageCancelFile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel-file", abstract: "Decline a file offered to you, or stop one under way (either direction).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The message (or file) id, or a unique prefix.", valueName: "id")) var id: String

    func run() async throws {
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer { client.close() }
        let r = try await client.call(method: "message.file_cancel", params: ["id": .string(id)])
        if common.json { outputJSON(r.compactJSON) } else { output("Cancelled \(fileSummary(r) ?? "the file").") }
    }
}

struct MessageFileSettings: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "file-settings",
        abstract: "Files fetched without asking: up to a size, for the node or one friend.",
        discussion: """
        A friend's offer up to the limit is fetched at once; a larger one waits for `tandem message accept`. \
        The node's default is 100 MiB; 0 asks every time. --auto-accept default removes a friend's own limit.
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("A friend (omit for the node's limit).", valueName: "friend")) var friend: String?
    @Option(help: ArgumentHelp("Bytes, or with a unit (KiB, MiB, GiB), or `default` (a friend's own limit removed).",
                               valueName: "size")) var autoAccept: String?

    static func parseSize(_ text: String) -> Int64? {
        let t = text.trimmingCharacters(in: .whitespaces)
        let units: [(String, Int64)] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1)]
        for (u, m) in units where t.hasSuffix(u) {
            guard let v = Int64(t.dropLast(u.count).trimmingCharacters(in: .whitespaces)), v >= 0 else { return nil }
            let (r, o) = v.multipliedReportingOverflow(by: m)
            return o ? nil : r
        }
        return Int64(t).flatMap { $0 >= 0 ? $0 : nil }
    }

    func validate() throws {
        if let autoAccept, autoAccept != "default" {
            guard let v = Self.parseSize(autoAccept), v <= Int64(ChatLimits.maximumFileBytes) else {
                throw ValidationError("--auto-accept is a size from 0 to 4 GiB (e.g. 100MiB), or default")
            }
        }
        if autoAccept == "default", friend == nil { throw ValidationError("--auto-accept default is for a friend") }
    }

    func run() async throws {
        var params: [String: JSONValue] = [:]
        if let friend { params["friend"] = .string(friend) }
        if let autoAccept { params["auto_accept_bytes"] = autoAccept == "default" ? .null : .int(Self.parseSize(autoAccept) ?? 0) }
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer { client.close() }
        let r = try await client.call(method: "message.file_settings", params: .object(params))
        if common.json { outputJSON(r.compactJSON) } else {
            output("Files up to \(byteText(r["auto_accept_bytes"]?.intValue ?? 0)) are fetched without asking.")
        }
    }
}
