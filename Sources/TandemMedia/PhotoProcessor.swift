import Foundation

/// What the vault does to a photo on import: tell whether it is one, make its thumbnail, read its
/// capture date, and write the copy that is stored (without GPS and device data). Every input is
/// treated as hostile: structure errors throw `MediaError`, never trap, and lengths are checked
/// before anything is read. Safe to call from several threads at once.
public enum PhotoProcessor {
    /// The format from the first bytes (nil: not a photo we process). `PhotoFormat.sniffLength`
    /// bytes are enough.
    public static func sniff(_ prefix: [UInt8]) -> PhotoFormat? {
        PhotoFormat.sniff(prefix)
    }

    /// A `size` × `size` centre-cropped JPEG thumbnail (quality 80), EXIF orientation applied,
    /// metadata stripped. The file is streamed and shrunk on load where the format allows (JPEG,
    /// HEIC), so a large photo is never held whole. `size` is 16…2048. A JPEG's header and a PNG's
    /// chunk list are checked first, so a crafted length fails at once instead of inside libvips.
    public static func thumbnail(of file: URL, size: Int = 300) throws -> [UInt8] {
        guard (16...2048).contains(size) else {
            throw MediaError(.invalidArgument, "thumbnail size \(size) is outside 16…2048")
        }
        let input = try InputFile(file)
        switch try format(of: input) {
        case .jpeg: try JPEGSegments.checkHeader(input)
        case .png: try PNGChunks.checkChunks(input)
        case .heic: try HEIFDecodeBound.check(input)   // declared sizes, before libheif sees the file
        }
        return try Thumbnailer.thumbnail(input, size: size)
    }

    /// The capture date in ms since 1970, or nil: EXIF DateTimeOriginal, else DateTimeDigitized,
    /// else DateTime, each read at its own offset tag (OffsetTimeOriginal…) when present and as UTC
    /// when not. A damaged EXIF block gives nil; a damaged file structure throws.
    public static func captureDate(of file: URL) throws -> Int64? {
        try exifFields(of: file)?.captureMilliseconds
    }

    /// Writes a copy of the photo with GPS and device data removed, the capture date and
    /// orientation kept (see SanitizeReport for what each format gets):
    ///  - JPEG, lossless: the EXIF block is replaced by a minimal one (Orientation, DateTime,
    ///    DateTimeOriginal, DateTimeDigitized and their offsets); XMP, IPTC/Photoshop, MPF, JFXX,
    ///    comments, other APPn segments and markers decoding does not need (JPGn, reserved codes)
    ///    are dropped; JFIF is kept without its thumbnail; the ICC profile and Adobe's segment are
    ///    kept; the image data from the first SOS on is copied byte for byte; bytes after EOI are
    ///    dropped.
    ///  - PNG, lossless: text chunks, tIME and unknown ancillary chunks are dropped, eXIf becomes the
    ///    same minimal block; all other chunks are copied whole; bytes after IEND are dropped.
    ///  - HEIC, lossless when its container allows (`HEIFMetadataRewrite`): the file copied byte for
    ///    byte, every Exif item overwritten in place by the same minimal block (zero-padded to its old
    ///    length), every XMP item by an empty one padded with spaces, vendor top-level boxes turned
    ///    into `free` boxes; no offset moves and the coded image data is untouched.
    ///  - HEIC the in-place rewrite refuses (an image sequence, metadata shared with image data or
    ///    built from other items, a damaged container): re-encoded (quality 90, 8-bit HEVC), pixels
    ///    upright, ICC profile kept, a minimal EXIF block with the dates; all other metadata dropped.
    ///    `SanitizeReport.reencodedBecause` says why. If that fails too, this throws.
    /// `output` is created or replaced; it is removed again if anything fails.
    public static func sanitizedCopy(of file: URL, to output: URL) throws -> SanitizeReport {
        let input = try InputFile(file)
        let format = try format(of: input)
        let heic = try OutputFile.write(to: output) { out -> HEICProcessor.Method? in
            switch format {
            case .jpeg: try JPEGSanitizer.sanitize(input, to: out)
            case .png: try PNGSanitizer.sanitize(input, to: out)
            case .heic: return try HEICProcessor.sanitize(input, to: out)
            }
            return nil
        }
        if case .reencoded(let reason) = heic {
            return SanitizeReport(format: format, strippedGPS: true, strippedDevice: true, lossless: false, reencodedBecause: reason.detail)
        }
        return SanitizeReport(format: format, strippedGPS: true, strippedDevice: true, lossless: true)
    }

    /// The in-place HEIF metadata rewrite on bytes in memory, without the re-encode fallback: the
    /// rewritten bytes, or the reason it refused. For the fuzzer.
    @_spi(Fuzzing)
    public static func rewriteHEIFMetadata(_ bytes: [UInt8]) throws -> [UInt8] {
        try HEIFMetadataRewrite(MemoryBytes(bytes)).applied(to: bytes)
    }

    /// The decode bound's check (`HEIFDecodeBound`) on bytes in memory. For the fuzzer.
    @_spi(Fuzzing)
    public static func checkHEIFDecodeBound(_ bytes: [UInt8]) throws {
        try HEIFDecodeBound.check(MemoryBytes(bytes))
    }

    /// The orientation and dates of the photo's EXIF block, with whether it held GPS or device tags;
    /// nil when it has none (or a damaged one).
    static func exifFields(of file: URL) throws -> ExifFields? {
        let input = try InputFile(file)
        switch try format(of: input) {
        case .jpeg: return try JPEGSegments.exifFields(input)
        case .png: return try PNGChunks.exifFields(input)
        case .heic: return try HEICProcessor.exifFields(input)
        }
    }

    /// Sniffs the file's first bytes and rewinds it.
    private static func format(of input: InputFile) throws -> PhotoFormat {
        let prefix = try input.prefix(PhotoFormat.sniffLength)
        _ = try input.rewoundDescriptor()
        guard let format = PhotoFormat.sniff(prefix) else {
            throw MediaError(.unsupportedFormat, "\(input.path) is not a JPEG, PNG or HEIC photo")
        }
        return format
    }
}
