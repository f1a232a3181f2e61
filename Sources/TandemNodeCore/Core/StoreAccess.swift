@_spi(StoreOwner) import TandemStore

// The one way into a store transaction for the node (checked): `NodeStore.batch` is SPI of
// TandemStore that only this file imports, so a feature module cannot open a transaction at all,
// and the step it opens here is `@NodeCore`.

extension NodeStore {
    /// One step on the core: `body` gets the transaction (`StoreStep`), which commits when it
    /// returns (synced unless `syncing` is false and nothing durable was written); what it left
    /// for after the commit runs then.
    @NodeCore
    package func step<T>(syncing: Bool = true, _ body: (StoreStep) throws -> T) throws -> T {
        try batch(syncing: syncing, body)
    }

    /// A step from a thread that is not the core, which waits for the core to run it: only for
    /// work before a node's services run (the start-up checks in `NodeRuntime.init`, a feature's
    /// load at init) and for synchronous drivers outside a node (`NodeHarness`). Traps on the core.
    package func stepWaiting<T>(syncing: Bool = true, _ body: sending (StoreStep) throws -> T) throws -> T {
        try NodeCore.blocking { try self.batch(syncing: syncing, body) }
    }
}
