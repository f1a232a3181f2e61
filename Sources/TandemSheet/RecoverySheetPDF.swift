import Foundation

extension RecoverySheetPage {
    /// The sheet as a PDF (A4, as many pages as the holders need): the text of the sheet in the
    /// PDF base fonts (Helvetica, Courier; nothing embedded), with the recovery code's QR code and
    /// each holder's share code as a QR code drawn in vector, so it prints sharp at any size.
    /// Characters outside ASCII print as '?' (base fonts); the text sheet keeps them.
    public func pdf() throws -> [UInt8] {
        var pages: [String] = []
        var page = PDFPage()
        page.text(title, x: 50, size: 16, bold: true)
        page.text("Made \(date). Keep it on paper, away from the machine: with the code and one friend below,", x: 50, size: 9)
        page.text("anyone can become this node.", x: 50, size: 9)
        page.gap(8)
        page.text("Node ID", x: 50, size: 9, bold: true)
        page.text(nodeID, x: 50, size: 9, mono: true)
        page.gap(4)
        page.text("Recovery code", x: 50, size: 9, bold: true)
        page.text(code, x: 50, size: 13, mono: true)
        page.qr(try QRCode(code), x: 400, top: 740, side: 150)
        page.y = min(page.y, 580)
        page.text("Friends holding backups (any one is enough; a restore asks the others too):", x: 50, size: 10, bold: true)
        if holders.isEmpty { page.text("(none yet)", x: 60, size: 9) }
        for h in holders {
            let lines = h.froms.flatMap { Self.wrap("tandem restore --from '\($0)'", width: 88) }
            let blockHeight = max(Double(lines.count) * 10 + 30, h.qrText == nil ? 0 : 100)
            if page.y - blockHeight < 50 {
                pages.append(page.content)
                page = PDFPage()
            }
            page.gap(6)
            let top = page.y
            page.text(h.name.isEmpty ? h.id : "\(h.name)  \(h.id)", x: 60, size: 9, bold: true)
            if lines.isEmpty { page.text("(no relay or address known: ask them for their share code, `tandem id --share`)", x: 70, size: 8) }
            for l in lines { page.text(l, x: 70, size: 7.5, mono: true) }
            if let text = h.qrText {
                page.qr(try QRCode(text), x: 470, top: top + 8, side: 90)
                page.y = min(page.y, top - 92)
            }
        }
        page.gap(10)
        page.text("On a new machine: install tandem, run one restore line above (or scan a friend's code), and type the", x: 50, size: 9)
        page.text("recovery code when asked.", x: 50, size: 9)
        pages.append(page.content)
        return PDFWriter.document(pages: pages)
    }

    static func wrap(_ text: String, width: Int) -> [String] {
        var out: [String] = []
        var rest = Substring(text)
        while rest.count > width {
            out.append(String(rest.prefix(width)))
            rest = rest.dropFirst(width)
        }
        out.append(String(rest))
        return out
    }
}

/// One page's content stream, drawn from the top down (`y` is the next line's baseline, in points
/// from the bottom of an A4 page).
struct PDFPage {
    var content = ""
    var y: Double = 800

    static func escaped(_ s: String) -> String {
        var out = ""
        for u in s.unicodeScalars {
            switch u {
            case "(", ")", "\\": out += "\\" + String(u)
            case " "..."~": out.unicodeScalars.append(u)
            default: out += "?"
            }
        }
        return out
    }

    mutating func text(_ s: String, x: Double, size: Double, bold: Bool = false, mono: Bool = false) {
        y -= size * 1.3
        let font = mono ? "F3" : bold ? "F2" : "F1"
        content += "BT /\(font) \(Self.number(size)) Tf \(Self.number(x)) \(Self.number(y)) Td (\(Self.escaped(s))) Tj ET\n"
    }

    mutating func gap(_ points: Double) { y -= points }

    /// `qr` with its quiet zone in a square of `side` points whose top-left corner is (x, top).
    mutating func qr(_ qr: QRCode, x: Double, top: Double, side: Double) {
        let module = side / Double(qr.size + 8)
        var rects = ""
        for my in 0..<qr.size {
            var mx = 0
            while mx < qr.size {
                guard qr.isDark(mx, my) else { mx += 1; continue }
                // A run of dark modules on one row is one rectangle.
                var run = 1
                while mx + run < qr.size && qr.isDark(mx + run, my) { run += 1 }
                let rx = x + Double(mx + 4) * module
                let ry = top - Double(my + 5) * module
                rects += "\(Self.number(rx)) \(Self.number(ry)) \(Self.number(Double(run) * module)) \(Self.number(module)) re\n"
                mx += run
            }
        }
        content += "0 g\n" + rects + "f\n"
    }

    static func number(_ v: Double) -> String { String(format: "%.2f", v) }
}

/// The few objects a PDF of text and rectangles needs, with a correct cross-reference table.
enum PDFWriter {
    static func document(pages: [String]) -> [UInt8] {
        // Objects: 1 catalog, 2 pages, 3–5 fonts, then per page its page object and its content.
        var objects: [String] = []
        let firstPage = 6
        let kids = pages.indices.map { "\(firstPage + 2 * $0) 0 R" }.joined(separator: " ")
        objects.append("<< /Type /Catalog /Pages 2 0 R >>")
        objects.append("<< /Type /Pages /Kids [\(kids)] /Count \(pages.count) >>")
        objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
        objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>")
        objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Courier /Encoding /WinAnsiEncoding >>")
        for (i, content) in pages.enumerated() {
            objects.append("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R /F2 4 0 R /F3 5 0 R >> >> /Contents \(firstPage + 2 * i + 1) 0 R >>")
            objects.append("<< /Length \(content.utf8.count) >>\nstream\n\(content)endstream")
        }
        var out = "%PDF-1.4\n"
        var offsets: [Int] = []
        for (i, o) in objects.enumerated() {
            offsets.append(out.utf8.count)
            out += "\(i + 1) 0 obj\n\(o)\nendobj\n"
        }
        let xref = out.utf8.count
        out += "xref\n0 \(objects.count + 1)\n0000000000 65535 f \n"
        for o in offsets { out += String(format: "%010d 00000 n \n", o) }
        out += "trailer\n<< /Size \(objects.count + 1) /Root 1 0 R >>\nstartxref\n\(xref)\n%%EOF\n"
        return Array(out.utf8)
    }
}
