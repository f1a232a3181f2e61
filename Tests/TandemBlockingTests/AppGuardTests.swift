import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import TandemBlocking

/// Real processes: copies of /bin/sleep and /bin/sh under distinctive names, so the guard (which
/// scans every process on the machine) can match nothing else.
final class AppGuardTests: XCTestCase {
    var dir: TempDir!
    var children: [Child] = []
    var guardian: AppGuard!
    let stops = Collector<StoppedProcess>()
    let errors = Collector<String>()

    override func setUp() {
        dir = TempDir("guard")
        let stops = self.stops, errors = self.errors
        guardian = AppGuard(onStop: { stops.add($0) }, onError: { errors.add($0) })
        guardian.scanIntervalMs = 100
    }

    override func tearDown() {
        guardian.stop()
        for c in children { c.kill() }
        dir.cleanUp()
    }

    func victim(_ name: String, source: String = "/bin/sleep", _ arguments: [String] = ["30"]) -> (Child, String) {
        let path = copyBinary(source, to: dir, name: name)
        let child = Child.spawn(path, arguments)
        children.append(child)
        return (child, path)
    }

    func testStopsABlockedAppByNameWithinASecondAndSaysWhat() {
        let name = uniqueName("focus-victim")
        let (child, path) = victim(name)
        let (bystander, _) = victim(uniqueName("focus-bystander"))
        usleep(50_000)
        guardian.set(blocked: [name, "some-other-app"], allowed: [])
        guardian.start()
        let started = Date()
        guard let status = child.waitExit(seconds: 1.5) else { return XCTFail("still running after 1.5 s") }
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.5)
        XCTAssertEqual(termSignal(status), SIGTERM)
        XCTAssertTrue(stops.wait(seconds: 1) { $0.contains { $0.pid == child.pid } })
        let stop = stops.all.first { $0.pid == child.pid }
        XCTAssertEqual(stop?.name, name)
        XCTAssertEqual(stop?.path, path)
        XCTAssertEqual(stop?.signal, SIGTERM)
        XCTAssertEqual(stop?.item, name)
        XCTAssertTrue(stop?.description.contains("stopped \(name) (pid \(child.pid)") ?? false)
        XCTAssertTrue(bystander.isRunning, "a process that matches nothing is left alone")
        XCTAssertEqual(stops.all.count, 1)
    }

    func testAProcessIgnoringSIGTERMIsKilledAfterASecond() {
        let name = uniqueName("focus-stubborn")
        let ready = dir.file("ready")
        let script = "trap '' TERM; : > '\(ready)'; while :; do sleep 0.1; done"
        let (child, _) = victim(name, source: "/bin/sh", ["-c", script])
        let deadline = Date().addingTimeInterval(5)
        while !FileManager.default.fileExists(atPath: ready) && Date() < deadline { usleep(10_000) }
        guardian.set(blocked: [name], allowed: [])
        guardian.start()
        let started = Date()
        guard let status = child.waitExit(seconds: 3) else { return XCTFail("still running after 3 s") }
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(termSignal(status), SIGKILL)
        XCTAssertGreaterThan(elapsed, 0.9)
        XCTAssertLessThan(elapsed, 2.0)
        XCTAssertTrue(stops.wait(seconds: 1) { $0.contains { $0.pid == child.pid } })
        XCTAssertEqual(stops.all.first { $0.pid == child.pid }?.signal, SIGKILL)
    }

    func testTemporaryItemsRunAndAreStoppedWhenItRelocks() {
        let name = uniqueName("focus-temp")
        let (child, _) = victim(name)
        guardian.set(blocked: [name, "other-app"], allowed: [name])
        guardian.start()
        XCTAssertNil(child.waitExit(seconds: 1.2), "allowed during the temporary unlock")
        guardian.set(blocked: [], allowed: [])
        XCTAssertNil(child.waitExit(seconds: 0.5), "nothing is blocked while unlocked")
        guardian.set(blocked: [name, "other-app"], allowed: [])  // relocked
        guard let status = child.waitExit(seconds: 1.5) else { return XCTFail("not stopped after relock") }
        XCTAssertEqual(termSignal(status), SIGTERM)
    }

    func testMatchesByAbsolutePathOnly() throws {
        let name = uniqueName("focus-path")
        let (child, path) = victim(name)
        let otherDir = TempDir("guard-other")
        defer { otherDir.cleanUp() }
        let twinPath = copyBinary("/bin/sleep", to: otherDir, name: name)  // same name, other path
        let twin = Child.spawn(twinPath, ["30"])
        children.append(twin)
        let rejected = guardian.set(blocked: [path, "relative/app", "  "], allowed: [])
        XCTAssertEqual(rejected, ["relative/app", "  "])
        guardian.start()
        guard let status = child.waitExit(seconds: 1.5) else { return XCTFail("not stopped by path") }
        XCTAssertEqual(termSignal(status), SIGTERM)
        XCTAssertTrue(twin.isRunning, "a binary of the same name at another path is not matched")
        XCTAssertEqual(stops.all.first { $0.pid == child.pid }?.path ?? path, path)
    }

    func testMatchesAPathThroughASymlinkGivenAsTheItem() {
        let name = uniqueName("focus-link")
        let (child, path) = victim(name)
        let link = dir.file("link-to-\(name)")
        XCTAssertEqual(symlink(path, link), 0)
        guardian.set(blocked: [link], allowed: [])
        guardian.start()
        XCTAssertNotNil(child.waitExit(seconds: 1.5), "an item that is a symlink matches the binary it points to")
    }

    func testNeverStopsItself() throws {
        guard let ownPath = Proc.exe(getpid()) else { throw XCTSkip("/proc/self/exe unreadable") }
        // Only the absolute path: the base name could match other test runs on this machine.
        guardian.set(blocked: [ownPath], allowed: [])
        guardian.start()
        usleep(600_000)
        XCTAssertTrue(stops.all.isEmpty, "\(stops.all)")
        XCTAssertTrue(guardian.isRunning)
        guardian.stop()
        XCTAssertFalse(guardian.isRunning)
        guardian.stop()  // twice is fine
    }

    func testIdleWithoutBlockedItemsAndRestartable() {
        let name = uniqueName("focus-idle")
        let (child, _) = victim(name)
        guardian.start()
        guardian.start()
        XCTAssertNil(child.waitExit(seconds: 0.4))
        guardian.stop()
        guardian.set(blocked: [name], allowed: [])
        XCTAssertNil(child.waitExit(seconds: 0.4), "a stopped guard stops nothing")
        guardian.start()
        XCTAssertNotNil(child.waitExit(seconds: 1.5))
    }

    func testStopsOnlyTheProcessesOfTheUserItActsFor() {
        let name = uniqueName("focus-otheruser")
        let (child, _) = victim(name)
        usleep(50_000)
        let stops = Collector<StoppedProcess>()
        let someoneElse = AppGuard(user: geteuid() &+ 4242, onStop: { stops.add($0) }, onError: { _ in })
        someoneElse.set(blocked: [name], allowed: [])
        someoneElse.scanOnce()
        usleep(200_000)
        someoneElse.scanOnce()
        XCTAssertTrue(child.isRunning, "the same name, another user's process (even for a node that could signal it)")
        XCTAssertEqual(stops.all, [])

        XCTAssertEqual(guardian.user, geteuid(), "by default, the node's own user")
        guardian.set(blocked: [name], allowed: [])
        guardian.scanOnce()
        XCTAssertNotNil(child.waitExit(seconds: 1.5), "the user it acts for: stopped")
    }

    func testTheRealUidComesFromTheStatusFile() {
        let status = Array("Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n".utf8)
        XCTAssertEqual(Proc.parseRealUid(status), 1000, "the real uid, not the effective one of a set-uid program")
        XCTAssertNil(Proc.parseRealUid(Array("Name:\tx\nGid:\t1\t1\t1\t1\n".utf8)))
        XCTAssertNil(Proc.parseRealUid(Array("Uid:\t1000\n".utf8)))
        XCTAssertNil(Proc.parseRealUid(Array("Uid:\tx\t0\t0\t0\n".utf8)))
        XCTAssertEqual(Proc.realUid(getpid()), getuid())
        XCTAssertTrue(AppGuard.belongs(uid: 1000, to: 1000))
        XCTAssertFalse(AppGuard.belongs(uid: 0, to: 1000), "root's processes are not the user's")
        XCTAssertFalse(AppGuard.belongs(uid: nil, to: 1000), "unreadable: left alone")
    }

    func testProcStatParsesOddNames() {
        let line = Array("123 (a) b (c)) S 45 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10".utf8)
        let st = Proc.parseStat(line)
        XCTAssertEqual(st?.comm, "a) b (c)")
        XCTAssertEqual(st?.ppid, 45)
        XCTAssertEqual(st?.startTime, 987654)
        XCTAssertNil(Proc.parseStat(Array("garbage".utf8)))
        XCTAssertNil(Proc.parseStat(Array("1 (x) S 1 2".utf8)))
        let me = Proc.stat(getpid())
        XCTAssertEqual(me?.ppid, getppid())
        XCTAssertEqual(me.map { $0.isKernelThread }, false)
    }
}
