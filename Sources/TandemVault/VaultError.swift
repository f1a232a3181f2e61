/// Why a vault operation failed. A struct over a kind (not a public enum) so new kinds do not break
/// callers; `detail` names the file, pack, blob or item concerned and is meant for people.
public struct VaultError: Error, CustomStringConvertible, Equatable, Sendable {
    public enum Kind: Sendable, Equatable {
        /// A name (item or album) that the vault refuses: empty, too long, control characters.
        case invalidName
        /// An argument the caller chose that is out of range (a thumbnail too large, a short recovery code).
        case invalidArgument
        /// No item, album or index with that name or id.
        case notFound
        /// The vault, album or keys file already exists.
        case alreadyExists
        /// A file in the vault directory is damaged or was tampered with: a pack, a blob, the index,
        /// the keys file. The detail names which.
        case corrupt
        /// The file system refused (open, read, write, rename, fsync).
        case io
        /// A PIN or recovery code that does not open the slot it must open (change-PIN, set-decoy).
        case wrongSecret
    }

    public let kind: Kind
    public let detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { detail }

    static func corrupt(_ detail: String) -> VaultError { VaultError(.corrupt, detail) }
    static func io(_ detail: String) -> VaultError { VaultError(.io, detail) }
}
