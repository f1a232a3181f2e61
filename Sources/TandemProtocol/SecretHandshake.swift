import NIOCore
import Sodium

/// The keys a finished handshake yields for box-stream, one direction each. The keys are held in
/// guarded memory and wiped when the last reference goes (hand them to the box-stream as they are).
public struct SessionKeys: Sendable {
    public let encryptionKey: SecureBytes
    public let encryptNonce: [UInt8]
    public let decryptionKey: SecureBytes
    public let decryptNonce: [UInt8]
    /// Copies of the keys on the ordinary heap (for tests and vectors; the caller wipes them).
    public var encryptKey: [UInt8] { encryptionKey.exposedCopy }
    public var decryptKey: [UInt8] { decryptionKey.exposedCopy }
    /// The peer's long-term Ed25519 public key, proven by the handshake.
    public let remotePublicKey: [UInt8]
}

/// Why a handshake failed. A struct around a private enum so new cases do not break callers.
public struct HandshakeError: Error, CustomStringConvertible, Equatable, Sendable {
    enum Reason: Equatable, Sendable {
        case wrongNetworkKey
        case badClientAuthentication
        case badServerAcceptance
        case weakKey
        case unexpectedData
        case alreadyFinished
    }

    let reason: Reason

    public static let wrongNetworkKey = HandshakeError(reason: .wrongNetworkKey)
    public static let badClientAuthentication = HandshakeError(reason: .badClientAuthentication)
    public static let badServerAcceptance = HandshakeError(reason: .badServerAcceptance)
    public static let weakKey = HandshakeError(reason: .weakKey)
    public static let unexpectedData = HandshakeError(reason: .unexpectedData)
    public static let alreadyFinished = HandshakeError(reason: .alreadyFinished)

    public var description: String {
        switch reason {
        case .wrongNetworkKey: return "peer's challenge does not match the Tandem network key (not a Tandem node?)"
        case .badClientAuthentication: return "client authentication failed (bad box or signature)"
        case .badServerAcceptance: return "server acceptance failed (wrong server key, bad box or signature)"
        case .weakKey: return "peer sent a weak ephemeral key"
        case .unexpectedData: return "peer sent data before the handshake finished"
        case .alreadyFinished: return "handshake already finished"
        }
    }
}

/// The Secret Handshake (Tarr's 4-message authenticated key exchange, as specified for
/// Secure Scuttlebutt), parameterised with a network key. Pure: bytes in, actions out.
///
/// Client: `start()` returns message 1; feed the server's bytes to `receive(_:)`.
/// Server: feed the client's bytes to `receive(_:)`.
public struct SecretHandshake {
    public static let challengeLength = 64
    public static let clientAuthLength = 112
    public static let serverAcceptLength = 80

    public enum Action {
        /// Not enough bytes yet.
        case needMoreData
        /// Send these bytes to the peer and keep feeding.
        case send([UInt8])
        /// The handshake is done. Send `send` (if any) first; then switch to box-stream
        /// with `keys`. Bytes left in the buffer belong to the box-stream.
        case complete(send: [UInt8]?, keys: SessionKeys)
    }

    private enum State {
        case clientIdle
        case clientAwaitingChallenge
        case clientAwaitingAcceptance(ClientAwaitingAcceptance)
        case serverAwaitingChallenge
        case serverAwaitingAuthentication(ServerAwaitingAuthentication)
        case finished
    }

    private struct ClientAwaitingAcceptance {
        var remoteEphemeral: [UInt8]
        var ab: SecretBytes
        var aB: SecretBytes
        var hashAB: [UInt8]
        /// sig_A ‖ A_pk, what the server signs back.
        var hello: [UInt8]
    }

    private struct ServerAwaitingAuthentication {
        var remoteEphemeral: [UInt8]
        var remoteHMAC: [UInt8]
        var ab: SecretBytes
        var hashAB: [UInt8]
    }

    private var state: State
    private let networkKey: [UInt8]
    private let identity: SigningKeyPair
    private let serverPublicKey: [UInt8]?
    private let ephemeralPublic: [UInt8]
    private let ephemeralSecret: SecretBytes
    private let localHMAC: [UInt8]

    /// A client that expects the server to prove `serverPublicKey`.
    public init(clientIdentity: SigningKeyPair, serverPublicKey: [UInt8],
                networkKey: [UInt8] = TandemConstants.networkKey,
                ephemeralSecret: [UInt8]? = nil) {
        self.identity = clientIdentity
        self.serverPublicKey = serverPublicKey
        self.networkKey = networkKey
        (ephemeralPublic, self.ephemeralSecret) = Self.ephemeral(ephemeralSecret)
        self.localHMAC = Hash.hmacSHA512_256(key: networkKey, message: ephemeralPublic)
        self.state = .clientIdle
    }

    /// A server; the client's identity is learnt (and proven) during the handshake.
    public init(serverIdentity: SigningKeyPair,
                networkKey: [UInt8] = TandemConstants.networkKey,
                ephemeralSecret: [UInt8]? = nil) {
        self.identity = serverIdentity
        self.serverPublicKey = nil
        self.networkKey = networkKey
        (ephemeralPublic, self.ephemeralSecret) = Self.ephemeral(ephemeralSecret)
        self.localHMAC = Hash.hmacSHA512_256(key: networkKey, message: ephemeralPublic)
        self.state = .serverAwaitingChallenge
    }

    private static func ephemeral(_ fixed: [UInt8]?) -> ([UInt8], SecretBytes) {
        if let fixed {
            return (X25519.publicKey(secretKey: fixed), SecretBytes(fixed))
        }
        let kp = X25519.keyPair()
        return (kp.publicKey, kp.secretKey)
    }

    /// The client's first message (64 bytes). Nil for a server or when already started.
    public mutating func start() -> [UInt8]? {
        switch state {
        case .clientIdle:
            state = .clientAwaitingChallenge
            return localHMAC + ephemeralPublic
        case .clientAwaitingChallenge, .clientAwaitingAcceptance, .serverAwaitingChallenge,
             .serverAwaitingAuthentication, .finished:
            return nil
        }
    }

    public var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }

    /// Consumes as many bytes as the current step needs. Reads nothing and returns
    /// `.needMoreData` when the step's message is incomplete. Throws on any failure;
    /// the connection must then be closed without reply.
    public mutating func receive(_ buffer: inout ByteBuffer) throws -> Action {
        switch state {
        case .clientIdle:
            throw HandshakeError.unexpectedData
        case .clientAwaitingChallenge:
            guard let msg = buffer.readBytes(length: Self.challengeLength) else { return .needMoreData }
            return try clientReceiveChallenge(msg)
        case .clientAwaitingAcceptance(let s):
            guard let msg = buffer.readBytes(length: Self.serverAcceptLength) else { return .needMoreData }
            return try clientReceiveAcceptance(msg, s)
        case .serverAwaitingChallenge:
            guard let msg = buffer.readBytes(length: Self.challengeLength) else { return .needMoreData }
            return try serverReceiveChallenge(msg)
        case .serverAwaitingAuthentication(let s):
            guard let msg = buffer.readBytes(length: Self.clientAuthLength) else { return .needMoreData }
            return try serverReceiveAuthentication(msg, s)
        case .finished:
            throw HandshakeError.alreadyFinished
        }
    }

    // MARK: client steps

    private mutating func clientReceiveChallenge(_ msg: [UInt8]) throws -> Action {
        state = .finished // until proven otherwise
        let (hmac, remoteEphemeral) = (Array(msg[0..<32]), Array(msg[32..<64]))
        guard Hash.verifyHMACSHA512_256(tag: hmac, key: networkKey, message: remoteEphemeral) else {
            throw HandshakeError.wrongNetworkKey
        }
        let serverKey = serverPublicKey!
        do {
            let ab = try X25519.sharedSecret(secretKey: ephemeralSecret, publicKey: remoteEphemeral)
            let serverCurve = try Ed25519.publicKeyToCurve25519(serverKey)
            let aB = try X25519.sharedSecret(secretKey: ephemeralSecret, publicKey: serverCurve)
            let hashAB = Hash.sha256(ab.exposedCopy)
            let sigA = identity.sign(networkKey + serverKey + hashAB)
            let hello = sigA + identity.publicKey
            let boxKey = Hash.sha256(networkKey, ab.exposedCopy, aB.exposedCopy)
            let box = try SecretBox.seal(hello, nonce: Self.zeroNonce, key: boxKey)
            state = .clientAwaitingAcceptance(ClientAwaitingAcceptance(
                remoteEphemeral: remoteEphemeral, ab: ab, aB: aB, hashAB: hashAB, hello: hello))
            return .send(box)
        } catch is SodiumError {
            throw HandshakeError.weakKey
        }
    }

    private mutating func clientReceiveAcceptance(_ msg: [UInt8], _ s: ClientAwaitingAcceptance) throws -> Action {
        state = .finished
        let serverKey = serverPublicKey!
        let Ab: SecretBytes
        do {
            // Only the secret half is needed: converting our own public key too would cost a
            // point decompression and subgroup check per handshake for nothing.
            Ab = try X25519.sharedSecret(secretKey: identity.curve25519SecretKey(), publicKey: s.remoteEphemeral)
        } catch {
            throw HandshakeError.weakKey
        }
        var secret = Hash.sha256(networkKey, s.ab.exposedCopy, s.aB.exposedCopy, Ab.exposedCopy)
        defer { Sodium.wipe(&secret) }
        guard let sigB = SecretBox.open(msg, nonce: Self.zeroNonce, key: secret),
              Ed25519.verify(signature: sigB, message: networkKey + s.hello + s.hashAB, publicKey: serverKey)
        else {
            throw HandshakeError.badServerAcceptance
        }
        let hmacRemote = Hash.hmacSHA512_256(key: networkKey, message: s.remoteEphemeral)
        let keys = Self.sessionKeys(secret: secret, localPublic: identity.publicKey, remotePublic: serverKey,
                                    localHMAC: localHMAC, remoteHMAC: hmacRemote)
        return .complete(send: nil, keys: keys)
    }

    // MARK: server steps

    private mutating func serverReceiveChallenge(_ msg: [UInt8]) throws -> Action {
        state = .finished
        let (hmac, remoteEphemeral) = (Array(msg[0..<32]), Array(msg[32..<64]))
        guard Hash.verifyHMACSHA512_256(tag: hmac, key: networkKey, message: remoteEphemeral) else {
            throw HandshakeError.wrongNetworkKey
        }
        let ab: SecretBytes
        do {
            ab = try X25519.sharedSecret(secretKey: ephemeralSecret, publicKey: remoteEphemeral)
        } catch {
            throw HandshakeError.weakKey
        }
        state = .serverAwaitingAuthentication(ServerAwaitingAuthentication(
            remoteEphemeral: remoteEphemeral, remoteHMAC: hmac, ab: ab, hashAB: Hash.sha256(ab.exposedCopy)))
        return .send(localHMAC + ephemeralPublic)
    }

    private mutating func serverReceiveAuthentication(_ msg: [UInt8], _ s: ServerAwaitingAuthentication) throws -> Action {
        state = .finished
        let aB: SecretBytes
        do {
            aB = try X25519.sharedSecret(secretKey: identity.curve25519SecretKey(), publicKey: s.remoteEphemeral)
        } catch {
            throw HandshakeError.weakKey
        }
        var boxKey = Hash.sha256(networkKey, s.ab.exposedCopy, aB.exposedCopy)
        defer { Sodium.wipe(&boxKey) }
        guard let hello = SecretBox.open(msg, nonce: Self.zeroNonce, key: boxKey), hello.count == 96 else {
            throw HandshakeError.badClientAuthentication
        }
        let sigA = Array(hello[0..<64])
        let clientKey = Array(hello[64..<96])
        guard Ed25519.verify(signature: sigA, message: networkKey + identity.publicKey + s.hashAB, publicKey: clientKey) else {
            throw HandshakeError.badClientAuthentication
        }
        let Ab: SecretBytes
        do {
            let clientCurve = try Ed25519.publicKeyToCurve25519(clientKey)
            Ab = try X25519.sharedSecret(secretKey: ephemeralSecret, publicKey: clientCurve)
        } catch {
            throw HandshakeError.weakKey
        }
        var secret = Hash.sha256(networkKey, s.ab.exposedCopy, aB.exposedCopy, Ab.exposedCopy)
        defer { Sodium.wipe(&secret) }
        let sigB = identity.sign(networkKey + hello + s.hashAB)
        let accept = try SecretBox.seal(sigB, nonce: Self.zeroNonce, key: secret)
        let keys = Self.sessionKeys(secret: secret, localPublic: identity.publicKey, remotePublic: clientKey,
                                    localHMAC: localHMAC, remoteHMAC: s.remoteHMAC)
        return .complete(send: accept, keys: keys)
    }

    // MARK: derivation

    static let zeroNonce = [UInt8](repeating: 0, count: 24)

    /// `secret` is sha256(K ‖ ab ‖ aB ‖ Ab), the key that boxed message 4. Each side encrypts with
    /// sha256(sha256(secret) ‖ remote long-term key) and the nonce taken from the *remote*
    /// ephemeral HMAC, and decrypts with its own (Protocol/README.md, "Box-stream keys").
    static func sessionKeys(secret: [UInt8], localPublic: [UInt8], remotePublic: [UInt8],
                            localHMAC: [UInt8], remoteHMAC: [UInt8]) -> SessionKeys {
        var base = Hash.sha256(secret)
        defer { Sodium.wipe(&base) }
        var encrypt = Hash.sha256(base, remotePublic)
        var decrypt = Hash.sha256(base, localPublic)
        return SessionKeys(
            encryptionKey: SecureBytes(wipedConsuming: &encrypt),
            encryptNonce: Array(remoteHMAC[0..<24]),
            decryptionKey: SecureBytes(wipedConsuming: &decrypt),
            decryptNonce: Array(localHMAC[0..<24]),
            remotePublicKey: remotePublic)
    }
}
