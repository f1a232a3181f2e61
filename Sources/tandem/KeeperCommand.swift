import ArgumentParser
import Foundation
import TandemBlocking

/// `tandem keeper`: the lock's keeper, started by the node when a mode locks (not by people). It
/// outlives the node: while the node is gone it stops the locked mode's apps and keeps its hosts
/// block, until the lock's time is up or the node, back, says nothing is locked.
struct Keeper: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keeper", abstract: "Keep a locked mode's blocking while the node is not running (started by the node).",
        shouldDisplay: false)
    @OptionGroup var common: CommonOptions

    func run() throws {
        let directory = common.dataDirectory.path
        let code = LockKeeper.run(directory: directory) { line in
            // Its own log beside the node's data (stderr is /dev/null: it runs detached).
            let text = "\(ISO8601DateFormatter().string(from: Date())) \(line)\n"
            if let h = FileHandle(forWritingAtPath: directory + "/lock-keeper.log") ?? {
                _ = FileManager.default.createFile(atPath: directory + "/lock-keeper.log", contents: nil, attributes: [.posixPermissions: 0o600])
                return FileHandle(forWritingAtPath: directory + "/lock-keeper.log")
            }() {
                h.seekToEndOfFile()
                h.write(Data(text.utf8))
                try? h.close()  // a log line lost is not worth stopping the keeper for
            }
        }
        if code != 0 { throw ExitCode(code) }
    }
}
