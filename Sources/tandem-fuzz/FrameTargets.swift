import Foundation
import NIOCore
import Sodium
import TandemNet
import TandemProtocol

// The "frames" target (the default): the decoders a peer reaches before (box-stream) and after
// (frames) the handshake.

extension FuzzTarget {
    static let frames = FuzzTarget(
        name: "frames",
        summary: "frame decoder + verifier, box-stream decoder and reader (raw, sealed, forged)",
        maximumLength: 70_000,
        shortRunShare: 4,
        run: { FrameTargets.run(&$0) })
}

enum FrameTargets {
    static func run(_ input: inout FuzzInput) {
        switch input.u8() % 5 {
        case 0: rawFrames(&input)
        case 1: signedFrames(&input)
        case 2: rawBoxStream(&input)
        case 3: sealedBoxStream(&input)
        default: forgedBoxHeader(&input)
        }
    }

    // MARK: splitting

    /// Chunk lengths for feeding `total` bytes: up to 8 lengths from the input, the last chunk
    /// takes what is left.
    static func splits(_ input: inout FuzzInput) -> [Int] {
        let count = Int(input.u8() % 9)
        return (0..<count).map { _ in input.u16() % 4200 }
    }

    /// Feeds `stream` in the given chunks, calling `drain` after each append (as a channel
    /// handler does after each read).
    static func feed(_ stream: [UInt8], splits: [Int], _ drain: (inout ByteBuffer) -> Bool) {
        var buffer = ByteBufferAllocator().buffer(capacity: 0)
        var offset = 0
        var chunks = splits
        chunks.append(stream.count)
        for n in chunks where offset < stream.count {
            let end = min(stream.count, offset + n)
            buffer.writeBytes(stream[offset..<end])
            offset = end
            guard drain(&buffer) else { return }
            buffer.discardReadBytes()
        }
    }

    // MARK: frames

    /// Random bytes through FrameDecoder → FrameVerifier (parse, signature, rules).
    static func rawFrames(_ input: inout FuzzInput) {
        let maximum = input.u8() < 128 ? TandemConstants.maximumEnvelopeLength : 1 + input.u16()
        let parts = splits(&input)
        decodeAndVerify(input.rest(), splits: parts, maximum: maximum, expectAccepted: nil)
    }

    /// Validly signed envelopes with fuzzer-chosen fields, then corrupted per the fuzzer: reaches
    /// the rules after the signature check (recipient, clock, replay window, type).
    static func signedFrames(_ input: inout FuzzInput) {
        var stream: [UInt8] = []
        var envelopes: [Envelope] = []
        let count = Int(input.u8() % 4) + 1
        for _ in 0..<count {
            // 0xFF: a link-authenticated type (README 5.4), accepted only from the link's peer.
            let typeByte = input.u8()
            let type = typeByte == 0xFF ? MessageType.backupPiece : MessageType(rawValue: UInt16(typeByte % 5))
            let recipient = input.u8() % 8 == 0 ? FuzzKeys.author.publicKey : FuzzKeys.local.publicKey
            // createdAt around the receiver's clock: in the future, in the window, stale.
            let skew = Int64(Int16(truncatingIfNeeded: input.u16())) * 60_000
            let createdAt = UInt64(max(0, Int64(FuzzKeys.now) + skew))
            let idByte = input.u8()
            let id = MessageID(bytes: [UInt8](repeating: idByte % 4, count: 16))
            let payload = input.take(Int(input.u8()))
            // A type that may go link-authenticated goes unsigned half the time (README 5.4).
            let envelope = type.mayBeLinkAuthenticated && input.bool()
                ? Envelope.unsigned(type: type, messageID: id, author: FuzzKeys.author.publicKey,
                                    recipient: recipient, createdAt: createdAt, payload: payload)
                : Envelope.sign(type: type, messageID: id, author: FuzzKeys.author,
                                recipient: recipient, createdAt: createdAt, payload: payload)
            // Invariants of the codec itself.
            let byLink = type.isLinkAuthenticated || envelope.needsSignatureOffLink
            guard let parsed = try? Envelope.parse(envelope.bytes), parsed == envelope,
                  parsed.isAuthentic(onLinkFrom: FuzzKeys.author.publicKey),
                  !parsed.isAuthentic(onLinkFrom: FuzzKeys.local.publicKey) || !byLink,
                  !byLink || !parsed.isAuthentic(onLinkFrom: nil),
                  parsed.signed(by: FuzzKeys.author).isAuthentic(onLinkFrom: nil) || type.isLinkAuthenticated else {
                fatalError("a freshly signed envelope does not parse back to itself")
            }
            envelopes.append(envelope)
            stream += envelope.frameBytes
        }
        // Corruptions: (position, xor) pairs; then maybe truncate.
        let flips = Int(input.u8() % 4)
        for _ in 0..<flips where !stream.isEmpty {
            let position = input.u16() % stream.count
            stream[position] ^= max(1, input.u8())
        }
        if input.u8() % 4 == 0, !stream.isEmpty { stream.removeLast(input.u16() % stream.count) }
        let parts = splits(&input)
        decodeAndVerify(stream, splits: parts, maximum: TandemConstants.maximumEnvelopeLength,
                        expectAccepted: flips == 0 ? envelopes : nil)
    }

    /// Runs the receive path of a link on a byte stream.
    static func decodeAndVerify(_ stream: [UInt8], splits: [Int], maximum: Int, expectAccepted: [Envelope]?) {
        let decoder = FrameDecoder(maximumEnvelopeLength: maximum)
        var verifier = FrameVerifier(localPublicKey: FuzzKeys.local.publicKey,
                                     replayCache: ReplayCache(capacity: 3))
        var decoded: [[UInt8]] = []
        feed(stream, splits: splits) { buffer in
            while true {
                let envelope: [UInt8]?
                do {
                    envelope = try decoder.read(&buffer)
                } catch {
                    guard let rejection = error as? FrameRejection, rejection.code == .frameTooLarge else {
                        fatalError("FrameDecoder threw something other than FRAME_TOO_LARGE: \(error)")
                    }
                    return false
                }
                guard let bytes = envelope else { return true }
                guard bytes.count <= maximum else { fatalError("FrameDecoder returned an envelope over the limit") }
                decoded.append(bytes)
                // Every stream comes on a link from the fuzz author.
                switch verifier.verify(bytes, linkPeer: FuzzKeys.author.publicKey, now: FuzzKeys.now) {
                case .success(let accepted):
                    guard accepted.isAuthentic(onLinkFrom: FuzzKeys.author.publicKey), accepted.recipient == FuzzKeys.local.publicKey,
                          !(accepted.type.isLinkAuthenticated || accepted.needsSignatureOffLink)
                            || accepted.author == FuzzKeys.author.publicKey else {
                        fatalError("FrameVerifier accepted an envelope that breaks its rules")
                    }
                    switch accepted.type {
                    case .ping: _ = try? Tandem_V1_Ping(serializedBytes: accepted.payload)
                    case .pong: _ = try? Tandem_V1_Pong(serializedBytes: accepted.payload)
                    case .error: _ = try? Tandem_V1_Error(serializedBytes: accepted.payload)
                    default: break
                    }
                case .failure(let rejection):
                    // What a node sends back; must never trap.
                    _ = FrameVerifier.errorReply(to: rejection, from: FuzzKeys.local,
                                                 linkPeer: FuzzKeys.author.publicKey, now: FuzzKeys.now)
                }
            }
        }
        if let expected = expectAccepted, stream.count == expected.reduce(0, { $0 + 4 + $1.bytes.count }) {
            guard decoded == expected.map(\.bytes) else {
                fatalError("FrameDecoder did not return the frames that were written")
            }
        }
    }

    // MARK: box-stream

    /// Random bytes into the decoder (they cannot authenticate; exercises the header path and
    /// buffering).
    static func rawBoxStream(_ input: inout FuzzInput) {
        let parts = splits(&input)
        decodeBoxes(input.rest(), splits: parts)
    }

    /// Boxes sealed by the encoder, then corrupted per the fuzzer. Without corruption the
    /// plaintext must come back unchanged, in order, followed by the goodbye.
    static func sealedBoxStream(_ input: inout FuzzInput) {
        var encoder = BoxStreamEncoder(key: FuzzKeys.boxKey, nonce: FuzzKeys.boxNonce)
        var out = ByteBufferAllocator().buffer(capacity: 0)
        var plaintext: [UInt8] = []
        let messages = Int(input.u8() % 4)
        for _ in 0..<messages {
            // Up to 9000 bytes: more than one box.
            let length = input.u16() % 9000
            let fill = input.u8()
            let message = (0..<length).map { UInt8(truncatingIfNeeded: $0) &+ fill }
            plaintext += message
            encoder.seal(message, into: &out)
        }
        let goodbye = input.u8() % 2 == 0
        if goodbye { encoder.goodbye(into: &out) }
        var stream = out.readBytes(length: out.readableBytes) ?? []
        let flips = Int(input.u8() % 3)
        for _ in 0..<flips where !stream.isEmpty {
            let position = input.u16() % stream.count
            stream[position] ^= max(1, input.u8())
        }
        var truncated = false
        if input.u8() % 4 == 0, !stream.isEmpty {
            stream.removeLast(input.u16() % stream.count)
            truncated = true
        }
        let trailing = input.u8() % 4 == 0 ? input.take(Int(input.u8())) : []
        stream += trailing
        let parts = splits(&input)
        let (received, sawGoodbye, error) = decodeBoxes(stream, splits: parts)
        if flips == 0, !truncated {
            guard received == plaintext, sawGoodbye == goodbye else {
                fatalError("box-stream did not return what was sealed")
            }
            // An independent reading of the same bytes (plain SecretBox calls, byte-array nonces).
            let reference = referenceOpen(stream)
            guard reference.plaintext == plaintext, reference.goodbye == goodbye else {
                fatalError("box-stream does not match the reference reading")
            }
            if goodbye, !trailing.isEmpty, error == nil {
                fatalError("box-stream accepted data after goodbye")
            }
            if !goodbye, trailing.isEmpty, error != nil {
                fatalError("box-stream rejected an intact stream: \(error!)")
            }
        }
    }

    /// A header sealed with the right key and nonce but a fuzzer-chosen plaintext (length and
    /// body MAC), then fuzzer bytes: exercises the length limit and goodbye detection.
    static func forgedBoxHeader(_ input: inout FuzzInput) {
        var plain = input.take(18)
        plain += [UInt8](repeating: 0, count: 18 - plain.count)
        let header = try! SecretBox.seal(plain, nonce: FuzzKeys.boxNonce, key: FuzzKeys.boxKey)
        let parts = splits(&input)
        decodeBoxes(header + input.rest(), splits: parts)
    }

    /// Reads a box-stream the slow, obvious way: the spec's layout with SecretBox.open and a
    /// 24-byte big-endian counter kept as bytes.
    static func referenceOpen(_ stream: [UInt8]) -> (plaintext: [UInt8], goodbye: Bool) {
        var nonce = FuzzKeys.boxNonce
        func increment() {
            var i = 23
            while i >= 0 {
                nonce[i] &+= 1
                if nonce[i] != 0 { return }
                i -= 1
            }
        }
        var out: [UInt8] = []
        var offset = 0
        while offset + 34 <= stream.count {
            guard let header = SecretBox.open(Array(stream[offset..<offset + 34]), nonce: nonce, key: FuzzKeys.boxKey) else {
                return (out, false)
            }
            if header.allSatisfy({ $0 == 0 }) { return (out, true) }
            let length = Int(header[0]) << 8 | Int(header[1])
            increment()
            guard offset + 34 + length <= stream.count,
                  let body = SecretBox.open(Array(header[2...]) + stream[(offset + 34)..<(offset + 34 + length)],
                                            nonce: nonce, key: FuzzKeys.boxKey) else { return (out, false) }
            increment()
            out += body
            offset += 34 + length
        }
        return (out, false)
    }

    /// Runs a box-stream through one of the two receive paths: the message-at-a-time decoder
    /// over an accumulating buffer, or BoxStreamReader fed each chunk as its own read (what
    /// SecureChannelHandler does). Both must agree on what they return.
    @discardableResult
    static func decodeBoxes(_ stream: [UInt8], splits: [Int]) -> ([UInt8], Bool, String?) {
        let viaDecoder = decodeOneByOne(stream, splits: splits)
        let viaReader = decodeWithReader(stream, splits: splits)
        guard viaDecoder.0 == viaReader.0, viaDecoder.1 == viaReader.1, viaDecoder.2 == viaReader.2 else {
            fatalError("BoxStreamReader and BoxStreamDecoder.read disagree: \(viaDecoder.2 ?? "ok") vs \(viaReader.2 ?? "ok")")
        }
        return viaDecoder
    }

    static func decodeOneByOne(_ stream: [UInt8], splits: [Int]) -> ([UInt8], Bool, String?) {
        var decoder = BoxStreamDecoder(key: FuzzKeys.boxKey, nonce: FuzzKeys.boxNonce)
        var received: [UInt8] = []
        var goodbye = false
        var failure: String?
        feed(stream, splits: splits) { buffer in
            while true {
                do {
                    switch try decoder.read(&buffer) {
                    case .none:
                        return true
                    case .goodbye:
                        goodbye = true
                    case .data(var body):
                        guard body.readableBytes <= BoxStream.maximumBodyLength else {
                            fatalError("box-stream returned a body over the limit")
                        }
                        received += body.readBytes(length: body.readableBytes) ?? []
                    }
                } catch let error as BoxStreamError {
                    failure = error.description
                    return false
                } catch {
                    fatalError("box-stream threw an unexpected error: \(error)")
                }
            }
        }
        return (received, goodbye, failure)
    }

    static func decodeWithReader(_ stream: [UInt8], splits: [Int]) -> ([UInt8], Bool, String?) {
        var reader = BoxStreamReader(key: FuzzKeys.boxKey, nonce: FuzzKeys.boxNonce)
        var received: [UInt8] = []
        var goodbye = false
        var offset = 0
        for n in splits + [stream.count] where offset < stream.count {
            let end = min(stream.count, offset + n)
            var incoming = ByteBufferAllocator().buffer(bytes: stream[offset..<end])
            offset = end
            var plaintext = ByteBufferAllocator().buffer(capacity: incoming.readableBytes + reader.bufferedBytes)
            do {
                let status = try reader.read(&incoming, into: &plaintext)
                guard reader.bufferedBytes <= BoxStream.headerLength + BoxStream.maximumBodyLength else {
                    fatalError("BoxStreamReader holds more than one box")
                }
                guard plaintext.readableBytes <= end else { fatalError("more plaintext than ciphertext") }
                received += plaintext.readBytes(length: plaintext.readableBytes) ?? []
                if status == .goodbye {
                    goodbye = true
                    // What follows a goodbye is an error, as the decoder says.
                    if incoming.readableBytes > 0 || offset < stream.count {
                        return (received, goodbye, "box-stream data after goodbye")
                    }
                    return (received, goodbye, nil)
                }
                guard incoming.readableBytes == 0 else { fatalError("BoxStreamReader left bytes of a read unconsumed") }
            } catch let error as BoxStreamError {
                received += plaintext.readBytes(length: plaintext.readableBytes) ?? []
                return (received, goodbye, error.description)
            } catch {
                fatalError("BoxStreamReader threw an unexpected error: \(error)")
            }
        }
        return (received, goodbye, nil)
    }
}
