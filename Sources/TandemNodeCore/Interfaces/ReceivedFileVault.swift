/// What the messages feature asks of the vault: a file received from a friend goes straight into
/// the vault (`tandem message accept ID --to-vault`, `message save ID --to-vault`), only while the
/// vault is open, through the vault's own import path (photos lose their GPS and device data, as
/// in `tandem vault import`). The node's wiring hands the vault service in; messages never import
/// the vault module.
package protocol ReceivedFileVault: Sendable {
    /// True while the vault is open (an import needs no PIN then).
    var isOpen: Bool { get }
    /// Imports the file at `path` (a file in the downloads folder) as an item named `name`;
    /// returns the item's id. Throws `NodeError.refused` when the vault is locked or missing, or
    /// the vault's own error when the import fails. The file at `path` is left in place: the
    /// caller removes it once the item is committed.
    func importReceivedFile(path: String, name: String) async throws -> String
}
