import Foundation
import NIOCore
import Sodium
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

// libFuzzer entry points. One binary hosts several targets (FuzzRegistry below); the target is
// chosen with TANDEM_FUZZ_TARGET=NAME or a leading -target=NAME flag (default: frames):
//   frames    frame decoder + verifier, box-stream decoder and reader (FrameTargets.swift)
//   machines  the pure state machines with arbitrary event sequences (MachineTargets.swift)
//   node      signed frames of every type into a real node's handlers (NodeTargets.swift)
//   holder    backup requests, restarts and damaged files into a node's backup holder (HolderTargets.swift)
//   relay     signed relay frames, connects, tunnel joins, clock jumps into a relay's handlers (RelayTargets.swift)
//   vault     files the vault reads: a keys file, photo metadata (VaultTargets.swift)
//   keys      point-cloud files and streams, object templates (KeysTargets.swift)
//   focus     stored focus state and key inputs into the focus service (FocusTargets.swift)
//   web       the dashboard's request guard, forms, login tokens and --web (WebTargets.swift)
//
// Fuzzing build (the `make fuzz` command runs every target):
//   swift build -c release --scratch-path .build-fuzz --product tandem-fuzz \
//       -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library
//   .build-fuzz/release/tandem-fuzz -target=machines -runs=1000000 -max_len=70000
// A normal `swift build` gives a replayer instead: `tandem-fuzz [-target=NAME] FILE_OR_DIR…` runs
// each file through the same entry point (for crash files and regression inputs, Tests/fuzz-crashes
// and the seed corpus Tests/fuzz-corpus). With `-mutate=N -seed=S` it then runs N inputs made from
// those files by a seeded mutator (Mutator.swift; `make fuzz-short`, part of `make test`).
// `tandem-fuzz -list-targets` prints the targets.
//
// SwiftPM links an executable's `main` to this module's entry point, so `main` below always
// runs. With -sanitize=fuzzer libFuzzer's driver is linked in too; `main` finds it by name
// (the target links with --export-dynamic) and hands it the command line.

/// One fuzz target: the name it is chosen by and what it does with one input.
struct FuzzTarget: Sendable {
    let name: String
    let summary: String
    /// The -max_len the Makefile passes for this target.
    var maximumLength = 4096
    /// This target's share of `make fuzz-short`'s executions (FUZZ_SHORT_RUNS split in proportion
    /// to the shares): the fast decoder and machine targets take more, the structure-aware ones
    /// (a few hundred executions a second) less, so every target runs and the step stays short.
    var shortRunShare = 1
    let run: @Sendable (inout FuzzInput) -> Void
}

/// Every target this binary hosts. To add one, define it in its own file as
/// `extension FuzzTarget { static let node = FuzzTarget(name: "node", summary: "…", run: { … }) }`
/// and add it to `all`; `make fuzz` and `make fuzz-short` run every target listed here (they read
/// `tandem-fuzz -list-targets`: name, max_len, short-run share, summary, tab-separated).
enum FuzzRegistry {
    static let all: [FuzzTarget] = [.frames, .machines, .node, .holder, .relay, .vault, .keys, .focus, .messages, .files, .web]
    static let defaultName = "frames"
    static let environmentVariable = "TANDEM_FUZZ_TARGET"

    static func named(_ name: String) -> FuzzTarget? { all.first { $0.name == name } }

    /// The target this process runs, from the environment (main copies a -target= flag there).
    static let selected: FuzzTarget = {
        let name = getenv(environmentVariable).map { String(cString: $0) } ?? defaultName
        return named(name.isEmpty ? defaultName : name) ?? named(defaultName)!
    }()
}

@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    var input = FuzzInput(UnsafeBufferPointer(start: data, count: size))
    FuzzRegistry.selected.run(&input)
    return 0
}

@main
enum TandemFuzz {
    typealias Callback = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    typealias Driver = @convention(c) (UnsafeMutablePointer<CInt>,
                                       UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
                                       Callback) -> CInt

    static func main() {
        var arguments = CommandLine.arguments
        // -target=NAME: taken out before libFuzzer sees the flags, and exported so that the
        // processes libFuzzer starts itself (-fork, -jobs) run the same target.
        if let i = arguments.indices.dropFirst().first(where: { arguments[$0].hasPrefix("-target=") || arguments[$0].hasPrefix("--target=") }) {
            let name = String(arguments[i].split(separator: "=", maxSplits: 1).last ?? "")
            setenv(FuzzRegistry.environmentVariable, name, 1)
            arguments.remove(at: i)
        }
        if arguments.contains("-list-targets") || arguments.contains("--list-targets") {
            for t in FuzzRegistry.all { print("\(t.name)\t\(t.maximumLength)\t\(t.shortRunShare)\t\(t.summary)") }
            exit(0)
        }
        let requested = getenv(FuzzRegistry.environmentVariable).map { String(cString: $0) } ?? ""
        if !requested.isEmpty, FuzzRegistry.named(requested) == nil {
            fail("unknown fuzz target '\(requested)' (known: \(FuzzRegistry.all.map(\.name).joined(separator: ", ")))", code: 2)
        }
        if let symbol = dlsym(nil, "LLVMFuzzerRunDriver") {
            // The Swift runtime's crash handlers would keep libFuzzer from installing its own
            // (it leaves SA_SIGINFO handlers in place), and then no crash file is written.
            for sig in [SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV] { signal(sig, SIG_DFL) }
            let driver = unsafeBitCast(symbol, to: Driver.self)
            var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
            var argc = CInt(arguments.count)
            let code = argv.withUnsafeMutableBufferPointer { buffer -> CInt in
                var base = buffer.baseAddress!
                return driver(&argc, &base, LLVMFuzzerTestOneInput)
            }
            exit(code)
        }
        replay(Array(arguments.dropFirst()))
    }

    static func fail(_ message: String, code: Int32) -> Never {
        FileHandle.standardError.write(Data("tandem-fuzz: \(message)\n".utf8))
        exit(code)
    }

    /// Without libFuzzer: run the given files through the entry point (a directory: its files, in
    /// name order). With -mutate=N, then N inputs the Mutator makes from them (Mutator.swift).
    static func replay(_ arguments: [String]) {
        var options: [String: String] = [:]
        var paths: [String] = []
        for argument in arguments {
            guard argument.hasPrefix("-") else { paths.append(argument); continue }
            let parts = argument.drop { $0 == "-" }.split(separator: "=", maxSplits: 1)
            options[String(parts.first ?? "")] = parts.count > 1 ? String(parts[1]) : ""
        }
        guard !paths.isEmpty || options["mutate"] != nil else {
            FileHandle.standardError.write(Data("""
            usage: tandem-fuzz [-target=NAME] FILE_OR_DIR…   (replays inputs; this build has no libFuzzer)
                   tandem-fuzz [-target=NAME] -mutate=N [-seed=S] [-max_len=L] [-timeout=SECONDS]
                               [-artifact_prefix=P] FILE_OR_DIR…
                     replays the inputs, then runs N mutations of them; each input is first written to
                     Pcurrent-input (removed after a clean run), so a crash leaves it there
            targets: \(FuzzRegistry.all.map(\.name).joined(separator: ", ")) (default \(FuzzRegistry.defaultName); or TANDEM_FUZZ_TARGET)
            fuzz with: swift build -c release --scratch-path .build-fuzz --product tandem-fuzz \\
                         -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library
                       .build-fuzz/release/tandem-fuzz -target=NAME -runs=1000000 -max_len=70000

            """.utf8))
            exit(arguments.isEmpty ? 0 : 2)
        }
        let files = paths.flatMap(expand)
        guard options["mutate"] != nil else {
            for path in files {
                let bytes = read(path)
                run(bytes)
                print("\(path): ok (\(bytes.count) bytes, target \(FuzzRegistry.selected.name))")
            }
            return
        }
        func number<N: FixedWidthInteger>(_ key: String, default value: N) -> N {
            guard let text = options[key] else { return value }
            guard let n = N(text), n >= 0 else { fail("-\(key)=\(text): expected a whole number ≥ 0", code: 2) }
            return n
        }
        let runs: Int = number("mutate", default: 0)
        let seed: UInt64 = number("seed", default: 1)
        let maximumLength: Int = number("max_len", default: FuzzRegistry.selected.maximumLength)
        let timeout: UInt32 = number("timeout", default: 0)
        guard maximumLength > 0 else { fail("-max_len must be positive", code: 2) }
        let artifact = CurrentInput(path: (options["artifact_prefix"] ?? "") + "current-input")

        let start = ContinuousClock.now
        var corpus: [[UInt8]] = []
        for path in files {
            let bytes = read(path)
            artifact.save(bytes)
            alarm(timeout)
            run(bytes)
            corpus.append(bytes)
        }
        if corpus.isEmpty { corpus = [[]] }
        var mutator = Mutator(seed: seed, maximumLength: maximumLength)
        for _ in 0..<runs {
            let input = mutator.mutate(corpus[mutator.pick(corpus.count)], splicingWith: corpus[mutator.pick(corpus.count)])
            artifact.save(input)
            alarm(timeout)
            run(input)
        }
        alarm(0)
        artifact.remove()
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("tandem-fuzz: target \(FuzzRegistry.selected.name): replayed \(files.count) files, ran \(runs) mutations "
              + "(seed \(seed), max_len \(maximumLength)) in \(String(format: "%.1f", seconds)) s")
    }

    static func run(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { _ = LLVMFuzzerTestOneInput($0.baseAddress, $0.count) }
    }

    static func read(_ path: String) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else { fail("cannot read \(path)", code: 1) }
        return [UInt8](data)
    }

    /// A directory's files (not its subdirectories or dot files) in name order; a file itself.
    static func expand(_ path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { fail("no such file \(path)", code: 1) }
        guard isDirectory.boolValue else { return [path] }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { fail("cannot list \(path)", code: 1) }
        return names.filter { !$0.hasPrefix(".") }.sorted().map { "\(path)/\($0)" }.filter {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: $0, isDirectory: &isDirectory) && !isDirectory.boolValue
        }
    }
}

/// The file that holds the input being run, rewritten before each one: a trap (or the -timeout
/// alarm) ends the process at once, and the input that did it is then on disk.
struct CurrentInput {
    let path: String
    private let fd: CInt

    init(path: String) {
        self.path = path
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { TandemFuzz.fail("cannot write \(path): \(String(cString: strerror(errno)))", code: 1) }
    }

    func save(_ bytes: [UInt8]) {
        let written = bytes.withUnsafeBytes { ftruncate(fd, 0) == 0 ? pwrite(fd, $0.baseAddress, $0.count, 0) : -1 }
        guard written == bytes.count else { TandemFuzz.fail("cannot write \(path): \(String(cString: strerror(errno)))", code: 1) }
    }

    func remove() {
        close(fd)
        unlink(path)
    }
}

/// Reads the fuzzer's bytes as a recipe; past the end every read yields zeros.
struct FuzzInput {
    private let bytes: UnsafeBufferPointer<UInt8>
    private(set) var offset = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }
    var isExhausted: Bool { offset >= bytes.count }

    mutating func u8() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func u16() -> Int { Int(u8()) << 8 | Int(u8()) }

    mutating func u32() -> UInt32 { UInt32(u16()) << 16 | UInt32(u16()) }

    mutating func u64() -> UInt64 {
        var v: UInt64 = 0
        for _ in 0..<8 { v = v << 8 | UInt64(u8()) }
        return v
    }

    mutating func bool() -> Bool { u8() & 1 == 1 }

    /// One of `n` choices (n > 0).
    mutating func pick(_ n: Int) -> Int { Int(u8()) % n }

    mutating func take(_ n: Int) -> [UInt8] {
        let n = max(0, min(n, remaining))
        defer { offset += n }
        return Array(bytes[offset..<offset + n])
    }

    mutating func rest() -> [UInt8] { take(remaining) }

    /// Exactly `n` bytes: what is left, padded with zeros.
    mutating func exactly(_ n: Int) -> [UInt8] {
        let b = take(n)
        return b + [UInt8](repeating: 0, count: n - b.count)
    }

    /// A signed integer as a peer might choose it: the extremes and their neighbours, zero and ±1,
    /// powers of two, small values, or any 64 bits.
    mutating func int64() -> Int64 {
        switch u8() % 12 {
        case 0: return 0
        case 1: return 1
        case 2: return -1
        case 3: return .max
        case 4: return .min
        case 5: return .max - Int64(u8())
        case 6: return .min + Int64(u8())
        case 7: return Int64(u16())
        case 8: return -Int64(u16())
        case 9: return Int64(1) << Int64(u8() % 63)
        default: return Int64(bitPattern: u64())
        }
    }

    /// An unsigned integer as a peer might choose it (2^63 and 2^64 - 1 included).
    mutating func uint64() -> UInt64 {
        switch u8() % 11 {
        case 0: return 0
        case 1: return 1
        case 2: return .max
        case 3: return .max - UInt64(u8())
        case 4: return UInt64(1) << 63
        case 5: return (UInt64(1) << 63) - 1 - UInt64(u8())
        case 6: return (UInt64(1) << 63) + UInt64(u8())
        case 7: return UInt64(u16())
        case 8: return UInt64(1) << UInt64(u8() % 64)
        default: return u64()
        }
    }

    /// Text as a peer might send it: empty, short, with controls, over the usual limits.
    mutating func text() -> String {
        switch u8() % 5 {
        case 0: return ""
        case 1: return "ok"
        case 2: return String(repeating: "x", count: 270 + Int(u8() % 30))
        case 3: return "\u{1B}[2J\r\u{202E}"
        default: return String(decoding: take(Int(u8() % 40)), as: UTF8.self)
        }
    }
}

/// Fixed keys so that inputs replay identically.
enum FuzzKeys {
    static let author = try! SigningKeyPair(seed: [UInt8](repeating: 1, count: 32))
    static let local = try! SigningKeyPair(seed: [UInt8](repeating: 2, count: 32))
    static let boxKey = [UInt8](repeating: 3, count: 32)
    /// Near a carry: after 16 increments the low byte wraps and carries through seven bytes.
    static let boxNonce: [UInt8] = [UInt8](repeating: 1, count: 16) + [UInt8](repeating: 0xff, count: 7) + [0xf0]
    /// The receiver's clock.
    static let now: UInt64 = 1_750_000_000_000
    /// Participants for the machines target.
    static let people: [SigningKeyPair] = (11...14).map { try! SigningKeyPair(seed: [UInt8](repeating: UInt8($0), count: 32)) }
}
