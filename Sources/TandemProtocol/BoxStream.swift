import NIOCore
import Sodium

/// Box-stream (Secure Scuttlebutt's encrypted framing after the Secret Handshake).
///
/// Each box is a 34-byte header `secretbox(len: u16 BE ‖ body MAC, nonce n)` followed by the
/// body's ciphertext sealed with nonce n+1; the next header uses n+2. A header whose
/// plaintext is 18 zero bytes says goodbye.
public enum BoxStream {
    public static let headerLength = 34
    public static let maximumBodyLength = 4096
    static let headerPlaintextLength = 18
}

/// A 24-byte big-endian counter nonce.
struct BoxNonce {
    var bytes: [UInt8]

    init(_ bytes: [UInt8]) {
        precondition(bytes.count == 24)
        self.bytes = bytes
    }

    mutating func increment() {
        var i = 23
        while i >= 0 {
            bytes[i] &+= 1
            if bytes[i] != 0 { return }
            i -= 1
        }
    }
}

public struct BoxStreamError: Error, CustomStringConvertible, Equatable, Sendable {
    enum Reason: Equatable, Sendable {
        case headerAuthenticationFailed
        case bodyAuthenticationFailed
        case bodyTooLong(Int)
        case dataAfterGoodbye
    }

    let reason: Reason

    public var description: String {
        switch reason {
        case .headerAuthenticationFailed: return "box-stream header does not authenticate"
        case .bodyAuthenticationFailed: return "box-stream body does not authenticate"
        case .bodyTooLong(let n): return "box-stream header announces \(n) bytes (limit \(BoxStream.maximumBodyLength))"
        case .dataAfterGoodbye: return "box-stream data after goodbye"
        }
    }
}

/// Seals plaintext into boxes. Pure; writes into a caller's buffer.
public struct BoxStreamEncoder {
    private let key: [UInt8]
    private var nonce: BoxNonce
    private var nextNonce: BoxNonce
    public private(set) var saidGoodbye = false

    public init(key: [UInt8], nonce: [UInt8]) {
        precondition(key.count == 32 && nonce.count == 24)
        self.key = key
        self.nonce = BoxNonce(nonce)
        var n = BoxNonce(nonce)
        n.increment()
        self.nextNonce = n
    }

    /// Seals all readable bytes of `plaintext` (without consuming them) as boxes of at most
    /// 4096 bytes, appended to `output`. An empty plaintext produces one empty box.
    public mutating func seal(_ plaintext: ByteBuffer, into output: inout ByteBuffer) {
        precondition(!saidGoodbye, "box-stream already closed")
        plaintext.withUnsafeReadableBytes { src in
            if src.isEmpty {
                sealOne(UnsafeRawBufferPointer(rebasing: src[0..<0]), into: &output)
                return
            }
            var offset = 0
            while offset < src.count {
                let n = min(BoxStream.maximumBodyLength, src.count - offset)
                sealOne(UnsafeRawBufferPointer(rebasing: src[offset..<offset + n]), into: &output)
                offset += n
            }
        }
    }

    /// Seals raw bytes as boxes, appended to `output`.
    public mutating func seal(_ plaintext: [UInt8], into output: inout ByteBuffer) {
        var buffer = ByteBufferAllocator().buffer(capacity: plaintext.count)
        buffer.writeBytes(plaintext)
        seal(buffer, into: &output)
    }

    private mutating func sealOne(_ body: UnsafeRawBufferPointer, into output: inout ByteBuffer) {
        let total = BoxStream.headerLength + body.count
        output.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { out in
            let base = out.baseAddress!
            // Body: copy, then seal in place after the header; its MAC goes into the header.
            if body.count > 0 {
                (base + BoxStream.headerLength).copyMemory(from: body.baseAddress!, byteCount: body.count)
            }
            // Header plaintext lives at [16, 34): length (2) ‖ body MAC (16).
            base.storeBytes(of: UInt8(body.count >> 8), toByteOffset: 16, as: UInt8.self)
            base.storeBytes(of: UInt8(body.count & 0xff), toByteOffset: 17, as: UInt8.self)
            key.withUnsafeBytes { k in
                nextNonce.bytes.withUnsafeBytes { bn in
                    SecretBox.sealDetachedInPlace(base + BoxStream.headerLength, count: body.count,
                                                  mac: base + 18, nonce: bn.baseAddress!, key: k.baseAddress!)
                }
                nonce.bytes.withUnsafeBytes { hn in
                    SecretBox.sealDetachedInPlace(base + 16, count: BoxStream.headerPlaintextLength,
                                                  mac: base, nonce: hn.baseAddress!, key: k.baseAddress!)
                }
            }
            return total
        }
        nonce.increment(); nonce.increment()
        nextNonce.increment(); nextNonce.increment()
    }

    /// Appends the goodbye header. Nothing may be sealed after it.
    public mutating func goodbye(into output: inout ByteBuffer) {
        guard !saidGoodbye else { return }
        saidGoodbye = true
        let zeros = [UInt8](repeating: 0, count: BoxStream.headerPlaintextLength)
        let header = try! SecretBox.seal(zeros, nonce: nonce.bytes, key: key)
        output.writeBytes(header)
    }
}

/// Opens boxes. Pure; consumes from a caller's buffer.
public struct BoxStreamDecoder {
    public enum Message: Equatable {
        case data(ByteBuffer)
        case goodbye
    }

    private let key: [UInt8]
    private var nonce: BoxNonce
    private var nextNonce: BoxNonce
    /// A header already opened, waiting for its body: (length, MAC).
    private var pending: (length: Int, mac: [UInt8])?
    public private(set) var receivedGoodbye = false

    public init(key: [UInt8], nonce: [UInt8]) {
        precondition(key.count == 32 && nonce.count == 24)
        self.key = key
        self.nonce = BoxNonce(nonce)
        var n = BoxNonce(nonce)
        n.increment()
        self.nextNonce = n
    }

    /// The next message, or nil when more bytes are needed. A header is consumed as soon as it
    /// is complete (its length is checked before any body byte is buffered).
    public mutating func read(_ buffer: inout ByteBuffer) throws -> Message? {
        if receivedGoodbye {
            if buffer.readableBytes > 0 { throw BoxStreamError(reason: .dataAfterGoodbye) }
            return nil
        }
        if pending == nil {
            guard buffer.readableBytes >= BoxStream.headerLength else { return nil }
            var header = buffer.readBytes(length: BoxStream.headerLength)!
            let ok = header.withUnsafeMutableBytes { h in
                key.withUnsafeBytes { k in
                    nonce.bytes.withUnsafeBytes { n in
                        SecretBox.openDetachedInPlace(h.baseAddress! + 16, count: BoxStream.headerPlaintextLength,
                                                      mac: h.baseAddress!, nonce: n.baseAddress!, key: k.baseAddress!)
                    }
                }
            }
            guard ok else { throw BoxStreamError(reason: .headerAuthenticationFailed) }
            let plain = header[16..<34]
            if plain.allSatisfy({ $0 == 0 }) {
                receivedGoodbye = true
                return .goodbye
            }
            let length = Int(plain[plain.startIndex]) << 8 | Int(plain[plain.startIndex + 1])
            guard length <= BoxStream.maximumBodyLength else {
                throw BoxStreamError(reason: .bodyTooLong(length))
            }
            pending = (length, Array(plain[(plain.startIndex + 2)...]))
        }
        let (length, mac) = pending!
        guard buffer.readableBytes >= length else { return nil }
        var body = ByteBufferAllocator().buffer(capacity: length)
        var ok = true
        buffer.withUnsafeReadableBytes { src in
            body.writeWithUnsafeMutableBytes(minimumWritableBytes: max(length, 1)) { dst in
                if length > 0 { dst.baseAddress!.copyMemory(from: src.baseAddress!, byteCount: length) }
                let dataPtr = dst.baseAddress!
                ok = key.withUnsafeBytes { k in
                    mac.withUnsafeBytes { m in
                        nextNonce.bytes.withUnsafeBytes { n in
                            SecretBox.openDetachedInPlace(dataPtr, count: length, mac: m.baseAddress!,
                                                          nonce: n.baseAddress!, key: k.baseAddress!)
                        }
                    }
                }
                return length
            }
        }
        guard ok else { throw BoxStreamError(reason: .bodyAuthenticationFailed) }
        buffer.moveReaderIndex(forwardBy: length)
        pending = nil
        nonce.increment(); nonce.increment()
        nextNonce.increment(); nextNonce.increment()
        return .data(body)
    }
}
