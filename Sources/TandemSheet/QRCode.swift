import CQrencode
import Foundation

/// A QR code's modules, from libqrencode (error correction level Q: a quarter of the symbol can be
/// smudged on paper and it still reads). `isDark(x, y)` for 0 ≤ x, y < `size`; the quiet zone (4
/// modules of white around it) is the drawer's job.
public struct QRCode: Sendable, Equatable {
    public let size: Int
    private let modules: [Bool]

    /// What a recovery sheet's codes are at most (a share code is under 200 bytes): far below the
    /// 1,663 bytes level Q holds.
    public static let maximumBytes = 1_024

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The QR code of `text` (bytes of UTF-8, 8-bit mode). Throws for text that is empty, longer
    /// than `maximumBytes`, or that libqrencode refuses.
    public init(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.maximumBytes, !bytes.contains(0) else {
            throw Failure(description: "a QR code holds 1 to \(Self.maximumBytes) bytes of text")
        }
        guard let code = QRcode_encodeString8bit(text, 0, QR_ECLEVEL_Q) else {
            throw Failure(description: "libqrencode could not encode the text: \(String(cString: strerror(errno)))")
        }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        guard width > 0, width <= 177, let data = code.pointee.data else { throw Failure(description: "libqrencode gave no symbol") }
        size = width
        // Bit 0 of each byte is the module's colour (1: dark); the other bits say what it is for.
        modules = (0..<(width * width)).map { data[$0] & 1 == 1 }
    }

    public func isDark(_ x: Int, _ y: Int) -> Bool {
        guard x >= 0, y >= 0, x < size, y < size else { return false }
        return modules[y * size + x]
    }
}
