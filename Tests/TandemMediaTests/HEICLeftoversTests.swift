import XCTest
@testable import TandemMedia

/// Issue 34: a HEIC's padding and leftovers (`free`/`skip` payloads, `mdat` bytes no item reaches)
/// are gone from the stored copy, and a HEIC is bounded in pixels before libheif sees it.
final class HEICLeftoversTests: MediaTestCase {
    func testFreeSkipAndUnreferencedMdatBytesAreZeroedAndTheImageDecodes() throws {
        let plain = try TestImages.heic(width: 64, height: 32, exif: TestImages.cameraExif(orientation: 1))
        let extra = HEIFBuilder.box("free", Array("FREEBOX old owner note".utf8))
            + HEIFBuilder.box("skip", Array("SKIPBOX earlier edit".utf8))
            + HEIFBuilder.box("mdat", Array("ORPHAN earlier original".utf8))
        let original = plain + extra
        let input = try file("leftovers.heic", original)
        let output = dir.appendingPathComponent("clean.heic")
        let report = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        XCTAssertTrue(report.lossless)
        let clean = try read(output)
        XCTAssertEqual(clean.count, original.count, "in place: no offset moves")
        for secret in ["FREEBOX", "old owner note", "SKIPBOX", "earlier edit", "ORPHAN", "earlier original", "TestCam", "SN12345"] {
            XCTAssertTrue(contains(original, secret), secret)
            XCTAssertFalse(contains(clean, secret), "\(secret) survived")
        }
        let tail = Array(clean[plain.count...])
        XCTAssertEqual(Array(tail[4..<8]), Array("free".utf8))
        XCTAssertTrue(tail[8..<(8 + 22)].allSatisfy { $0 == 0 }, "the free box's payload is zeros")
        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate, "the capture date is kept")
        let a = try TestImages.decode(plain), b = try TestImages.decode(clean)
        XCTAssertEqual([a.width, a.height], [b.width, b.height])
        XCTAssertTrue(a.pixels == b.pixels, "the copy decodes to the same pixels")
    }

    /// Bytes inside one `mdat` between and after the items' extents are zeroed; the items' own
    /// bytes (image data) are not touched.
    func testGapsInsideMdatAreZeroed() throws {
        let exif = HEIFBuilder.exifItem()
        let gap1 = Array("GAP-ONE left by an editor".utf8), gap2 = Array("GAP-TWO trailing".utf8)
        let image = HEIFBuilder.image
        let mdat = image + gap1 + exif + gap2
        let bytes = HEIFBuilder.file([
            .init(id: 1, type: "hvc1", extents: [(0, UInt64(image.count))]),
            .init(id: 2, type: "Exif", extents: [(UInt64(image.count + gap1.count), UInt64(exif.count))]),
        ], mdat: mdat)
        let plan = try HEIFMetadataRewrite(MemoryBytes(bytes))
        let out = plan.applied(to: bytes)
        XCTAssertEqual(plan.zeroedBytes, Int64(gap1.count + gap2.count))
        XCTAssertFalse(contains(out, "GAP-ONE"))
        XCTAssertFalse(contains(out, "GAP-TWO"))
        XCTAssertTrue(contains(out, "CODED-IMAGE-DATA"), "image data untouched")
        let at = bytes.count - mdat.count
        XCTAssertEqual(Array(out[at..<(at + image.count)]), image)
    }

    func testGapArithmetic() {
        typealias R = ClosedRange<UInt64>
        XCTAssertEqual(HEIFMetadataRewrite.gaps(in: 10..<20, outside: []), [10..<20])
        XCTAssertEqual(HEIFMetadataRewrite.gaps(in: 10..<20, outside: [12...13, 15...30]), [10..<12, 14..<15])
        XCTAssertEqual(HEIFMetadataRewrite.gaps(in: 10..<20, outside: [0...9, 10...19]), [])
        XCTAssertEqual(HEIFMetadataRewrite.gaps(in: 10..<20, outside: [0...UInt64.max]), [])
        XCTAssertEqual(HEIFMetadataRewrite.gaps(in: 10..<20, outside: [11...11, 11...12, 25...UInt64.max]), [10..<11, 13..<20])
    }

    /// A file whose data is in another file (data reference ≠ 0) keeps its `mdat` as it is: what no
    /// item reaches cannot be known.
    func testMdatGapsAreLeftWhenDataIsElsewhere() throws {
        let image = HEIFBuilder.image
        var bytes = HEIFBuilder.file([.init(id: 1, type: "hvc1", extents: [(0, 8)])], mdat: image)
        // iloc v1, item 1: id(2) method(2) data_reference_index(2): set the reference to 1.
        let iloc = try XCTUnwrap(find(bytes, Array("iloc".utf8)))
        let entry = iloc + 4 + 4 + 2 + 2   // type, version/flags, sizes, count
        bytes[entry + 5] = 1
        let plan = try HEIFMetadataRewrite(MemoryBytes(bytes))
        XCTAssertEqual(plan.zeroedBytes, 0)
    }

    // MARK: the decode bound

    static func ispe(_ w: UInt32, _ h: UInt32) -> [UInt8] { HEIFBuilder.fullBox("ispe", version: 0, HEIFBuilder.u32(w) + HEIFBuilder.u32(h)) }

    /// `iprp` with `properties` and one `ipma` (version 0, 1-byte indices) giving item 1 each index.
    static func sized(_ properties: [[UInt8]], associate indices: [UInt8], items: [UInt32] = [1]) -> [UInt8] {
        let entries = items.flatMap { HEIFBuilder.u16(UInt16($0)) + [UInt8(indices.count)] + indices }
        let ipma = HEIFBuilder.fullBox("ipma", version: 0, HEIFBuilder.u32(UInt32(items.count)) + entries)
        return HEIFBuilder.box("iprp", HEIFBuilder.box("ipco", properties.joined().map { $0 }) + ipma)
    }

    static func crafted(_ iprp: [UInt8], items: [UInt32] = [1]) -> [UInt8] {
        HEIFBuilder.file(items.map { .init(id: $0, type: "hvc1", extents: [(0, 16)]) }, mdat: HEIFBuilder.image, properties: iprp)
    }

    private func assertTooLarge(_ bytes: [UInt8], forReencode: Bool = false, _ fragment: String, line: UInt = #line) {
        XCTAssertThrowsError(try HEIFDecodeBound.check(MemoryBytes(bytes), forReencode: forReencode), line: line) { error in
            let e = error as? MediaError
            XCTAssertEqual(e?.kind, .tooLarge, "\(error)", line: line)
            XCTAssertTrue(e?.detail.contains(fragment) == true, "\(error) should mention \(fragment)", line: line)
        }
    }

    func testDeclaredSizesAreBoundedBeforeDecoding() throws {
        let udes = HEIFBuilder.udes(["", "", "", ""])
        // Read through ipma: the ispe is the second property.
        let ok = Self.crafted(Self.sized([udes, Self.ispe(8064, 6048)], associate: [1, 0x82]))
        XCTAssertEqual(try HEIFContainer(MemoryBytes(ok)).declaredSizes, [.init(item: 1, width: 8064, height: 6048)])
        XCTAssertNoThrow(try HEIFDecodeBound.check(MemoryBytes(ok)), "a 48-megapixel photo")
        assertTooLarge(ok, forReencode: true, "for a re-encode")

        assertTooLarge(Self.crafted(Self.sized([Self.ispe(65_535, 65_535)], associate: [1])), "65535 × 65535")
        assertTooLarge(Self.crafted(Self.sized([Self.ispe(0, 10)], associate: [1])), "0 × 10")
        assertTooLarge(Self.crafted(Self.sized([Self.ispe(100, 100)], associate: [])), "no image size")
        assertTooLarge(Self.crafted([]), "no image size")
        // One shared ispe counted for every item it is associated with: 40 tiles of 4096 × 1024.
        let ids = Array(UInt32(1)...40)
        assertTooLarge(Self.crafted(Self.sized([Self.ispe(4096, 1024)], associate: [1], items: ids), items: ids), "in all")
        // An association past the properties is malformed, and so refused.
        assertTooLarge(Self.crafted(Self.sized([Self.ispe(10, 10)], associate: [2])), "cannot be bounded")
    }

    /// A libheif-written HEIC's own `ispe` is read; one whose `ispe` is rewritten to a bomb's size is
    /// refused by the thumbnail and the re-encode (both decode) before libheif reads it; its date,
    /// read from the header, and the in-place rewrite, which decodes nothing, still work.
    func testACraftedHeaderIsRefusedBeforeLibheif() throws {
        let plain = try TestImages.heic(width: 64, height: 32, exif: TestImages.cameraExif(orientation: 1))
        XCTAssertTrue(try HEIFContainer(MemoryBytes(plain)).declaredSizes.contains { $0.width == 64 && $0.height == 32 })
        var bomb = plain
        var search = 0
        while let at = find(Array(bomb[search...]), Array("ispe".utf8)).map({ $0 + search }) {
            // 16 000 × 16 000: under libheif's own limit (16 384 per side), 256 megapixels to decode.
            bomb.replaceSubrange((at + 8)..<(at + 16), with: HEIFBuilder.u32(16_000) + HEIFBuilder.u32(16_000))
            search = at + 16
        }
        let input = try file("bomb.heic", bomb)
        XCTAssertThrowsError(try PhotoProcessor.thumbnail(of: input)) { XCTAssertEqual(($0 as? MediaError)?.kind, .tooLarge, "\($0)") }
        XCTAssertEqual(try PhotoProcessor.captureDate(of: input), TestImages.cameraDate, "the date needs no decode")
        // The in-place rewrite needs no decode and still works; a container it refuses would be
        // re-encoded, and that is refused by the bound.
        XCTAssertTrue(try PhotoProcessor.sanitizedCopy(of: input, to: dir.appendingPathComponent("a.heic")).lossless)
        let sequence = try file("bomb-sequence.heic", bomb + HEIFBuilder.box("moov", []))
        XCTAssertThrowsError(try PhotoProcessor.sanitizedCopy(of: sequence, to: dir.appendingPathComponent("b.heic"))) {
            XCTAssertEqual(($0 as? MediaError)?.kind, .tooLarge, "\($0)")
        }
    }

    private func find(_ haystack: [UInt8], _ needle: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        return (0...(haystack.count - needle.count)).first { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}
