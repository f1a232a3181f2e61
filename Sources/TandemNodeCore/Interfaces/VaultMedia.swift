import Foundation

/// One item's bytes as the vault gives them to the dashboard.
package struct VaultMediaFile: Sendable {
    /// The item's file name (a plain name, checked at import).
    package var name: String
    /// "photo", "video", "file"…: the item's type as the vault sniffed it.
    package var type: String
    package var bytes: [UInt8]

    package init(name: String, type: String, bytes: [UInt8]) {
        self.name = name
        self.type = type
        self.bytes = bytes
    }
}

/// What the dashboard's vault page needs from the vault that the control methods cannot carry
/// (bytes, not JSON). PINs never go through here: these methods work only while the vault is
/// already open (unlocked through `vault.unlock`, which applies the PIN guard) and throw the
/// control error `vault_locked` otherwise. The node's wiring hands the vault service over.
package protocol VaultMedia: Sendable {
    /// The JPEG thumbnail of item `ref` (an id or unique id prefix).
    func thumbnail(of ref: String) async throws -> [UInt8]
    /// Item `ref`'s content, decrypted; refused when it is larger than `maximumBytes`.
    func content(of ref: String, maximumBytes: Int64) async throws -> VaultMediaFile
    /// Imports `bytes` under `name` through the vault's normal import (photos: thumbnail, capture
    /// date, metadata stripped), into `album` when given. The bytes are staged in memory only.
    /// Answers what `vault.import` answers (`items`, `bytes`).
    func importUpload(name: String, bytes: [UInt8], album: String?) async throws -> JSONValue
}
