import Foundation
import XCTest
@testable import TandemKeys

/// Fixtures: Tests/fixtures/keys (written by `testWriteFixtures` when TANDEM_WRITE_FIXTURES=1).
let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("fixtures/keys")

func fixture(_ name: String) throws -> [UInt8] {
    [UInt8](try Data(contentsOf: fixtures.appendingPathComponent(name)))
}

func assertThrows(_ bytes: [UInt8], _ fragment: String, file: StaticString = #filePath, line: UInt = #line) {
    do {
        _ = try PointCloudReader.read(bytes)
        XCTFail("no error, expected one containing '\(fragment)'", file: file, line: line)
    } catch let error as KeyInputError {
        XCTAssertTrue(error.description.contains(fragment), "'\(error)' lacks '\(fragment)'", file: file, line: line)
        XCTAssertFalse(error.description.contains("\n"), file: file, line: line)
    } catch {
        XCTFail("unexpected error \(error)", file: file, line: line)
    }
}

final class ReaderTests: XCTestCase {
    let tetra: [SIMD3<Float>] = [SIMD3(0, 0, 0.5), SIMD3(0.1, 0, 0.5), SIMD3(0, 0.1, 0.5), SIMD3(0, 0, 0.6)]

    func testWriteFixtures() throws {
        guard ProcessInfo.processInfo.environment["TANDEM_WRITE_FIXTURES"] == "1" else { return }
        let frame = PointFrame(points: tetra, trackingState: .normal)
        try Data(PLYWriter.ascii(frame)).write(to: fixtures.appendingPathComponent("tetra-ascii.ply"))
        try Data(PLYWriter.binary(frame)).write(to: fixtures.appendingPathComponent("tetra-binary.ply"))
    }

    func testFixtures() throws {
        for name in ["tetra-ascii.ply", "tetra-binary.ply", "tetra-faces-ascii.ply", "tetra-faces-binary.ply", "tetra.xyz"] {
            let f = try PointCloudReader.read(try fixture(name))
            XCTAssertEqual(f.points, tetra, name)
        }
        XCTAssertEqual(try PointCloudReader.read(try fixture("tetra-ascii.ply")).trackingState, .normal)
        XCTAssertEqual(try PointCloudReader.read(try fixture("tetra-faces-ascii.ply")).trackingState, .limited)
        XCTAssertNil(try PointCloudReader.read(try fixture("tetra.xyz")).trackingState)
    }

    func testWriterRoundTrip() throws {
        let frame = SyntheticShapes.view(of: SyntheticShapes.named("mug")!, seed: 3, points: 800)
        XCTAssertEqual(try PointCloudReader.read(PLYWriter.binary(frame)), frame)
        let ascii = try PointCloudReader.read(PLYWriter.ascii(frame))
        XCTAssertEqual(ascii.points.count, frame.points.count)
        for (a, b) in zip(ascii.points, frame.points) { XCTAssertLessThan(length3(a - b), 1e-6) }
        XCTAssertEqual(try PointCloudReader.read(PLYWriter.xyz(frame)).points, ascii.points)
    }

    func testBinaryDoublesAndExtraProperties() throws {
        var bytes = Array("ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty uchar red\nproperty double x\nproperty double y\nproperty double z\nproperty float nx\nend_header\n".utf8)
        for (x, y, z) in [(1.0, 2.0, 3.0), (-0.5, 0.25, 0.125)] {
            bytes.append(7)
            for v in [x, y, z] { withUnsafeBytes(of: v.bitPattern.littleEndian) { bytes.append(contentsOf: $0) } }
            withUnsafeBytes(of: Float(0.5).bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
        }
        XCTAssertEqual(try PointCloudReader.read(bytes).points, [SIMD3(1, 2, 3), SIMD3(-0.5, 0.25, 0.125)])
    }

    func testXYZColumnsCommentsAndSeparators() throws {
        let text = "# scan\n0.1 0.2 0.3 255 0 0\n\n0.4,0.5,0.6 # comment\n1e-1\t2E-1 3e-1\n"
        let f = try PointCloudReader.read(Array(text.utf8))
        XCTAssertEqual(f.points.count, 3)
        XCTAssertEqual(f.points[1], SIMD3(0.4, 0.5, 0.6))
        XCTAssertEqual(f.points[2], SIMD3(0.1, 0.2, 0.3))
    }

    func testNonFinitePointsAreDropped() throws {
        let f = try PointCloudReader.read(Array("0 0 1\nnan 0 1\n0 inf 1\n0 0 5000\n1 1 1\n".utf8))
        XCTAssertEqual(f.points, [SIMD3(0, 0, 1), SIMD3(1, 1, 1)])
        XCTAssertEqual(f.droppedPoints, 3)
        assertThrows(Array("nan nan nan\ninf 0 0\n".utf8), "NaN")
        var binary = Array("ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n".utf8)
        for v in [Float.nan, 0, 1] { withUnsafeBytes(of: v.bitPattern.littleEndian) { binary.append(contentsOf: $0) } }
        assertThrows(binary, "NaN")
    }

    func testMalformedInputsThrow() {
        let header = "ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nend_header\n"
        assertThrows(Array(header.utf8) + [UInt8](repeating: 0, count: 35), "truncated")
        assertThrows(Array(header.utf8) + [UInt8](repeating: 0, count: 37), "after the PLY body")
        assertThrows(Array("ply\nformat ascii 1.0\nelement vertex 999999999999\nproperty float x\nproperty float y\nproperty float z\nend_header\n".utf8), "vertices")
        assertThrows(Array("ply\nformat ascii 1.0\nelement vertex 2000000\nproperty float x\nproperty float y\nproperty float z\nend_header\n".utf8), "at most 200000")
        assertThrows(Array("ply\nformat ascii 1.0\nelement vertex 99999999999999999999999\nend_header\n".utf8), "element NAME COUNT")
        assertThrows(Array("ply\nformat binary_big_endian 1.0\nelement vertex 1\nproperty float x\nend_header\n".utf8), "big_endian")
        assertThrows(Array("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nend_header\n0 0\n".utf8), "x, y and z")
        assertThrows(Array("ply\nformat ascii 1.0\nelement face 1\nproperty list uchar int v\nend_header\n3 0 1 2\n".utf8), "no vertex element")
        assertThrows(Array("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 zero 0\n".utf8), "not a number")
        assertThrows(Array("ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0 0\n".utf8), "truncated")
        assertThrows(Array("ply\nformat ascii 1.0\ncomment tracking_state wobbly\nend_header\n".utf8), "tracking_state")
        assertThrows(Array("ply\nformat ascii 1.0\n".utf8) + [UInt8](repeating: 0x41, count: 20_000), "header")
        assertThrows(Array("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nelement face 1\nproperty list uchar int v\nend_header\n0 0 0\n9999 1 2\n".utf8), "list count")
        assertThrows(Array("0.1 0.2\n".utf8), "2 values")
        assertThrows([0x00, 0xFF, 0x10, 0x80], "not a number")
        assertThrows(Array("ply\nformat ascii 1.0\nbogus\nend_header\n".utf8), "unknown keyword")
    }

    func testHugeXYZIsRefused() {
        var text = ""
        text.reserveCapacity(200_001 * 6)
        for _ in 0...200_000 { text += "0 0 1\n" }
        assertThrows(Array(text.utf8), "at most 200000")
    }

    func testEveryPrefixOfABinaryFileThrowsOrReads() {
        let bytes = PLYWriter.binary(PointFrame(points: tetra))
        for n in 0..<bytes.count {
            XCTAssertThrowsError(try PointCloudReader.read(Array(bytes.prefix(n))), "prefix \(n)")
        }
    }
}
