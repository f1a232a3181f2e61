import NIOCore
import TandemNet
import TandemProtocol

/// What the relay's frame handling needs of an authenticated client link: its key, sending and
/// closing. A `PeerLink` in production; a recording link in `RelayHarness`, so that the handlers
/// (registration, tunnels, mail) run without sockets.
public protocol RelayClientLink: AnyObject, Sendable {
    /// The client's proven key (nil before the handshake finishes).
    var remotePublicKey: [UInt8]? { get }
    /// Signs a frame as the relay and sends it to the client.
    func sendSigned(type: MessageType, payload: [UInt8])
    /// Sends an envelope as it is.
    func sendEnvelope(_ envelope: Envelope)
    /// Sends a frame, then closes the link once it is written (RELAY_GOODBYE).
    func sendThenClose(type: MessageType, payload: [UInt8])
    func close()
}

extension PeerLink: RelayClientLink {
    public func sendSigned(type: MessageType, payload: [UInt8]) {
        send(type: type, payload: payload)
    }

    public func sendEnvelope(_ envelope: Envelope) {
        send(envelope)
    }

    public func sendThenClose(type: MessageType, payload: [UInt8]) {
        send(type: type, payload: payload).whenComplete { [self] _ in close() }
    }
}
