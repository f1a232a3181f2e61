import Foundation
import TandemKeys

/// Object-key input someone else wrote: point-cloud files and streams (`tandem … --object FILE|-`),
/// and stored templates. The first byte picks the reader; the rest is the input. Each must throw or
/// succeed, never trap, and never hold more than its caps.
extension FuzzTarget {
    static let keys = FuzzTarget(name: "keys", summary: "point-cloud files (PLY ascii/binary, XYZ), the stream splitter, object templates",
                                 maximumLength: 65_536, shortRunShare: 2, run: { input in
        let which = input.pick(4)
        let chunk = 1 + input.pick(64)
        let body = input.rest()
        switch which {
        case 0:
            // One file; a readable frame also goes through the frame check.
            if let frame = try? PointCloudReader.read(body) { _ = FrameCheck.assess(frame) }
        case 1:
            // A stream fed in chunks, with a small frame cap.
            var splitter = PointCloudStreamSplitter(maximumFrameBytes: 16_384)
            var i = 0
            do {
                while i < body.count {
                    splitter.append(Array(body[i..<min(i + chunk, body.count)]))
                    i += chunk
                    while try splitter.nextFrame() != nil {}
                    precondition(splitter.bufferedBytes <= 2 * 16_384 + 4_096 + chunk, "splitter holds too much")
                }
                while try splitter.finish() != nil {}
            } catch {}
        case 2:
            // A template: a valid one with bytes replaced by the input from a point on.
            let valid = KeysFuzzSeed.template
            let at = chunk * 13 % max(valid.count, 1)
            _ = try? ObjectTemplate(serialized: Array(valid.prefix(at)) + body)
        default:
            _ = try? ObjectTemplate(serialized: body)
        }
    })
}

/// A real template made once per process (a small enrolment of a generated mug).
enum KeysFuzzSeed {
    static let template: [UInt8] = {
        var e = ObjectEnrollment()
        let mug = SyntheticShapes.named("mug")!
        for s in 0..<UInt64(3) { _ = e.add(SyntheticShapes.view(of: mug, seed: s, points: 800)) }
        return (try? e.finish(force: true).serialized()) ?? []
    }()
}
