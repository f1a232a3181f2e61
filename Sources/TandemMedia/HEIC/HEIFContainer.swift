/// Random access to a file's bytes, for a format whose structure points back and forth (ISOBMFF
/// item locations). `InputFile` reads with pread; tests and the fuzzer use bytes in memory.
protocol RandomAccessBytes {
    /// The name errors give (the file's path).
    var name: String { get }
    var size: Int64 { get }
    /// Exactly `count` bytes at `offset`; a range outside the file throws `.malformed`.
    func bytes(at offset: Int64, count: Int) throws -> [UInt8]
}

/// Bytes already in memory, as a `RandomAccessBytes`.
struct MemoryBytes: RandomAccessBytes {
    let name: String
    let storage: [UInt8]

    init(_ storage: [UInt8], name: String = "HEIF data") {
        self.storage = storage
        self.name = name
    }

    var size: Int64 { Int64(storage.count) }

    func bytes(at offset: Int64, count: Int) throws -> [UInt8] {
        guard offset >= 0, count >= 0, offset <= size, Int64(count) <= size - offset else {
            throw MediaError.malformed("\(name): \(count) bytes at \(offset) are outside its \(size) bytes")
        }
        return Array(storage[Int(offset)..<(Int(offset) + count)])
    }
}

/// A four-character box or item type. Printed with anything outside printable ASCII as "?", so a
/// hostile type cannot break an error message's one line.
struct FourCC: Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    let bytes: [UInt8]

    init(_ bytes: ArraySlice<UInt8>) { self.bytes = Array(bytes) }

    init(stringLiteral value: String) {
        precondition(value.utf8.count == 4, "a four-character code has four characters")
        bytes = Array(value.utf8)
    }

    var description: String {
        String(decoding: bytes.map { (0x20...0x7E).contains($0) ? $0 : 0x3F }, as: UTF8.self)
    }
}

/// One box's header: where it starts and ends, and where its payload begins (ISO/IEC 14496-12
/// §4.2). Offsets are relative to whatever was parsed (the file, or a box's bytes in memory).
struct BoxHeader: Equatable {
    let type: FourCC
    let start: Int64
    /// 8, 16 with a 64-bit `largesize`, 16 more for a `uuid` box's user type.
    let headerSize: Int
    let end: Int64
    /// The size field was 1 (the real size follows as 64 bits).
    let largeSize: Bool

    var payloadStart: Int64 { start + Int64(headerSize) }
    var payloadSize: Int64 { end - payloadStart }

    /// Parses the header at `start` from `bytes`, the first bytes there (up to 32; fewer when the
    /// enclosing range ends sooner). `limit` is the end of that range (the file's, or the parent
    /// box's end): a box must fit inside it, and size 0 means "up to the limit".
    static func parse(_ bytes: ArraySlice<UInt8>, at start: Int64, limit: Int64, in name: String) throws -> BoxHeader {
        let available = limit - start
        guard available >= 8, bytes.count >= 8 else {
            throw MediaError.malformed("\(name): a box header at byte \(start) is cut short (\(max(available, 0)) bytes left)")
        }
        let b = Array(bytes.prefix(32))
        let size32 = UInt32(b[0]) << 24 | UInt32(b[1]) << 16 | UInt32(b[2]) << 8 | UInt32(b[3])
        let type = FourCC(b[4..<8])
        var headerSize = 8
        let total: Int64
        switch size32 {
        case 0:
            total = available
        case 1:
            guard available >= 16, b.count >= 16 else {
                throw MediaError.malformed("\(name): box '\(type)' at byte \(start) is cut short inside its 64-bit size")
            }
            let large = b[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            guard large <= UInt64(Int64.max) else {
                throw MediaError.malformed("\(name): box '\(type)' at byte \(start) announces \(large) bytes")
            }
            total = Int64(large)
            headerSize = 16
        default:
            total = Int64(size32)
        }
        if type == "uuid" { headerSize += 16 }
        guard total >= Int64(headerSize) else {
            throw MediaError.malformed("\(name): box '\(type)' at byte \(start) has size \(total), less than its \(headerSize)-byte header")
        }
        guard total <= available else {
            throw MediaError.malformed("\(name): box '\(type)' at byte \(start) announces \(total) bytes, but only \(available) are left in its parent")
        }
        return BoxHeader(type: type, start: start, headerSize: headerSize, end: start + total, largeSize: size32 == 1)
    }
}

/// Bounds-checked big-endian reading inside one box's bytes in memory. Every read checks what is
/// left first; running out throws `.malformed` naming the box.
struct BoxReader {
    private let bytes: [UInt8]
    private(set) var position: Int
    let end: Int
    private let what: String

    /// Reads `bytes[range]`; `what` names the box for messages.
    init(_ bytes: [UInt8], _ range: Range<Int>, what: String) {
        precondition(range.lowerBound >= 0 && range.upperBound <= bytes.count)
        self.bytes = bytes
        position = range.lowerBound
        end = range.upperBound
        self.what = what
    }

    var remaining: Int { end - position }

    private mutating func take(_ n: Int) throws -> ArraySlice<UInt8> {
        guard n >= 0, n <= remaining else {
            throw MediaError.malformed("\(what) ends early: \(n) bytes needed at byte \(position), \(remaining) left")
        }
        defer { position += n }
        return bytes[position..<(position + n)]
    }

    mutating func u8() throws -> UInt8 { try take(1).first ?? 0 }
    mutating func u16() throws -> UInt16 { UInt16(try uint(2)) }
    mutating func u32() throws -> UInt32 { UInt32(try uint(4)) }
    mutating func fourCC() throws -> FourCC { FourCC(try take(4)) }

    /// An unsigned big-endian integer of `size` bytes (0…8; 0 reads as 0, as iloc's sizes allow).
    mutating func uint(_ size: Int) throws -> UInt64 {
        precondition((0...8).contains(size))
        return try take(size).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
    }

    /// A full box's version and flags.
    mutating func versionAndFlags() throws -> (version: UInt8, flags: UInt32) {
        let v = try u8()
        return (v, UInt32(try uint(3)))
    }

    /// A NUL-terminated string; a box that ends first ends the string too (writers are sloppy
    /// here, and the text decides nothing but an item's content type).
    mutating func cString() throws -> [UInt8] {
        var out: [UInt8] = []
        while remaining > 0 {
            let c = try u8()
            if c == 0 { break }
            out.append(c)
        }
        return out
    }
}

/// What the vault reads of a HEIF file's structure (ISO/IEC 14496-12 ISOBMFF, ISO/IEC 23008-12
/// HEIF): the top-level boxes, and in the `meta` box the item list (`iinf`), where each item's
/// bytes are (`iloc`), the in-box item data (`idat`), and among the item properties (`iprp`/`ipco`)
/// the user descriptions (`udes`). Enough to find the Exif and XMP items and the free-text
/// properties and rewrite them in place; other properties and references are not read.
///
/// The file is hostile: every size, count and offset is checked before use, with checked
/// arithmetic, and any violation throws `MediaError`. Only the box headers and the `meta` box
/// (at most `maximumMetaSize`) are read; item data stays on disk.
struct HEIFContainer {
    /// The largest `meta` box read. A phone's is a few KB (grids, properties, an ICC profile).
    static let maximumMetaSize = 16 << 20
    static let maximumItems = 10_000
    static let maximumExtentsPerItem = 64
    /// Top-level boxes walked before giving up (a photo has three to five).
    static let maximumTopLevelBoxes = 1_024
    /// Child boxes listed in one container box (`meta`, `iinf`).
    static let maximumChildren = 20_000

    struct Item: Equatable {
        let id: UInt32
        /// `infe` version 2 or 3's item_type; nil for versions 0 and 1, which have none.
        let type: FourCC?
        /// A `mime` item's content type (or versions 0 and 1's), as written.
        let contentType: [UInt8]
        let protectionIndex: UInt16

        /// An Exif item (ISO/IEC 23008-12 A.2.1).
        var isExif: Bool { type == "Exif" }

        /// An XMP item: MIME type application/rdf+xml (ISO/IEC 23008-12 A.2.2), compared without
        /// case and parameters.
        var isXMP: Bool {
            guard type == nil || type == "mime" else { return false }
            let bare = contentType.prefix { $0 != 0x3B }.filter { $0 != 0x20 && $0 != 0x09 }   // up to ";", no blanks
            return String(decoding: bare, as: UTF8.self).lowercased() == "application/rdf+xml"
        }
    }

    /// Where an item's bytes are, as `iloc` says (ISO/IEC 14496-12 §8.11.3).
    struct Location: Equatable {
        enum Construction: UInt8 {
            /// Offsets into this file (or the file `dataReferenceIndex` names).
            case file = 0
            /// Offsets into the `meta` box's `idat`.
            case idat = 1
            /// Offsets into other items' data (`iref` 'iloc').
            case item = 2
        }

        struct Extent: Equatable {
            let offset: UInt64
            /// 0: "the whole referenced container".
            let length: UInt64
        }

        let itemID: UInt32
        let construction: Construction
        let dataReferenceIndex: UInt16
        let baseOffset: UInt64
        let extents: [Extent]
    }

    let name: String
    let fileSize: Int64
    let topLevel: [BoxHeader]
    let meta: BoxHeader
    /// Items in `iinf` order.
    let items: [Item]
    /// By item ID.
    let locations: [UInt32: Location]
    /// The `idat` payload's range in the file, when there is one.
    let idat: Range<Int64>?
    /// The payloads of the user-description properties (`udes`) in the file, in `ipco` order.
    let descriptions: [Range<Int64>]
    /// Every image size (`ispe`) an item is associated with in `ipma`, one entry per association:
    /// what a decoder would allocate for it (`HEIFDecodeBound`).
    let declaredSizes: [DeclaredSize]

    /// An item's declared width and height (`ispe`, ISO/IEC 23008-12 6.5.3).
    struct DeclaredSize: Equatable {
        let item: UInt32
        let width: UInt32
        let height: UInt32

        var pixels: UInt64 { UInt64(width) * UInt64(height) }   // at most (2^32 - 1)^2: no overflow
    }

    init(_ source: some RandomAccessBytes) throws {
        name = source.name
        fileSize = source.size
        topLevel = try HEIFContainer.topLevelBoxes(source)
        let metas = topLevel.filter { $0.type == "meta" }
        guard metas.count == 1, let meta = metas.first else {
            throw MediaError.malformed("\(name): HEIF file has \(metas.count) top-level 'meta' boxes, not one")
        }
        self.meta = meta
        guard meta.end - meta.start <= Int64(HEIFContainer.maximumMetaSize) else {
            throw MediaError(.tooLarge, "\(name): HEIF 'meta' box of \(meta.end - meta.start) bytes (at most \(HEIFContainer.maximumMetaSize))")
        }
        // meta.end - meta.start is at most maximumMetaSize, so Int conversions below are exact.
        let bytes = try source.bytes(at: meta.start, count: Int(meta.end - meta.start))
        let parsed = try HEIFContainer.parseMeta(bytes, metaHeaderSize: meta.headerSize, name: name)
        items = parsed.items
        locations = parsed.locations
        idat = parsed.idat.map { (meta.start + Int64($0.lowerBound))..<(meta.start + Int64($0.upperBound)) }
        descriptions = parsed.descriptions.map { (meta.start + Int64($0.lowerBound))..<(meta.start + Int64($0.upperBound)) }
        declaredSizes = parsed.sizes
    }

    /// The top-level boxes, by their headers only (payloads are skipped, not read).
    private static func topLevelBoxes(_ source: some RandomAccessBytes) throws -> [BoxHeader] {
        var boxes: [BoxHeader] = []
        var at: Int64 = 0
        while at < source.size {
            guard boxes.count < maximumTopLevelBoxes else {
                throw MediaError(.tooLarge, "\(source.name): more than \(maximumTopLevelBoxes) top-level boxes")
            }
            let count = Int(min(32, source.size - at))
            let header = try BoxHeader.parse(try source.bytes(at: at, count: count)[...], at: at, limit: source.size, in: source.name)
            boxes.append(header)
            at = header.end
        }
        guard boxes.first?.type == "ftyp" else {
            throw MediaError.malformed("\(source.name): HEIF file does not start with an 'ftyp' box")
        }
        return boxes
    }

    /// The child boxes of `range` in `bytes` (a box's payload).
    private static func children(_ bytes: [UInt8], _ range: Range<Int>, name: String) throws -> [BoxHeader] {
        var out: [BoxHeader] = []
        var at = range.lowerBound
        while at < range.upperBound {
            guard out.count < maximumChildren else {
                throw MediaError(.tooLarge, "\(name): more than \(maximumChildren) boxes in one HEIF container box")
            }
            let header = try BoxHeader.parse(bytes[at..<min(at + 32, range.upperBound)], at: Int64(at),
                                             limit: Int64(range.upperBound), in: name)
            out.append(header)
            at = Int(header.end)
        }
        return out
    }

    private struct Meta {
        var items: [Item] = []
        var locations: [UInt32: Location] = [:]
        var idat: Range<Int>?
        var descriptions: [Range<Int>] = []
        var sizes: [DeclaredSize] = []
    }

    /// `bytes` is the whole `meta` box, header included.
    private static func parseMeta(_ bytes: [UInt8], metaHeaderSize: Int, name: String) throws -> Meta {
        var reader = BoxReader(bytes, metaHeaderSize..<bytes.count, what: "\(name): HEIF 'meta' box")
        let (version, _) = try reader.versionAndFlags()
        guard version == 0 else { throw MediaError.malformed("\(name): HEIF 'meta' box has version \(version)") }
        var meta = Meta()
        var seen: Set<FourCC> = []
        var handler: FourCC?
        for box in try children(bytes, reader.position..<bytes.count, name: name) {
            let payload = Int(box.payloadStart)..<Int(box.end)
            switch box.type {
            case "hdlr", "iinf", "iloc", "idat", "iprp":
                guard seen.insert(box.type).inserted else {
                    throw MediaError.malformed("\(name): HEIF 'meta' box has two '\(box.type)' boxes")
                }
            default:
                continue   // properties, references, the primary item: not needed to find metadata
            }
            switch box.type {
            case "hdlr":
                var r = BoxReader(bytes, payload, what: "\(name): HEIF 'hdlr' box")
                _ = try r.versionAndFlags()
                _ = try r.u32()   // pre_defined
                handler = try r.fourCC()
            case "iinf":
                meta.items = try parseItemInfo(bytes, payload, name: name)
            case "iloc":
                meta.locations = try parseItemLocations(bytes, payload, name: name)
            case "iprp":
                meta.descriptions = try descriptionProperties(bytes, payload, name: name)
                meta.sizes = try declaredSizes(bytes, payload, name: name)
            default:
                meta.idat = payload
            }
        }
        guard handler == "pict" else {
            throw MediaError.malformed("\(name): HEIF 'meta' box's handler is '\(handler?.description ?? "missing")', not 'pict'")
        }
        return meta
    }

    /// `iprp`: the payload ranges of the user-description properties (`udes`, ISO/IEC 23008-12
    /// 6.5.20: language, name, description and tags as NUL-terminated UTF-8) in its `ipco`.
    /// Other properties describe the coded image and are not read.
    private static func descriptionProperties(_ bytes: [UInt8], _ payload: Range<Int>, name: String) throws -> [Range<Int>] {
        let containers = try children(bytes, payload, name: name).filter { $0.type == "ipco" }
        guard containers.count <= 1 else {
            throw MediaError.malformed("\(name): HEIF 'iprp' box has \(containers.count) 'ipco' boxes")
        }
        guard let ipco = containers.first else { return [] }
        return try children(bytes, Int(ipco.payloadStart)..<Int(ipco.end), name: name)
            .filter { $0.type == "udes" }
            .map { Int($0.payloadStart)..<Int($0.end) }
    }

    /// `iprp`: for every association in its `ipma` boxes (ISO/IEC 23008-12 9.3) of an item with an
    /// `ispe` property of its `ipco`, that item and size. Association indices are 1-based into the
    /// `ipco` children (0: none); an index past them is malformed.
    private static func declaredSizes(_ bytes: [UInt8], _ payload: Range<Int>, name: String) throws -> [DeclaredSize] {
        let boxes = try children(bytes, payload, name: name)
        guard let ipco = boxes.first(where: { $0.type == "ipco" }) else { return [] }
        let properties = try children(bytes, Int(ipco.payloadStart)..<Int(ipco.end), name: name)
        var sizes: [Int: (UInt32, UInt32)] = [:]
        for (index, box) in properties.enumerated() where box.type == "ispe" {
            var r = BoxReader(bytes, Int(box.payloadStart)..<Int(box.end), what: "\(name): HEIF 'ispe' property")
            _ = try r.versionAndFlags()
            sizes[index + 1] = (try r.u32(), try r.u32())
        }
        var out: [DeclaredSize] = []
        var associations = 0
        for box in boxes where box.type == "ipma" {
            var r = BoxReader(bytes, Int(box.payloadStart)..<Int(box.end), what: "\(name): HEIF 'ipma' box")
            let (version, flags) = try r.versionAndFlags()
            let count = try r.u32()
            guard count <= maximumItems else {
                throw MediaError(.tooLarge, "\(name): HEIF 'ipma' announces \(count) items (at most \(maximumItems))")
            }
            for _ in 0..<count {
                let item = version < 1 ? UInt32(try r.u16()) : try r.u32()
                let n = try r.u8()
                for _ in 0..<n {
                    associations += 1
                    guard associations <= maximumChildren else {
                        throw MediaError(.tooLarge, "\(name): more than \(maximumChildren) HEIF property associations")
                    }
                    let index = flags & 1 != 0 ? Int(try r.u16() & 0x7FFF) : Int(try r.u8() & 0x7F)
                    guard index <= properties.count else {
                        throw MediaError.malformed("\(name): HEIF item \(item) is associated with property \(index) of \(properties.count)")
                    }
                    if let (w, h) = sizes[index] { out.append(DeclaredSize(item: item, width: w, height: h)) }
                }
            }
        }
        return out
    }

    /// `iinf`: the entry count, then `infe` boxes. Every `infe` inside is read, even past the
    /// count, so an item another reader might find is never missed.
    private static func parseItemInfo(_ bytes: [UInt8], _ payload: Range<Int>, name: String) throws -> [Item] {
        var r = BoxReader(bytes, payload, what: "\(name): HEIF 'iinf' box")
        let (version, _) = try r.versionAndFlags()
        let count = version == 0 ? UInt32(try r.u16()) : try r.u32()
        guard count <= maximumItems else {
            throw MediaError(.tooLarge, "\(name): HEIF 'iinf' announces \(count) items (at most \(maximumItems))")
        }
        var items: [Item] = []
        var ids: Set<UInt32> = []
        for box in try children(bytes, r.position..<payload.upperBound, name: name) where box.type == "infe" {
            guard items.count < maximumItems else {
                throw MediaError(.tooLarge, "\(name): HEIF 'iinf' holds more than \(maximumItems) items")
            }
            let item = try parseItemInfoEntry(bytes, Int(box.payloadStart)..<Int(box.end), name: name)
            guard ids.insert(item.id).inserted else {
                throw MediaError.malformed("\(name): HEIF item \(item.id) is described twice")
            }
            items.append(item)
        }
        return items
    }

    /// `infe` versions 0 to 3 (ISO/IEC 14496-12 §8.11.6).
    private static func parseItemInfoEntry(_ bytes: [UInt8], _ payload: Range<Int>, name: String) throws -> Item {
        var r = BoxReader(bytes, payload, what: "\(name): HEIF 'infe' box")
        let (version, _) = try r.versionAndFlags()
        switch version {
        case 0, 1:
            let id = UInt32(try r.u16())
            let protection = try r.u16()
            _ = try r.cString()   // item_name
            let contentType = try r.cString()
            return Item(id: id, type: nil, contentType: contentType, protectionIndex: protection)
        case 2, 3:
            let id = version == 2 ? UInt32(try r.u16()) : try r.u32()
            let protection = try r.u16()
            let type = try r.fourCC()
            _ = try r.cString()   // item_name
            let contentType = type == "mime" ? try r.cString() : []
            return Item(id: id, type: type, contentType: contentType, protectionIndex: protection)
        default:
            throw MediaError.malformed("\(name): HEIF 'infe' box has version \(version)")
        }
    }

    /// `iloc` versions 0, 1 and 2 (ISO/IEC 14496-12 §8.11.3).
    private static func parseItemLocations(_ bytes: [UInt8], _ payload: Range<Int>, name: String) throws -> [UInt32: Location] {
        var r = BoxReader(bytes, payload, what: "\(name): HEIF 'iloc' box")
        let (version, _) = try r.versionAndFlags()
        guard version <= 2 else { throw MediaError.malformed("\(name): HEIF 'iloc' box has version \(version)") }
        let sizes1 = try r.u8(), sizes2 = try r.u8()
        let offsetSize = Int(sizes1 >> 4), lengthSize = Int(sizes1 & 0x0F), baseOffsetSize = Int(sizes2 >> 4)
        let indexSize = version >= 1 ? Int(sizes2 & 0x0F) : 0
        for (field, size) in [("offset_size", offsetSize), ("length_size", lengthSize),
                              ("base_offset_size", baseOffsetSize), ("index_size", indexSize)] where ![0, 4, 8].contains(size) {
            throw MediaError.malformed("\(name): HEIF 'iloc' has \(field) \(size) (0, 4 or 8)")
        }
        let count = version < 2 ? UInt32(try r.u16()) : try r.u32()
        guard count <= maximumItems else {
            throw MediaError(.tooLarge, "\(name): HEIF 'iloc' announces \(count) items (at most \(maximumItems))")
        }
        var locations: [UInt32: Location] = [:]
        for _ in 0..<count {
            let id = version < 2 ? UInt32(try r.u16()) : try r.u32()
            var construction = Location.Construction.file
            if version >= 1 {
                let method = UInt8(try r.u16() & 0x0F)
                guard let c = Location.Construction(rawValue: method) else {
                    throw MediaError.malformed("\(name): HEIF item \(id) has construction method \(method)")
                }
                construction = c
            }
            let reference = try r.u16()
            let base = try r.uint(baseOffsetSize)
            let extentCount = Int(try r.u16())
            guard extentCount <= maximumExtentsPerItem else {
                throw MediaError(.tooLarge, "\(name): HEIF item \(id) has \(extentCount) extents (at most \(maximumExtentsPerItem))")
            }
            var extents: [Location.Extent] = []
            for _ in 0..<extentCount {
                _ = try r.uint(indexSize)   // extent_index: for construction method 2
                extents.append(Location.Extent(offset: try r.uint(offsetSize), length: try r.uint(lengthSize)))
            }
            guard locations[id] == nil else {
                throw MediaError.malformed("\(name): HEIF item \(id) has two locations")
            }
            locations[id] = Location(itemID: id, construction: construction, dataReferenceIndex: reference,
                                     baseOffset: base, extents: extents)
        }
        return locations
    }

    /// The file ranges of an item's extents, in order, for construction methods 0 (in this file)
    /// and 1 (in `idat`). Throws for anything that is not plainly in this file: another file, other
    /// items' data, an extent of "the rest", a range past its container.
    func fileRanges(of location: Location) throws -> [Range<Int64>] {
        guard location.dataReferenceIndex == 0 else {
            throw MediaError.malformed("\(name): HEIF item \(location.itemID)'s data is in another file (data reference \(location.dataReferenceIndex))")
        }
        let container: Range<Int64>
        switch location.construction {
        case .file: container = 0..<fileSize
        case .idat:
            guard let idat else { throw MediaError.malformed("\(name): HEIF item \(location.itemID) is in an 'idat' box the file does not have") }
            container = idat
        case .item:
            throw MediaError.malformed("\(name): HEIF item \(location.itemID) is built from other items (construction method 2)")
        }
        return try location.extents.map { extent in
            guard extent.length > 0 else {
                throw MediaError.malformed("\(name): HEIF item \(location.itemID) has an extent of length 0 (the rest of its container)")
            }
            let (relative, o1) = location.baseOffset.addingReportingOverflow(extent.offset)
            let span = UInt64(container.upperBound - container.lowerBound)
            guard !o1, relative <= span, extent.length <= span - relative else {
                throw MediaError.malformed("\(name): HEIF item \(location.itemID) has an extent (\(location.baseOffset) + \(extent.offset), \(extent.length) bytes) outside its \(span)-byte container")
            }
            let start = container.lowerBound + Int64(relative)
            return start..<(start + Int64(extent.length))
        }
    }

    /// Where an item's bytes may lie, without trusting anything: saturating arithmetic, length 0 as
    /// "to the end", nil for data elsewhere (another file, other items). For checking that a
    /// rewrite touches no image data, even that of a damaged item.
    func reach(of location: Location) -> [ClosedRange<UInt64>]? {
        guard location.dataReferenceIndex == 0 else { return nil }
        let base: UInt64
        switch location.construction {
        case .file: base = 0
        case .idat:
            guard let idat else { return nil }
            base = UInt64(idat.lowerBound)
        case .item: return nil
        }
        return location.extents.map { extent in
            let start = base.addingSaturating(location.baseOffset).addingSaturating(extent.offset)
            let end = extent.length == 0 ? UInt64.max : start.addingSaturating(extent.length - 1)
            return start...end
        }
    }
}

extension UInt64 {
    func addingSaturating(_ other: UInt64) -> UInt64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? .max : sum
    }
}
