import ArgumentParser
import Foundation
import Logging
import NIOPosix
import TandemNet
import TandemNode
import TandemNodeCore
import NodeBackup
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Become a lost node again from its recovery code and one friend that keeps its backups.",
        discussion: """
        Run it on an empty data directory (no node running): it asks for the recovery code, fetches the \
        recovery kit from the friend, writes the old identity, friends, home relays and ledger, then fetches \
        the newest complete backup of the vault, checking every blob against its name. The vault keeps its old PIN.

        Interrupted, it can be run again with the same code: what is already in place is not fetched again.
        --from takes the friend's address as ID@host:port, or its share code (tandem:ID?relay=…) to reach it through its relay; \
        give it once per friend you know, or give --sheet with your recovery sheet (`tandem recovery sheet`): every friend \
        on it is tried in turn until one gives the recovery kit, and all of them are asked for their newest copy.
        """)

    @OptionGroup var common: CommonOptions

    @Option(help: ArgumentHelp("A friend that holds your backups: ID@host:port, or its share code (repeat for several).", valueName: "address"))
    var from: [String] = []

    @Option(help: ArgumentHelp("Your recovery sheet's text file: every `tandem restore --from` line on it is tried.", valueName: "file"))
    var sheet: String?

    func validate() throws {
        guard !from.isEmpty || sheet != nil else {
            throw ValidationError("name a friend with --from ID@host:port (or a share code), or give your recovery sheet with --sheet")
        }
    }

    @Flag(name: .long, help: "Read the recovery code from the first line of stdin instead of asking (for scripts).")
    var codeStdin = false

    func run() async throws {
        var texts = from
        if let sheet { texts += try Self.sheetFroms(sheet) }
        var holders: [(holder: NodeID, host: String, port: Int, relay: RelayAddress?)] = []
        for t in texts {
            let h = try Self.parseFrom(t)
            if !holders.contains(where: { $0.holder == h.holder && $0.host == h.host && $0.port == h.port && $0.relay == h.relay }) { holders.append(h) }
        }
        guard let holder = holders.first else {
            throw TandemError("--sheet: \(String((sheet ?? "").prefix(200)).terminalSafe) names no friend to restore from (no `tandem restore --from` line)",
                              exitCode: TandemError.usageExitCode)
        }
        let code = try Self.readCode(fromStdin: codeStdin)
        var logger = Logger(label: "tandem.restore")
        logger.logLevel = .critical
        let json = common.json
        let out = RestoreOutput(json: json)
        let client = RestoreClient(group: MultiThreadedEventLoopGroup.singleton, logger: logger)
        let ways = holders.map {
            RestoreClient.Options(holder: $0.holder, host: $0.host, port: $0.port, code: code, dataDirectory: common.dataDirectory, relay: $0.relay)
        }
        let report: RestoreClient.Report
        do {
            report = try await client.run(ways) { out.show($0) }
        } catch {
            out.bar.finish()
            throw error
        }
        out.bar.finish()
        if json {
            var o: [String: Any] = ["id": report.id.canonical, "friends": report.friends, "home_relays": report.homeRelays,
                                    "ledger_entries": report.ledgerEntries, "vault": report.vault, "items": report.items,
                                    "blobs": report.blobs, "blobs_already_here": report.blobsAlreadyHere, "bytes": report.bytes,
                                    "bytes_fetched": report.bytesFetched, "skipped": report.skipped]
            if let t = report.snapshotCreatedAtMs { o["snapshot_created_at_ms"] = t }
            if let from = report.vaultFrom { o["vault_from"] = from.canonical }
            if let g = report.generation { o["generation"] = g }
            o["kit_generation"] = report.kitGeneration
            o["freshness"] = report.freshness
            o["copies"] = report.copies.map { c -> [String: Any] in
                var d: [String: Any] = ["friend": c.name, "id": c.holder.canonical]
                if let n = c.newest {
                    d["generation"] = n.generation
                    d["created_at_ms"] = n.createdAtMs
                    d["total_bytes"] = n.totalBytes
                }
                if c.unsigned > 0 { d["unsigned_snapshots"] = c.unsigned }
                if let e = c.error { d["error"] = e }
                return d
            }
            printJSON(o)
        } else {
            output("Restored \(report.id.canonical): \(report.friends) friend(s), \(report.ledgerEntries) ledger entr\(report.ledgerEntries == 1 ? "y" : "ies")"
                   + (report.vault ? ", vault with \(report.items) item(s) (\(bytesText(report.bytes)))" : ", no vault")
                   + (report.vaultFrom.map { $0 != holder.holder ? " from friend \($0.short)…" : "" } ?? "") + ".")
            if !report.freshness.isEmpty { output(String(report.freshness.terminalSafe.prefix(2_000))) }
            if let g = report.generation, let newest = report.copies.compactMap({ $0.newest?.generation }).max(), g < newest {
                output("Note: the newest copy (generation \(newest)) could not be used; the vault is generation \(g).")
            }
            if report.vault { output("The vault keeps its old PIN. Start the node with `tandem node`.") }
        }
    }

    /// The `--from` of every `tandem restore --from '…'` line of a recovery sheet's text, in order.
    static func sheetFroms(_ path: String) throws -> [String] {
        let shown = String(path.prefix(200)).terminalSafe
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TandemError("--sheet: cannot read \(shown)", exitCode: TandemError.usageExitCode)
        }
        guard data.count <= 1 << 20 else { throw TandemError("--sheet: \(shown) is not a recovery sheet (over 1 MiB)", exitCode: TandemError.usageExitCode) }
        return sheetFroms(text: String(decoding: data, as: UTF8.self))
    }

    static func sheetFroms(text: String) -> [String] {
        text.split(whereSeparator: \.isNewline).compactMap { line -> String? in
            let l = line.trimmingCharacters(in: .whitespaces)
            let prefix = "tandem restore --from '"
            guard l.hasPrefix(prefix), l.hasSuffix("'"), l.count > prefix.count + 1 else { return nil }
            return String(l.dropFirst(prefix.count).dropLast())
        }
    }

    /// `ID@host:port`, or a share code `tandem:ID?relay=RELAY_ID@host:port` (through that relay).
    static func parseFrom(_ text: String) throws -> (holder: NodeID, host: String, port: Int, relay: RelayAddress?) {
        let t = text.trimmingCharacters(in: .whitespaces)
        let shown = String(t.prefix(200)).terminalSafe
        if t.lowercased().hasPrefix("tandem:") || !t.contains("@") {
            let code: ShareCode
            do {
                code = try ShareCode(parsing: t)
            } catch {
                throw TandemError("--from: '\(shown)' is neither ID@host:port nor a share code (\(error))", exitCode: TandemError.usageExitCode)
            }
            guard let relay = code.relay else {
                throw TandemError("--from: that share code names no relay: give the friend's ID@host:port or a share code with ?relay=",
                                  exitCode: TandemError.usageExitCode)
            }
            return (code.id, relay.host, relay.port, relay)
        }
        do {
            let a = try RelayAddress(parsing: t)
            return (a.id, a.host, a.port, nil)
        } catch {
            throw TandemError("--from: '\(shown)' is not ID@host:port (\(error))", exitCode: TandemError.usageExitCode)
        }
    }

    /// One line of stdin, or the terminal without echo.
    static func readCode(fromStdin: Bool) throws -> RecoveryCode {
        let text: String
        if fromStdin {
            let data = FileHandle.standardInput.readDataToEndOfFile()
            text = String(decoding: data.prefix(4096), as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
                .first.map(String.init) ?? ""
        } else {
            guard isatty(STDIN_FILENO) == 1 else {
                throw TandemError("no terminal to ask for the recovery code: pass --code-stdin", exitCode: TandemError.usageExitCode)
            }
            guard let raw = getpass("Recovery code: ") else { throw TandemError("no recovery code given", exitCode: TandemError.usageExitCode) }
            text = String(cString: raw)
            memset(raw, 0, strlen(raw))
        }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw TandemError("no recovery code given", exitCode: TandemError.usageExitCode) }
        do {
            return try RecoveryCode(parsing: trimmed)
        } catch {
            throw TandemError("that is not a recovery code: \(error)", exitCode: TandemError.usageExitCode)
        }
    }
}

/// Where a restore's events go: lines and a progress bar on stderr, or JSON lines on stdout.
/// Events come one at a time from the restore's task.
final class RestoreOutput: @unchecked Sendable {
    let json: Bool
    let bar: ProgressBar

    init(json: Bool) {
        self.json = json
        bar = ProgressBar(verb: "Restoring", enabled: !json && isatty(STDERR_FILENO) == 1)
    }

    func show(_ event: RestoreClient.Event) {
        switch event {
        case .step(let text):
            // Steps are for a person watching (a terminal); a script gets them with --json.
            if json { outputJSON(JSONValue.object(["step": .string(text)]).compactJSON) } else if bar.enabled {
                bar.finish()
                FileHandle.standardError.write(Data("\(text.terminalSafe)\n".utf8))
            }
        case .skipped(let text):
            if json { outputJSON(JSONValue.object(["skipped": .string(text)]).compactJSON) } else {
                bar.finish()
                FileHandle.standardError.write(Data("skipped: \(text.terminalSafe)\n".utf8))
            }
        case .progress(let phase, let done, let total, let rate):
            let p = JSONValue.object(["phase": .string(phase), "done": .int(done), "total": .int(total), "bytes_per_second": .int(rate)])
            if json { outputJSON(JSONValue.object(["progress": p]).compactJSON) } else { bar.show(p) }
        }
    }
}
