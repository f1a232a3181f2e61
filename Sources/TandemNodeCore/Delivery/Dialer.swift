import Logging
import NIOCore
import TandemNet
import TandemProtocol
import TandemStore

/// How a node reaches a peer for its outbox: the link up now, else the addresses the dialling
/// policy orders (Protocol/README.md 12.8) — addresses the user typed, LAN sightings, addresses the
/// peer was observed at, then at most two it merely claimed (a claimed DNS name only when it
/// resolves to a global address) — then a tunnel through its home relay; or, when that relay says
/// the peer is offline, its mailbox there.
package struct Dialer: OutboxTransport {
    let store: NodeStore
    let peers: PeerManager
    let relays: RelayClient
    let health: StoreHealth
    let logger: Logger
    package var connectTimeout: TimeAmount = .seconds(3)

    package init(store: NodeStore, peers: PeerManager, relays: RelayClient, health: StoreHealth, logger: Logger) {
        (self.store, self.peers, self.relays, self.health, self.logger) = (store, peers, relays, health, logger)
    }

    package func link(to key: [UInt8]) -> OutboxLink? { peers.link(to: key) }

    package func dial(_ key: [UInt8]) async -> DialOutcome { await dial(key, lanOnly: false) }

    /// `lanOnly`: only addresses on this machine or a private network, never a relay (backups'
    /// `--lan-only`).
    package func dial(_ key: [UInt8], lanOnly: Bool) async -> DialOutcome {
        let (known, storedRelay) = await NodeCore.run {
            (health.read("read a peer's addresses", or: []) { try store.addresses(key) },
             health.read("read a peer's relay", or: nil) { try store.peerRelay(key) })
        }
        let relay = lanOnly ? nil : storedRelay
        let candidates = DialPolicy.order(known.map {
            DialPolicy.Candidate(host: $0.host, port: $0.port, source: AddressSource(stored: $0.source))
        }).filter { !lanOnly || Self.isLocal($0.host) }
        for a in candidates {
            var host = a.host
            if a.source == .claimed, AddressScope(host: host) == .name {
                guard let resolved = Self.resolveGlobal(host, port: a.port) else {
                    logger.debug("claimed name not dialled", metadata: ["peer": "\(NodeID(publicKey: key).short)", "host": "\(host)"])
                    continue
                }
                host = resolved
            }
            do {
                return .link(try await peers.connect(to: key, host: host, port: a.port, timeout: connectTimeout))
            } catch {
                logger.debug("dial failed", metadata: ["peer": "\(NodeID(publicKey: key).short)", "address": "\(host):\(a.port)",
                                                       "error": "\(error)"])
            }
        }
        if let r = relay {
            let address = RelayAddress(id: NodeID(publicKey: r.publicKey), host: r.host, port: r.port)
            do {
                return .link(try await relays.openTunnel(to: key, via: address))
            } catch is RelayClient.Offline {
                return .offline(relays.preferredAddress(of: address))
            } catch {
                logger.debug("tunnel failed", metadata: ["peer": "\(NodeID(publicKey: key).short)", "relay": "\(address)",
                                                         "error": "\(error)"])
            }
        }
        return .unreachable
    }

    package func deposit(_ envelopes: [Envelope], via relay: RelayAddress) async throws -> [[UInt8]] {
        try await relays.deposit(envelopes, via: relay)
    }

    /// On this machine or a private network (loopback, RFC 1918 / ULA, link-local).
    package static func isLocal(_ host: String) -> Bool {
        [.loopback, .privateNetwork, .linkLocal].contains(AddressScope(host: host))
    }

    /// The first address a DNS name resolves to, when it is global (a claimed name must not lead
    /// the node to loopback or a private network).
    static func resolveGlobal(_ host: String, port: Int) -> String? {
        guard let address = try? SocketAddress.makeAddressResolvingHost(host, port: port), let ip = address.ipAddress,  // unresolvable: no address
              AddressScope(host: ip) == .global else { return nil }
        return ip
    }
}
