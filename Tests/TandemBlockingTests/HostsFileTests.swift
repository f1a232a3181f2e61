import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import TandemBlocking

final class HostsFileTests: XCTestCase {
    var dir: TempDir!
    var immutable: [String] = []

    override func setUp() { dir = TempDir("hosts") }
    override func tearDown() {
        for p in immutable { _ = chattr("-i", p) }
        dir.cleanUp()
    }

    func chattr(_ flag: String, _ path: String) -> Bool {
        guard case .success(let s) = Spawned.spawn(path: "/usr/bin/chattr", arguments: [flag, path], environment: [],
                                                   newProcessGroup: false, captureOutput: false) else { return false }
        var status: Int32 = 0
        waitpid(s.pid, &status, 0)
        return status == 0
    }

    func inode(_ path: String) -> (ino: UInt, mode: mode_t) {
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        return (UInt(st.st_ino), st.st_mode & 0o7777)
    }

    func testApplyAndRemoveKeepPermissionsAndOtherLines() throws {
        let original = "127.0.0.1 localhost\r\n# my own comment\r\n10.0.0.5 nas"
        let path = dir.write("hosts", original, mode: 0o640)
        let hosts = HostsFile(path: path)
        let before = inode(path)
        let rejected = try hosts.apply(mode: "work", domains: ["news.example", "not a domain"])
        XCTAssertEqual(rejected, ["not a domain"])
        let after = inode(path)
        XCTAssertNotEqual(after.ino, before.ino, "written through a temporary file and a rename")
        XCTAssertEqual(after.mode, 0o640)
        let text = try hosts.read()
        XCTAssertTrue(text.hasPrefix(original + "\r\n# BEGIN tandem mode work\r\n"))
        XCTAssertTrue(text.contains("0.0.0.0 www.news.example\r\n:: www.news.example\r\n"))
        XCTAssertEqual(try hosts.modes(), ["work"])
        try hosts.apply(mode: "play", domains: ["game.example"])
        try hosts.remove(mode: "work")
        XCTAssertEqual(try hosts.modes(), ["play"])
        try hosts.removeAll()
        XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: path))), Array(original.utf8))
        XCTAssertEqual(inode(path).mode, 0o640)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["hosts"], "no temporary file left")
    }

    func testASymlinkedHostsFileStaysALink() throws {
        let target = dir.write("real-hosts", "127.0.0.1 localhost\n")
        let link = dir.file("hosts")
        XCTAssertEqual(symlink(target, link), 0)
        try HostsFile(path: link).apply(mode: "m", domains: ["x.example"])
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: link), target)
        XCTAssertTrue(try String(contentsOfFile: target, encoding: .utf8).contains("0.0.0.0 x.example"))
    }

    func testAMissingFileIsCreatedOnApplyAndNotOnRemove() throws {
        let path = dir.file("none")
        try HostsFile(path: path).remove(mode: "m")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
        try HostsFile(path: path).apply(mode: "m", domains: ["x.example"])
        XCTAssertEqual(inode(path).mode, 0o644)
        XCTAssertEqual(try HostsFile(path: path).modes(), ["m"])
    }

    func testUnwritableFileGivesOneClearError() throws {
        let path = dir.write("hosts", "127.0.0.1 localhost\n", mode: 0o444)
        if geteuid() == 0 {
            // root writes through mode bits; an immutable file refuses even root.
            guard chattr("+i", path) else { throw XCTSkip("chattr +i is not available here") }
            immutable.append(path)
        }  // else: mode 0444 is enough
        XCTAssertThrowsError(try HostsFile(path: path).apply(mode: "m", domains: ["x.example"])) { error in
            guard let e = error as? BlockingError else { return XCTFail("\(error)") }
            XCTAssertTrue(e.needsPermission)
            XCTAssertTrue(e.description.contains("site blocking needs write access to \(path)"), e.description)
            XCTAssertTrue(e.description.contains("--hosts-file"), e.description)
            XCTAssertFalse(e.description.contains("\n"))
        }
        XCTAssertEqual(try HostsFile(path: path).read(), "127.0.0.1 localhost\n")
        let notes = BlockingCapabilities.probe(hostsPath: path)
        XCTAssertTrue(notes.contains { $0.hasPrefix("site blocking off: \(path) is not writable by this user") }, "\(notes)")
    }

    func testFallsBackToRewritingInPlaceWhenTheDirectoryRefusesNewFiles() throws {
        let path = dir.write("hosts", "127.0.0.1 localhost\n", mode: 0o604)
        let sub = dir.path
        if geteuid() == 0 {
            guard chattr("+i", sub) else { throw XCTSkip("chattr +i is not available here") }
            immutable.append(sub)
        } else {
            chmod(sub, 0o555)
        }
        defer { if geteuid() != 0 { chmod(sub, 0o755) } }
        let before = inode(path)
        try HostsFile(path: path).apply(mode: "m", domains: ["x.example", "y.example"])
        XCTAssertEqual(inode(path).ino, before.ino, "same file, rewritten in place")
        XCTAssertEqual(inode(path).mode, 0o604)
        try HostsFile(path: path).remove(mode: "m")
        XCTAssertEqual(try HostsFile(path: path).read(), "127.0.0.1 localhost\n", "shorter text truncates the file")
    }

    func testConcurrentWritersDoNotLoseBlocks() throws {
        let path = dir.write("hosts", "127.0.0.1 localhost\n")
        let errors = Collector<String>()
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            do { try HostsFile(path: path).apply(mode: "m\(i)", domains: ["d\(i).example"]) } catch { errors.add("\(error)") }
        }
        XCTAssertEqual(errors.all, [])
        XCTAssertEqual(Set(try HostsFile(path: path).modes()), Set((0..<16).map { "m\($0)" }))
        try HostsFile(path: path).removeAll()
        XCTAssertEqual(try HostsFile(path: path).read(), "127.0.0.1 localhost\n")
    }

    func testProbeIsQuietWhenTheHostsFileIsWritable() {
        let path = dir.write("hosts", "")
        let notes = BlockingCapabilities.probe(hostsPath: path)
        XCTAssertFalse(notes.contains { $0.hasPrefix("site blocking") }, "\(notes)")
        let missing = BlockingCapabilities.probe(hostsPath: "/nonexistent-\(UInt32.random(in: 0...UInt32.max))/hosts")
        XCTAssertTrue(missing.contains { $0.contains("does not exist and cannot be created") }, "\(missing)")
        XCTAssertFalse(notes.contains { $0.hasPrefix("app blocking") && !$0.contains("/proc cannot be listed") },
                       "acting for its own uid, the app guard needs no right: \(notes)")
        if let caps = Proc.effectiveCapabilities() {
            // Acting for another uid needs CAP_KILL.
            let other = BlockingCapabilities.probe(hostsPath: path, appUser: geteuid() &+ 4242)
            XCTAssertEqual(other.contains { $0.hasPrefix("app blocking off: the node stops only the processes of uid") && $0.contains("CAP_KILL") },
                           caps & (1 << 5) == 0, "\(other)")
        }
    }
}
