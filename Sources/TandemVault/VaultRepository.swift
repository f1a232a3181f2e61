import Foundation
import Sodium

/// One vault's storage in a directory: its packs, its encrypted index, and the operations on them.
///
/// Layout of the directory (shared by every vault whose keys file lives there):
///
///     <dir>/keys                      the keys file (VaultKeyFile)
///     <dir>/index/<locator>           one encrypted index per vault (locator derived from its key)
///     <dir>/packs/<xx>/<64 hex>       pack files of every vault, named by their BLAKE2b-256
///
/// State is the index, held in memory and written whole (atomically) after every change; a change
/// that fails to commit is undone in memory too. Packs are written durably before any index refers
/// to them. A crash mid-import can leave packs no index refers to: they cost space but never
/// correctness, and no vault deletes them (it cannot tell them from another vault's packs).
///
/// Not thread-safe: one owner (the node's vault service) calls it.
public final class VaultRepository: @unchecked Sendable {
    public let directory: URL
    let keys: VaultKeys
    let packStore: PackStore
    let zstd = Zstd()
    var index: VaultIndex
    /// Reused between imports (about 12 MiB, allocated on first use).
    lazy var packWriter = PackWriter()

    /// The buffers the last import used at most.
    public internal(set) var lastImportMemory = VaultImportMemory(chunkerBuffer: 0, packBuffer: 0, readBuffer: 0)

    private init(directory: URL, keys: VaultKeys, index: VaultIndex) {
        self.directory = directory
        self.keys = keys
        self.packStore = PackStore(directory: directory)
        self.index = index
    }

    /// A new, empty vault for `masterKey` in `directory` (created if needed). Fails with
    /// `.alreadyExists` if this key's index is already there (other keys' vaults are left alone).
    public static func create(at directory: URL, masterKey: SecretBytes) throws -> VaultRepository {
        let keys = try VaultKeys(masterKey: masterKey)
        let url = IndexFile.url(directory: directory, keys: keys)
        guard !FileIO.exists(url) else { throw VaultError(.alreadyExists, "a vault for this key already exists in \(directory.path)") }
        try FileIO.createDirectory(directory)
        try FileIO.createDirectory(PackStore(directory: directory).root)
        let repo = VaultRepository(directory: directory, keys: keys, index: VaultIndex())
        try IndexFile.write(repo.index, to: url, keys: keys, zstd: repo.zstd)
        return repo
    }

    /// The vault of `masterKey` in `directory`: `.notFound` if there is none, `.corrupt` if its index
    /// does not decrypt or validate.
    public static func open(at directory: URL, masterKey: SecretBytes) throws -> VaultRepository {
        let keys = try VaultKeys(masterKey: masterKey)
        let url = IndexFile.url(directory: directory, keys: keys)
        guard FileIO.exists(url) else { throw VaultError(.notFound, "no vault for this key in \(directory.path)") }
        let repo = VaultRepository(directory: directory, keys: keys, index: VaultIndex())
        repo.index = try IndexFile.read(from: url, keys: keys, zstd: repo.zstd)
        return repo
    }

    public var items: [VaultItem] { index.items }
    public var albums: [VaultAlbum] { index.albums }

    public func item(_ id: String) -> VaultItem? { index.items.first { $0.id == id } }

    /// The packs this vault's index refers to, as file names (64 hex): what a backup must hold.
    public var packNames: [String] { index.packs.keys.sorted().map(\.hex) }

    /// The pack file for a name from `packNames` (nil for a malformed name).
    public func packFileURL(name: String) -> URL? {
        Self.packFileURL(in: directory, name: name)
    }

    /// Where the pack `name` (64 hex) belongs in the vault at `directory` (`packs/<2 hex>/<64 hex>`),
    /// whether or not it is there; nil for a name that is not 64 hex digits. For writing a vault's
    /// packs before it can be opened (a restore).
    public static func packFileURL(in directory: URL, name: String) -> URL? {
        guard let bytes = Hex.decode(name), let id = ChunkID(bytes) else { return nil }
        return PackStore(directory: directory).url(for: id)
    }

    public func indexFileURL() -> URL { IndexFile.url(directory: directory, keys: keys) }

    /// The index file's name (its locator, 64 hex) for the vault of `masterKey`.
    public static func indexLocator(masterKey: SecretBytes) throws -> String {
        IndexFile.locator(keys: try VaultKeys(masterKey: masterKey))
    }

    /// Writes `staged` as the index and adopts it; on failure the in-memory state is unchanged.
    func commit(_ staged: VaultIndex) throws {
        // Packs the new index names are durable first.
        try packWriter.waitForWrites()
        var next = staged
        next.generation = index.generation &+ 1
        try IndexFile.write(next, to: indexFileURL(), keys: keys, zstd: zstd)
        index = next
    }

    func itemPosition(_ id: String) throws -> Int {
        guard let i = index.items.firstIndex(where: { $0.id == id }) else {
            throw VaultError(.notFound, "no item \(id) in the vault")
        }
        return i
    }

    /// A fresh random item id (12 hex), unique in the vault.
    func newItemID() -> String {
        while true {
            let id = Hex.encode(Sodium.randomBytes(6))
            if !index.items.contains(where: { $0.id == id }) { return id }
        }
    }
}
