import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import TandemBlocking

final class HookRunnerTests: XCTestCase {
    var dir: TempDir!

    override func setUp() { dir = TempDir("hooks") }
    override func tearDown() { dir.cleanUp() }

    @discardableResult
    func hook(_ relative: String, _ body: String, mode: mode_t = 0o755) -> String {
        dir.write(relative, "#!/bin/sh\n" + body + "\n", mode: mode)
    }

    func testTheEnvironmentArrivesAndNothingElseOfTheNodes() throws {
        let out = dir.file("env.txt")
        hook("work/locked", "env > '\(out)'")
        setenv("TANDEM_TEST_SECRET", "leak", 1)
        defer { unsetenv("TANDEM_TEST_SECRET") }
        let runner = HookRunner(directory: dir.path)
        let results = runner.run(mode: "work", transition: .locked, environment: HookEnvironment(
            blockedSites: ["news.example", "video.example"], blockedApps: ["firefox", "/usr/bin/steam"],
            tempItems: ["mail.example"], untilMs: 1_700_000_000_123, reason: "key"))
        XCTAssertEqual(results.count, 1)
        XCTAssertFalse(results[0].failed, results[0].description)
        XCTAssertEqual(results[0].exitCode, 0)
        let lines = Set(try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map(String.init))
        for expected in ["TANDEM_MODE=work", "TANDEM_TRANSITION=locked", "TANDEM_BLOCKED_SITES=news.example video.example",
                         "TANDEM_BLOCKED_APPS=firefox /usr/bin/steam", "TANDEM_TEMP_ITEMS=mail.example",
                         "TANDEM_UNTIL_MS=1700000000123", "TANDEM_REASON=key"] {
            XCTAssertTrue(lines.contains(expected), "missing \(expected) in \(lines)")
        }
        XCTAssertTrue(lines.contains { $0.hasPrefix("PATH=") })
        XCTAssertFalse(lines.contains { $0.hasPrefix("TANDEM_TEST_SECRET=") }, "not the node's whole environment")

        // The dictionary form, and an empty "until".
        let dictResults = runner.run(mode: "work", transition: .locked,
                                     environment: ["TANDEM_BLOCKED_SITES": "a.example", "BAD-NAME": "x", "TANDEM_MODE": "spoof"])
        XCTAssertFalse(dictResults[0].failed)
        let dictLines = Set(try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map(String.init))
        XCTAssertTrue(dictLines.contains("TANDEM_MODE=work"))
        XCTAssertTrue(dictLines.contains("TANDEM_BLOCKED_SITES=a.example"))
        XCTAssertTrue(dictLines.contains("TANDEM_UNTIL_MS="))
        XCTAssertFalse(dictLines.contains { $0.hasPrefix("BAD-NAME") })
    }

    func testAHookOthersCouldHaveWrittenIsSkippedWithTheReason() {
        let out = dir.file("ran.txt")
        let path = hook("all/locked", "echo ran >> '\(out)'", mode: 0o700)
        let runner = HookRunner(directory: dir.path)
        func runOnce() -> HookResult {
            let results = runner.run(mode: "m", transition: .locked, environment: HookEnvironment())
            XCTAssertEqual(results.count, 1)
            return results[0]
        }
        func runs() -> Int { ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(separator: "\n").count }

        let ok = runOnce()
        XCTAssertFalse(ok.failed, ok.description)
        XCTAssertFalse(ok.skipped)
        XCTAssertEqual(runs(), 1, "0700 and ours: runs")

        for (mode, who) in [(mode_t(0o720), "group"), (0o702, "others"), (0o777, "group and others")] {
            chmod(path, mode)
            let r = runOnce()
            XCTAssertTrue(r.skipped && r.failed, r.description)
            XCTAssertNil(r.exitCode)
            XCTAssertEqual(r.description, "hook \(path) skipped: \(path) is writable by \(who) (chmod go-w \(path))")
        }
        chmod(path, 0o700)
        chmod(dir.file("all"), 0o777)
        let inDir = runOnce()
        XCTAssertTrue(inDir.skipped, inDir.description)
        XCTAssertTrue(inDir.error?.hasPrefix("its directory \(dir.file("all")) is writable by group and others") == true, inDir.description)
        chmod(dir.file("all"), 0o755)
        chmod(dir.path, 0o775)
        XCTAssertTrue(runOnce().skipped, "the hooks directory itself counts")
        chmod(dir.path, 0o755)

        // A .d directory on the way.
        let inDotD = hook("all/unlocked.d/10-a", "echo ran >> '\(out)'", mode: 0o755)
        chmod(dir.file("all/unlocked.d"), 0o757)
        let d = runner.run(mode: "m", transition: .unlocked, environment: HookEnvironment())
        XCTAssertEqual(d.map(\.path), [inDotD])
        XCTAssertTrue(d[0].skipped && d[0].error?.contains("all/unlocked.d is writable by others") == true, d[0].description)
        chmod(dir.file("all/unlocked.d"), 0o755)

        if geteuid() == 0 {  // only root can give a file away
            chown(path, 12345, 12345)
            let r = runOnce()
            XCTAssertTrue(r.skipped)
            XCTAssertEqual(r.error, "\(path) is owned by uid 12345, not by this user (uid 0) or root")
            chown(path, 0, 0)
        }
        XCTAssertEqual(runs(), 1, "none of the unsafe ones ran")
        XCTAssertFalse(runOnce().failed)
        XCTAssertEqual(runs(), 2)
    }

    func testTheOwnerCheck() {
        XCTAssertNil(HookRunner.unsafeReason("/h", uid: 1000, mode: S_IFREG | 0o755, user: 1000))
        XCTAssertNil(HookRunner.unsafeReason("/h", uid: 0, mode: S_IFREG | 0o755, user: 1000), "root's own")
        XCTAssertEqual(HookRunner.unsafeReason("/h", uid: 1001, mode: S_IFREG | 0o700, user: 1000),
                       "/h is owned by uid 1001, not by this user (uid 1000) or root")
        XCTAssertEqual(HookRunner.unsafeReason("/h", uid: 0, mode: S_IFDIR | 0o1777, user: 1000),
                       "/h is writable by group and others (chmod go-w /h)")
    }

    func testAFailingHookIsReportedWithItsOutput() {
        hook("all/unlocked", "echo to-stdout; echo to-stderr >&2; exit 3")
        let results = HookRunner(directory: dir.path).run(mode: "m", transition: .unlocked, environment: HookEnvironment())
        XCTAssertEqual(results.count, 1)
        let r = results[0]
        XCTAssertTrue(r.failed)
        XCTAssertEqual(r.exitCode, 3)
        XCTAssertNil(r.signal)
        XCTAssertFalse(r.timedOut)
        XCTAssertEqual(r.stdout, "to-stdout\n")
        XCTAssertEqual(r.stderr, "to-stderr\n")
        XCTAssertTrue(r.description.contains("failed: exit 3"), r.description)
        XCTAssertTrue(r.description.contains("to-stderr"), r.description)
    }

    func testATimeoutStopsTheHooksWholeProcessGroup() throws {
        let childFile = dir.file("child.pid")
        // The hook ignores SIGTERM and leaves a child; both must go.
        hook("all/locked", "trap '' TERM; sleep 30 & echo $! > '\(childFile)'; while :; do sleep 0.1; done")
        let runner = HookRunner(directory: dir.path, timeoutMs: 400)
        let started = Date()
        let results = runner.run(mode: "m", transition: .locked, environment: HookEnvironment())
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(results.count, 1)
        let r = results[0]
        XCTAssertTrue(r.timedOut)
        XCTAssertTrue(r.failed)
        XCTAssertEqual(r.signal, SIGKILL)
        XCTAssertLessThan(elapsed, 3.0)
        XCTAssertGreaterThan(elapsed, 1.3, "SIGTERM at 0.4 s, SIGKILL 1 s later")
        let childPid = try XCTUnwrap(Int32(try String(contentsOfFile: childFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        let deadline = Date().addingTimeInterval(2)
        while (Proc.stat(childPid).map { !$0.isGone } ?? false) && Date() < deadline { usleep(20_000) }
        XCTAssertFalse(Proc.stat(childPid).map { !$0.isGone } ?? false, "the hook's child is gone too")
        XCTAssertEqual(zombieChildren(), [])
    }

    func testAPoliteHookEndsAtSIGTERM() {
        hook("all/locked", "sleep 30")
        let r = HookRunner(directory: dir.path, timeoutMs: 200).run(mode: "m", transition: .locked, environment: HookEnvironment())[0]
        XCTAssertTrue(r.timedOut)
        XCTAssertTrue(r.signal == SIGTERM || r.signal == SIGKILL)
        XCTAssertTrue(r.description.contains("timed out"), r.description)
    }

    func testNonExecutableAndOrderAndSkippedNames() {
        let log = dir.file("order.log")
        let append = { (name: String) in "echo \(name) >> '\(log)'" }
        hook("all/relocked", append("all"))
        hook("all/relocked.d/20-b", append("all.d/20-b"))
        hook("all/relocked.d/10-a", append("all.d/10-a"))
        hook("all/relocked.d/.hidden", append("hidden"))
        hook("all/relocked.d/15-backup~", append("backup"))
        hook("work/relocked.d/05-c", append("work.d/05-c"))
        hook("work/relocked", append("work"))
        hook("work/relocked.d/30-plain", append("plain"), mode: 0o644)
        hook("other/relocked", append("other"))
        try? FileManager.default.createDirectory(atPath: dir.file("all/relocked.d/sub"), withIntermediateDirectories: true)

        let runner = HookRunner(directory: dir.path)
        let expected = ["all/relocked", "all/relocked.d/10-a", "all/relocked.d/20-b", "work/relocked",
                        "work/relocked.d/05-c", "work/relocked.d/30-plain"].map { dir.file($0) }
        XCTAssertEqual(runner.hooks(mode: "work", transition: .relocked), expected)
        XCTAssertEqual(runner.hooks(mode: "work", transition: "relocked"), expected)
        XCTAssertEqual(runner.hooks(mode: "work", transition: "bogus"), [])
        let results = runner.run(mode: "work", transition: .relocked, environment: HookEnvironment())
        XCTAssertEqual(results.map(\.path), expected)
        XCTAssertEqual(results.filter(\.failed).map(\.path), [dir.file("work/relocked.d/30-plain")])
        XCTAssertTrue(results.last?.error?.hasPrefix("not executable") ?? false)
        XCTAssertEqual(try String(contentsOfFile: log, encoding: .utf8),
                       "all\nall.d/10-a\nall.d/20-b\nwork\nwork.d/05-c\n")
        XCTAssertEqual(runner.run(mode: "work", transition: "bogus", environment: HookEnvironment()).first?.failed, true)
        XCTAssertEqual(runner.run(mode: "work", transition: .locked, environment: HookEnvironment()), [], "no hooks, no results")
    }

    func testModeNamesCannotLeaveTheHooksDirectory() {
        hook("all/locked", "exit 0")
        hook("x/locked", "exit 0")
        let runner = HookRunner(directory: dir.file("all/.."))
        for mode in ["../x", "..", ".", "", "a/b", "x\u{0}y"] {
            XCTAssertEqual(runner.hooks(mode: mode, transition: .locked), [dir.file("all/..") + "/all/locked"], mode.debugDescription)
        }
        XCTAssertEqual(runner.hooks(mode: "all", transition: .locked).count, 1, "a mode named all runs them once")
    }

    func testOutputIsCappedAndABackgroundChildHoldingThePipeDoesNotHang() throws {
        let childFile = dir.file("bg.pid")
        hook("all/locked", "head -c 100000 /dev/zero | tr '\\0' x; sleep 30 & echo $! > '\(childFile)'; exit 0")
        let started = Date()
        let r = HookRunner(directory: dir.path).run(mode: "m", transition: .locked, environment: HookEnvironment())[0]
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        XCTAssertEqual(r.exitCode, 0)
        XCTAssertFalse(r.failed)
        XCTAssertTrue(r.stdout.hasPrefix(String(repeating: "x", count: HookRunner.outputCap)))
        XCTAssertTrue(r.stdout.hasSuffix("[\(100_000 - HookRunner.outputCap) more bytes not kept]"), String(r.stdout.suffix(80)))
        if let pid = Int32(try String(contentsOfFile: childFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) {
            kill(pid, SIGKILL)
        }
        XCTAssertEqual(zombieChildren(), [])
    }

    func testManyRunsLeaveNoZombies() {
        hook("all/temp_unlocked", "exit 0")
        hook("all/temp_unlocked.d/a", "exit 1")
        let runner = HookRunner(directory: dir.path)
        for _ in 0..<20 {
            let results = runner.run(mode: "m", transition: .tempUnlocked, environment: HookEnvironment())
            XCTAssertEqual(results.map(\.failed), [false, true])
        }
        XCTAssertEqual(zombieChildren(), [])
    }
}
