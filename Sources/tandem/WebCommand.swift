import ArgumentParser
import Foundation
import TandemNet
import TandemNodeCore

/// `tandem web`: a one-time login link to the node's dashboard (Protocol/web.md).
struct WebCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "web",
        abstract: "Print a one-time login link to the node's web dashboard (and open it when there is a display).",
        discussion: """
        The dashboard is served by `tandem node` on 127.0.0.1:7812 by default (--web). The link works \
        once, within 5 minutes; it opens a session in the browser. Needs a running node (exit 7 without one).
        """)

    @OptionGroup var common: CommonOptions

    @Flag(help: "Only print the link, even when a display is available.")
    var noOpen = false

    func run() async throws {
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer { client.close() }
        let answer = try await client.call(method: "web.login")
        guard let url = answer["url"]?.stringValue else {
            throw TandemError("the node's answer has no login link", exitCode: 1)
        }
        if common.json {
            outputJSON(answer.compactJSON)
            return
        }
        output(url)
        if let f = answer["tls_fingerprint"]?.stringValue {
            output("TLS certificate SHA-256 fingerprint: \(f) (check that your browser shows the same)")
        }
        if !noOpen, isatty(STDOUT_FILENO) == 1, Self.hasDisplay, Self.open(url) {
            FileHandle.standardError.write(Data("tandem: opened in your browser (the link works once)\n".utf8))
        }
    }

    static var hasDisplay: Bool {
        let env = ProcessInfo.processInfo.environment
        return !(env["DISPLAY"] ?? "").isEmpty || !(env["WAYLAND_DISPLAY"] ?? "").isEmpty
    }

    /// `xdg-open URL`, when it exists; true when it started.
    static func open(_ url: String) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["xdg-open", url]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return false
        }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
