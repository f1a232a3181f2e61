import XCTest
@testable import TandemKeys

final class SplitterTests: XCTestCase {
    func frames() -> [PointFrame] {
        let shape = SyntheticShapes.named("cone")!
        return (0..<3).map { SyntheticShapes.view(of: shape, seed: UInt64($0), points: 120) }
    }

    /// Feeds `bytes` in chunks of `chunk`, pulling frames after each; then finishes.
    func split(_ bytes: [UInt8], chunk: Int, maximum: Int = PointCloudStreamSplitter.defaultMaximumFrameBytes) throws -> [PointFrame] {
        var s = PointCloudStreamSplitter(maximumFrameBytes: maximum)
        var out: [PointFrame] = []
        var i = 0
        while i < bytes.count {
            s.append(Array(bytes[i..<min(i + chunk, bytes.count)]))
            i += chunk
            while let f = try s.nextFrame() { out.append(f) }
        }
        while let f = try s.finish() { out.append(f) }
        return out
    }

    func testMixedStreamByteByByte() throws {
        let f = frames()
        var stream = PLYWriter.binary(f[0]) + PLYWriter.ascii(f[1]) + Array("\n---\n".utf8) + PLYWriter.xyz(f[2]) + Array("---\n".utf8)
        stream += PLYWriter.xyz(f[0]) + Array("\n\n".utf8) + PLYWriter.binary(f[2])
        let expected = [f[0], try PointCloudReader.read(PLYWriter.ascii(f[1])), try PointCloudReader.read(PLYWriter.xyz(f[2])),
                        try PointCloudReader.read(PLYWriter.xyz(f[0])), f[2]]
        for chunk in [1, 7, 100, stream.count] {
            let got = try split(stream, chunk: chunk)
            XCTAssertEqual(got.map(\.points), expected.map(\.points), "chunk \(chunk)")
        }
    }

    func testFramesComeOutAsSoonAsComplete() throws {
        let f = frames()
        let first = PLYWriter.binary(f[0])
        var s = PointCloudStreamSplitter()
        s.append(Array(first.dropLast()))
        XCTAssertNil(try s.nextFrame())
        s.append([first.last!])
        XCTAssertEqual(try s.nextFrame(), f[0])
        // XYZ: complete at its separator line.
        s.append(Array("0 0 1\n0 1 1\n-".utf8))
        XCTAssertNil(try s.nextFrame())
        s.append(Array("--\n".utf8))
        XCTAssertEqual(try s.nextFrame()?.points.count, 2)
        XCTAssertNil(try s.finish())
    }

    func testTruncatedPLYAtEndThrows() {
        let bytes = PLYWriter.binary(frames()[0])
        var s = PointCloudStreamSplitter()
        s.append(Array(bytes.dropLast(5)))
        XCTAssertNil(try s.nextFrame())
        XCTAssertThrowsError(try s.finish())
        // Failed for good.
        s.append(PLYWriter.binary(frames()[1]))
        XCTAssertThrowsError(try s.nextFrame())
    }

    func testMaximumFrameSize() {
        let big = PLYWriter.ascii(frames()[0])
        XCTAssertThrowsError(try split(big, chunk: 64, maximum: 2_048)) { error in
            XCTAssertTrue("\(error)".contains("too large"), "\(error)")
        }
        var xyz = [UInt8]()
        for _ in 0..<400 { xyz += Array("0.1 0.2 0.3\n".utf8) }
        XCTAssertThrowsError(try split(xyz, chunk: 100, maximum: 2_048))
        // A huge vertex count is refused from the header, before any body byte.
        var s = PointCloudStreamSplitter()
        s.append(Array("ply\nformat binary_little_endian 1.0\nelement vertex 900000\nproperty float x\nproperty float y\nproperty float z\nend_header\n".utf8))
        XCTAssertThrowsError(try s.nextFrame())
    }

    func testGarbageThrows() {
        XCTAssertThrowsError(try split(Array("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0 x\n".utf8), chunk: 3))
        XCTAssertThrowsError(try split(Array("hello world\n".utf8), chunk: 1))
    }
}
