/// Why a photo could not be processed, in one line a person can act on. A struct over a private
/// enum (like the protocol's errors) so a new reason does not break callers that switch on `kind`.
public struct MediaError: Error, CustomStringConvertible, Equatable, Sendable {
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case unsupportedFormat = "unsupported format"
            case malformed
            case tooLarge = "too large"
            case io
            case decoder
            case invalidArgument = "invalid argument"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Not a JPEG, PNG or HEIC (by its first bytes).
        public static let unsupportedFormat = Kind(.unsupportedFormat)
        /// The file breaks its format's structure: truncated, a length past the end, a bad marker.
        public static let malformed = Kind(.malformed)
        /// Dimensions or a metadata block beyond what is processed (a decompression bomb).
        public static let tooLarge = Kind(.tooLarge)
        /// The file system refused (open, read, write).
        public static let io = Kind(.io)
        /// libvips could not decode or encode the image; the detail carries its message.
        public static let decoder = Kind(.decoder)
        /// An argument the caller chose is out of range (a thumbnail size).
        public static let invalidArgument = Kind(.invalidArgument)

        public var description: String { base.rawValue }
    }

    public let kind: Kind
    public let detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { detail }

    static func malformed(_ detail: String) -> MediaError { MediaError(.malformed, detail) }
    static func io(_ detail: String) -> MediaError { MediaError(.io, detail) }
}
