import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol
import TandemSheet

/// `tandem recovery sheet`: one page to print and keep away from the machine — the recovery code
/// and, for each friend holding backups, what `tandem restore --from` takes to reach it.
struct RecoverySheet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sheet", abstract: "Write a one-page recovery sheet (the code and the friends who hold your backups) to print.",
        discussion: """
        The sheet is written three ways (each file 0600): a text file, a PNG and a one-page PDF (named \
        like the text file, .png and .pdf). Each holds your recovery code, and for each friend holding your \
        backups their share code (through their relay) and where your node last reached them, with the exact \
        restore command; the PNG and the PDF carry the recovery code and each friend's share code as QR codes. \
        Print it, keep it with your papers, and delete the files: anyone with the code and one friend can become you.
        """)
    @OptionGroup var common: CommonOptions
    @OptionGroup var pin: PINOptions
    @Option(help: ArgumentHelp("Where to write the text sheet (the PNG and PDF go beside it).", valueName: "file")) var out: String = "tandem-recovery-sheet.txt"

    /// The text file, and the PNG and PDF beside it (the text file's name with .png, .pdf).
    static func paths(_ out: String) -> (text: URL, png: URL, pdf: URL) {
        let text = URL(fileURLWithPath: out)
        let base = text.pathExtension.lowercased() == "txt" ? text.deletingPathExtension() : text
        return (text, base.appendingPathExtension("png"), base.appendingPathExtension("pdf"))
    }

    func run() async throws {
        let paths = Self.paths(out)
        let url = paths.text
        for u in [paths.text, paths.png, paths.pdf] where FileManager.default.fileExists(atPath: u.path) {
            throw TandemError("\(String(u.path.prefix(200)).terminalSafe) already exists: give another --out", exitCode: TandemError.usageExitCode)
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
        let date = localTimeText(Int64(Date().timeIntervalSince1970 * 1000))
        let name = status["name"]?.stringValue ?? ""
        let id = status["id"]?.stringValue ?? "?"
        let list = holders["holders"]?.arrayValue ?? []
        let text = Self.render(code: code, id: id, name: name, holders: list, date: date)
        let page = RecoverySheetPage(title: "TANDEM RECOVERY SHEET" + (name.isEmpty ? "" : " - \(name)"), date: date, nodeID: id, code: code,
                                     holders: list.map(Self.holder))
        let png: [UInt8]
        let pdf: [UInt8]
        do {
            (png, pdf) = (try page.png(), try page.pdf())
        } catch {
            throw TandemError("cannot draw the sheet: \(error)", exitCode: 1)
        }
        try Self.writeNew(Array(text.utf8), to: paths.text)
        try Self.writeNew(png, to: paths.png)
        try Self.writeNew(pdf, to: paths.pdf)
        let count = list.count
        if json {
            outputJSON(JSONValue.object(["file": .string(url.path), "png": .string(paths.png.path), "pdf": .string(paths.pdf.path),
                                         "holders": .int(Int64(count))]).compactJSON)
        } else {
            output("Wrote \(url.path), \(paths.png.lastPathComponent) and \(paths.pdf.lastPathComponent) (\(count) friend(s) holding your backups).")
            output("Print the PDF (or the PNG), keep it away from this machine, then delete the three files.")
            if count == 0 { output("No friend holds your backups yet: ask one to run `tandem backup offer YOUR-ID --quota 10GiB`.") }
        }
    }

    /// A file that must not exist yet, 0600.
    static func writeNew(_ bytes: [UInt8], to url: URL) throws {
        let shown = String(url.path.prefix(200)).terminalSafe
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw TandemError("cannot create \(shown): \(String(cString: strerror(errno)))", exitCode: 1) }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw TandemError("cannot write \(shown): \(String(cString: strerror(errno)))", exitCode: 1) }
            done += n
        }
    }

    /// What `restore --from` takes for one holder: its share code first, then its addresses.
    static func froms(_ h: JSONValue) -> [String] {
        var froms: [String] = []
        if let share = h["share_code"]?.stringValue { froms.append(share) }
        froms += (h["addresses"]?.arrayValue ?? []).compactMap(\.stringValue)
        return froms
    }

    static func holder(_ h: JSONValue) -> RecoverySheetPage.Holder {
        RecoverySheetPage.Holder(name: h["name"]?.stringValue.map { $0.terminalSafe } ?? "", id: h["id"]?.stringValue ?? "?", froms: froms(h))
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
            let froms = Self.froms(h)
            if froms.isEmpty { lines.append("    (no relay or address known: ask them for their share code, `tandem id --share`)") }
            for f in froms { lines.append("    tandem restore --from '\(f.terminalSafe)'") }
        }
        lines += ["", "On a new machine: install tandem, run one restore line above, and type the recovery code when asked.", ""]
        return lines.joined(separator: "\n")
    }
}
