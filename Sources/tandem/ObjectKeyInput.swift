import Foundation
import Sodium
import TandemKeys
import TandemNet
import TandemNode
import TandemNodeCore
import NodeFocus
import TandemProtocol

/// `--roi minX,minY,minZ,maxX,maxY,maxZ` (metres).
func parseROI(_ text: String?) throws -> RegionOfInterest? {
    guard let text else { return nil }
    let v = text.split(separator: ",").map { Float($0.trimmingCharacters(in: .whitespaces)) }
    guard v.count == 6, v.allSatisfy({ $0 != nil }) else {
        throw TandemError("--roi is six numbers in metres: minX,minY,minZ,maxX,maxY,maxZ", exitCode: TandemError.usageExitCode)
    }
    let roi = RegionOfInterest(minimum: SIMD3(v[0]!, v[1]!, v[2]!), maximum: SIMD3(v[3]!, v[4]!, v[5]!))
    guard roi.isValid else { throw TandemError("--roi: each minimum must be at most its maximum", exitCode: TandemError.usageExitCode) }
    return roi
}

/// The frames of `--object`: each file in turn (`-`: frames streamed on stdin, handed on as each
/// one completes, so a live sweep gets its verdicts while it goes on).
struct ObjectFrames: AsyncSequence {
    typealias Element = (label: String, frame: PointFrame)
    let sources: [String]

    struct AsyncIterator: AsyncIteratorProtocol {
        var sources: [String]
        var index = 0
        var splitter: PointCloudStreamSplitter?
        var stdinDone = false
        var stdinCount = 0

        mutating func next() async throws -> Element? {
            while index < sources.count {
                let source = sources[index]
                if source != "-" {
                    index += 1
                    return (source, try readFile(source))
                }
                if splitter == nil { splitter = PointCloudStreamSplitter() }
                do {
                    if let f = try splitter!.nextFrame() { stdinCount += 1; return ("stdin frame \(stdinCount)", f) }
                    if stdinDone {
                        index += 1
                        if let f = try splitter!.finish() { stdinCount += 1; return ("stdin frame \(stdinCount)", f) }
                        continue
                    }
                } catch {
                    throw TandemError("stdin frame \(stdinCount + 1): \(error)", exitCode: TandemError.usageExitCode)
                }
                let chunk = FileHandle.standardInput.availableData
                if chunk.isEmpty { stdinDone = true } else { splitter!.append(Array(chunk)) }
            }
            return nil
        }

        func readFile(_ path: String) throws -> PointFrame {
            guard let h = FileHandle(forReadingAtPath: path) else {
                throw TandemError("cannot read \(path): \(FileManager.default.fileExists(atPath: path) ? "permission denied" : "no such file")", exitCode: 1)
            }
            defer { try? h.close() }
            let data = (try? h.read(upToCount: PointCloudReader.maximumFileBytes + 1)) ?? Data()
            guard data.count <= PointCloudReader.maximumFileBytes else {
                throw TandemError("\(path) is larger than \(PointCloudReader.maximumFileBytes >> 20) MiB", exitCode: TandemError.usageExitCode)
            }
            do {
                return try PointCloudReader.read(Array(data))
            } catch {
                throw TandemError("\(path): \(error)", exitCode: TandemError.usageExitCode)
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(sources: sources) }
}

/// Sends an object key input one frame per request (then a last request), printing each frame's
/// verdict unless `quiet`; returns the node's final answer.
func presentObject(_ client: ControlClient, _ common: CommonOptions, _ input: KeyInputOptions, _ method: String,
                   _ params: [String: JSONValue], finish: Bool, restart: Bool, quiet: Bool) async throws -> JSONValue {
    let roi = try parseROI(input.roi)
    let session = hexString(Sodium.randomBytes(8))
    var first = true
    var n = 0
    func request(_ extra: [String: JSONValue]) async throws -> JSONValue {
        var p = params
        p["session"] = .string(session)
        if first { p["restart"] = .bool(restart); first = false }
        for (k, v) in extra { p[k] = v }
        return try await client.call(method: method, params: .object(p), timeout: .seconds(60))
    }
    for try await (label, frame) in ObjectFrames(sources: input.object) {
        n += 1
        let bytes = KeyFrameWire.encode(frame, roi: roi)
        if bytes.count <= 9 {
            if !quiet { output("frame \(n) (\(label)): no points inside --roi; skipped") }
            continue
        }
        let r = try await request(["frame_b64": .string(Data(bytes).base64EncodedString())])
        if !quiet { printFrameVerdict(n, label, r["frame"] ?? (r["frames"]?.arrayValue?.last ?? .null), r) }
        if r["done"]?.boolValue == true { return r }
    }
    if n == 0 && !finish && !restart { throw TandemError("no frames in the --object input", exitCode: TandemError.usageExitCode) }
    return try await request(["last": true, "finish": .bool(finish)])
}

func printFrameVerdict(_ n: Int, _ label: String, _ v: JSONValue, _ r: JSONValue) {
    guard !v.isNull else { return }
    let s = v.terminalSafe
    func f(_ k: String) -> String { String(format: "%.2f", s[k]?.doubleValue ?? 0) }
    var line = "frame \(n) (\(label)): "
    if let accepted = s["accepted"]?.boolValue {
        line += accepted ? "good" : "not used"
        line += "  quality \(f("quality"))  \(r["good_frames"]?.intValue ?? 0) good, \(r["viewpoints"]?.intValue ?? 0) viewpoints"
    } else {
        line += (s["passed"]?.boolValue == true ? "pass" : "no")
        line += "  score \(f("score"))  fit \(f("fit"))  rms \(String(format: "%.1f", (s["rms"]?.doubleValue ?? 0) * 1000)) mm  quality \(f("quality"))"
    }
    if let g = s["guidance"]?.stringValue { line += "  — \(g)" }
    output(line)
}
