import NIOCore
import XCTest
@testable import TandemRelay

/// The per-client token bucket, driven with explicit instants.
final class ByteRateTests: XCTestCase {
    func testUnlimitedNeverWaits() {
        let r = ByteRate(bytesPerSecond: 0)
        XCTAssertEqual(r.consume(1 << 30, nowNs: 1), .zero)
    }

    func testBurstOfOneSecondThenDebtIsPaidAtTheRate() {
        let r = ByteRate(bytesPerSecond: 1000)
        let t0: UInt64 = 1_000_000_000
        XCTAssertEqual(r.consume(1000, nowNs: t0), .zero, "one second's worth is the burst")
        // 500 bytes of debt at 1000 B/s: wait half a second.
        XCTAssertEqual(r.consume(500, nowNs: t0), .milliseconds(500))
        // Half a second later the debt is paid; 250 more bytes are a quarter second of debt.
        XCTAssertEqual(r.consume(250, nowNs: t0 + 500_000_000), .milliseconds(250))
    }

    func testRefillIsCappedAtTheBurst() {
        let r = ByteRate(bytesPerSecond: 1000)
        let t0: UInt64 = 1_000_000_000
        _ = r.consume(1000, nowNs: t0)
        // An hour idle refills one second's worth, not an hour's.
        XCTAssertEqual(r.consume(1000, nowNs: t0 + 3_600_000_000_000), .zero)
        XCTAssertEqual(r.consume(1000, nowNs: t0 + 3_600_000_000_000), .seconds(1))
    }

    /// A debt however large (a rate of 1 B/s and a gigabyte read) gives a bounded wait, no trap.
    func testHugeDebtIsCappedAtADay() {
        let r = ByteRate(bytesPerSecond: 1)
        XCTAssertEqual(r.consume(Int.max / 2, nowNs: 1), .seconds(86_400))
        XCTAssertEqual(r.consume(1 << 30, nowNs: 2), .seconds(86_400))
    }
}
