/// The photo formats the vault processes on import. Anything else is stored as it is, without a
/// thumbnail or a capture date.
public enum PhotoFormat: String, Sendable, CaseIterable {
    case jpeg, png, heic

    /// How many leading bytes `PhotoProcessor.sniff` needs to decide.
    public static let sniffLength = 12

    /// The format from the magic numbers: JPEG SOI and a marker, the PNG signature, or an ISO-BMFF
    /// `ftyp` box whose major brand is one of HEIF's still-image brands. AVIF (`avif`) and video
    /// brands are not photos here.
    static func sniff(_ b: [UInt8]) -> PhotoFormat? {
        if b.count >= 3, b[0] == 0xFF, b[1] == 0xD8, b[2] == 0xFF { return .jpeg }
        if b.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if b.count >= 12, Array(b[4..<8]) == Array("ftyp".utf8) {
            let brand = String(decoding: b[8..<12], as: UTF8.self)
            if heifBrands.contains(brand) { return .heic }
        }
        return nil
    }

    /// HEIF image brands (ISO/IEC 23008-12): HEVC stills and sequences and the generic `mif1`/`msf1`.
    private static let heifBrands: Set<String> = ["heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1"]
}
