import NIOConcurrencyHelpers

// The relay's counters and their Prometheus text (served by MetricsServer).

/// Counters the relay exports at /metrics.
public final class RelayMetrics: Sendable {
    public struct Snapshot: Sendable {
        public var connectionsAccepted = 0
        public var refusals: [String: Int] = [:]
        public var handshakesFailed = 0
        public var tunnelsOpened = 0
        public var tunnelsRefused = 0
        public var bytesRelayed = 0
        public var mailboxStored = 0
        public var mailboxDelivered = 0
        public var mailboxRefused = 0
        public var mailboxExpired = 0
        public var idleClosed = 0
        public var registrationsFailed = 0
    }

    private let box = NIOLockedValueBox(Snapshot())
    public init() {}
    public var snapshot: Snapshot { box.withLockedValue { $0 } }
    func update(_ body: (inout Snapshot) -> Void) { box.withLockedValue(body) }
    func refused(_ reason: String) { box.withLockedValue { $0.refusals[reason, default: 0] += 1 } }
}

extension RelayServer {
    /// The Prometheus text for /metrics.
    public func renderMetrics() -> String {
        let m = metrics.snapshot
        let b = book.withLockedValue { ($0.clientCount, $0.registeredCount, $0.splicedTunnelCount, $0.tunnels.count,
                                        $0.pendingCount, $0.connectionCount, $0.mailboxJobs) }
        let depth = mailbox.depth
        var out = ""
        out += PrometheusText.gauge("tandem_relay_clients", help: "Authenticated client links.", value: b.0)
        out += PrometheusText.gauge("tandem_relay_registered_clients", help: "Clients registered here as their home relay.", value: b.1)
        out += PrometheusText.gauge("tandem_relay_tunnels", help: "Spliced tunnels.", value: b.2)
        out += PrometheusText.gauge("tandem_relay_tunnels_waiting", help: "Tunnels waiting for their ends to join.", value: b.3 - b.2)
        out += PrometheusText.gauge("tandem_relay_pending_connections", help: "Connections that have not finished the handshake or join.", value: b.4)
        out += PrometheusText.gauge("tandem_relay_connections", help: "Open connections of every kind.", value: b.5)
        out += PrometheusText.counter("tandem_relay_connections_accepted_total", help: "TCP connections accepted.", value: m.connectionsAccepted)
        out += PrometheusText.counter("tandem_relay_handshakes_failed_total", help: "Connections closed before finishing the handshake.", value: m.handshakesFailed)
        out += PrometheusText.counter("tandem_relay_refusals_total", help: "Connections and clients refused, by limit.",
                                      samples: ["connections", "pending", "clients", "clients_per_address", "tunnel_token",
                                                "tunnel_early_data", "tunnel_target_full", "mailbox_queue"].map { (["reason": $0], m.refusals[$0] ?? 0) })
        out += PrometheusText.counter("tandem_relay_tunnels_opened_total", help: "Tunnels spliced.", value: m.tunnelsOpened)
        out += PrometheusText.counter("tandem_relay_tunnels_refused_total", help: "Tunnel requests refused (offline target or limit).", value: m.tunnelsRefused)
        out += PrometheusText.counter("tandem_relay_bytes_relayed_total", help: "Bytes forwarded through tunnels.", value: m.bytesRelayed)
        out += PrometheusText.gauge("tandem_relay_mailbox_items", help: "Mail items held.", value: depth.items)
        out += PrometheusText.gauge("tandem_relay_mailbox_bytes", help: "Bytes of mail held.", value: depth.bytes)
        out += PrometheusText.counter("tandem_relay_mailbox_stored_total", help: "Mail items stored.", value: m.mailboxStored)
        out += PrometheusText.counter("tandem_relay_mailbox_delivered_total", help: "Mail items acknowledged by their recipient.", value: m.mailboxDelivered)
        out += PrometheusText.counter("tandem_relay_mailbox_refused_total", help: "Mail items refused (quota, unknown recipient, size).", value: m.mailboxRefused)
        out += PrometheusText.counter("tandem_relay_mailbox_expired_total", help: "Mail items dropped after their time-to-live.", value: m.mailboxExpired)
        out += PrometheusText.counter("tandem_relay_idle_closed_total", help: "Client links closed for idleness.", value: m.idleClosed)
        out += PrometheusText.gauge("tandem_relay_mailbox_queue", help: "Mailbox jobs queued or running.", value: b.6)
        out += PrometheusText.counter("tandem_relay_registrations_failed_total",
                                      help: "Registrations answered with RELAY_GOODBYE because the mailbox could not record them.",
                                      value: m.registrationsFailed)
        return out
    }
}
