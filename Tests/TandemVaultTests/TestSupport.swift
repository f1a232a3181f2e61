import Foundation
import Sodium
import XCTest
@testable import TandemVault

/// A fresh directory under the system temp dir, removed when the test ends.
func makeTempDirectory(_ test: XCTestCase) throws -> URL {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vault-test-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    test.addTeardownBlock { try? FileManager.default.removeItem(at: dir) }
    return dir
}

func randomBytes(_ n: Int) -> [UInt8] { n == 0 ? [] : Sodium.randomBytes(n) }

/// Text-like data that zstd shrinks well but with enough variety not to be trivial.
func compressibleBytes(_ n: Int) -> [UInt8] {
    let words = ["vault", "tandem", "friend", "backup", "chunk", "pack", "index", "photo", "album", "the", "of", "and"]
    var out: [UInt8] = []
    out.reserveCapacity(n + 16)
    var rng = SplitMix(seed: 42)
    while out.count < n {
        out.append(contentsOf: words[Int(rng.next() % UInt64(words.count))].utf8)
        out.append(rng.next() % 9 == 0 ? 10 : 32)
    }
    return Array(out.prefix(n))
}

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func key(_ byte: UInt8) -> SecretBytes { SecretBytes([UInt8](repeating: byte, count: 32)) }

/// Asserts `body` throws a VaultError of `kind` whose detail contains `fragment` (if given).
func assertVaultError<T>(_ kind: VaultError.Kind, containing fragment: String? = nil, file: StaticString = #filePath,
                         line: UInt = #line, _ body: () throws -> T) {
    do {
        _ = try body()
        XCTFail("expected a \(kind) error", file: file, line: line)
    } catch let error as VaultError {
        XCTAssertEqual(error.kind, kind, "\(error)", file: file, line: line)
        if let fragment { XCTAssertTrue(error.detail.contains(fragment), "'\(error.detail)' lacks '\(fragment)'", file: file, line: line) }
    } catch {
        XCTFail("unexpected error \(error)", file: file, line: line)
    }
}

/// Every regular file under `dir`.
func allFiles(under dir: URL) -> [URL] {
    guard let e = FileManager.default.enumerator(at: dir, includingPropertiesForKeys: [.isRegularFileKey]) else { return [] }
    return e.compactMap { $0 as? URL }.filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true }
}

func packFiles(under dir: URL) -> [URL] {
    allFiles(under: dir).filter { $0.path.contains("/packs/") }
}

func flipByte(in url: URL, at offset: Int) throws {
    var data = try Data(contentsOf: url)
    data[offset] ^= 0x5a
    try data.write(to: url)
}

extension Array where Element == UInt8 {
    func contains(subsequence needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= count else { return false }
        let first = needle[0]
        var i = 0
        while i <= count - needle.count {
            if self[i] == first && Array(self[i..<(i + needle.count)]) == needle { return true }
            i += 1
        }
        return false
    }
}
