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

/// A 24-byte big-endian counter nonce, held inline (no heap storage, so incrementing it never
/// copies or allocates).
struct BoxNonce {
    /// The counter as three 64-bit words, most significant first, in host order.
    private var high: UInt64
    private var middle: UInt64
    private var low: UInt64

    init(_ bytes: [UInt8]) {
        precondition(bytes.count == 24)
        func word(_ i: Int) -> UInt64 { bytes[i..<i + 8].reduce(0) { $0 << 8 | UInt64($1) } }
        high = word(0)
        middle = word(8)
        low = word(16)
    }

    mutating func increment() {
        low &+= 1
        guard low == 0 else { return }
        middle &+= 1
        guard middle == 0 else { return }
        high &+= 1
    }

    /// The 24 nonce bytes, for the duration of `body`.
    func withUnsafeBytes<R>(_ body: (UnsafeRawPointer) throws -> R) rethrows -> R {
        let be = (high.bigEndian, middle.bigEndian, low.bigEndian)
        return try Swift.withUnsafeBytes(of: be) { try body($0.baseAddress!) }
    }

    var bytes: [UInt8] { withUnsafeBytes { Array(UnsafeRawBufferPointer(start: $0, count: 24)) } }
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
    /// In guarded memory, wiped when the last copy of the stream state is released.
    private let key: SecureBytes
    private var nonce: BoxNonce
    private var nextNonce: BoxNonce
    public private(set) var saidGoodbye = false

    public init(key: [UInt8], nonce: [UInt8]) {
        self.init(key: SecureBytes(wiped: key), nonce: nonce)
    }

    public init(key: SecureBytes, nonce: [UInt8]) {
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
            // Body: sealed straight from the plaintext to its place after the header; its MAC goes
            // into the header. Header plaintext lives at [16, 34): length (2) ‖ body MAC (16).
            base.storeBytes(of: UInt8(body.count >> 8), toByteOffset: 16, as: UInt8.self)
            base.storeBytes(of: UInt8(body.count & 0xff), toByteOffset: 17, as: UInt8.self)
            key.withUnsafeBytes { k in
                nextNonce.withUnsafeBytes { bn in
                    SecretBox.sealDetached(body.baseAddress ?? UnsafeRawPointer(base + BoxStream.headerLength),
                                           count: body.count, into: base + BoxStream.headerLength,
                                           mac: base + 18, nonce: bn, key: k.baseAddress!)
                }
                nonce.withUnsafeBytes { hn in
                    SecretBox.sealDetachedInPlace(base + 16, count: BoxStream.headerPlaintextLength,
                                                  mac: base, nonce: hn, key: k.baseAddress!)
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
        var k = key.exposedCopy
        defer { Sodium.wipe(&k) }
        let header = try! SecretBox.seal(zeros, nonce: nonce.bytes, key: k)
        output.writeBytes(header)
    }
}

/// Opens boxes. Pure; consumes from a caller's buffer.
public struct BoxStreamDecoder {
    public enum Message: Equatable {
        case data(ByteBuffer)
        case goodbye
    }

    /// In guarded memory, wiped when the last copy of the stream state is released.
    private let key: SecureBytes
    private var nonce: BoxNonce
    private var nextNonce: BoxNonce
    /// A header already opened, waiting for its body: (length, MAC).
    private var pending: (length: Int, mac: (UInt64, UInt64))?
    public private(set) var receivedGoodbye = false

    public init(key: [UInt8], nonce: [UInt8]) {
        self.init(key: SecureBytes(wiped: key), nonce: nonce)
    }

    public init(key: SecureBytes, nonce: [UInt8]) {
        precondition(key.count == 32 && nonce.count == 24)
        self.key = key
        self.nonce = BoxNonce(nonce)
        var n = BoxNonce(nonce)
        n.increment()
        self.nextNonce = n
    }

    /// What `readAvailable` stopped on.
    public enum ReadStatus: Equatable, Sendable {
        /// Every complete box was read; what is left in the buffer is less than `bytesNeeded`.
        case needMoreData
        /// The goodbye header was read; bytes after it were left in the buffer.
        case goodbye
    }

    /// How many bytes the next step needs in all: a header, or the body of the header already read.
    public var bytesNeeded: Int { pending?.length ?? BoxStream.headerLength }

    /// The next message, or nil when more bytes are needed. A header is consumed as soon as it
    /// is complete (its length is checked before any body byte is buffered).
    public mutating func read(_ buffer: inout ByteBuffer) throws -> Message? {
        if receivedGoodbye {
            if buffer.readableBytes > 0 { throw BoxStreamError(reason: .dataAfterGoodbye) }
            return nil
        }
        if pending == nil {
            switch try readHeader(&buffer) {
            case .needMoreData: return nil
            case .goodbye: return .goodbye
            case .body: break
            }
        }
        guard buffer.readableBytes >= pending!.length else { return nil }
        var body = ByteBufferAllocator().buffer(capacity: pending!.length)
        try readBody(&buffer, into: &body)
        return .data(body)
    }

    /// Opens every complete box in `buffer`, appending the plaintext to `output`: the hot path, with
    /// no allocation per box (each body is opened straight from `buffer` into `output`). Stops at
    /// the goodbye header. Consumes exactly what it read; on a throw the stream is unusable.
    public mutating func readAvailable(_ buffer: inout ByteBuffer, into output: inout ByteBuffer) throws -> ReadStatus {
        if receivedGoodbye {
            if buffer.readableBytes > 0 { throw BoxStreamError(reason: .dataAfterGoodbye) }
            return .needMoreData
        }
        while true {
            if pending == nil {
                switch try readHeader(&buffer) {
                case .needMoreData: return .needMoreData
                case .goodbye: return .goodbye
                case .body: break
                }
            }
            guard buffer.readableBytes >= pending!.length else { return .needMoreData }
            try readBody(&buffer, into: &output)
        }
    }

    private enum HeaderResult {
        case needMoreData
        case goodbye
        case body
    }

    /// Opens the next header into a stack buffer: length (2) ‖ body MAC (16).
    private mutating func readHeader(_ buffer: inout ByteBuffer) throws -> HeaderResult {
        guard buffer.readableBytes >= BoxStream.headerLength else { return .needMoreData }
        var plain: (UInt64, UInt64, UInt16, UInt16, UInt32) = (0, 0, 0, 0, 0) // 24 bytes, 18 used
        let ok = withUnsafeMutableBytes(of: &plain) { p in
            buffer.withUnsafeReadableBytes { h in
                key.withUnsafeBytes { k in
                    nonce.withUnsafeBytes { n in
                        SecretBox.openDetached(h.baseAddress! + 16, count: BoxStream.headerPlaintextLength,
                                               into: p.baseAddress!, mac: h.baseAddress!, nonce: n,
                                               key: k.baseAddress!)
                    }
                }
            }
        }
        guard ok else { throw BoxStreamError(reason: .headerAuthenticationFailed) }
        buffer.moveReaderIndex(forwardBy: BoxStream.headerLength)
        let (length, mac, isGoodbye) = withUnsafeBytes(of: &plain) { p -> (Int, (UInt64, UInt64), Bool) in
            let length = Int(p[0]) << 8 | Int(p[1])
            let mac = (p.loadUnaligned(fromByteOffset: 2, as: UInt64.self),
                       p.loadUnaligned(fromByteOffset: 10, as: UInt64.self))
            return (length, mac, p[0..<BoxStream.headerPlaintextLength].allSatisfy { $0 == 0 })
        }
        if isGoodbye {
            receivedGoodbye = true
            return .goodbye
        }
        guard length <= BoxStream.maximumBodyLength else {
            throw BoxStreamError(reason: .bodyTooLong(length))
        }
        pending = (length, mac)
        return .body
    }

    /// Opens the pending body (all of it is in `buffer`) from `buffer` into `output`.
    private mutating func readBody(_ buffer: inout ByteBuffer, into output: inout ByteBuffer) throws {
        let (length, mac) = pending!
        var ok = true
        _ = buffer.withUnsafeReadableBytes { src in
            output.writeWithUnsafeMutableBytes(minimumWritableBytes: max(length, 1)) { dst in
                ok = key.withUnsafeBytes { k in
                    withUnsafeBytes(of: mac) { m in
                        nextNonce.withUnsafeBytes { n in
                            SecretBox.openDetached(src.baseAddress ?? UnsafeRawPointer(dst.baseAddress!), count: length,
                                                   into: dst.baseAddress!, mac: m.baseAddress!, nonce: n,
                                                   key: k.baseAddress!)
                        }
                    }
                }
                return ok ? length : 0
            }
        }
        guard ok else { throw BoxStreamError(reason: .bodyAuthenticationFailed) }
        buffer.moveReaderIndex(forwardBy: length)
        pending = nil
        nonce.increment(); nonce.increment()
        nextNonce.increment(); nextNonce.increment()
    }
}

/// The receiving end of a box-stream as a connection sees it: reads of any size, boxes split
/// anywhere. Pure; the channel handler feeds it each read.
///
/// A read is decoded where it lies: only a box split across reads is copied (into a small carry
/// buffer, topped up with just the bytes it lacks), and every body is opened straight into the
/// caller's plaintext buffer. So a read costs no copy of its bulk and no allocation per box.
/// At most one box (34 + 4096 bytes) is ever buffered.
public struct BoxStreamReader {
    public private(set) var decoder: BoxStreamDecoder
    /// The start of a box whose end has not arrived yet.
    private var carried: ByteBuffer?

    public init(key: [UInt8], nonce: [UInt8]) {
        decoder = BoxStreamDecoder(key: key, nonce: nonce)
    }

    public init(key: SecureBytes, nonce: [UInt8]) {
        decoder = BoxStreamDecoder(key: key, nonce: nonce)
    }

    /// Bytes held back for a box split across reads.
    public var bufferedBytes: Int { carried?.readableBytes ?? 0 }

    /// Opens every box completed by `incoming` (consumed whole unless the goodbye header comes
    /// first), appending the plaintext to `plaintext`. After a throw the stream is unusable.
    public mutating func read(_ incoming: inout ByteBuffer, into plaintext: inout ByteBuffer) throws
        -> BoxStreamDecoder.ReadStatus {
        var status = BoxStreamDecoder.ReadStatus.needMoreData
        if var carry = carried {
            carried = nil
            // First the box that straddles the previous read.
            while carry.readableBytes > 0, incoming.readableBytes > 0, status == .needMoreData {
                let lacking = max(0, decoder.bytesNeeded - carry.readableBytes)
                var piece = incoming.readSlice(length: min(lacking, incoming.readableBytes))!
                carry.writeBuffer(&piece)
                status = try decoder.readAvailable(&carry, into: &plaintext)
            }
            if status == .goodbye { return .goodbye }
            if carry.readableBytes > 0 {
                // Still incomplete: this read ran out.
                carried = carry
                return .needMoreData
            }
            carry.clear()
            carried = carry // keep the storage for the next split box
        }
        // Then the rest of this read, in place.
        status = try decoder.readAvailable(&incoming, into: &plaintext)
        if status == .needMoreData, incoming.readableBytes > 0 {
            var carry = carried ?? ByteBufferAllocator().buffer(capacity: BoxStream.headerLength)
            carry.clear()
            carry.writeBuffer(&incoming)
            carried = carry
        }
        return status
    }

    /// Box by box instead: every box completed by `incoming`, each body on its own (an empty box
    /// gives an empty body), up to and including a goodbye. For tools that mirror boxes (the
    /// interop echo server); frames use `read(_:into:)`. After a throw the stream is unusable.
    public mutating func readBoxes(_ incoming: inout ByteBuffer) throws -> [BoxStreamDecoder.Message] {
        var carry = carried ?? ByteBufferAllocator().buffer(capacity: incoming.readableBytes)
        carried = nil
        carry.writeBuffer(&incoming)
        var boxes: [BoxStreamDecoder.Message] = []
        while let box = try decoder.read(&carry) {
            boxes.append(box)
            if box == .goodbye { return boxes }
        }
        carry.discardReadBytes()
        carried = carry
        return boxes
    }
}
