import Logging
import NIOCore
import NIOEmbedded
import Sodium
import TandemProtocol
import XCTest

@testable import TandemNet

/// How much a link is read per turn of its event loop (Protocol/README.md 5.12): anyone's link
/// `LinkLimits.maximumReadBytes`, a friend's (trusted) link `trustedMaximumReadBytes`, back to the
/// first when the friendship ends.
final class PeerLinkReadTests: XCTestCase {
    func readMaximum(_ channel: Channel) throws -> Int {
        let allocator = try channel.getOption(ChannelOptions.recvAllocator).wait()
        return try XCTUnwrap(allocator as? AdaptiveRecvByteBufferAllocator).maximum
    }

    func testAFriendsLinkIsReadInLargerPiecesAndAStrangersIsNot() throws {
        let me = SigningKeyPair.generate()
        let channel = EmbeddedChannel()
        let gate = FrameGate(localPublicKey: me.publicKey, metrics: TransportMetrics())
        let link = try PeerPipeline.configure(channel: channel, identity: me, serverPublicKey: nil, gate: gate, delegate: nil,
                                              options: .init(), logger: Logger(label: "test"))
        let limits = gate.limits
        XCTAssertEqual(limits.maximumReadBytes, 4 * 1024)
        XCTAssertEqual(limits.trustedMaximumReadBytes, 64 * 1024)
        XCTAssertEqual(try readMaximum(channel), limits.maximumReadBytes, "a new link is anyone's")
        link.setTrusted(true)
        XCTAssertEqual(try readMaximum(channel), limits.trustedMaximumReadBytes)
        link.setTrusted(true)  // unchanged: nothing to do
        XCTAssertEqual(try readMaximum(channel), limits.trustedMaximumReadBytes)
        link.setTrusted(false)
        XCTAssertEqual(try readMaximum(channel), limits.maximumReadBytes, "a friendship ended: read as anyone's again")
        _ = try? channel.finish()
    }

    func testATrustedReadIsNeverSmallerThanAnyonesRead() throws {
        let me = SigningKeyPair.generate()
        let channel = EmbeddedChannel()
        var limits = LinkLimits()
        limits.maximumReadBytes = 16 * 1024
        limits.trustedMaximumReadBytes = 1024
        let gate = FrameGate(localPublicKey: me.publicKey, metrics: TransportMetrics(), limits: limits)
        let link = try PeerPipeline.configure(channel: channel, identity: me, serverPublicKey: nil, gate: gate, delegate: nil,
                                              options: .init(), logger: Logger(label: "test"))
        link.setTrusted(true)
        XCTAssertEqual(try readMaximum(channel), 16 * 1024)
        _ = try? channel.finish()
    }
}
