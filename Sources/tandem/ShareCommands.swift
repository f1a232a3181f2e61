import ArgumentParser
import Foundation
import TandemNet
import TandemNodeCore
import TandemProtocol

// `tandem share health on|off` (issue 35): whether friends see this node's health and state in its
// PRESENCE (Protocol/bedtime.md "Health in presence"). Off by default.

struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "What friends see of you: `tandem share health on|off` (off by default); without arguments, what is shared.",
        discussion: """
        While health is shared, your node's presence tells your friends today's health (0–100) and so the state \
        (healthy, concerned, tired, weak, dead); `tandem friend list` on their side shows it, and a friend can \
        cheer you with `tandem cheer YOU [TEXT]`. Nothing else about your day (bypasses, timeline) is shared.
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("What to share: health.", valueName: "what")) var what: String?
    @Argument(help: ArgumentHelp("on or off.", valueName: "on|off")) var value: String?

    func validate() throws {
        guard let what else {
            if value != nil { throw ValidationError("say what to share: tandem share health on|off") }
            return
        }
        guard what == "health" else { throw ValidationError("only health can be shared: tandem share health on|off") }
        guard value == nil || value == "on" || value == "off" else { throw ValidationError("say on or off: tandem share health on|off") }
    }

    func run() async throws {
        guard let what, let value else {
            try await callNode(common, "share.show") { s in output(shareLine(s)) }
            return
        }
        try await callNode(common, "share.set", ["what": .string(what), "on": .bool(value == "on")]) { s in output(shareLine(s)) }
    }
}

func shareLine(_ s: JSONValue) -> String {
    guard s["health"]?.boolValue == true else { return "Health: not shared with friends (tandem share health on)" }
    let h = s["shared_health"]?.intValue
    return "Health: shared with friends" + (h.map { " (they see \($0), \(HealthPool.State(health: Int($0)).rawValue))" } ?? "")
}
