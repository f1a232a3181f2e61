import Foundation
import Sodium
import TandemProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where a node keeps its files: `--data-dir`, else `$TANDEM_HOME`, else `~/.tandem`.
public struct DataDirectory: Sendable {
    public let url: URL

    public init(explicit: String?) {
        if let explicit, !explicit.isEmpty {
            url = URL(fileURLWithPath: (explicit as NSString).expandingTildeInPath)
        } else if let env = ProcessInfo.processInfo.environment["TANDEM_HOME"], !env.isEmpty {
            url = URL(fileURLWithPath: (env as NSString).expandingTildeInPath)
        } else {
            url = FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".tandem")
        }
    }

    public init(url: URL) { self.url = url }

    public var identityFile: URL { url.appendingPathComponent("identity.key") }
    public var storeFile: URL { url.appendingPathComponent("node.sqlite") }
    public var path: String { url.path }

    /// Creates the directory with mode 0700 if it does not exist: set explicitly after creating it,
    /// so the umask does not matter. An existing directory is left as it is.
    public func create() throws {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue { return }
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw TandemError("cannot create data directory \(path): \(error.localizedDescription)")
        }
        guard chmod(path, 0o700) == 0 else {
            throw TandemError("cannot make data directory \(path) private: \(String(cString: strerror(errno)))")
        }
    }
}

/// The node's long-term Ed25519 identity, stored as `identity.key` (JSON, mode 0600), optionally
/// sealed with a passphrase (Argon2id + XChaCha20-Poly1305). Format in Protocol/README.md.
public enum IdentityFile {
    public static let format = "tandem-identity-v1"

    /// Argon2id limits for a new sealed key: libsodium's MODERATE (3 passes, 256 MiB).
    public static var newOpsLimit: UInt64 { PasswordHash.opsLimitModerate }
    public static var newMemLimit: Int { PasswordHash.memLimitModerate }
    /// Limits a key file may ask for: from INTERACTIVE (what older files use) to SENSITIVE passes
    /// and 1 GiB. A file asking for more would make every start take minutes or gigabytes; less,
    /// and the passphrase is cheap to guess.
    public static var acceptedOpsLimits: ClosedRange<UInt64> { PasswordHash.opsLimitInteractive...PasswordHash.opsLimitSensitive }
    public static var acceptedMemLimits: ClosedRange<Int> { PasswordHash.memLimitInteractive...(1 << 30) }

    struct Plain: Codable {
        var format: String
        var public_key: String
        var seed: String?
        var encrypted_seed: Sealed?
    }

    struct Sealed: Codable {
        var kdf: String
        var opslimit: UInt64
        var memlimit: Int
        var salt: String
        var aead: String
        var nonce: String
        var ciphertext: String
    }

    /// Creates a new identity. Refuses to overwrite an existing one unless `force`.
    @discardableResult
    public static func create(in dir: DataDirectory, passphrase: SecureBytes? = nil, force: Bool = false,
                              seed: [UInt8]? = nil) throws -> SigningKeyPair {
        try dir.create()
        let file = dir.identityFile
        if FileManager.default.fileExists(atPath: file.path), !force {
            throw TandemError("an identity already exists at \(file.path) (use --force to replace it; the old ID is lost)")
        }
        let pair = try seed.map { try SigningKeyPair(seed: $0) } ?? SigningKeyPair.generate()
        var seedBytes = pair.seed()
        defer { Sodium.wipe(&seedBytes) }
        var record = Plain(format: format, public_key: hexString(pair.publicKey), seed: nil, encrypted_seed: nil)
        if let passphrase {
            let salt = Sodium.randomBytes(PasswordHash.saltBytes)
            let ops = newOpsLimit
            let mem = newMemLimit
            let key = try PasswordHash.deriveKey(length: 32, passphrase: passphrase, salt: salt, opsLimit: ops, memLimit: mem)
            let nonce = Sodium.randomBytes(XChaCha20Poly1305.nonceBytes)
            let ct = try XChaCha20Poly1305.seal(seedBytes, additionalData: pair.publicKey, nonce: nonce, key: key)
            record.encrypted_seed = Sealed(kdf: "argon2id13", opslimit: ops, memlimit: mem, salt: hexString(salt),
                                           aead: "xchacha20poly1305-ietf", nonce: hexString(nonce),
                                           ciphertext: hexString(ct))
        } else {
            record.seed = hexString(seedBytes)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        var data = try encoder.encode(record)
        defer { data.resetBytes(in: 0..<data.count) }
        try writePrivately(data, to: file)
        return pair
    }

    /// Writes a file with mode 0600 atomically: a new temporary file beside it (O_CREAT|O_EXCL|
    /// O_NOFOLLOW, so neither a file nor a symlink planted under that name is ever written through),
    /// written, fsynced, renamed over the target, then the directory fsynced so the rename itself
    /// survives a crash. The mode is set with fchmod, whatever the umask.
    /// `temporaryPath` is for tests (the name is random otherwise).
    static func writePrivately(_ data: Data, to url: URL, temporaryPath: String? = nil) throws {
        func failure(_ what: String) -> TandemError { TandemError("cannot write \(what): \(String(cString: strerror(errno)))") }
        var tmp = ""
        var fd: Int32 = -1
        for _ in 0..<8 {
            tmp = temporaryPath ?? url.path + ".tmp.\(getpid()).\(hexString(Sodium.randomBytes(6)))"
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if fd >= 0 || errno != EEXIST || temporaryPath != nil { break }
        }
        guard fd >= 0 else { throw failure(tmp) }
        let ok = fchmod(fd, 0o600) == 0 && data.withUnsafeBytes { buf -> Bool in
            var off = 0
            while off < buf.count {
                let n = write(fd, buf.baseAddress! + off, buf.count - off)
                if n < 0, errno == EINTR { continue }
                if n <= 0 { return false }
                off += n
            }
            return fsync(fd) == 0
        }
        let error = failure(url.path)
        close(fd)
        guard ok else {
            unlink(tmp)
            throw error
        }
        guard rename(tmp, url.path) == 0 else {
            let error = failure(url.path)
            unlink(tmp)
            throw error
        }
        let directory = url.deletingLastPathComponent().path
        let dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dirfd >= 0 else { throw failure("\(directory) (fsync after rename)") }
        defer { close(dirfd) }
        guard fsync(dirfd) == 0 else { throw failure("\(directory) (fsync after rename)") }
    }

    /// True when the identity file exists.
    public static func exists(in dir: DataDirectory) -> Bool {
        FileManager.default.fileExists(atPath: dir.identityFile.path)
    }

    /// Whether the stored identity needs a passphrase; nil when there is none.
    public static func isEncrypted(in dir: DataDirectory) -> Bool? {
        guard let data = FileManager.default.contents(atPath: dir.identityFile.path),
              let rec = try? JSONDecoder().decode(Plain.self, from: data) else { return nil }
        return rec.encrypted_seed != nil
    }

    /// The public key alone (no passphrase needed).
    public static func publicKey(in dir: DataDirectory) throws -> [UInt8] {
        let rec = try read(dir)
        guard let pk = parseHex(rec.public_key), pk.count == 32 else {
            throw TandemError("identity file \(dir.identityFile.path) is damaged (bad public_key)")
        }
        return pk
    }

    /// Loads the key pair. Refuses a key file that group or others can read.
    public static func load(from dir: DataDirectory, passphrase: SecureBytes? = nil) throws -> SigningKeyPair {
        let path = dir.identityFile.path
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw TandemError("no identity in \(dir.path): run `tandem init` first", exitCode: TandemError.notInitializedExitCode)
        }
        let mode = st.st_mode & 0o777
        if mode & 0o077 != 0 {
            throw TandemError("refusing to use \(path): it is readable by group or others (mode \(String(mode, radix: 8))); run `chmod 600 \(path)`")
        }
        let rec = try read(dir)
        guard let pk = parseHex(rec.public_key), pk.count == 32 else {
            throw TandemError("identity file \(path) is damaged (bad public_key)")
        }
        var seed: [UInt8]
        if let s = rec.seed {
            guard let b = parseHex(s), b.count == 32 else { throw TandemError("identity file \(path) is damaged (bad seed)") }
            seed = b
        } else if let sealed = rec.encrypted_seed {
            guard let passphrase else {
                throw TandemError("the identity in \(dir.path) is passphrase-protected: set TANDEM_PASSPHRASE or pass --passphrase-file",
                                  exitCode: TandemError.authenticationExitCode)
            }
            guard sealed.kdf == "argon2id13", sealed.aead == "xchacha20poly1305-ietf",
                  let salt = parseHex(sealed.salt), let nonce = parseHex(sealed.nonce),
                  let ct = parseHex(sealed.ciphertext) else {
                throw TandemError("identity file \(path) is damaged or uses an unknown format")
            }
            guard acceptedOpsLimits.contains(sealed.opslimit), acceptedMemLimits.contains(sealed.memlimit) else {
                throw TandemError("identity file \(path) asks for Argon2id limits outside the accepted range "
                                  + "(opslimit \(sealed.opslimit), memlimit \(sealed.memlimit); accepted: opslimit "
                                  + "\(acceptedOpsLimits.lowerBound)-\(acceptedOpsLimits.upperBound), memlimit "
                                  + "\(acceptedMemLimits.lowerBound)-\(acceptedMemLimits.upperBound) bytes)")
            }
            let key = try PasswordHash.deriveKey(length: 32, passphrase: passphrase, salt: salt,
                                                 opsLimit: sealed.opslimit, memLimit: sealed.memlimit)
            guard let plain = XChaCha20Poly1305.open(ct, additionalData: pk, nonce: nonce, key: key), plain.count == 32 else {
                throw TandemError("wrong passphrase for the identity in \(dir.path)", exitCode: TandemError.authenticationExitCode)
            }
            seed = plain
        } else {
            throw TandemError("identity file \(path) holds no key")
        }
        defer { Sodium.wipe(&seed) }
        let pair = try SigningKeyPair(seed: seed)
        guard pair.publicKey == pk else {
            throw TandemError("identity file \(path) is inconsistent: its seed does not match its public key")
        }
        return pair
    }

    private static func read(_ dir: DataDirectory) throws -> Plain {
        let path = dir.identityFile.path
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TandemError("no identity in \(dir.path): run `tandem init` first", exitCode: TandemError.notInitializedExitCode)
        }
        guard let rec = try? JSONDecoder().decode(Plain.self, from: data), rec.format == format else {
            throw TandemError("identity file \(path) is not a \(format) file")
        }
        return rec
    }
}
