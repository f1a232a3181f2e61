extension VaultRepository {
    /// Changes an item's editable fields (name, album, favourite, type, created date) and commits.
    /// The id, size, chunks and thumbnail cannot change here; the album must exist (or be nil).
    public func update(_ id: String, _ change: (inout VaultItem) -> Void) throws {
        let position = try itemPosition(id)
        let old = index.items[position]
        var item = old
        change(&item)
        guard item.id == old.id, item.size == old.size, item.chunks == old.chunks, item.thumbnail == old.thumbnail,
              item.importedAtMs == old.importedAtMs else {
            throw VaultError(.invalidArgument, "item \(id): only name, album, type, favourite and created date can change")
        }
        try VaultNames.validateItemName(item.name, stored: item.name == old.name)
        if let album = item.album, !index.albums.contains(where: { $0.name == album }) {
            throw VaultError(.notFound, "no album with that name")
        }
        var next = index
        next.items[position] = item
        try commit(next)
    }

    /// Removes items (unknown ids are an error, nothing removed) and commits. Their chunks stay in
    /// packs until `prune`. Albums whose cover was removed lose their cover.
    public func remove(_ ids: [String]) throws {
        let doomed = Set(ids)
        for id in doomed { _ = try itemPosition(id) }
        var next = index
        next.items.removeAll { doomed.contains($0.id) }
        for i in next.albums.indices where next.albums[i].cover.map(doomed.contains) == true {
            next.albums[i].cover = nil
        }
        try commit(next)
    }

    public func createAlbum(_ name: String, nowMs: Int64) throws {
        try VaultNames.validateAlbumName(name)
        guard !index.albums.contains(where: { $0.name == name }) else {
            throw VaultError(.alreadyExists, "an album with that name exists")
        }
        var next = index
        next.albums.append(VaultAlbum(name: name, cover: nil, createdAtMs: nowMs))
        try commit(next)
    }

    /// Renames an album; its items follow.
    public func renameAlbum(_ name: String, to newName: String) throws {
        try VaultNames.validateAlbumName(newName)
        guard let a = index.albums.firstIndex(where: { $0.name == name }) else { throw VaultError(.notFound, "no album with that name") }
        guard name == newName || !index.albums.contains(where: { $0.name == newName }) else {
            throw VaultError(.alreadyExists, "an album with the new name exists")
        }
        var next = index
        next.albums[a].name = newName
        for i in next.items.indices where next.items[i].album == name { next.items[i].album = newName }
        try commit(next)
    }

    /// Deletes an album; its items stay in the vault, in no album.
    public func deleteAlbum(_ name: String) throws {
        guard let a = index.albums.firstIndex(where: { $0.name == name }) else { throw VaultError(.notFound, "no album with that name") }
        var next = index
        next.albums.remove(at: a)
        for i in next.items.indices where next.items[i].album == name { next.items[i].album = nil }
        try commit(next)
    }

    /// Sets (or with nil clears) the item shown for an album.
    public func setCover(album: String, item: String?) throws {
        guard let a = index.albums.firstIndex(where: { $0.name == album }) else { throw VaultError(.notFound, "no album with that name") }
        if let item { _ = try itemPosition(item) }
        var next = index
        next.albums[a].cover = item
        try commit(next)
    }
}
