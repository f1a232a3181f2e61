/// The lossless HEIF rewrite: the file is copied byte for byte except the bytes of its metadata
/// items, which are overwritten in place with as many bytes as they had. No box grows or shrinks
/// and no offset moves, so `iloc` stays right and the coded image data is untouched.
///
/// - Every `Exif` item: a new minimal block (`ExifWriter`: orientation and dates) written where the
///   old TIFF header was, its 4-byte offset prefix and an "Exif\0\0" marker before the header kept
///   (ISO/IEC 23008-12 A.2.1), every other byte of the item zero. A block that does not fit throws
///   (never in practice: the new block is smaller than any camera's).
/// - Every XMP item (`mime`, application/rdf+xml): an empty `x:xmpmeta` element padded with spaces
///   (blanks after the root element are valid XML), or only spaces when even that does not fit.
/// - Every user-description property (`udes` in `iprp`/`ipco`: language, name, description and
///   tags, free text a phone or an editor may fill): its version and flags kept, the rest zeros, so
///   it reads as four empty strings. The box keeps its type, so property indices in `ipma` hold.
/// - A top-level box that is neither structure nor image data (`ftyp`, `meta`, `mdat`, `free`,
///   `skip`) — a vendor's `uuid` box, a motion photo's video — becomes a `free` box of the same size
///   with a zero payload, unless an item's data lies in it.
/// - The payload of every top-level `free` and `skip` box, and every byte of an `mdat` that no
///   item's extents reach (what an editor left behind: an earlier version's metadata or image),
///   becomes zeros, when every item's data is in this file.
///
/// The plan is made and checked before anything is written, so the caller can fall back to a
/// re-encode when it throws: a file that is not plainly laid out (an image sequence, metadata in
/// another file or built from other items, metadata bytes shared with image data, extents outside
/// their container) is never half rewritten.
struct HEIFMetadataRewrite {
    /// Bytes to put at `offset` in place of the original's `length` bytes: `head`, then `fill` up to
    /// the length (so a large item needs no large buffer).
    struct Patch: Equatable {
        let offset: Int64
        let length: Int64
        let head: [UInt8]
        let fill: UInt8
    }

    /// The largest Exif item read: the TIFF reader's limit plus room for the prefix.
    static let maximumExifItemSize = TIFFReader.maximumSize + 4096
    /// The empty XMP written over an XMP item when it fits.
    static let emptyXMP = Array(#"<x:xmpmeta xmlns:x="adobe:ns:meta/"/>"#.utf8)
    /// A TIFF header and an IFD0 without entries: the Exif block written when nothing is kept.
    static let emptyTIFF: [UInt8] = [0x49, 0x49, 42, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    /// Top-level boxes left as they are: structure, image data, padding.
    static let keptTopLevel: Set<FourCC> = ["ftyp", "meta", "mdat", "free", "skip"]

    /// Sorted by offset, none overlapping.
    let patches: [Patch]
    let exifItems: Int
    let xmpItems: Int
    /// User-description properties (`udes`) emptied.
    let descriptions: Int
    /// Top-level boxes turned into `free` boxes, by type.
    let freedBoxes: [FourCC]
    /// Bytes of `free`/`skip` payloads and of `mdat` bytes no item reaches, zeroed.
    let zeroedBytes: Int64

    init(_ source: some RandomAccessBytes) throws {
        let container = try HEIFContainer(source)
        let name = source.name
        if container.topLevel.contains(where: { $0.type == "moov" }) {
            throw MediaError.malformed("\(name): HEIF file holds an image sequence ('moov'), which is not rewritten in place")
        }
        let mdats = container.topLevel.filter { $0.type == "mdat" }.map { $0.payloadStart..<$0.end }

        var patches: [Patch] = []
        var metadataRanges: [Range<Int64>] = []
        var exif = 0, xmp = 0
        for item in container.items where item.isExif || item.isXMP {
            guard let location = container.locations[item.id] else { continue }   // no data, nothing to remove
            guard item.protectionIndex == 0 else {
                throw MediaError.malformed("\(name): HEIF metadata item \(item.id) is encrypted")
            }
            let ranges = try container.fileRanges(of: location)
            if location.construction == .file {
                for r in ranges where !mdats.contains(where: { $0.lowerBound <= r.lowerBound && r.upperBound <= $0.upperBound }) {
                    throw MediaError.malformed("\(name): HEIF item \(item.id)'s bytes \(r.lowerBound)..<\(r.upperBound) are not inside an 'mdat' box")
                }
            }
            metadataRanges += ranges
            if item.isExif {
                exif += 1
                patches += try HEIFMetadataRewrite.exifPatches(source, ranges, item: item.id)
            } else {
                xmp += 1
                patches += HEIFMetadataRewrite.xmpPatches(ranges)
            }
        }

        // Image data (and anything else that is not metadata) must not share a byte with what is
        // overwritten: an item placed over an Exif item's bytes would be damaged.
        let metadataIDs = Set(container.items.filter { $0.isExif || $0.isXMP }.map(\.id))
        let otherReach = container.locations.values.filter { !metadataIDs.contains($0.itemID) }.compactMap(container.reach).joined()
        for r in metadataRanges {
            let bytes = UInt64(r.lowerBound)...UInt64(r.upperBound - 1)
            if otherReach.contains(where: { $0.overlaps(bytes) }) {
                throw MediaError.malformed("\(name): HEIF metadata bytes \(r.lowerBound)..<\(r.upperBound) are shared with another item")
            }
        }

        var freed: [FourCC] = []
        let allReach = container.locations.values.compactMap(container.reach).joined()
        // A `udes` payload is version and flags (4 bytes), then the strings; a shorter one holds
        // no string. No item's data may lie in what is zeroed.
        for r in container.descriptions where r.upperBound - r.lowerBound > 4 {
            let strings = (r.lowerBound + 4)..<r.upperBound
            let span = UInt64(strings.lowerBound)...UInt64(strings.upperBound - 1)
            if allReach.contains(where: { $0.overlaps(span) }) {
                throw MediaError.malformed("\(name): HEIF item data lies in a 'udes' property")
            }
            patches.append(Patch(offset: strings.lowerBound, length: strings.upperBound - strings.lowerBound, head: [], fill: 0))
        }
        for box in container.topLevel where !HEIFMetadataRewrite.keptTopLevel.contains(box.type) {
            let span = UInt64(box.start)...UInt64(box.end - 1)
            if allReach.contains(where: { $0.overlaps(span) }) {
                throw MediaError.malformed("\(name): HEIF item data lies in a top-level '\(box.type)' box")
            }
            freed.append(box.type)
            let sizeEnd = box.start + (box.largeSize ? 16 : 8)
            patches.append(Patch(offset: box.start + 4, length: 4, head: Array("free".utf8), fill: 0))
            if box.end > sizeEnd {
                patches.append(Patch(offset: sizeEnd, length: box.end - sizeEnd, head: [], fill: 0))
            }
        }

        // Padding and leftovers: a top-level `free` or `skip` box's payload (an editor's old
        // metadata, a previous version's bytes) and every byte of an `mdat` that no item's extents
        // reach are zeroed; the sizes stay, so no offset moves. Only when every item's data is in
        // this file, so that "no item reaches it" can be known.
        var zeroed: Int64 = 0
        for box in container.topLevel where (box.type == "free" || box.type == "skip") && box.payloadSize > 0 {
            let span = UInt64(box.payloadStart)...UInt64(box.end - 1)
            if allReach.contains(where: { $0.overlaps(span) }) {
                throw MediaError.malformed("\(name): HEIF item data lies in a top-level '\(box.type)' box")
            }
            patches.append(Patch(offset: box.payloadStart, length: box.payloadSize, head: [], fill: 0))
            zeroed += box.payloadSize
        }
        if container.locations.values.allSatisfy({ $0.dataReferenceIndex == 0 }) {
            let reached = allReach.sorted { $0.lowerBound < $1.lowerBound }
            for mdat in mdats {
                for gap in HEIFMetadataRewrite.gaps(in: mdat, outside: reached) {
                    patches.append(Patch(offset: gap.lowerBound, length: gap.upperBound - gap.lowerBound, head: [], fill: 0))
                    zeroed += gap.upperBound - gap.lowerBound
                }
            }
        }

        patches.sort { $0.offset < $1.offset }
        for (a, b) in zip(patches, patches.dropFirst()) where a.offset + a.length > b.offset {
            throw MediaError.malformed("\(name): HEIF metadata items overlap (bytes \(a.offset) and \(b.offset))")
        }
        self.patches = patches
        exifItems = exif
        xmpItems = xmp
        descriptions = container.descriptions.count
        freedBoxes = freed
        zeroedBytes = zeroed
    }

    /// The parts of `range` that none of `reached` (sorted by lower bound) covers.
    static func gaps(in range: Range<Int64>, outside reached: [ClosedRange<UInt64>]) -> [Range<Int64>] {
        var out: [Range<Int64>] = []
        var at = range.lowerBound
        for r in reached {
            guard at < range.upperBound else { break }
            if r.upperBound < UInt64(at) { continue }
            if r.lowerBound > UInt64(at) {
                let end = r.lowerBound >= UInt64(range.upperBound) ? range.upperBound : Int64(r.lowerBound)
                out.append(at..<end)
            }
            at = r.upperBound >= UInt64(range.upperBound) - 1 ? range.upperBound : max(at, Int64(r.upperBound) + 1)
        }
        if at < range.upperBound { out.append(at..<range.upperBound) }
        return out
    }

    /// The Exif item's bytes, gathered from its extents, rewritten, and scattered back.
    private static func exifPatches(_ source: some RandomAccessBytes, _ ranges: [Range<Int64>], item: UInt32) throws -> [Patch] {
        var total: Int64 = 0
        for r in ranges {
            total += r.upperBound - r.lowerBound   // at most 64 extents inside the file: no overflow
            guard total <= Int64(maximumExifItemSize) else {
                throw MediaError(.tooLarge, "\(source.name): HEIF Exif item \(item) is over \(maximumExifItemSize) bytes")
            }
        }
        var old: [UInt8] = []
        for r in ranges { old += try source.bytes(at: r.lowerBound, count: Int(r.upperBound - r.lowerBound)) }
        let new = try rewrittenExif(old, name: "\(source.name): HEIF Exif item \(item)")
        var patches: [Patch] = []
        var at = 0
        for r in ranges {
            let n = Int(r.upperBound - r.lowerBound)
            patches.append(Patch(offset: r.lowerBound, length: Int64(n), head: Array(new[at..<(at + n)]), fill: 0))
            at += n
        }
        return patches
    }

    /// An Exif item's new bytes, as many as `old`: the TIFF structure found where `tiffStart` says,
    /// replaced by the minimal block (or an empty one when nothing is kept); the 4-byte prefix and an
    /// "Exif\0\0" marker right before the TIFF header kept; everything else zero. An item whose TIFF
    /// header cannot be found becomes all zeros (it held nothing a reader could use).
    static func rewrittenExif(_ old: [UInt8], name: String) throws -> [UInt8] {
        var new = [UInt8](repeating: 0, count: old.count)
        guard let start = HEICProcessor.tiffStart(old) else { return new }
        let kept = JPEGSegments.parseLeniently(Array(old[start...]))?.kept ?? ExifFields()
        let block = ExifWriter.tiff(kept) ?? emptyTIFF
        guard block.count <= old.count - start else {
            throw MediaError(.tooLarge, "\(name): the new Exif block (\(block.count) bytes) does not fit the old one's \(old.count - start)")
        }
        if let skip = HEICProcessor.offsetPrefix(old), 4 + skip == start || 4 + skip + 6 == start {
            new.replaceSubrange(0..<4, with: old[0..<4])
        }
        if start >= 6, old[(start - 6)..<start].elementsEqual(JPEGSegments.exifPrefix) {
            new.replaceSubrange((start - 6)..<start, with: JPEGSegments.exifPrefix)
        }
        new.replaceSubrange(start..<(start + block.count), with: block)
        return new
    }

    /// An XMP item's extents overwritten: the empty element at the start of the first extent when
    /// it fits there, spaces everywhere else.
    private static func xmpPatches(_ ranges: [Range<Int64>]) -> [Patch] {
        ranges.enumerated().map { i, r in
            let head = i == 0 && r.upperBound - r.lowerBound >= Int64(emptyXMP.count) ? emptyXMP : []
            return Patch(offset: r.lowerBound, length: r.upperBound - r.lowerBound, head: head, fill: 0x20)
        }
    }

    /// Copies `input` to `output` with the patches applied, streaming (the input is read in order,
    /// through its buffer; fills are written in pieces).
    func write(_ input: InputFile, to output: OutputFile) throws {
        _ = try input.rewoundDescriptor()
        var at: Int64 = 0
        for p in patches {
            try input.copy(p.offset - at, to: output, "HEIF data")
            try output.write(p.head)
            var left = p.length - Int64(p.head.count)
            let chunk = [UInt8](repeating: p.fill, count: Int(min(left, 1 << 16)))
            while left > 0 {
                let n = Int(min(left, Int64(chunk.count)))
                try output.write(chunk[0..<n])
                left -= Int64(n)
            }
            try input.skip(p.length, "a HEIF metadata item")
            at = p.offset + p.length
        }
        try input.copy(input.size - at, to: output, "HEIF data")
    }

    /// The patched bytes, for bytes in memory (tests, the fuzzer).
    func applied(to bytes: [UInt8]) -> [UInt8] {
        var out = bytes
        for p in patches {
            let start = Int(p.offset), end = Int(p.offset + p.length)
            out.replaceSubrange(start..<(start + p.head.count), with: p.head)
            for i in (start + p.head.count)..<end { out[i] = p.fill }
        }
        return out
    }
}
