import Foundation
import TandemNet
import TandemProtocol
import TandemStore

/// The control-socket methods for relays (Protocol/control.md): relay.add, relay.remove,
/// relay.list and node.share.
extension RelayClient {
    nonisolated package func registerControlMethods(on router: ControlRouter, record: any OwnContactRecord) {
        router.registerOnCore(in: store, publishing: events, "relay.add") { [self] params, step in
            guard let text = params["address"]?.stringValue else {
                throw NodeError.invalidArgument("missing parameter 'address'")
            }
            let relay: RelayAddress
            do {
                relay = try RelayAddress(parsing: text)
            } catch {
                throw NodeError.invalidArgument("'\(text)' is not a relay address: \(error)")
            }
            guard relay.id.publicKey != identity.publicKey else {
                throw NodeError.invalidArgument("that is this node's own ID, not a relay's")
            }
            let wasFirst = try step.relays().isEmpty
            let changed: Bool
            do {
                changed = try step.addRelay(relay.id.publicKey, host: relay.host, port: relay.port, nowMs: now())
            } catch let e as RelayStoreError {
                throw NodeError.invalidArgument(e.description)
            }
            if changed {
                record.recordChanged()
                disconnect(relay.id.publicKey)
                if try wasFirst || step.relays().first?.publicKey == relay.id.publicKey { try record.announceRecord(step) }
                events.emit("relay.added", ["relay": .string(relay.description)], in: step)
                poke()
            }
            return .object(["id": .string(relay.id.canonical), "address": .string(relay.description), "added": .bool(changed)])
        }
        router.registerOnCore(in: store, publishing: events, "relay.remove") { [self] params, step in
            guard let text = params["id"]?.stringValue else {
                throw NodeError.invalidArgument("missing parameter 'id'")
            }
            let key: [UInt8]
            if let r = try? RelayAddress(parsing: text) {  // not an address: an ID, below
                key = r.id.publicKey
            } else {
                do { key = try NodeID.parse(text) } catch {
                    throw NodeError.invalidArgument("'\(text)' is not a relay ID or address: \(error)")
                }
            }
            let wasHome = try step.relays().first?.publicKey == key
            guard try step.removeRelay(key) else {
                throw NodeError.nothingToActOn("that relay is not one of this node's relays (see tandem relay list)")
            }
            disconnect(key)
            record.recordChanged()
            if wasHome { try record.announceRecord(step) }
            events.emit("relay.removed", ["relay": .string(NodeID(publicKey: key).canonical)], in: step)
            return .object(["id": .string(NodeID(publicKey: key).canonical), "removed": true])
        }
        router.registerOnCore("relay.list") { [self] _ in
            .object(["relays": .array(status())])
        }
        router.registerOnCore("node.share") { [self] _ in
            let home = homeRelays().first
            let code = ShareCode(id: NodeID(publicKey: identity.publicKey), relay: home)
            return .object(["share": .string(code.description), "id": .string(code.id.canonical),
                            "relay": home.map { .string($0.description) } ?? .null])
        }
    }
}
