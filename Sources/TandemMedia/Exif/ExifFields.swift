/// The EXIF tags this library reads and keeps, by number (EXIF 2.32, TIFF 6.0).
enum ExifTag {
    static let orientation: UInt16 = 0x0112
    static let dateTime: UInt16 = 0x0132
    static let exifIFD: UInt16 = 0x8769
    static let gpsIFD: UInt16 = 0x8825
    static let exifVersion: UInt16 = 0x9000
    static let dateTimeOriginal: UInt16 = 0x9003
    static let dateTimeDigitized: UInt16 = 0x9004
    static let offsetTime: UInt16 = 0x9010
    static let offsetTimeOriginal: UInt16 = 0x9011
    static let offsetTimeDigitized: UInt16 = 0x9012

    /// Tags naming the device or its owner (dropped by sanitizing; listed so tests can look for them).
    static let device: Set<UInt16> = [
        0x010F, 0x0110, 0x0131, 0x013B, 0x013C,   // Make, Model, Software, Artist, HostComputer
        0x927C, 0xA420, 0xA430, 0xA431,           // MakerNote, ImageUniqueID, CameraOwnerName, BodySerialNumber
        0xA433, 0xA434, 0xA435,                   // LensMake, LensModel, LensSerialNumber
    ]
}

/// What a photo's EXIF block says that the vault keeps: orientation and dates. Also whether it held
/// GPS or device data, so a caller (and the tests) can tell what sanitizing removed.
struct ExifFields: Equatable, Sendable {
    var orientation: UInt16?
    var dateTimeOriginal: ExifDateTime?
    var dateTimeDigitized: ExifDateTime?
    var dateTime: ExifDateTime?
    var offsetTimeOriginal: ExifOffset?
    var offsetTimeDigitized: ExifOffset?
    var offsetTime: ExifOffset?
    var hasGPS = false
    var deviceTags: Set<UInt16> = []

    /// Parses a TIFF-structured EXIF block (without the "Exif\0\0" prefix): IFD0 and the EXIF IFD it
    /// points to. Other IFDs (the thumbnail's IFD1, interoperability, GPS contents) are not read.
    init(tiff: [UInt8]) throws {
        let reader = try TIFFReader(tiff)
        let ifd0 = try reader.entries(ofIFDAt: try reader.firstIFDOffset)
        var exifIFDOffset: Int?
        for entry in ifd0 {
            switch entry.tag {
            case ExifTag.orientation:
                if let v = try reader.integer(of: entry), (1...8).contains(v) { orientation = UInt16(v) }
            case ExifTag.dateTime:
                dateTime = try ExifFields.date(entry, reader)
            case ExifTag.offsetTime:
                offsetTime = try ExifFields.offset(entry, reader)
            case ExifTag.exifIFD:
                exifIFDOffset = try reader.integer(of: entry).map { Int($0) }
            case ExifTag.gpsIFD:
                hasGPS = true
            default:
                if ExifTag.device.contains(entry.tag) { deviceTags.insert(entry.tag) }
            }
        }
        guard let exifIFDOffset else { return }
        for entry in try reader.entries(ofIFDAt: exifIFDOffset) {
            switch entry.tag {
            case ExifTag.dateTimeOriginal: dateTimeOriginal = try ExifFields.date(entry, reader)
            case ExifTag.dateTimeDigitized: dateTimeDigitized = try ExifFields.date(entry, reader)
            case ExifTag.offsetTime: offsetTime = try ExifFields.offset(entry, reader)
            case ExifTag.offsetTimeOriginal: offsetTimeOriginal = try ExifFields.offset(entry, reader)
            case ExifTag.offsetTimeDigitized: offsetTimeDigitized = try ExifFields.offset(entry, reader)
            case ExifTag.gpsIFD: hasGPS = true
            default:
                if ExifTag.device.contains(entry.tag) { deviceTags.insert(entry.tag) }
            }
        }
    }

    init() {}

    /// The capture time in ms since 1970: DateTimeOriginal, else DateTimeDigitized, else DateTime,
    /// each read at its own offset tag when present and as UTC when not.
    var captureMilliseconds: Int64? {
        if let d = dateTimeOriginal { return d.millisecondsSince1970(offset: offsetTimeOriginal) }
        if let d = dateTimeDigitized { return d.millisecondsSince1970(offset: offsetTimeDigitized) }
        if let d = dateTime { return d.millisecondsSince1970(offset: offsetTime) }
        return nil
    }

    /// The fields a sanitized copy carries: orientation and dates, nothing else.
    var kept: ExifFields {
        var k = self
        k.hasGPS = false
        k.deviceTags = []
        // An offset means nothing without the date it qualifies.
        if k.dateTimeOriginal == nil { k.offsetTimeOriginal = nil }
        if k.dateTimeDigitized == nil { k.offsetTimeDigitized = nil }
        if k.dateTime == nil { k.offsetTime = nil }
        return k
    }

    private static func ascii(_ entry: TIFFReader.Entry, _ reader: TIFFReader) throws -> [UInt8]? {
        guard entry.type == 2 || entry.type == 7 else { return nil }   // ASCII; UNDEFINED seen in the wild
        return Array(try reader.value(of: entry))
    }

    private static func date(_ entry: TIFFReader.Entry, _ reader: TIFFReader) throws -> ExifDateTime? {
        try ascii(entry, reader).flatMap(ExifDateTime.init(ascii:))
    }

    private static func offset(_ entry: TIFFReader.Entry, _ reader: TIFFReader) throws -> ExifOffset? {
        try ascii(entry, reader).flatMap(ExifOffset.init(ascii:))
    }
}
