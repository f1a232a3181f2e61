import Foundation
import TandemProtocol
import TandemVault
import TandemNodeCore

/// What opens a vault: a PIN (digits) or a passphrase (any text), one rule for both
/// (Protocol/vault.md "PINs and passphrases"): 4 to 256 characters, at most 1,024 bytes of UTF-8
/// in Unicode normalization form C (the same passphrase typed on another keyboard gives the same
/// bytes), no control characters. A digit PIN is the same bytes as before, so vaults made with
/// one open as they did.
enum VaultSecret {
    static let minimumCharacters = 4
    static let maximumCharacters = 256
    static let maximumBytes = 1024

    /// The bytes the keys file is given, or `invalidArgument` naming `what`.
    static func bytes(_ text: String, what: String = "PIN") throws -> [UInt8] {
        let normal = text.precomposedStringWithCanonicalMapping
        let bytes = Array(normal.utf8)
        guard (minimumCharacters...maximumCharacters).contains(normal.count), bytes.count <= maximumBytes,
              !normal.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw NodeError.invalidArgument("a \(what) is 4 to 256 characters (digits, or a passphrase), without control characters")
        }
        return bytes
    }
}

/// How long guessing lasts against a stolen whole data directory (the keys file and the identity
/// key): one Argon2id derivation per guess and per record tried, measured on this machine.
struct GuessingEstimate: Sendable {
    /// Seconds of one derivation with the vault's parameters, measured here.
    let secondsPerGuess: Double
    let parameters: VaultKeyParameters

    /// The spaces `vault status` reports: name, number of secrets.
    static let spaces: [(String, Double)] = [
        ("pin_4_digits", 1e4), ("pin_6_digits", 1e6), ("pin_8_digits", 1e8),
        ("passphrase_10_random_lowercase", pow(26, 10)), ("passphrase_5_diceware_words", pow(7776, 5)),
    ]

    /// Seconds for one core to try every secret of a space (half of it on average).
    func exhaustSeconds(_ count: Double) -> Double { count * secondsPerGuess }

    var json: JSONValue {
        var spaces: [String: JSONValue] = [:]
        for (name, count) in Self.spaces { spaces[name] = .double(exhaustSeconds(count).rounded()) }
        return [
            "seconds_per_guess": .double((secondsPerGuess * 1000).rounded() / 1000),
            "opslimit": .int(Int64(parameters.opsLimit)),
            "memlimit_mib": .int(Int64(parameters.memLimitBytes >> 20)),
            "one_core_exhausts_in_s": .object(spaces),
        ]
    }
}
