import ArgumentParser
import Foundation
import TandemKeys
import TandemNet

/// `tandem dev key-frames SHAPE`: point-cloud frames of a generated object (TandemKeys'
/// SyntheticShapes: partial views from random viewpoints, with noise and outliers), written as
/// PLY or XYZ files: what tests and demos enrol and present as object keys.
struct DevKeyFrames: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key-frames", abstract: "Write point-cloud frames of a generated object (for tests and demos).")
    @Argument(help: ArgumentHelp("The shape (see --list).", valueName: "shape")) var shape: String = "mug"
    @Option(help: "How many frames.") var count = 10
    @Option(help: "Seed of the first frame's viewpoint (frame i uses seed + i).") var seed: UInt64 = 1
    @Option(help: "Points per frame (fewer when little of the object is visible).") var points = 6000
    @Option(help: ArgumentHelp("Where the frames go (frame-NN.ply).", valueName: "dir")) var out: String = "."
    @Option(help: "ply (binary little-endian), ply-ascii, or xyz.") var format = "ply"
    @Flag(help: "Write every frame to stdout, one after another (a stream for --object -).") var stdout = false
    @Flag(help: "List the shapes.") var list = false

    func validate() throws {
        guard (1...500).contains(count) else { throw ValidationError("--count is 1 to 500") }
        guard (10...200_000).contains(points) else { throw ValidationError("--points is 10 to 200000") }
        guard ["ply", "ply-ascii", "xyz"].contains(format) else { throw ValidationError("--format is ply, ply-ascii or xyz") }
    }

    func run() throws {
        if list {
            for s in SyntheticShapes.catalogue { output(s.name) }
            return
        }
        guard let s = SyntheticShapes.named(shape) else {
            throw TandemError("no shape \(shape) (tandem dev key-frames --list)", exitCode: TandemError.usageExitCode)
        }
        if !stdout { try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true) }
        for i in 0..<count {
            let frame = SyntheticShapes.view(of: s, seed: seed &+ UInt64(i), points: points)
            var bytes: [UInt8]
            switch format {
            case "ply-ascii": bytes = PLYWriter.ascii(frame)
            case "xyz": bytes = PLYWriter.xyz(frame) + (stdout && i < count - 1 ? Array("---\n".utf8) : [])
            default: bytes = PLYWriter.binary(frame)
            }
            if stdout {
                FileHandle.standardOutput.write(Data(bytes))
            } else {
                let name = String(format: "frame-%02d.%@", i, format == "xyz" ? "xyz" : "ply")
                try Data(bytes).write(to: URL(fileURLWithPath: out).appendingPathComponent(name))
            }
        }
    }
}
