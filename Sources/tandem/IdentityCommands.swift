import ArgumentParser
import Foundation
import Sodium
import TandemNet
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
        var secret: SecureBytes? = nil
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

/// The passphrase ends up in guarded memory (`SecureBytes`); the byte copies on the way are wiped.
/// (An environment variable's own copy cannot be: prefer --passphrase-file or the prompt.)
enum Passphrase {
    /// From --passphrase-file, else $TANDEM_PASSPHRASE, else a terminal prompt.
    static func obtain(file: String?, confirm: Bool) throws -> SecureBytes {
        if let file {
            guard var data = FileManager.default.contents(atPath: file).map({ [UInt8]($0) }) else {
                throw TandemError("cannot read passphrase file \(file)")
            }
            defer { Sodium.wipe(&data) }
            let end = data.firstIndex(of: UInt8(ascii: "\n")) ?? data.count
            guard end > 0 else { throw TandemError("passphrase file \(file) is empty") }
            return data.withUnsafeBytes { src in
                SecureBytes(count: end) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[..<end])) }
            }
        }
        if let env = ProcessInfo.processInfo.environment["TANDEM_PASSPHRASE"], !env.isEmpty {
            var bytes = Array(env.utf8)
            return SecureBytes(consuming: &bytes)
        }
        guard isatty(STDIN_FILENO) == 1 else {
            throw TandemError("a passphrase is needed: set TANDEM_PASSPHRASE or pass --passphrase-file", exitCode: TandemError.authenticationExitCode)
        }
        var first = prompt("Passphrase: ")
        defer { Sodium.wipe(&first) }
        guard !first.isEmpty else { throw TandemError("empty passphrase") }
        if confirm {
            var second = prompt("Repeat passphrase: ")
            defer { Sodium.wipe(&second) }
            guard Sodium.constantTimeEqual(first, second) else { throw TandemError("the passphrases do not match") }
        }
        return SecureBytes(first)
    }

    /// One line from the terminal without echo; getpass's static buffer is wiped after the copy.
    private static func prompt(_ text: String) -> [UInt8] {
        guard let p = getpass(text) else { return [] }
        let n = strlen(p)
        let bytes = Array(UnsafeBufferPointer(start: UnsafeRawPointer(p).assumingMemoryBound(to: UInt8.self), count: n))
        Sodium.wipe(UnsafeMutableRawBufferPointer(start: UnsafeMutableRawPointer(p), count: n))
        return bytes
    }

    /// The passphrase for loading, only if the identity needs one.
    static func forLoading(_ dir: DataDirectory, file: String?) throws -> SecureBytes? {
        guard IdentityFile.isEncrypted(in: dir) == true else { return nil }
        return try obtain(file: file, confirm: false)
    }
}
