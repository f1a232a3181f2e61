import ArgumentParser
import Foundation
import Sodium
import TandemNode
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

struct Init: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create this node's identity (an Ed25519 key pair) in the data directory.",
        discussion: "The key is written to identity.key with mode 0600. With --passphrase it is sealed with Argon2id + XChaCha20-Poly1305; the passphrase comes from $TANDEM_PASSPHRASE, --passphrase-file, or a prompt.")

    @OptionGroup var common: CommonOptions

    @Flag(help: "Protect the key with a passphrase.")
    var passphrase = false

    @Option(help: ArgumentHelp("Read the passphrase from this file (first line); implies --passphrase.", valueName: "file"))
    var passphraseFile: String?

    @Flag(help: "Replace an existing identity (its ID is lost for good).")
    var force = false

    func run() async throws {
        let dir = common.dataDirectory
        var secret: [UInt8]? = nil
        if passphrase || passphraseFile != nil {
            secret = try Passphrase.obtain(file: passphraseFile, confirm: true)
        }
        let pair = try IdentityFile.create(in: dir, passphrase: secret, force: force)
        let id = NodeID(publicKey: pair.publicKey)
        if common.json {
            printJSON(["id": id.canonical, "display": id.display, "public_key": hexString(pair.publicKey),
                       "data_dir": dir.path, "passphrase_protected": secret != nil])
        } else {
            output("Created identity in \(dir.path)")
            output("Your ID: \(id.display)")
            output("Share it with friends; start your node with `tandem node`.")
        }
    }
}

struct ID: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "id",
        abstract: "Print this node's ID.")

    @OptionGroup var common: CommonOptions

    @Flag(help: "Print the canonical form without separators.")
    var canonical = false

    @Flag(help: "Print a share code for friends off your LAN: your ID and your home relay (asks the running node).")
    var share = false

    func run() async throws {
        if share {
            try await callNode(common, "node.share") { r in
                output(r["share"]?.stringValue ?? "")
                if r["relay"] == .null {
                    FileHandle.standardError.write(Data("tandem: note: no home relay yet (tandem relay add ID@host:port), so this code only works on your LAN or with --addr\n".utf8))
                }
            }
            return
        }
        let dir = common.dataDirectory
        let pk = try IdentityFile.publicKey(in: dir)
        let id = NodeID(publicKey: pk)
        if common.json {
            printJSON(["id": id.canonical, "display": id.display, "public_key": hexString(pk),
                       "data_dir": dir.path, "passphrase_protected": IdentityFile.isEncrypted(in: dir) ?? false])
        } else {
            output(canonical ? id.canonical : id.display)
        }
    }
}

enum Passphrase {
    /// From --passphrase-file, else $TANDEM_PASSPHRASE, else a terminal prompt.
    static func obtain(file: String?, confirm: Bool) throws -> [UInt8] {
        if let file {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw TandemError("cannot read passphrase file \(file)")
            }
            let line = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).first ?? ""
            guard !line.isEmpty else { throw TandemError("passphrase file \(file) is empty") }
            return Array(line.utf8)
        }
        if let env = ProcessInfo.processInfo.environment["TANDEM_PASSPHRASE"], !env.isEmpty {
            return Array(env.utf8)
        }
        guard isatty(STDIN_FILENO) == 1 else {
            throw TandemError("a passphrase is needed: set TANDEM_PASSPHRASE or pass --passphrase-file", exitCode: TandemError.authenticationExitCode)
        }
        guard let first = getpass("Passphrase: ").map({ String(cString: $0) }), !first.isEmpty else {
            throw TandemError("empty passphrase")
        }
        if confirm {
            let second = getpass("Repeat passphrase: ").map { String(cString: $0) }
            guard second == first else { throw TandemError("the passphrases do not match") }
        }
        return Array(first.utf8)
    }

    /// The passphrase for loading, only if the identity needs one.
    static func forLoading(_ dir: DataDirectory, file: String?) throws -> [UInt8]? {
        guard IdentityFile.isEncrypted(in: dir) == true else { return nil }
        return try obtain(file: file, confirm: false)
    }
}
