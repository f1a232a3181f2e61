import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// The control-socket methods of the friends flow (documented in Protocol/control.md).
extension FriendService {
    func describe(_ c: Contact, _ r: StoreReading) -> JSONValue {
        let key = c.key
        let online = peers.link(to: key) != nil
        var via: JSONValue = .null
        if online, peers.isRelayed(key) {
            via = .string("relay")
        } else if online {
            let host = peers.remoteAddress(of: key)?.ipAddress ?? ""
            let lan = health.read("read the LAN sightings", or: []) { try r.sightings(since: now() - 60_000) }.contains { $0.publicKey == c.publicKey && $0.host == host }
            via = .string(lan ? "lan" : "direct")
        }
        // What the friend shares of its health (Protocol/bedtime.md "Health in presence"): null
        // when it does not share, or is offline.
        let shared = online ? health.read("read a friend's health", or: nil) { try r.friendHealth(key) } : nil
        return .object([
            "health": shared.map { .int(Int64($0.health)) } ?? .null,
            "state": shared.map { .string(HealthPool.State(health: $0.health).rawValue) } ?? .null,
            "id": .string(NodeID(publicKey: key).canonical),
            "name": .string(c.displayName),
            "nickname": health.read("read a nickname", or: nil) { try r.nickname(key) }.map(JSONValue.string) ?? .null,
            "relationship": .string(c.relationship.rawValue),
            "online": .bool(online),
            "status": online ? .string(c.presence ?? "idle") : .string("offline"),
            "via": via,
            "last_seen": JSONValue.iso(online ? now() : c.lastSeenMs),
            "message": c.requestMessage.map(JSONValue.string) ?? .null,
            "requested_at": JSONValue.iso(c.requestedAtMs),
            "friend_since": JSONValue.iso(c.friendSinceMs),
            "relay": health.read("read a peer's relay", or: nil) { try r.peerRelay(key) }.map {
                .string(RelayAddress(id: NodeID(publicKey: $0.publicKey), host: $0.host, port: $0.port).description)
            } ?? .null,
        ])
    }

    /// Registers the friend, name, peers and discoverability methods.
    nonisolated public func registerControlMethods(on router: ControlRouter, discoverable: DiscoverableSetting) {
        router.registerOnCore(in: store, publishing: events, "friend.request") { [self] params, step in
            // The ID may be a share code ("tandem:ID?relay=RELAY@host:port"); --relay names one too.
            guard let idText = params["id"]?.stringValue else {
                throw NodeError.invalidArgument("missing parameter 'id'")
            }
            let code: ShareCode
            do {
                code = try ShareCode(parsing: idText)
            } catch {
                throw NodeError.invalidArgument("'\(idText)' is not a Tandem ID or share code: \(error)")
            }
            let key = code.id.publicKey
            var relay = code.relay
            if let r = params["relay"]?.stringValue, !r.isEmpty {
                do { relay = try RelayAddress(parsing: r) } catch {
                    throw NodeError.invalidArgument("'\(r)' is not a relay address: \(error)")
                }
            }
            var address: HostPort?
            if let addr = params["addr"]?.stringValue, !addr.isEmpty {
                let (h, p) = try TandemNet.HostPort.parse(addr, defaultHost: "127.0.0.1")
                guard p > 0 else { throw NodeError.invalidArgument("--addr needs a port") }
                address = HostPort(host: h, port: p)
            }
            let c = try requestNow(key, message: params["message"]?.stringValue ?? "", address: address, relay: relay, step)
            return describe(c, step)
        }
        router.registerOnCore("friend.requests") { [self] _ in
            .object([
                "received": .array(try store.contacts([.pending]).map { describe($0, store) }),
                "sent": .array(try store.contacts([.requested]).map { describe($0, store) }),
            ])
        }
        router.registerOnCore(in: store, publishing: events, "friend.accept") { [self] params, step in describe(try acceptNow(try ContactNames.resolve(params, among: [.pending], in: step, anyID: true), step), step) }
        router.registerOnCore(in: store, publishing: events, "friend.decline") { [self] params, step in
            let key = try ContactNames.resolve(params, among: [.pending], in: step, anyID: true)
            try declineNow(key, step)
            return .object(["id": .string(NodeID(publicKey: key).canonical), "declined": true])
        }
        router.registerOnCore(in: store, publishing: events, "friend.remove") { [self] params, step in
            let key = try ContactNames.resolve(params, among: [.friend, .requested], in: step, anyID: true)
            try removeNow(key, step)
            return .object(["id": .string(NodeID(publicKey: key).canonical), "removed": true])
        }
        router.registerOnCore(in: store, publishing: events, "friend.block") { [self] params, step in
            let key = try ContactNames.resolve(params, among: [.friend, .pending, .requested, .none], in: step, anyID: true)
            try blockNow(key, step)
            return .object(["id": .string(NodeID(publicKey: key).canonical), "blocked": true])
        }
        router.registerOnCore(in: store, publishing: events, "friend.unblock") { [self] params, step in
            let key = try ContactNames.resolve(params, among: [.blocked], in: step, anyID: true)
            guard try unblockNow(key, step) else { throw NodeError.nothingToActOn("that ID is not blocked") }
            return .object(["id": .string(NodeID(publicKey: key).canonical), "blocked": false])
        }
        router.registerOnCore("friend.list") { [self] _ in
            .object(["friends": .array(try store.contacts([.friend]).map { describe($0, store) }),
                     "blocked": .array(try store.contacts([.blocked]).map { .string(NodeID(publicKey: $0.key).canonical) })])
        }
        router.registerOnCore(in: store, publishing: events, "friend.nick") { [self] params, step in
            // A local name for a friend (or a pending or requested contact); "" removes it.
            let key = try ContactNames.resolve(params, among: [.friend, .pending, .requested], in: step)
            guard let text = params["nickname"]?.stringValue else { throw NodeError.invalidArgument("missing parameter 'nickname'") }
            let nick = text.trimmingCharacters(in: .whitespaces).isEmpty ? nil : try ContactNames.checkNickname(text)
            if let nick {
                let clash = try step.nicknames().contains { $0.key != Data(key) && $0.value.caseInsensitiveCompare(nick) == .orderedSame }
                guard !clash else { throw NodeError.invalidArgument("another contact already has the nickname '\(nick.terminalSafe)'") }
            }
            try step.setNickname(key, nick)
            guard let c = try step.contact(key) else { throw NodeError.nothingToActOn("that contact is gone") }
            return describe(c, step)
        }
        router.registerOnCore("name.get") { [self] _ in .object(["name": .string(displayName)]) }
        router.registerOnCore(in: store, publishing: events, "name.set") { [self] params, step in
            guard let name = params["name"]?.stringValue else { throw NodeError.invalidArgument("missing parameter 'name'") }
            try setNameNow(name, step)
            return .object(["name": .string(name)])
        }
        router.registerOnCore("peers.list") { [self] _ in
            let friends = Set(try store.friendKeys().map { Data($0) })
            let list = try store.sightings().map { s -> JSONValue in
                .object([
                    "id": .string(NodeID(publicKey: Array(s.publicKey)).canonical),
                    "name": s.displayName.map(JSONValue.string) ?? .null,
                    "address": .string("\(s.host):\(s.port)"),
                    "last_seen": JSONValue.iso(s.lastSeenMs),
                    "friend": .bool(friends.contains(s.publicKey)),
                ])
            }
            return .object(["peers": .array(list)])
        }
        router.registerOnCore("discoverable.get") { _ in
            .object(["mode": .string(discoverable.mode.rawValue), "discoverable": .bool(discoverable.isDiscoverable)])
        }
        router.registerOnCore(in: store, publishing: events, "discoverable.set") { params, step in
            guard let text = params["mode"]?.stringValue, let mode = DiscoverableSetting.Mode(rawValue: text) else {
                throw NodeError.invalidArgument("mode must be on, off or auto")
            }
            try discoverable.set(mode, step)
            return .object(["mode": .string(mode.rawValue), "discoverable": .bool(discoverable.isDiscoverable(step))])
        }
    }
}

/// Whether the node sends open beacons: `on`, `off`, or `auto` (on until the first friend is added).
@NodeCore
public final class DiscoverableSetting: Sendable {
    public enum Mode: String, Sendable { case on, off, auto }
    private let store: NodeStore
    private let signals: NodeSignals
    private let health: StoreHealth

    package nonisolated init(store: NodeStore, signals: NodeSignals, health: StoreHealth) {
        self.store = store
        self.signals = signals
        self.health = health
    }

    public var mode: Mode { mode(store) }
    public var isDiscoverable: Bool { isDiscoverable(store) }

    /// The setting as `r` (a step being built, or the store) has it.
    func mode(_ r: StoreReading) -> Mode {
        health.read("read the discoverable setting", or: nil) { try r.setting("discoverable") }.flatMap(Mode.init(rawValue:)) ?? .auto
    }

    func isDiscoverable(_ r: StoreReading) -> Bool {
        switch mode(r) {
        case .on: return true
        case .off: return false
        case .auto: return health.read("read the friends", or: []) { try r.friendKeys() }.isEmpty
        }
    }

    public func set(_ mode: Mode, _ step: StoreStep) throws {
        try step.setSetting("discoverable", mode.rawValue)
        step.afterCommit { [signals] in signals.post(.discoverableChanged) }
    }
}
