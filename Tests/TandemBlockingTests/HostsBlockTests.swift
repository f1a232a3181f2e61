import XCTest
@testable import TandemBlocking

final class HostsBlockTests: XCTestCase {
    func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

    func testApplyAppendsAMarkedBlockWithWwwFormsForBothFamilies() {
        let original = "127.0.0.1 localhost\n::1 localhost\n"
        let out = HostsBlock.applying(mode: "work", domains: ["Example.com", "www.news.org", "https://video.site:443/watch?v=1"], to: original)
        let expected = original
            + "# BEGIN tandem mode work\n"
            + "# Managed by Tandem while this mode is locked; removed when it unlocks. Do not edit.\n"
            + "0.0.0.0 example.com\n:: example.com\n0.0.0.0 www.example.com\n:: www.example.com\n"
            + "0.0.0.0 www.news.org\n:: www.news.org\n"
            + "0.0.0.0 video.site\n:: video.site\n0.0.0.0 www.video.site\n:: www.video.site\n"
            + "# END tandem mode work\n"
        XCTAssertEqual(bytes(out), bytes(expected))
        XCTAssertEqual(HostsBlock.modes(in: out), ["work"])
        XCTAssertEqual(bytes(HostsBlock.removing(mode: "work", from: out)), bytes(original))
    }

    func testRoundTripsByteForByte() {
        let originals = [
            "", "a", "a\n", "\n", "\n\n", "a\r", "a\r\n", "x\r\ny", "x\r\ny\r\n", "# my comment\n127.0.0.1 localhost",
            "127.0.0.1 localhost\r\n# BEGIN something else\r\n0.0.0.0 ads.example\r\n",
            "0.0.0.0 mine.example\n# END of my list", "ünïcødé\t line\n\u{2028}\n", "# BEGIN tandem mode other\n",
        ]
        for original in originals {
            let once = HostsBlock.applying(mode: "deep work", domains: ["a.example", "b.example"], to: original)
            XCTAssertNotEqual(once, original)
            XCTAssertEqual(bytes(HostsBlock.removing(mode: "deep work", from: once)), bytes(original), "original: \(original.debugDescription)")
            let twice = HostsBlock.applying(mode: "deep work", domains: ["c.example"], to: once)
            XCTAssertFalse(twice.contains("a.example"))
            XCTAssertEqual(bytes(HostsBlock.removing(mode: "deep work", from: twice)), bytes(original), "original: \(original.debugDescription)")
            XCTAssertEqual(bytes(HostsBlock.applying(mode: "deep work", domains: [], to: twice)), bytes(original))
        }
    }

    func testAppendAddsTheMissingNewlineInTheFilesStyle() {
        XCTAssertTrue(HostsBlock.applying(mode: "m", domains: ["x.org"], to: "a").hasPrefix("a\n# BEGIN tandem mode m\n"))
        XCTAssertFalse(HostsBlock.applying(mode: "m", domains: ["x.org"], to: "a").hasSuffix("\n"))
        let crlf = HostsBlock.applying(mode: "m", domains: ["x.org"], to: "a\r\nb")
        XCTAssertEqual(bytes(crlf), bytes("a\r\nb\r\n# BEGIN tandem mode m\r\n\(HostsBlock.commentLine)\r\n0.0.0.0 x.org\r\n:: x.org\r\n0.0.0.0 www.x.org\r\n:: www.x.org\r\n# END tandem mode m"))
    }

    func testReplacesInPlaceAndKeepsOtherModes() {
        let original = "top\n"
        var text = HostsBlock.applying(mode: "a", domains: ["one.example"], to: original)
        text += "between\n"
        text = HostsBlock.applying(mode: "b", domains: ["two.example"], to: text)
        text += "bottom\n"
        let replaced = HostsBlock.applying(mode: "a", domains: ["three.example"], to: text)
        let lines = replaced.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(lines.first, "top")
        XCTAssertEqual(lines[1], "# BEGIN tandem mode a")
        XCTAssertTrue(lines.contains("0.0.0.0 three.example"))
        XCTAssertFalse(lines.contains("0.0.0.0 one.example"))
        XCTAssertLessThan(lines.firstIndex(of: "# END tandem mode a")!, lines.firstIndex(of: "between")!)
        XCTAssertEqual(HostsBlock.modes(in: replaced), ["a", "b"])
        let withoutA = HostsBlock.removing(mode: "a", from: replaced)
        XCTAssertEqual(HostsBlock.modes(in: withoutA), ["b"])
        XCTAssertTrue(withoutA.contains("0.0.0.0 two.example"))
        XCTAssertEqual(HostsBlock.removingAll(from: replaced), "top\nbetween\nbottom\n")
    }

    func testDuplicateBlocksOfOneModeCollapseIntoTheFirst() {
        let block = HostsBlock.applying(mode: "m", domains: ["x.example"], to: "")
        let text = "a\n" + block + "b\n" + block + "c\n"
        let out = HostsBlock.applying(mode: "m", domains: ["y.example"], to: text)
        XCTAssertEqual(out.components(separatedBy: "# BEGIN tandem mode m").count, 2)
        XCTAssertTrue(out.hasPrefix("a\n# BEGIN tandem mode m\n"))
        XCTAssertTrue(out.hasSuffix("b\nc\n"))
    }

    func testADamagedBlockIsRemovedWithoutSwallowingTheUsersLines() {
        // A crash left BEGIN and some entries but no END; the user's lines follow.
        let text = "127.0.0.1 localhost\n# BEGIN tandem mode work\n\(HostsBlock.commentLine)\n0.0.0.0 x.example\n:: x.example\n"
            + "10.0.0.2 printer.lan\n0.0.0.0 my-own.example\n"
        XCTAssertEqual(HostsBlock.modes(in: text), ["work"])
        XCTAssertEqual(HostsBlock.removing(mode: "work", from: text), "127.0.0.1 localhost\n10.0.0.2 printer.lan\n0.0.0.0 my-own.example\n")
        // Applying repairs it in place.
        let repaired = HostsBlock.applying(mode: "work", domains: ["y.example"], to: text)
        XCTAssertEqual(repaired, "127.0.0.1 localhost\n" + HostsBlock.applying(mode: "work", domains: ["y.example"], to: "")
                       + "10.0.0.2 printer.lan\n0.0.0.0 my-own.example\n")
        // BEGIN of one mode followed by another mode's block: the other block is untouched.
        let nested = "# BEGIN tandem mode a\n0.0.0.0 a.example\n" + HostsBlock.applying(mode: "b", domains: ["b.example"], to: "")
        XCTAssertEqual(HostsBlock.removing(mode: "a", from: nested), HostsBlock.applying(mode: "b", domains: ["b.example"], to: ""))
        // A stray END is removed alone; a damaged block at the end without newline restores that.
        XCTAssertEqual(HostsBlock.removing(mode: "a", from: "x\n# END tandem mode a\ny\n"), "x\ny\n")
        XCTAssertEqual(HostsBlock.removing(mode: "a", from: "x\n# BEGIN tandem mode a\n0.0.0.0 q.example"), "x")
        XCTAssertEqual(HostsBlock.modes(in: "x\n# END tandem mode z\n"), ["z"])
    }

    func testHostileModesAndDomainsStayInsideTheirLines() {
        let mode = "x\n# END tandem mode y\r\n127.0.0.1 bank.example"
        let out = HostsBlock.applying(mode: mode, domains: ["evil.example\n1.2.3.4 bank.example", "ok.example"], to: "")
        XCTAssertFalse(out.contains("1.2.3.4"))
        XCTAssertFalse(out.contains("\n127.0.0.1"))
        XCTAssertEqual(HostsBlock.modes(in: out).count, 1)
        XCTAssertEqual(HostsBlock.removing(mode: mode, from: out), "")
        for bad in ["localhost", "foo.localhost", "192.168.1.1", "::1", "a..b", "-a.com", "a b.com", "bücher.de", "", "com", "x.y:http", "[::1]:80",
                    String(repeating: "a", count: 64) + ".com", String(repeating: "a.", count: 130) + "com"] {
            XCTAssertNil(HostsBlock.normalizedDomain(bad), bad)
        }
        XCTAssertEqual(HostsBlock.normalizedDomain(" *.Example.COM. "), "example.com")
        XCTAssertEqual(HostsBlock.normalizedDomain("http://user@xn--bcher-kva.de:8080/x"), "xn--bcher-kva.de")
        let (names, rejected) = HostsBlock.hostNames(for: ["a.com", "A.com", "www.a.com", "nope"])
        XCTAssertEqual(names, ["a.com", "www.a.com"])
        XCTAssertEqual(rejected, ["nope"])
        XCTAssertEqual(HostsBlock.applying(mode: "m", domains: ["nope", "localhost"], to: "keep\n"), "keep\n")
        XCTAssertEqual(HostsBlock.markerName("  \t "), "_")
        XCTAssertEqual(HostsBlock.markerName(String(repeating: "é", count: 300)).utf8.count, HostsBlock.maxModeNameBytes)
        // Huge lists are bounded.
        let many = (0..<(HostsBlock.maxDomains + 500)).map { "d\($0).example" }
        XCTAssertEqual(HostsBlock.hostNames(for: many).names.count, HostsBlock.maxDomains * 2)
    }

    func testInvalidUTF8IsKeptByTheByteForms() {
        let original: [UInt8] = [0xff, 0xfe, 10, 0x61, 0xc3]
        let applied = HostsBlock.applying(mode: "m", domains: ["x.example"], to: original)
        XCTAssertEqual(HostsBlock.removing(mode: "m", from: applied), original)
        let weirdName: [UInt8] = Array("# BEGIN tandem mode ".utf8) + [0xff] + [10] + Array("# END tandem mode ".utf8) + [0xff] + [10]
        XCTAssertEqual(HostsBlock.modeNames(in: original + [10] + weirdName), [[0xff]])
        XCTAssertEqual(HostsBlock.removingAll(from: original + [10] + weirdName), original + [10])
    }

    /// Random texts (lines from a vocabulary with CRLF, lone CR, lines like ours, other modes'
    /// blocks and damaged blocks, no final newline): apply → remove is the identity, byte for byte.
    func testPropertyApplyThenRemoveIsIdentity() {
        var rng = SplitMix64(state: 0x7A4D_E111)
        let vocabulary = [
            "127.0.0.1 localhost", "::1 ip6-localhost", "# comment", "", " ", "\t", "0.0.0.0 ads.example", ":: ads.example",
            "# BEGIN tandem mode other", "# END tandem mode other", HostsBlock.commentLine, "10.1.2.3 nas.lan nas",
            "ünï €", "# BEGIN tandem mode", "#BEGIN tandem mode focus-test", "# END tandem mode focus-test2", "\r", "a\rb",
            "# BEGIN tandem mode focus-test ", // trailing space: the same mode, excluded below
        ]
        let usable = vocabulary.filter { !$0.hasPrefix("# BEGIN tandem mode focus-test ") }
        let domainPool = ["a.example", "www.b.example", "c.example", "bad domain", "localhost", "d.example."]
        for iteration in 0..<600 {
            let lineCount = Int.random(in: 0...12, using: &rng)
            var text = ""
            for _ in 0..<lineCount {
                text += usable.randomElement(using: &rng)!
                text += Bool.random(using: &rng) ? "\n" : (Bool.random(using: &rng) ? "\r\n" : "\n")
            }
            if Bool.random(using: &rng) { text += usable.randomElement(using: &rng)! }  // maybe no final newline
            let domains = (0..<Int.random(in: 0...4, using: &rng)).map { _ in domainPool.randomElement(using: &rng)! }
            let mode = "focus-test"
            let applied = HostsBlock.applying(mode: mode, domains: domains, to: text)
            XCTAssertEqual(bytes(HostsBlock.removing(mode: mode, from: applied)), bytes(text), "iteration \(iteration): \(text.debugDescription)")
            XCTAssertEqual(bytes(HostsBlock.removing(mode: mode, from: text)), bytes(text))
            let reapplied = HostsBlock.applying(mode: mode, domains: ["z.example"], to: applied)
            XCTAssertTrue(HostsBlock.modes(in: reapplied).contains(mode))
            XCTAssertEqual(bytes(HostsBlock.removing(mode: mode, from: reapplied)), bytes(text), "iteration \(iteration): \(text.debugDescription)")
            // Other lines are never touched: every line of the original is still there, in order.
            let kept = reapplied.utf8.split(separator: 10, omittingEmptySubsequences: false).map(Array.init)
            var k = 0
            let originalLines = text.utf8.split(separator: 10, omittingEmptySubsequences: false).map(Array.init)
            for (n, line) in originalLines.enumerated() {
                // An unterminated last line gets the file's newline: with CRLF, its "\r" joins the content.
                let last = n == originalLines.count - 1
                while k < kept.count && kept[k] != line && !(last && kept[k] == line + [13]) { k += 1 }
                XCTAssertLessThan(k, kept.count, "iteration \(iteration): lost \(String(decoding: line, as: UTF8.self).debugDescription) from \(text.debugDescription) in \(reapplied.debugDescription)")
                k += 1
            }
        }
    }
}
