import XCTest
@testable import TandemRelay

/// The relay's bookkeeping driven directly, without sockets: admission of connections, the client
/// cap, registration, tunnels and their joins, expiry, and what a closing client takes with it.
final class RelayBookTests: XCTestCase {
    static let limits = RelayBook.Limits(maximumClients: 3, maximumPending: 4, maximumPendingPerAddress: 2,
                                         maximumTunnelsPerClient: 2, tunnelJoinTimeoutMs: 10_000, maximumConnections: 6)

    func key(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 32) }
    func token(_ n: UInt8) -> RelayBook.Token { [UInt8](repeating: n, count: 32) }

    /// A book with clients 1 (key 1) and 2 (key 2), both registered.
    func twoRegistered(limits: RelayBook.Limits = limits) -> RelayBook {
        var book = RelayBook(limits: limits)
        XCTAssertEqual(book.authenticated(1, key: key(1), address: "a"), .accepted)
        XCTAssertEqual(book.authenticated(2, key: key(2), address: "a"), .accepted)
        XCTAssertNil(book.register(1))
        XCTAssertNil(book.register(2))
        return book
    }

    func assertSane(_ book: RelayBook, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertGreaterThanOrEqual(book.pendingCount, 0, "pendingCount", file: file, line: line)
        XCTAssertGreaterThanOrEqual(book.connectionCount, 0, "connectionCount", file: file, line: line)
        XCTAssertTrue(book.pendingByAddress.values.allSatisfy { $0 > 0 }, "per-address counts", file: file, line: line)
        XCTAssertEqual(book.pendingByAddress.values.reduce(0, +), book.pendingCount, "pending total vs per address",
                       file: file, line: line)
        XCTAssertLessThanOrEqual(book.registeredCount, book.clientCount, file: file, line: line)
        XCTAssertLessThanOrEqual(book.splicedTunnelCount, book.tunnels.count, file: file, line: line)
    }

    // MARK: admission

    func testPendingPerAddressCap() {
        var book = RelayBook(limits: Self.limits)
        XCTAssertEqual(book.admit(address: "10.0.0.1"), .admitted)
        XCTAssertEqual(book.admit(address: "10.0.0.1"), .admitted)
        XCTAssertEqual(book.admit(address: "10.0.0.1"), .tooManyPending)
        // A refusal changes nothing.
        XCTAssertEqual(book.pendingCount, 2)
        XCTAssertEqual(book.connectionCount, 2)
        // Another address is not affected.
        XCTAssertEqual(book.admit(address: "10.0.0.2"), .admitted)
        // One of the first address's connections finishes its handshake: room for one more.
        book.leavePending(address: "10.0.0.1")
        XCTAssertEqual(book.admit(address: "10.0.0.1"), .admitted)
        XCTAssertEqual(book.admit(address: "10.0.0.1"), .tooManyPending)
        XCTAssertEqual(book.pendingCount, 3)
        XCTAssertEqual(book.connectionCount, 4)
        assertSane(book)
    }

    func testPendingTotalCap() {
        var book = RelayBook(limits: Self.limits)
        for a in ["a", "b", "c", "d"] { XCTAssertEqual(book.admit(address: a), .admitted) }
        XCTAssertEqual(book.admit(address: "e"), .tooManyPending)
        XCTAssertEqual(book.pendingCount, 4)
        book.leavePending(address: "b")
        XCTAssertEqual(book.admit(address: "e"), .admitted)
        XCTAssertEqual(book.admit(address: "f"), .tooManyPending)
        assertSane(book)
    }

    func testConnectionCapCountsAuthenticatedConnectionsToo() {
        var book = RelayBook(limits: Self.limits)
        // Six connections, each done with its handshake (no longer pending) but still open.
        for i in 0..<6 {
            XCTAssertEqual(book.admit(address: "h\(i)"), .admitted)
            book.leavePending(address: "h\(i)")
        }
        XCTAssertEqual(book.pendingCount, 0)
        XCTAssertEqual(book.connectionCount, 6)
        XCTAssertEqual(book.admit(address: "x"), .tooManyConnections)
        XCTAssertEqual(book.connectionCount, 6)
        XCTAssertEqual(book.pendingCount, 0)
        book.connectionClosed()
        XCTAssertEqual(book.admit(address: "x"), .admitted)
        XCTAssertEqual(book.admit(address: "y"), .tooManyConnections)
        assertSane(book)
    }

    func testConnectionCapIsCheckedBeforeThePendingCaps() {
        var book = RelayBook(limits: .init(maximumClients: 1, maximumPending: 2, maximumPendingPerAddress: 2,
                                           maximumTunnelsPerClient: 1, tunnelJoinTimeoutMs: 1, maximumConnections: 2))
        XCTAssertEqual(book.admit(address: "a"), .admitted)
        XCTAssertEqual(book.admit(address: "a"), .admitted)
        // Both caps are reached; the connection cap is the one reported.
        XCTAssertEqual(book.admit(address: "a"), .tooManyConnections)
    }

    func testLeavePendingForAnUnknownAddressIsHarmless() {
        var book = RelayBook(limits: Self.limits)
        book.leavePending(address: "never-seen")
        XCTAssertEqual(book.pendingCount, 0)
        XCTAssertEqual(book.connectionCount, 0)
        XCTAssertEqual(book.admit(address: "a"), .admitted)
        book.leavePending(address: "never-seen")
        XCTAssertEqual(book.pendingCount, 1)
        book.leavePending(address: "a")
        // Leaving twice: the second is a no-op, not a decrement below zero.
        book.leavePending(address: "a")
        XCTAssertEqual(book.pendingCount, 0)
        XCTAssertTrue(book.pendingByAddress.isEmpty)
        assertSane(book)
    }

    func testConnectionClosedNeverGoesNegative() {
        var book = RelayBook(limits: Self.limits)
        book.connectionClosed()
        book.connectionClosed()
        XCTAssertEqual(book.connectionCount, 0)
        XCTAssertEqual(book.admit(address: "a"), .admitted)
        XCTAssertEqual(book.connectionCount, 1)
        book.connectionClosed()
        book.connectionClosed()
        XCTAssertEqual(book.connectionCount, 0)
        assertSane(book)
    }

    // MARK: clients

    func testClientCap() {
        var book = RelayBook(limits: Self.limits)
        XCTAssertEqual(book.authenticated(1, key: key(1), address: "a"), .accepted)
        XCTAssertEqual(book.authenticated(2, key: key(2), address: "a"), .accepted)
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "a"), .accepted)
        XCTAssertEqual(book.authenticated(4, key: key(4), address: "a"), .full)
        XCTAssertEqual(book.clientCount, 3)
        XCTAssertNil(book.key(of: 4))
        // Register of a refused client does nothing.
        XCTAssertNil(book.register(4))
        XCTAssertFalse(book.isOnline(key(4)))
        book.clientClosed(2)
        XCTAssertEqual(book.clientCount, 2)
        XCTAssertEqual(book.authenticated(4, key: key(4), address: "a"), .accepted)
        XCTAssertEqual(book.key(of: 4), key(4))
        XCTAssertEqual(book.authenticated(5, key: key(5), address: "a"), .full)
        assertSane(book)
    }

    func testRegisterMakesTheClientOnline() {
        var book = RelayBook(limits: Self.limits)
        XCTAssertEqual(book.authenticated(7, key: key(1), address: "a"), .accepted)
        XCTAssertFalse(book.isOnline(key(1)), "authenticated but not registered")
        XCTAssertEqual(book.registeredCount, 0)
        XCTAssertNil(book.register(7))
        XCTAssertTrue(book.isOnline(key(1)))
        XCTAssertEqual(book.homeClient(of: key(1)), 7)
        XCTAssertEqual(book.registeredCount, 1)
        // Registering again on the same link replaces nothing.
        XCTAssertNil(book.register(7))
        XCTAssertEqual(book.registeredCount, 1)
        XCTAssertNil(book.register(99), "an unknown client registers nothing")
        XCTAssertEqual(book.registeredCount, 1)
        assertSane(book)
    }

    func testReplacingARegistrationReturnsTheOldClient() {
        var book = RelayBook(limits: Self.limits)
        XCTAssertEqual(book.authenticated(1, key: key(9), address: "a"), .accepted)
        XCTAssertNil(book.register(1))
        XCTAssertEqual(book.authenticated(2, key: key(9), address: "a"), .accepted)
        XCTAssertEqual(book.register(2), 1)
        XCTAssertEqual(book.homeClient(of: key(9)), 2)
        XCTAssertEqual(book.registeredCount, 1)
        XCTAssertEqual(book.clientCount, 2)
        // The replaced link closing does not take the key offline.
        book.clientClosed(1)
        XCTAssertTrue(book.isOnline(key(9)))
        XCTAssertEqual(book.homeClient(of: key(9)), 2)
        // The current one closing does.
        book.clientClosed(2)
        XCTAssertFalse(book.isOnline(key(9)))
        XCTAssertEqual(book.clientCount, 0)
        XCTAssertEqual(book.registeredCount, 0)
        // Closing again (or an unknown id) is harmless.
        XCTAssertEqual(book.clientClosed(2), [:])
        XCTAssertEqual(book.clientClosed(42), [:])
        assertSane(book)
    }

    func testReplacedLinkCanRegisterBackAndReplaceTheNewer() {
        var book = RelayBook(limits: Self.limits)
        XCTAssertEqual(book.authenticated(1, key: key(9), address: "a"), .accepted)
        XCTAssertEqual(book.authenticated(2, key: key(9), address: "a"), .accepted)
        XCTAssertNil(book.register(1))
        XCTAssertEqual(book.register(2), 1)
        XCTAssertEqual(book.register(1), 2)
        XCTAssertEqual(book.homeClient(of: key(9)), 1)
        XCTAssertEqual(book.registeredCount, 1)
    }

    // MARK: opening tunnels

    func testOpenTunnelRequests() {
        var book = twoRegistered()
        XCTAssertEqual(book.openTunnel(from: 99, to: key(2), token: token(1), nowMs: 0), .badRequest("not connected"))
        if case .badRequest = book.openTunnel(from: 1, to: [1, 2, 3], token: token(1), nowMs: 0) {} else {
            XCTFail("a short key is a bad request")
        }
        if case .badRequest = book.openTunnel(from: 1, to: key(1), token: token(1), nowMs: 0) {} else {
            XCTFail("a tunnel to yourself is a bad request")
        }
        XCTAssertEqual(book.openTunnel(from: 1, to: key(5), token: token(1), nowMs: 0), .offline)
        XCTAssertTrue(book.tunnels.isEmpty, "refusals leave no tunnel behind")
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.tunnels[token(1)]?.initiator, 1)
        XCTAssertEqual(book.tunnels[token(1)]?.target, 2)
        XCTAssertEqual(book.tunnels[token(1)]?.spliced, false)
        XCTAssertEqual(book.tunnelCount(of: 1), 1)
        XCTAssertEqual(book.tunnelCount(of: 2), 1)
        XCTAssertEqual(book.tunnelCount(of: 99), 0)
    }

    func testTunnelToAnAuthenticatedButUnregisteredClientIsOffline() {
        var book = RelayBook(limits: Self.limits)
        XCTAssertEqual(book.authenticated(1, key: key(1), address: "a"), .accepted)
        XCTAssertEqual(book.authenticated(2, key: key(2), address: "a"), .accepted)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .offline)
        // The initiator needs no registration of its own.
        XCTAssertNil(book.register(2))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
    }

    func testTunnelsPerClientCapForTheInitiator() {
        var book = twoRegistered()
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "a"), .accepted)
        XCTAssertNil(book.register(3))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(3), token: token(2), nowMs: 0), .ready(target: 3))
        guard case .limit = book.openTunnel(from: 1, to: key(2), token: token(3), nowMs: 0) else {
            return XCTFail("a third tunnel from client 1 is past the limit")
        }
        XCTAssertNil(book.tunnels[token(3)])
        XCTAssertEqual(book.tunnelCount(of: 1), 2)
        // Dropping one makes room again.
        book.dropTunnel(token(1))
        XCTAssertEqual(book.tunnelCount(of: 1), 1)
        XCTAssertEqual(book.tunnelCount(of: 2), 0)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(3), nowMs: 0), .ready(target: 2))
    }

    /// Spliced tunnels to a target count against it; waiting ones do not.
    func testTunnelsPerClientCapForTheTargetCountsSplicedTunnels() {
        var limits = Self.wide
        limits.maximumTunnelsPerClient = 2
        var book = twoRegistered(limits: limits)
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "a"), .accepted)
        XCTAssertEqual(book.authenticated(4, key: key(4), address: "a"), .accepted)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.openTunnel(from: 3, to: key(2), token: token(2), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.tunnelLoad(of: key(2)), 0, "waiting tunnels are not charged to the target")
        splice(&book, token(1), 100)
        splice(&book, token(2), 102)
        XCTAssertEqual(book.tunnelLoad(of: key(2)), 2)
        XCTAssertEqual(book.openTunnel(from: 4, to: key(2), token: token(3), nowMs: 0),
                       .limit("the target has too many tunnels"))
        XCTAssertNil(book.tunnels[token(3)])
        XCTAssertEqual(book.tunnelLoad(of: key(4)), 0, "a refusal charges nothing")
        book.dropTunnel(token(1))
        XCTAssertEqual(book.openTunnel(from: 4, to: key(2), token: token(3), nowMs: 0), .ready(target: 2))
    }

    /// Joins both ends of `token` with connections `first` and `first + 1`; fails unless spliced.
    func splice(_ book: inout RelayBook, _ token: RelayBook.Token, _ first: UInt64,
                file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(book.join(token: token, connection: first), .waiting, file: file, line: line)
        guard case .paired = book.join(token: token, connection: first + 1) else {
            return XCTFail("not spliced", file: file, line: line)
        }
    }

    // MARK: whom tunnels are charged to

    static let wide = RelayBook.Limits(maximumClients: 100, maximumPending: 4, maximumPendingPerAddress: 2,
                                       maximumTunnelsPerClient: 32, tunnelJoinTimeoutMs: 10_000, maximumConnections: 6,
                                       maximumClientsPerAddress: 100, maximumTunnelsPerPair: 4)

    /// The attack: one stranger opens tunnel after tunnel to a target and never joins them.
    /// Before, 32 of them took the target's whole allowance and its friends got LIMIT.
    func testAStrangersWaitingTunnelsDoNotLockOutTheTargetsFriends() {
        var book = twoRegistered(limits: Self.wide)  // 1 = target... and 2 = its friend
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "s"), .accepted)  // the stranger
        var granted = 0
        for i in 0..<32 {
            if case .ready = book.openTunnel(from: 3, to: key(1), token: token(UInt8(100 + i)), nowMs: 0) { granted += 1 }
        }
        XCTAssertEqual(granted, 4, "the pair cap")
        XCTAssertEqual(book.tunnelLoad(of: key(1)), 0)
        XCTAssertEqual(book.tunnelLoad(of: key(3)), 4)
        XCTAssertEqual(book.tunnelCount(from: key(3), to: key(1)), 4)
        XCTAssertEqual(book.openTunnel(from: 2, to: key(1), token: token(1), nowMs: 0), .ready(target: 1))
    }

    func testPairCapBoundaries() {
        var limits = Self.wide
        limits.maximumTunnelsPerPair = 2
        var book = twoRegistered(limits: limits)
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "a"), .accepted)
        XCTAssertNil(book.register(3))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(2), nowMs: 0), .ready(target: 2))  // = cap
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(3), nowMs: 0),
                       .limit("at most 2 tunnels to one target"))  // cap + 1
        // Spliced tunnels stay in the pair's count.
        splice(&book, token(1), 100)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(3), nowMs: 0),
                       .limit("at most 2 tunnels to one target"))
        // Other pairs are not affected: the other direction, and another target.
        XCTAssertEqual(book.openTunnel(from: 2, to: key(1), token: token(4), nowMs: 0), .ready(target: 1))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(3), token: token(5), nowMs: 0), .ready(target: 3))
        // One ends (expires, or its ends close): room for one.
        book.dropTunnel(token(2))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(3), nowMs: 0), .ready(target: 2))
        assertSane(book)
    }

    /// The initiator's allowance counts its waiting tunnels and its spliced ones, at exactly the cap.
    func testInitiatorCapBoundaries() {
        var limits = Self.wide
        limits.maximumTunnelsPerClient = 3
        limits.maximumTunnelsPerPair = 1
        var book = RelayBook(limits: limits)
        for i in 1...6 {
            XCTAssertEqual(book.authenticated(UInt64(i), key: key(UInt8(i)), address: "a"), .accepted)
            XCTAssertNil(book.register(UInt64(i)))
        }
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        splice(&book, token(1), 100)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(3), token: token(2), nowMs: 0), .ready(target: 3))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(4), token: token(3), nowMs: 0), .ready(target: 4))  // 3 = cap
        XCTAssertEqual(book.openTunnel(from: 1, to: key(5), token: token(4), nowMs: 0),
                       .limit("at most 3 tunnels per client"))
        XCTAssertEqual(book.tunnelLoad(of: key(1)), 3)
        // A spliced tunnel *to* the key counts as well.
        book.dropTunnel(token(3))
        XCTAssertEqual(book.openTunnel(from: 6, to: key(1), token: token(5), nowMs: 0), .ready(target: 1))
        XCTAssertEqual(book.tunnelLoad(of: key(1)), 2, "waiting to it: not counted")
        splice(&book, token(5), 200)
        XCTAssertEqual(book.tunnelLoad(of: key(1)), 3)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(5), token: token(4), nowMs: 0),
                       .limit("at most 3 tunnels per client"))
    }

    /// The attack: a client at its cap of spliced tunnels reconnects; before, its new link started
    /// from zero. Tunnels are charged to keys, and spliced ones outlive the link.
    func testSplicedTunnelsStayChargedAfterTheClientReconnects() {
        var limits = Self.wide
        limits.maximumTunnelsPerClient = 2
        var book = twoRegistered(limits: limits)
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "a"), .accepted)
        XCTAssertNil(book.register(3))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(2), nowMs: 0), .ready(target: 2))
        splice(&book, token(1), 100)
        splice(&book, token(2), 102)
        XCTAssertEqual(book.clientClosed(1), [:], "spliced tunnels are not dropped")
        XCTAssertEqual(book.authenticated(9, key: key(1), address: "a"), .accepted)  // the same key, a new link
        XCTAssertEqual(book.tunnelLoad(of: key(1)), 2)
        XCTAssertEqual(book.openTunnel(from: 9, to: key(3), token: token(3), nowMs: 0),
                       .limit("at most 2 tunnels per client"))
        // The target's side too: its spliced tunnels still count after it reconnects.
        book.clientClosed(2)
        XCTAssertEqual(book.authenticated(10, key: key(2), address: "a"), .accepted)
        XCTAssertEqual(book.tunnelLoad(of: key(2)), 2)
        XCTAssertEqual(book.openTunnel(from: 10, to: key(3), token: token(4), nowMs: 0),
                       .limit("at most 2 tunnels per client"))
        book.dropTunnel(token(1))
        XCTAssertEqual(book.tunnelLoad(of: key(1)), 1)
        XCTAssertEqual(book.tunnelLoad(of: key(2)), 1)
        XCTAssertEqual(book.openTunnel(from: 9, to: key(3), token: token(3), nowMs: 0), .ready(target: 3))
    }

    /// Tunnels waiting to a target may outnumber its allowance (they are the initiators'); the
    /// one whose splice would take the target past its cap is refused at the join.
    func testJoinIsRefusedWhenTheTargetFilledUpMeanwhile() {
        var limits = Self.wide
        limits.maximumTunnelsPerClient = 1
        var book = twoRegistered(limits: limits)
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "a"), .accepted)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.openTunnel(from: 3, to: key(2), token: token(2), nowMs: 0), .ready(target: 2))
        splice(&book, token(1), 100)
        XCTAssertEqual(book.join(token: token(2), connection: 200), .waiting)
        XCTAssertEqual(book.join(token: token(2), connection: 201), .refused(other: 200))
        XCTAssertNil(book.tunnels[token(2)])
        XCTAssertEqual(book.tunnelLoad(of: key(3)), 0, "the refused tunnel is no longer charged")
        XCTAssertEqual(book.tunnelLoad(of: key(2)), 1)
        XCTAssertEqual(book.join(token: token(2), connection: 202), .unknownToken)
        assertSane(book)
    }

    // MARK: clients per address

    func testClientsPerAddressCap() {
        var limits = Self.wide
        limits.maximumClientsPerAddress = 2
        var book = RelayBook(limits: limits)
        XCTAssertEqual(book.authenticated(1, key: key(1), address: "10.0.0.1"), .accepted)
        XCTAssertEqual(book.authenticated(2, key: key(2), address: "10.0.0.1"), .accepted)  // = cap
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "10.0.0.1"), .tooManyFromAddress)
        XCTAssertNil(book.key(of: 3))
        XCTAssertEqual(book.authenticated(4, key: key(3), address: "10.0.0.2"), .accepted)
        XCTAssertEqual(book.clientCount, 3)
        book.clientClosed(1)
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "10.0.0.1"), .accepted)
        XCTAssertEqual(book.authenticated(5, key: key(5), address: "10.0.0.1"), .tooManyFromAddress)
        // The relay-wide cap still applies first.
        var full = RelayBook(limits: Self.limits)  // 3 clients, no per-address cap
        for i in 1...3 { XCTAssertEqual(full.authenticated(UInt64(i), key: key(UInt8(i)), address: "x\(i)"), .accepted) }
        XCTAssertEqual(full.authenticated(4, key: key(4), address: "x4"), .full)
    }

    func testAddressBuckets() {
        XCTAssertEqual(RelayBook.addressBucket("203.0.113.7"), "203.0.113.7")
        XCTAssertEqual(RelayBook.addressBucket("::ffff:203.0.113.7"), "203.0.113.7")
        XCTAssertEqual(RelayBook.addressBucket("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64")
        XCTAssertEqual(RelayBook.addressBucket("2001:DB8:1:2::9"), "2001:db8:1:2::/64")
        XCTAssertEqual(RelayBook.addressBucket("2001:db8:0001:0002:ffff::1"), "2001:db8:1:2::/64")
        XCTAssertEqual(RelayBook.addressBucket("2001:db8::1"), "2001:db8:0:0::/64")
        XCTAssertEqual(RelayBook.addressBucket("::1"), "0:0:0:0::/64")
        XCTAssertEqual(RelayBook.addressBucket("?"), "?")
        // Hosts of one /64 share a bucket; neighbouring /64s do not.
        XCTAssertEqual(RelayBook.addressBucket("2001:db8:a:b::1"), RelayBook.addressBucket("2001:db8:a:b:ffff:ffff:ffff:ffff"))
        XCTAssertNotEqual(RelayBook.addressBucket("2001:db8:a:b::1"), RelayBook.addressBucket("2001:db8:a:c::1"))
        // Malformed text does not trap.
        _ = RelayBook.addressBucket(":::::::::::")
        _ = RelayBook.addressBucket("1:2:3:4:5:6:7:8:9:10")
    }

    // MARK: the mailbox queue

    func testMailboxJobCaps() {
        var limits = Self.wide
        limits.maximumMailboxJobs = 3
        limits.maximumMailboxJobsPerClient = 2
        var book = RelayBook(limits: limits)
        XCTAssertEqual(book.startMailboxJob(client: 1), .accepted)
        XCTAssertEqual(book.startMailboxJob(client: 1), .accepted)  // = per-client cap
        XCTAssertEqual(book.startMailboxJob(client: 1), .tooManyFromClient)
        XCTAssertEqual(book.startMailboxJob(client: 2), .accepted)  // = total cap
        XCTAssertEqual(book.startMailboxJob(client: 3), .busy)
        XCTAssertEqual(book.mailboxJobs, 3)
        book.finishMailboxJob(client: 1)
        XCTAssertEqual(book.startMailboxJob(client: 3), .accepted)
        XCTAssertEqual(book.startMailboxJob(client: 1), .busy)
        // Finishing a job that was never started changes nothing.
        book.finishMailboxJob(client: 42)
        XCTAssertEqual(book.mailboxJobs, 3)
        for c: UInt64 in [1, 2, 3] { book.finishMailboxJob(client: c) }
        XCTAssertEqual(book.mailboxJobs, 0)
        XCTAssertTrue(book.mailboxJobsByClient.isEmpty)
        book.finishMailboxJob(client: 1)
        XCTAssertEqual(book.mailboxJobs, 0, "never negative")
    }

    // MARK: joins

    func testJoinPairsTwoEndsAndRefusesAThird() {
        var book = twoRegistered()
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.join(token: token(1), connection: 100), .waiting)
        XCTAssertEqual(book.tunnels[token(1)]?.joined, [100])
        XCTAssertEqual(book.splicedTunnelCount, 0)
        // The same connection joining twice does not pair with itself.
        XCTAssertEqual(book.join(token: token(1), connection: 100), .unknownToken)
        guard case .paired(let other, let tunnel) = book.join(token: token(1), connection: 101) else {
            return XCTFail("the second end pairs")
        }
        XCTAssertEqual(other, 100)
        XCTAssertEqual(tunnel.joined, [100, 101])
        XCTAssertTrue(tunnel.spliced)
        XCTAssertEqual(tunnel.initiator, 1)
        XCTAssertEqual(tunnel.target, 2)
        XCTAssertEqual(book.splicedTunnelCount, 1)
        // A third join with the same token is refused, whoever it is.
        XCTAssertEqual(book.join(token: token(1), connection: 102), .unknownToken)
        XCTAssertEqual(book.join(token: token(1), connection: 100), .unknownToken)
        XCTAssertEqual(book.tunnels[token(1)]?.joined, [100, 101])
        XCTAssertEqual(book.splicedTunnelCount, 1)
    }

    func testJoinWithAnUnknownTokenIsRefused() {
        var book = twoRegistered()
        XCTAssertEqual(book.join(token: token(7), connection: 1), .unknownToken)
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.join(token: token(2), connection: 1), .unknownToken)
        XCTAssertEqual(book.tunnels[token(1)]?.joined, [])
    }

    func testJoinsExpireAfterTheTimeout() {
        var book = twoRegistered()
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 1_000), .ready(target: 2))
        XCTAssertEqual(book.openTunnel(from: 2, to: key(1), token: token(2), nowMs: 5_000), .ready(target: 1))
        XCTAssertEqual(book.join(token: token(1), connection: 100), .waiting)
        XCTAssertTrue(book.expireJoins(nowMs: 10_999).isEmpty, "not yet")
        let expired = book.expireJoins(nowMs: 11_000)
        XCTAssertEqual(expired.count, 1)
        XCTAssertEqual(expired.first?.0, token(1))
        XCTAssertEqual(expired.first?.1, [100], "the end that joined and waits in vain")
        XCTAssertNil(book.tunnels[token(1)])
        XCTAssertEqual(book.tunnelCount(of: 1), 1)
        XCTAssertEqual(book.tunnelCount(of: 2), 1)
        // A join after expiry is refused.
        XCTAssertEqual(book.join(token: token(1), connection: 101), .unknownToken)
        XCTAssertEqual(book.join(token: token(1), connection: 100), .unknownToken)
        // The younger tunnel expires later, with no ends joined.
        let later = book.expireJoins(nowMs: 15_000)
        XCTAssertEqual(later.map(\.0), [token(2)])
        XCTAssertEqual(later.first?.1, [])
        XCTAssertTrue(book.tunnels.isEmpty)
        XCTAssertEqual(book.tunnelCount(of: 1), 0)
        XCTAssertEqual(book.tunnelCount(of: 2), 0)
        XCTAssertTrue(book.expireJoins(nowMs: 1_000_000).isEmpty)
    }

    func testSplicedTunnelsDoNotExpire() {
        var book = twoRegistered()
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.join(token: token(1), connection: 100), .waiting)
        guard case .paired = book.join(token: token(1), connection: 101) else { return XCTFail("paired") }
        XCTAssertTrue(book.expireJoins(nowMs: 1_000_000).isEmpty)
        XCTAssertEqual(book.tunnels[token(1)]?.spliced, true)
        // It ends when the server drops it (a connection closed).
        book.dropTunnel(token(1))
        XCTAssertNil(book.tunnels[token(1)])
        XCTAssertEqual(book.tunnelCount(of: 1), 0)
        XCTAssertEqual(book.tunnelCount(of: 2), 0)
        book.dropTunnel(token(1))  // twice: harmless
        book.dropTunnel(token(9))  // unknown: harmless
    }

    // MARK: a client closing

    func testClientClosedDropsUnsplicedTunnelsButKeepsSplicedOnes() {
        var book = twoRegistered()
        XCTAssertEqual(book.authenticated(3, key: key(3), address: "a"), .accepted)
        XCTAssertNil(book.register(3))
        // 1 → 2 spliced, 1 → 3 waiting for its ends, 3 → 2 not involving 1.
        XCTAssertEqual(book.openTunnel(from: 1, to: key(2), token: token(1), nowMs: 0), .ready(target: 2))
        XCTAssertEqual(book.join(token: token(1), connection: 100), .waiting)
        guard case .paired = book.join(token: token(1), connection: 101) else { return XCTFail("paired") }
        XCTAssertEqual(book.openTunnel(from: 1, to: key(3), token: token(2), nowMs: 0), .ready(target: 3))
        XCTAssertEqual(book.join(token: token(2), connection: 102), .waiting)
        XCTAssertEqual(book.openTunnel(from: 3, to: key(2), token: token(3), nowMs: 0), .ready(target: 2))

        let dropped = book.clientClosed(1)
        XCTAssertEqual(dropped, [token(2): [102]], "the dropped tunnel, with its end that waits in vain")
        XCTAssertNil(book.tunnels[token(2)])
        XCTAssertEqual(book.tunnels[token(1)]?.spliced, true, "a spliced tunnel lives on its own connections")
        XCTAssertNotNil(book.tunnels[token(3)])
        XCTAssertFalse(book.isOnline(key(1)))
        XCTAssertEqual(book.tunnelCount(of: 3), 1, "client 3 keeps only the tunnel not involving 1")
        XCTAssertEqual(book.tunnelCount(of: 2), 2)
        // The dropped tunnel's waiting end cannot be joined any more.
        XCTAssertEqual(book.join(token: token(2), connection: 103), .unknownToken)
        // The target closing drops its unspliced tunnel too, from the initiator's count as well.
        XCTAssertEqual(book.clientClosed(2), [token(3): []])
        XCTAssertEqual(book.tunnelCount(of: 3), 0)
        XCTAssertEqual(book.tunnels.count, 1)
        XCTAssertEqual(book.splicedTunnelCount, 1)
        assertSane(book)
    }

    // MARK: counts never go negative

    /// Random sequences of well-formed connection lifecycles, mixed with stray calls (unknown
    /// addresses leaving, extra closes, unknown clients): every count stays consistent and non-negative,
    /// and everything returns to zero once every connection is gone.
    func testCountsStayConsistentOverRandomSequences() {
        var rng = RelayTestRNG(seed: 0x7a_ad_e1)
        for _ in 0..<50 {
            var book = RelayBook(limits: .init(maximumClients: 5, maximumPending: 6, maximumPendingPerAddress: 3,
                                               maximumTunnelsPerClient: 3, tunnelJoinTimeoutMs: 50, maximumConnections: 8))
            struct Conn { let id: UInt64; let address: String; var pending: Bool; var client: Bool }
            var open: [Conn] = []
            var nextID: UInt64 = 1
            var now: Int64 = 0
            for _ in 0..<400 {
                now += Int64.random(in: 0...5, using: &rng)
                switch Int.random(in: 0..<9, using: &rng) {
                case 0, 1:
                    let address = "10.0.0.\(Int.random(in: 1...3, using: &rng))"
                    if book.admit(address: address) == .admitted {
                        open.append(Conn(id: nextID, address: address, pending: true, client: false))
                        nextID += 1
                    }
                case 2:
                    // A pending connection authenticates (or is refused, and stays a plain connection).
                    if let i = open.indices.filter({ open[$0].pending }).randomElement(using: &rng) {
                        book.leavePending(address: open[i].address)
                        open[i].pending = false
                        let k = [UInt8](repeating: UInt8(Int.random(in: 1...4, using: &rng)), count: 32)
                        if book.authenticated(open[i].id, key: k, address: open[i].address) == .accepted {
                            open[i].client = true
                            if Bool.random(using: &rng) { _ = book.register(open[i].id) }
                        }
                    }
                case 3:
                    // A connection closes.
                    if let i = open.indices.randomElement(using: &rng) {
                        let c = open.remove(at: i)
                        if c.pending { book.leavePending(address: c.address) }
                        if c.client { book.clientClosed(c.id) }
                        book.connectionClosed()
                    }
                case 4:
                    let clients = open.filter(\.client)
                    if let a = clients.randomElement(using: &rng) {
                        let k = [UInt8](repeating: UInt8(Int.random(in: 1...4, using: &rng)), count: 32)
                        let t = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
                        _ = book.openTunnel(from: a.id, to: k, token: t, nowMs: now)
                    }
                case 5:
                    if let t = book.tunnels.keys.randomElement(using: &rng) {
                        _ = book.join(token: t, connection: UInt64.random(in: 1000...1003, using: &rng))
                    }
                case 6:
                    _ = book.expireJoins(nowMs: now)
                case 7:
                    if let t = book.tunnels.keys.randomElement(using: &rng) { book.dropTunnel(t) }
                default:
                    // Stray calls.
                    book.leavePending(address: "203.0.113.9")
                    book.clientClosed(UInt64.random(in: 10_000...10_010, using: &rng))
                    _ = book.register(UInt64.random(in: 10_000...10_010, using: &rng))
                }
                assertSane(book)
                XCTAssertEqual(book.connectionCount, open.count)
                XCTAssertEqual(book.pendingCount, open.filter(\.pending).count)
                XCTAssertEqual(book.clientCount, open.filter(\.client).count)
                for k in 1...4 {
                    XCTAssertLessThanOrEqual(book.tunnelLoad(of: [UInt8](repeating: UInt8(k), count: 32)), 3)
                }
                XCTAssertEqual(book.loads.values.map(\.initiated).reduce(0, +), book.tunnels.count,
                               "every tunnel is charged to its initiator once")
                XCTAssertEqual(book.loads.values.map(\.splicedIn).reduce(0, +), book.splicedTunnelCount,
                               "every spliced tunnel is charged to its target once")
                XCTAssertEqual(book.pairs.values.reduce(0, +), book.tunnels.count)
                XCTAssertEqual(book.clientsByAddress.values.reduce(0, +), book.clientCount)
            }
            for c in open {
                if c.pending { book.leavePending(address: c.address) }
                if c.client { book.clientClosed(c.id) }
                book.connectionClosed()
            }
            XCTAssertEqual(book.connectionCount, 0)
            XCTAssertEqual(book.pendingCount, 0)
            XCTAssertEqual(book.clientCount, 0)
            XCTAssertEqual(book.registeredCount, 0)
            XCTAssertTrue(book.tunnels.allSatisfy(\.value.spliced), "only spliced tunnels outlive their clients")
            XCTAssertTrue(book.clientsByAddress.isEmpty)
            for t in book.tunnels.keys { book.dropTunnel(t) }
            XCTAssertTrue(book.loads.isEmpty, "loads return to zero with the tunnels")
            XCTAssertTrue(book.pairs.isEmpty)
            assertSane(book)
        }
    }
}

/// A small deterministic generator so random sequences are reproducible from a seed.
struct RelayTestRNG: RandomNumberGenerator {
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
