/// What an item is, as the importer said (it decides which views show it).
public enum VaultItemType: String, Codable, Sendable, CaseIterable {
    case photo, video, document
}

/// One file in the vault. Everything here lives only in the encrypted index.
public struct VaultItem: Codable, Sendable, Equatable {
    /// 12 lowercase hex characters, random, unique in the vault: how commands, events and logs name
    /// an item (never by file name).
    public var id: String
    /// The file name as imported (never written in clear).
    public var name: String
    public var album: String?
    public var type: VaultItemType
    /// Plaintext bytes.
    public var size: Int64
    /// Capture or creation date if known (ms since 1970).
    public var createdAtMs: Int64?
    public var importedAtMs: Int64
    public var favorite: Bool
    /// Chunk ids (32 bytes each) in file order.
    public var chunks: [[UInt8]]
    /// The chunk id of the thumbnail JPEG, if any.
    public var thumbnail: [UInt8]?

    public init(id: String, name: String, album: String?, type: VaultItemType, size: Int64, createdAtMs: Int64?,
                importedAtMs: Int64, favorite: Bool, chunks: [[UInt8]], thumbnail: [UInt8]?) {
        self.id = id
        self.name = name
        self.album = album
        self.type = type
        self.size = size
        self.createdAtMs = createdAtMs
        self.importedAtMs = importedAtMs
        self.favorite = favorite
        self.chunks = chunks
        self.thumbnail = thumbnail
    }
}

public struct VaultAlbum: Codable, Sendable, Equatable {
    public var name: String
    /// The id of the item shown for the album, if chosen.
    public var cover: String?
    public var createdAtMs: Int64

    public init(name: String, cover: String?, createdAtMs: Int64) {
        self.name = name
        self.cover = cover
        self.createdAtMs = createdAtMs
    }
}

public struct VaultStats: Sendable, Equatable {
    public var items: Int
    public var albums: Int
    /// Sum of the items' sizes (what exporting everything would write).
    public var plaintextBytes: Int64
    /// Sum of this vault's pack files (what it costs on disk and to back up).
    public var storedBytes: Int64
    public var packs: Int
    /// Chunks in the index (thumbnails included), each stored once.
    public var chunks: Int
    /// Plaintext bytes of those chunks (after dedup, before compression).
    public var uniqueChunkBytes: Int64
    /// Chunks stored zstd-compressed.
    public var compressedChunks: Int
}

public struct VaultCheckReport: Sendable, Equatable {
    public var packsChecked: Int
    public var blobsChecked: Int
    /// One line per problem, naming the pack and, where it applies, the blob (chunk id) and item.
    public var problems: [String]

    public var isHealthy: Bool { problems.isEmpty }
}

/// The largest buffers the last import held (tests assert they stay bounded whatever the file size).
public struct VaultImportMemory: Sendable, Equatable {
    /// The chunker's buffer (at most `Chunker.maximumSize`).
    public var chunkerBuffer: Int
    /// The open pack's buffer (at most the pack target plus one blob).
    public var packBuffer: Int
    /// The file read buffer.
    public var readBuffer: Int
}
