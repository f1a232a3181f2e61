/// Recognises files that are already compressed (photos, videos, audio, archives) from their first
/// bytes, so the vault stores their chunks as they are instead of spending zstd's time to learn that
/// they do not shrink. Only the magic numbers of the formats are used; a miss just means zstd tries.
public enum MediaSniffer {
    /// How many leading bytes `isAlreadyCompressed` looks at.
    public static let prefixLength = 16

    public static func isAlreadyCompressed(prefix: UnsafeRawBufferPointer) -> Bool {
        let b = Array(prefix.prefix(prefixLength))
        func starts(_ magic: [UInt8], at offset: Int = 0) -> Bool {
            guard b.count >= offset + magic.count else { return false }
            return Array(b[offset..<(offset + magic.count)]) == magic
        }
        let ascii: (String) -> [UInt8] = { Array($0.utf8) }
        if starts([0xFF, 0xD8, 0xFF]) { return true }                                  // JPEG
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return true }    // PNG
        if starts(ascii("GIF87a")) || starts(ascii("GIF89a")) { return true }          // GIF
        if starts(ascii("RIFF")) && starts(ascii("WEBP"), at: 8) { return true }       // WebP
        if starts(ascii("ftyp"), at: 4) { return true }                                // HEIC/HEIF/AVIF/MP4/MOV/M4A/3GP
        if starts([0x1A, 0x45, 0xDF, 0xA3]) { return true }                            // Matroska / WebM (EBML)
        if starts([0x50, 0x4B, 0x03, 0x04]) || starts([0x50, 0x4B, 0x05, 0x06])
            || starts([0x50, 0x4B, 0x07, 0x08]) { return true }                        // zip, docx/xlsx/odt, epub, jar
        if starts([0x1F, 0x8B]) { return true }                                        // gzip
        if starts([0x28, 0xB5, 0x2F, 0xFD]) { return true }                            // zstd
        if starts([0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00]) { return true }                // xz
        if starts(ascii("BZh")) { return true }                                        // bzip2
        if starts([0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C]) { return true }                // 7z
        if starts(ascii("Rar!")) { return true }                                       // rar
        if starts(ascii("ID3")) { return true }                                        // mp3 with ID3 tag
        if b.count >= 2, b[0] == 0xFF, b[1] & 0xE0 == 0xE0, b[1] & 0x06 != 0 { return true } // MPEG audio frame (mp3)
        if starts(ascii("OggS")) { return true }                                       // ogg / opus / vorbis
        if starts(ascii("fLaC")) { return true }                                       // flac
        return false
    }

    public static func isAlreadyCompressed(prefix: [UInt8]) -> Bool {
        prefix.withUnsafeBytes { isAlreadyCompressed(prefix: $0) }
    }
}
