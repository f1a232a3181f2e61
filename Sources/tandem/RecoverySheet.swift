import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

/// `tandem recovery sheet`: one page to print and keep away from the machine — the recovery code
/// and, for each friend holding backups, what `tandem restore --from` takes to reach it.
struct RecoverySheet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sheet", abstract: "Write a one-page recovery sheet (the code and the friends who hold your backups) to print.",
        discussion: """
        The sheet is a text file (0600): your recovery code, and for each friend holding your backups their \
        share code (through their relay) and where your node last reached them, with the exact restore command. \
        Print it, keep it with your papers, and delete the file: anyone with the code and one friend can become you.
        """)
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Option(help: ArgumentHelp("Where to write the sheet.", valueName: "file")) var out: String = "tandem-recovery-sheet.txt"

    func run() async throws {
        let url = URL(fileURLWithPath: out)
        guard !FileManager.default.fileExists(atPath: url.path) else {
            throw TandemError("\(String(out.prefix(200)).terminalSafe) already exists: give another --out", exitCode: TandemError.usageExitCode)
        }
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let holders = try await client.call(method: "backup.sheet", params: [:], timeout: .seconds(60))
        let status = try await client.call(method: "node.status", params: [:], timeout: .seconds(60))
        let json = common.json
        // The code as `recovery show` gives it (the PIN is checked there).
        var params: [String: JSONValue] = [:]
        if pin.pinStdin { params["pin"] = .string(try PINInput.line(0)) }
        let shown: JSONValue
        do {
            shown = try await client.call(method: "recovery.show", params: .object(params), timeout: .seconds(600))
        } catch let error as ControlError where (error.code == "vault_locked" || error.code == "pin_required") && params["pin"] == nil {
            params["pin"] = .string(try PINInput.prompt("Vault PIN: "))
            shown = try await client.call(method: "recovery.show", params: .object(params), timeout: .seconds(600))
        }
        guard let code = shown["code"]?.stringValue else { throw TandemError("the node gave no recovery code", exitCode: 1) }
        let text = Self.render(code: code, id: status["id"]?.stringValue ?? "?", name: status["name"]?.stringValue ?? "",
                               holders: holders["holders"]?.arrayValue ?? [],
                               date: localTimeText(Int64(Date().timeIntervalSince1970 * 1000)))
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw TandemError("cannot create \(String(out.prefix(200)).terminalSafe): \(String(cString: strerror(errno)))", exitCode: 1) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == bytes.count else { throw TandemError("cannot write \(String(out.prefix(200)).terminalSafe)", exitCode: 1) }
        let count = holders["holders"]?.arrayValue?.count ?? 0
        if json {
            outputJSON(JSONValue.object(["file": .string(url.path), "holders": .int(Int64(count))]).compactJSON)
        } else {
            output("Wrote \(url.path) (\(count) friend(s) holding your backups). Print it, keep it away from this machine, then delete the file.")
            if count == 0 { output("No friend holds your backups yet: ask one to run `tandem backup offer YOUR-ID --quota 10GiB`.") }
        }
    }

    static func render(code: String, id: String, name: String, holders: [JSONValue], date: String) -> String {
        var lines = [
            "TANDEM RECOVERY SHEET" + (name.isEmpty ? "" : " — \(name.terminalSafe)"),
            "Made \(date). Keep it on paper, away from the machine: with the code and one friend below, anyone can become this node.",
            "",
            "Node ID:        \(id)",
            "Recovery code:  \(code)",
            "",
            "Friends holding backups (any one is enough; a restore asks the others too):",
        ]
        if holders.isEmpty { lines.append("  (none yet)") }
        for h in holders {
            let hid = h["id"]?.stringValue ?? "?"
            let hname = h["name"]?.stringValue.map { $0.terminalSafe } ?? ""
            lines.append("")
            lines.append("  \(hname.isEmpty ? hid : "\(hname)  \(hid)")" + (h["holds_a_copy"]?.boolValue == true ? "" : "  (offered; no copy pushed yet)"))
            var froms: [String] = []
            if let share = h["share_code"]?.stringValue { froms.append(share) }
            froms += (h["addresses"]?.arrayValue ?? []).compactMap(\.stringValue)
            if froms.isEmpty { lines.append("    (no relay or address known: ask them for their share code, `tandem id --share`)") }
            for f in froms { lines.append("    tandem restore --from '\(f.terminalSafe)'") }
        }
        lines += ["", "On a new machine: install tandem, run one restore line above, and type the recovery code when asked.", ""]
        return lines.joined(separator: "\n")
    }
}
