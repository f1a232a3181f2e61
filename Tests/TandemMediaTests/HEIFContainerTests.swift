import XCTest
@testable import TandemMedia

/// HEIF files built by hand, box by box, so each structure the reader accepts and each one it
/// must refuse can be made exactly.
enum HEIFBuilder {
    static func u16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
    static func u32(_ v: UInt32) -> [UInt8] { TestImages.be32(v) }
    static func uint(_ v: UInt64, _ size: Int) -> [UInt8] { (0..<size).reversed().map { UInt8((v >> (8 * UInt64($0))) & 0xFF) } }

    static func box(_ type: String, _ payload: [UInt8]) -> [UInt8] { u32(UInt32(8 + payload.count)) + Array(type.utf8) + payload }
    static func fullBox(_ type: String, version: UInt8, flags: UInt32 = 0, _ payload: [UInt8]) -> [UInt8] {
        box(type, [version] + uint(UInt64(flags), 3) + payload)
    }

    static let ftyp = box("ftyp", Array("heic".utf8) + u32(0) + Array("mif1heic".utf8))
    static let hdlr = fullBox("hdlr", version: 0, u32(0) + Array("pict".utf8) + [UInt8](repeating: 0, count: 12) + [0])

    struct Item {
        var id: UInt32
        var type: String
        var contentType: String? = nil
        var method: UInt8 = 0
        var base: UInt64 = 0
        /// (offset, length); offsets relative to `base` (and, for method 0 with `inMdat`, to the
        /// start of the mdat payload).
        var extents: [(UInt64, UInt64)]
        var inMdat = true
    }

    static func infe(_ item: Item, version: UInt8) -> [UInt8] {
        let id = version == 3 ? u32(item.id) : u16(UInt16(item.id))
        var p = id + u16(0) + Array(item.type.utf8) + [0]
        if let c = item.contentType { p += Array(c.utf8) + [0] }
        return fullBox("infe", version: version, flags: 1, p)
    }

    struct Sizes { var offset = 4, length = 4, base = 0, index = 0 }

    static func iloc(_ items: [Item], version: UInt8, sizes: Sizes, mdatStart: UInt64) -> [UInt8] {
        var p: [UInt8] = [UInt8(sizes.offset << 4 | sizes.length), UInt8(sizes.base << 4 | sizes.index)]
        p += version < 2 ? u16(UInt16(items.count)) : u32(UInt32(items.count))
        for item in items {
            p += version < 2 ? u16(UInt16(item.id)) : u32(item.id)
            if version >= 1 { p += u16(UInt16(item.method)) }
            p += u16(0) + uint(item.base, sizes.base) + u16(UInt16(item.extents.count))
            for (offset, length) in item.extents {
                if version >= 1 { p += uint(0, sizes.index) }
                let absolute = item.method == 0 && item.inMdat ? offset + mdatStart : offset
                p += uint(absolute, sizes.offset) + uint(length, sizes.length)
            }
        }
        return fullBox("iloc", version: version, p)
    }

    /// ftyp, meta (hdlr, iinf, iloc, idat, then `properties`: an `iprp` box), mdat; `extra` boxes after mdat.
    static func file(_ items: [Item], mdat: [UInt8], idat: [UInt8]? = nil, ilocVersion: UInt8 = 1, infeVersion: UInt8 = 2,
                     sizes: Sizes = Sizes(), properties: [UInt8] = [], extra: [UInt8] = []) -> [UInt8] {
        func meta(_ mdatStart: UInt64) -> [UInt8] {
            let iinf = fullBox("iinf", version: 0, u16(UInt16(items.count)) + items.flatMap { infe($0, version: infeVersion) })
            return fullBox("meta", version: 0, hdlr + iinf + iloc(items, version: ilocVersion, sizes: sizes, mdatStart: mdatStart)
                           + (idat.map { box("idat", $0) } ?? []) + properties)
        }
        let mdatStart = UInt64(ftyp.count + meta(0).count + 8)
        return ftyp + meta(mdatStart) + box("mdat", mdat) + extra
    }

    /// An Exif item's bytes as cameras write them: offset 6, "Exif\0\0", the TIFF structure.
    static func exifItem(_ tiff: [UInt8] = TestImages.cameraExif(orientation: 3)) -> [UInt8] {
        u32(6) + JPEGSegments.exifPrefix + tiff
    }

    /// A user-description property (`udes`): language, name, description, tags, each NUL-terminated.
    static func udes(_ strings: [String]) -> [UInt8] {
        fullBox("udes", version: 0, strings.flatMap { Array($0.utf8) + [0] })
    }

    /// `iprp` holding one `ipco` with `properties` and an `ipma` associating none of them.
    static func iprp(_ properties: [UInt8]) -> [UInt8] {
        box("iprp", box("ipco", properties) + fullBox("ipma", version: 0, u32(0)))
    }

    static let image = Array("CODED-IMAGE-DATA".utf8) + [UInt8](repeating: 0xAB, count: 48)
    static let xmp = Array(#"<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF>TestCam X100 48,51.4N</rdf:RDF></x:xmpmeta>"#.utf8)

    /// A typical file: an image item, an Exif item and an XMP item, all in mdat.
    static func typical(ilocVersion: UInt8 = 1, infeVersion: UInt8 = 2, sizes: Sizes = Sizes(), ids: [UInt32] = [1, 2, 3]) -> [UInt8] {
        let exif = exifItem()
        let mdat = image + exif + xmp
        return file([
            Item(id: ids[0], type: "hvc1", extents: [(0, UInt64(image.count))]),
            Item(id: ids[1], type: "Exif", extents: [(UInt64(image.count), UInt64(exif.count))]),
            Item(id: ids[2], type: "mime", contentType: "application/rdf+xml", extents: [(UInt64(image.count + exif.count), UInt64(xmp.count))]),
        ], mdat: mdat, ilocVersion: ilocVersion, infeVersion: infeVersion, sizes: sizes)
    }
}

final class HEIFContainerTests: MediaTestCase {
    private func rewrite(_ bytes: [UInt8]) throws -> (plan: HEIFMetadataRewrite, out: [UInt8]) {
        let plan = try HEIFMetadataRewrite(MemoryBytes(bytes))
        let out = plan.applied(to: bytes)
        XCTAssertEqual(out.count, bytes.count)
        return (plan, out)
    }

    private func assertRefused(_ bytes: [UInt8], _ fragment: String, kind: MediaError.Kind = .malformed,
                               file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try HEIFMetadataRewrite(MemoryBytes(bytes)), file: file, line: line) { error in
            guard let e = error as? MediaError else { return XCTFail("not a MediaError: \(error)", file: file, line: line) }
            XCTAssertEqual(e.kind, kind, "\(e)", file: file, line: line)
            XCTAssertTrue(e.detail.contains(fragment), "\(e.detail) should mention \(fragment)", file: file, line: line)
            XCTAssertFalse(e.detail.contains("\n"), file: file, line: line)
        }
    }

    private func find(_ haystack: [UInt8], _ needle: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        return (0...(haystack.count - needle.count)).first { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    /// The Exif item at `range` of `out` is the minimal block: no GPS, no device tags, the date and
    /// orientation 3 kept, the offset prefix and marker kept, zeros after.
    private func assertCleanExif(_ item: ArraySlice<UInt8>, file: StaticString = #filePath, line: UInt = #line) throws {
        let bytes = Array(item)
        XCTAssertEqual(Array(bytes[0..<10]), HEIFBuilder.u32(6) + JPEGSegments.exifPrefix, file: file, line: line)
        let tiff = try XCTUnwrap(HEICProcessor.tiffBody(bytes), file: file, line: line)
        let fields = try ExifFields(tiff: tiff)
        XCTAssertFalse(fields.hasGPS, file: file, line: line)
        XCTAssertTrue(fields.deviceTags.isEmpty, file: file, line: line)
        XCTAssertEqual(fields.orientation, 3, file: file, line: line)
        XCTAssertEqual(fields.captureMilliseconds, TestImages.cameraDate, file: file, line: line)
        let block = try XCTUnwrap(ExifWriter.tiff(fields.kept), file: file, line: line)
        XCTAssertTrue(bytes[(10 + block.count)...].allSatisfy { $0 == 0 }, "zero-filled after the block", file: file, line: line)
    }

    func testTypicalFileIsRewrittenInPlace() throws {
        for (ilocVersion, infeVersion, sizes, ids) in [
            (UInt8(0), UInt8(2), HEIFBuilder.Sizes(), [UInt32(1), 2, 3]),
            (1, 2, HEIFBuilder.Sizes(offset: 8, length: 8, base: 0, index: 4), [1, 2, 3]),
            (2, 3, HEIFBuilder.Sizes(offset: 4, length: 4, base: 8, index: 8), [0x0001_0000, 0xFFFF_FFFE, 70_000]),
        ] {
            let original = HEIFBuilder.typical(ilocVersion: ilocVersion, infeVersion: infeVersion, sizes: sizes, ids: ids)
            let (plan, out) = try rewrite(original)
            XCTAssertEqual(plan.exifItems, 1)
            XCTAssertEqual(plan.xmpItems, 1)
            let imageAt = try XCTUnwrap(find(original, HEIFBuilder.image))
            let exifAt = imageAt + HEIFBuilder.image.count
            let exifCount = HEIFBuilder.exifItem().count
            let xmpAt = exifAt + exifCount
            // Outside the metadata items, every byte is the original's.
            XCTAssertEqual(Array(out[..<exifAt]), Array(original[..<exifAt]))
            XCTAssertEqual(Array(out[(xmpAt + HEIFBuilder.xmp.count)...]), Array(original[(xmpAt + HEIFBuilder.xmp.count)...]))
            try assertCleanExif(out[exifAt..<(exifAt + exifCount)])
            let xmp = Array(out[xmpAt..<(xmpAt + HEIFBuilder.xmp.count)])
            XCTAssertEqual(Array(xmp.prefix(HEIFMetadataRewrite.emptyXMP.count)), HEIFMetadataRewrite.emptyXMP)
            XCTAssertTrue(xmp.dropFirst(HEIFMetadataRewrite.emptyXMP.count).allSatisfy { $0 == 0x20 })
            for secret in ["TestCam", "X100", "SN12345", "TestFirmware"] {
                XCTAssertNotNil(find(original, Array(secret.utf8)))
                XCTAssertNil(find(out, Array(secret.utf8)), "\(secret) survived (iloc v\(ilocVersion))")
            }
            // A second pass changes nothing: the rewrite is idempotent.
            XCTAssertEqual(try rewrite(out).out, out)
        }
    }

    func testExifInIdatAndSplitAcrossExtents() throws {
        let exif = HEIFBuilder.exifItem()
        let half = exif.count / 2
        // Exif in idat, in two extents stored in reverse order, with a base offset.
        let idat = [0xEE, 0xEE] + Array(exif[half...]) + Array(exif[..<half])
        let original = HEIFBuilder.file([
            .init(id: 1, type: "hvc1", extents: [(0, UInt64(HEIFBuilder.image.count))]),
            .init(id: 2, type: "Exif", method: 1, base: 2,
                  extents: [(UInt64(exif.count - half), UInt64(half)), (0, UInt64(exif.count - half))]),
        ], mdat: HEIFBuilder.image, idat: idat, sizes: .init(offset: 4, length: 4, base: 4))
        let (_, out) = try rewrite(original)
        let idatAt = try XCTUnwrap(find(original, Array("idat".utf8))) + 4
        let rewritten = Array(out[(idatAt + 2 + exif.count - half)..<(idatAt + 2 + exif.count)]) + Array(out[(idatAt + 2)..<(idatAt + 2 + exif.count - half)])
        try assertCleanExif(rewritten[...])
        XCTAssertEqual(Array(out[..<(idatAt + 2)]), Array(original[..<(idatAt + 2)]))
        XCTAssertEqual(Array(out[(idatAt + 2 + exif.count)...]), Array(original[(idatAt + 2 + exif.count)...]))
    }

    func testExifForms() throws {
        let tiff = TestImages.cameraExif(orientation: 3)
        // Bare TIFF, "Exif\0\0" then TIFF, offset 0 then TIFF, offset 6 then marker then TIFF.
        for (prefix, tiffAt) in [([UInt8](), 0), (JPEGSegments.exifPrefix, 6), (HEIFBuilder.u32(0), 4),
                                 (HEIFBuilder.u32(6) + JPEGSegments.exifPrefix, 10), (HEIFBuilder.u32(0) + JPEGSegments.exifPrefix, 10)] {
            let old = prefix + tiff
            let new = try HEIFMetadataRewrite.rewrittenExif(old, name: "test")
            XCTAssertEqual(new.count, old.count)
            XCTAssertEqual(Array(new[..<tiffAt]), prefix, "prefix \(prefix) kept")
            XCTAssertEqual(HEICProcessor.tiffStart(new), tiffAt)
            let fields = try ExifFields(tiff: try XCTUnwrap(HEICProcessor.tiffBody(new)))
            XCTAssertEqual(fields, try ExifFields(tiff: tiff).kept)
        }
        // No TIFF header anywhere: all zeros. A damaged TIFF: an empty one.
        let junk = Array("GPS 48N TestCam".utf8) + [UInt8](repeating: 7, count: 20)
        XCTAssertEqual(try HEIFMetadataRewrite.rewrittenExif(junk, name: "test"), [UInt8](repeating: 0, count: junk.count))
        let damaged = HEIFBuilder.u32(0) + [0x4D, 0x4D, 0, 42, 0x7F, 0xFF, 0xFF, 0xFF] + Array("TestCam".utf8) + [UInt8](repeating: 0, count: 8)
        let empty = try HEIFMetadataRewrite.rewrittenExif(damaged, name: "test")
        XCTAssertEqual(Array(empty[4..<(4 + HEIFMetadataRewrite.emptyTIFF.count)]), HEIFMetadataRewrite.emptyTIFF)
        XCTAssertNil(find(empty, Array("TestCam".utf8)))
        // A block that does not fit: only DateTimeOriginal, no ExifVersion (the new block adds one).
        let tight = TestImages.tiff([[TestImages.pointer(0x8769, toIFD: 1)], [.ascii(0x9003, "2021:07:04 15:30:45")]])
        XCTAssertThrowsError(try HEIFMetadataRewrite.rewrittenExif(HEIFBuilder.u32(0) + tight, name: "test")) {
            XCTAssertEqual(($0 as? MediaError)?.kind, .tooLarge)
        }
    }

    func testBoxSizeForms() throws {
        let typical = HEIFBuilder.typical()
        let mdatAt = try XCTUnwrap(find(typical, Array("mdat".utf8))) - 4
        // mdat with size 0 (to the end of the file).
        var sizeZero = typical
        sizeZero.replaceSubrange(mdatAt..<(mdatAt + 4), with: [0, 0, 0, 0])
        XCTAssertEqual(try rewrite(sizeZero).plan.exifItems, 1)
        // mdat with size 1 and a 64-bit size: 8 more header bytes, so every offset moves by 8.
        let items = [HEIFBuilder.Item(id: 1, type: "hvc1", extents: [(8, UInt64(HEIFBuilder.image.count))]),
                     HEIFBuilder.Item(id: 2, type: "Exif", extents: [(8 + UInt64(HEIFBuilder.image.count), UInt64(HEIFBuilder.exifItem().count))])]
        let mdatPayload = HEIFBuilder.image + HEIFBuilder.exifItem()
        let plain = HEIFBuilder.file(items, mdat: [UInt8](repeating: 0, count: 8) + mdatPayload)
        let at = try XCTUnwrap(find(plain, Array("mdat".utf8))) - 4
        let large = Array(plain[..<at]) + HEIFBuilder.u32(1) + Array("mdat".utf8) + HEIFBuilder.uint(UInt64(16 + mdatPayload.count), 8) + mdatPayload
        XCTAssertEqual(large.count, plain.count)
        let (_, out) = try rewrite(large)
        try assertCleanExif(out[(at + 16 + HEIFBuilder.image.count)...])
        // A 64-bit size past the file, and one of 2^63 and more.
        for size: UInt64 in [UInt64(17 + mdatPayload.count), 1 << 63, .max] {
            let bad = Array(plain[..<at]) + HEIFBuilder.u32(1) + Array("mdat".utf8) + HEIFBuilder.uint(size, 8) + mdatPayload
            assertRefused(bad, "mdat")
        }
        // A size smaller than the header.
        var tiny = typical
        tiny.replaceSubrange(mdatAt..<(mdatAt + 4), with: [0, 0, 0, 7])
        assertRefused(tiny, "less than its 8-byte header")
        // A child box larger than its parent (iloc announcing more than meta holds).
        var big = typical
        let ilocAt = try XCTUnwrap(find(typical, Array("iloc".utf8))) - 4
        big.replaceSubrange(ilocAt..<(ilocAt + 4), with: HEIFBuilder.u32(0x0010_0000))
        assertRefused(big, "only")
        // Two metas, no ftyp, a handler that is not pict, no meta at all.
        let metaAt = try XCTUnwrap(find(typical, Array("meta".utf8))) - 4
        let meta = Array(typical[metaAt..<mdatAt])
        assertRefused(Array(typical[..<mdatAt]) + meta + Array(typical[mdatAt...]), "2 top-level 'meta'")
        assertRefused(HEIFBuilder.box("free", []) + Array(typical), "ftyp")
        var vide = typical
        let pictAt = try XCTUnwrap(find(typical, Array("pict".utf8)))
        vide.replaceSubrange(pictAt..<(pictAt + 4), with: Array("vide".utf8))
        assertRefused(vide, "handler")
        assertRefused(HEIFBuilder.ftyp + HEIFBuilder.box("mdat", []), "0 top-level 'meta'")
    }

    func testEveryPrefixAndRandomFlipsThrowOrRewrite() throws {
        let typical = HEIFBuilder.typical(ilocVersion: 2, infeVersion: 3)
        func exercise(_ bytes: [UInt8]) {
            do {
                let out = try HEIFMetadataRewrite(MemoryBytes(bytes)).applied(to: bytes)
                XCTAssertEqual(out.count, bytes.count)
            } catch let e as MediaError {
                XCTAssertFalse(e.detail.isEmpty)
                XCTAssertFalse(e.detail.contains("\n"), e.detail)
            } catch {
                XCTFail("not a MediaError: \(error)")
            }
        }
        for n in 0...typical.count { exercise(Array(typical.prefix(n))) }
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<3000 {
            var b = typical
            for _ in 0..<Int.random(in: 1...6, using: &generator) {
                let at = Int.random(in: 0..<b.count, using: &generator)
                b[at] = [0x00, 0x01, 0x7F, 0x80, 0xFF, UInt8.random(in: 0...255, using: &generator)][Int.random(in: 0..<6, using: &generator)]
            }
            exercise(b)
        }
    }

    func testHostileLocationsAreRefused() throws {
        let image = HEIFBuilder.image, exif = HEIFBuilder.exifItem()
        let mdat = image + exif
        let hvc1 = HEIFBuilder.Item(id: 1, type: "hvc1", extents: [(0, UInt64(image.count))])
        func exifItem(_ change: (inout HEIFBuilder.Item) -> Void) -> HEIFBuilder.Item {
            var item = HEIFBuilder.Item(id: 2, type: "Exif", extents: [(UInt64(image.count), UInt64(exif.count))])
            change(&item)
            return item
        }
        // Past the end of the file.
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.extents = [(UInt64(image.count), 1 << 20)] }], mdat: mdat), "outside")
        // Overlapping the file's header (offset 0 is ftyp, not mdat).
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.inMdat = false; $0.extents = [(0, 16)] }], mdat: mdat), "not inside an 'mdat'")
        // Sharing bytes with the image.
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.extents = [(UInt64(image.count - 4), UInt64(exif.count))] }], mdat: mdat + [0, 0, 0, 0]), "shared")
        // An image item reaching "to the end" (length 0) from before the Exif item.
        let greedy = HEIFBuilder.Item(id: 1, type: "hvc1", extents: [(0, 0)])
        assertRefused(HEIFBuilder.file([greedy, exifItem { _ in }], mdat: mdat), "shared")
        // Base + offset overflowing 64 bits, with 8-byte fields.
        let sizes = HEIFBuilder.Sizes(offset: 8, length: 8, base: 8, index: 0)
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.base = .max; $0.inMdat = false; $0.extents = [(2, 4)] }], mdat: mdat, sizes: sizes), "outside")
        // Construction method 2, in idat without an idat, in another file, of length 0, and a method 5.
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.method = 2 }], mdat: mdat), "construction method 2")
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.method = 1 }], mdat: mdat), "'idat' box the file does not have")
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.extents = [(UInt64(image.count), 0)] }], mdat: mdat), "length 0")
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.method = 5 }], mdat: mdat), "construction method 5")
        var other = HEIFBuilder.file([hvc1, exifItem { _ in }], mdat: mdat)
        let ilocAt = try XCTUnwrap(find(other, Array("iloc".utf8)))
        // v1 iloc after its type: version/flags 4, sizes 2, count 2, item 1 (id, method, ref, base 0, count, one 8-byte
        // extent: 16 bytes), then item 2's id and method: its data reference index.
        let secondRef = ilocAt + 4 + 4 + 2 + 2 + 16 + 2 + 2
        other.replaceSubrange(secondRef..<(secondRef + 2), with: [0, 1])
        assertRefused(other, "another file")
        // idat extent past idat's end.
        assertRefused(HEIFBuilder.file([hvc1, exifItem { $0.method = 1; $0.extents = [(0, UInt64(exif.count + 1))] }], mdat: image, idat: exif), "outside")
        // Offset size 3 (only 0, 4, 8 exist).
        assertRefused(HEIFBuilder.file([hvc1], mdat: mdat, sizes: .init(offset: 3)), "offset_size 3")
        // Two Exif items on the same bytes.
        assertRefused(HEIFBuilder.file([hvc1, exifItem { _ in }, exifItem { $0.id = 3 }], mdat: mdat), "overlap")
        // An image sequence.
        assertRefused(HEIFBuilder.typical() + HEIFBuilder.box("moov", []), "image sequence")
        // An item's data inside a vendor box.
        let uuid = HEIFBuilder.box("uuid", [UInt8](repeating: 1, count: 16) + Array("TestCam".utf8))
        let typical = HEIFBuilder.typical()
        var withData = HEIFBuilder.file([hvc1, exifItem { _ in },
                                         .init(id: 4, type: "hvc1", extents: [(UInt64(mdat.count + 8 + 16), 7)])], mdat: mdat, extra: uuid)
        assertRefused(withData, "lies in a top-level 'uuid'")
        withData = typical + uuid
        let (plan, out) = try rewrite(withData)
        XCTAssertEqual(plan.freedBoxes, ["uuid"])
        XCTAssertEqual(Array(out[typical.count..<(typical.count + 8)]), HEIFBuilder.u32(UInt32(uuid.count)) + Array("free".utf8))
        XCTAssertTrue(out[(typical.count + 8)...].allSatisfy { $0 == 0 })
    }

    func testUserDescriptionPropertiesAreEmptiedInPlace() throws {
        let image = HEIFBuilder.image, exif = HEIFBuilder.exifItem()
        let items = [HEIFBuilder.Item(id: 1, type: "hvc1", extents: [(0, UInt64(image.count))]),
                     HEIFBuilder.Item(id: 2, type: "Exif", extents: [(UInt64(image.count), UInt64(exif.count))])]
        let ispe = HEIFBuilder.fullBox("ispe", version: 0, HEIFBuilder.u32(4032) + HEIFBuilder.u32(3024))
        let first = HEIFBuilder.udes(["en-GB", "Anna's TestCam X100", "Home, 48.8566 N 2.3522 E", "family,SN12345"])
        let second = HEIFBuilder.udes(["fr", "", "TestFirmware 1.2", ""])
        let original = HEIFBuilder.file(items, mdat: image + exif, properties: HEIFBuilder.iprp(ispe + first + ispe + second))
        let (plan, out) = try rewrite(original)
        XCTAssertEqual(plan.descriptions, 2)
        XCTAssertEqual(plan.exifItems, 1)
        for secret in ["en-GB", "TestCam", "48.8566", "family", "SN12345", "TestFirmware"] {
            XCTAssertNotNil(find(original, Array(secret.utf8)), secret)
            XCTAssertNil(find(out, Array(secret.utf8)), "\(secret) survived")
        }
        // Each box keeps its header, version and flags; its strings read as empty; the properties
        // beside it are untouched.
        let starts = (0...(out.count - 8)).filter { out[($0 + 4)..<($0 + 8)].elementsEqual(Array("udes".utf8)) }
        XCTAssertEqual(starts, (0...(original.count - 8)).filter { original[($0 + 4)..<($0 + 8)].elementsEqual(Array("udes".utf8)) })
        XCTAssertEqual(starts.count, 2)
        for (start, udes) in zip(starts, [first, second]) {
            XCTAssertEqual(Array(out[start..<(start + 12)]), Array(udes.prefix(12)), "size, type, version and flags kept")
            XCTAssertTrue(out[(start + 12)..<(start + udes.count)].allSatisfy { $0 == 0 }, "the strings are zeros")
        }
        XCTAssertEqual(find(out, ispe + Array(out[starts[0]..<(starts[0] + first.count)]) + ispe), find(original, ispe + first + ispe))
        let changed = (0..<out.count).filter { out[$0] != original[$0] }
        let exifAt = try XCTUnwrap(find(original, exif))
        for i in changed {
            let inUdes = zip(starts, [first, second]).contains { (start, udes) in ((start + 12)..<(start + udes.count)).contains(i) }
            XCTAssertTrue(inUdes || (exifAt..<(exifAt + exif.count)).contains(i), "byte \(i) changed outside the metadata")
        }
        XCTAssertEqual(try rewrite(out).out, out, "idempotent")

        // A file without properties, or with an empty ipco, has none to empty.
        XCTAssertEqual(try rewrite(HEIFBuilder.file(items, mdat: image + exif, properties: HEIFBuilder.iprp([]))).plan.descriptions, 0)
        // An item whose data lies in the strings: refused (the re-encode takes the file).
        func pointingAt(_ offset: UInt64) -> [UInt8] {
            HEIFBuilder.file(items + [.init(id: 3, type: "hvc1", extents: [(offset, UInt64(4))], inMdat: false)],
                             mdat: image + exif, properties: HEIFBuilder.iprp(first))
        }
        // The extent's offset field has a fixed size, so the layout does not depend on its value.
        let stringsAt = try XCTUnwrap(find(pointingAt(0), Array("Anna".utf8)))
        XCTAssertEqual(find(pointingAt(UInt64(stringsAt)), Array("Anna".utf8)) ?? -1, stringsAt)
        assertRefused(pointingAt(UInt64(stringsAt)), "lies in a 'udes' property")
        // Two ipco boxes, or two iprp boxes: refused.
        let twoIpco = HEIFBuilder.box("iprp", HEIFBuilder.box("ipco", first) + HEIFBuilder.box("ipco", []))
        assertRefused(HEIFBuilder.file(items, mdat: image + exif, properties: twoIpco), "2 'ipco' boxes")
        assertRefused(HEIFBuilder.file(items, mdat: image + exif, properties: HEIFBuilder.iprp(first) + HEIFBuilder.iprp([])), "two 'iprp' boxes")
        // A udes box running past its ipco: refused by the box reader.
        var cut = HEIFBuilder.udes(["en", "x"])
        cut.replaceSubrange(0..<4, with: HEIFBuilder.u32(UInt32(cut.count + 40)))
        assertRefused(HEIFBuilder.file(items, mdat: image + exif, properties: HEIFBuilder.iprp(cut)), "udes")
    }

    func testAbsurdCounts() throws {
        let typical = HEIFBuilder.typical()
        // iinf announcing 2^32 - 1 items.
        var b = typical
        let iinfAt = try XCTUnwrap(find(b, Array("iinf".utf8)))
        b.replaceSubrange((iinfAt + 8)..<(iinfAt + 10), with: [0xFF, 0xFF])
        assertRefused(b, "65535 items", kind: .tooLarge)
        // iloc (v2) announcing 70 000 items; an item with 65 535 extents.
        var c = HEIFBuilder.typical(ilocVersion: 2)
        let ilocAt = try XCTUnwrap(find(c, Array("iloc".utf8)))
        c.replaceSubrange((ilocAt + 4 + 4 + 2)..<(ilocAt + 4 + 4 + 2 + 4), with: HEIFBuilder.u32(70_000))
        assertRefused(c, "70000 items", kind: .tooLarge)
        var d = typical
        let ilocAt1 = try XCTUnwrap(find(d, Array("iloc".utf8)))
        // v1: version/flags, sizes, count (2), id (2), method (2), ref (2), base (0), extent count.
        let extentCountAt = ilocAt1 + 4 + 4 + 2 + 2 + 2 + 2 + 2
        d.replaceSubrange(extentCountAt..<(extentCountAt + 2), with: [0xFF, 0xFF])
        assertRefused(d, "65535 extents", kind: .tooLarge)
        // 2,000 top-level free boxes.
        let frees = (0..<2000).flatMap { _ in HEIFBuilder.box("free", []) }
        assertRefused(typical + frees, "top-level boxes", kind: .tooLarge)
    }
}
