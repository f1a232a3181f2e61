import Foundation
import TandemNet
import XCTest
@testable import TandemRelay

final class ConfigFileTests: XCTestCase {
    /// Writes `text` to a fresh `relay.conf` and returns its path.
    private func write(_ text: String) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-relay-conf-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: dir) }
        let url = dir.appendingPathComponent("relay.conf")
        try Data(text.utf8).write(to: url)
        return url.path
    }

    /// The error message of loading `text`, with the temporary path shortened to `relay.conf`.
    private func loadError(_ text: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let path = try write(text)
        do {
            _ = try RelayConfiguration.load(file: path)
            XCTFail("loaded without error: \(text)", file: file, line: line)
            return ""
        } catch let error as TandemError {
            XCTAssertEqual(error.exitCode, TandemError.usageExitCode, file: file, line: line)
            return error.message.replacingOccurrences(of: path, with: "relay.conf")
        }
    }

    func testEveryKey() throws {
        let path = try write("""
            listen = 10.0.0.1:9000
            metrics = 0.0.0.0:9100
            data-dir = /var/lib/tandem-relay
            public-address = relay.example.org:9000
            event-loops = 3
            max-clients = 100
            max-clients-per-address = 9
            max-pending = 50
            max-pending-per-address = 5
            handshake-timeout = 5s
            idle-timeout = 2m
            max-tunnels-per-client = 4
            max-tunnels-per-pair = 3
            tunnel-join-timeout = 15
            client-rate = 512k
            tunnel-queue = 1M
            mailbox-items-per-recipient = 10
            mailbox-bytes-per-recipient = 2m
            mailbox-items-per-sender = 3
            mailbox-total-items = 1000
            mailbox-total-bytes = 1g
            mailbox-item-bytes = 8K
            mailbox-ttl = 12h
            mailbox-bytes-per-sender = 3m
            mailbox-bytes-per-address = 40m
            mailbox-item-charge = 2k
            mailbox-queue = 77
            log-format = json
            log-level = debug
            """)
        let c = try RelayConfiguration.load(file: path)
        XCTAssertEqual(c.listenHost, "10.0.0.1")
        XCTAssertEqual(c.listenPort, 9000)
        XCTAssertEqual(c.metricsHost, "0.0.0.0")
        XCTAssertEqual(c.metricsPort, 9100)
        XCTAssertEqual(c.dataDirectory, "/var/lib/tandem-relay")
        XCTAssertEqual(c.publicAddress, "relay.example.org:9000")
        XCTAssertEqual(c.eventLoops, 3)
        XCTAssertEqual(c.maximumClients, 100)
        XCTAssertEqual(c.maximumPendingConnections, 50)
        XCTAssertEqual(c.maximumPendingPerAddress, 5)
        XCTAssertEqual(c.handshakeTimeoutSeconds, 5)
        XCTAssertEqual(c.idleTimeoutSeconds, 120)
        XCTAssertEqual(c.maximumTunnelsPerClient, 4)
        XCTAssertEqual(c.tunnelJoinTimeoutSeconds, 15)
        XCTAssertEqual(c.clientBytesPerSecond, 512 * 1024)
        XCTAssertEqual(c.tunnelQueueBytes, 1 << 20)
        XCTAssertEqual(c.mailboxItemsPerRecipient, 10)
        XCTAssertEqual(c.mailboxBytesPerRecipient, 2 << 20)
        XCTAssertEqual(c.mailboxItemsPerSender, 3)
        XCTAssertEqual(c.mailboxTotalItems, 1000)
        XCTAssertEqual(c.mailboxTotalBytes, 1 << 30)
        XCTAssertEqual(c.mailboxItemBytes, 8 * 1024)
        XCTAssertEqual(c.mailboxTTLSeconds, 12 * 3600)
        XCTAssertEqual(c.maximumClientsPerAddress, 9)
        XCTAssertEqual(c.maximumTunnelsPerPair, 3)
        XCTAssertEqual(c.mailboxBytesPerSender, 3 << 20)
        XCTAssertEqual(c.mailboxBytesPerAddress, 40 << 20)
        XCTAssertEqual(c.mailboxItemCharge, 2048)
        XCTAssertEqual(c.mailboxQueueJobs, 77)
        XCTAssertEqual(c.mailboxQuotas.bytesPerSender, 3 << 20)
        XCTAssertEqual(c.mailboxQuotas.bytesPerAddress, 40 << 20)
        XCTAssertEqual(c.mailboxQuotas.minimumChargedBytes, 2048)
        XCTAssertEqual(c.logFormat, .json)
        XCTAssertEqual(c.logLevel, "debug")
    }

    func testConfigKeysAreExactlyTheAcceptedKeys() throws {
        XCTAssertEqual(RelayConfiguration.configKeys.count, 29)
        XCTAssertEqual(Set(RelayConfiguration.configKeys).count, RelayConfiguration.configKeys.count)
        // Every listed key is accepted by apply (with a value each kind of key takes).
        let sample: [String: String] = ["listen": "1.2.3.4:5", "metrics": "off", "log-format": "text", "log-level": "info"]
        for key in RelayConfiguration.configKeys {
            var c = RelayConfiguration()
            XCTAssertNoThrow(try c.apply(key: key, value: sample[key] ?? "7", origin: "test"), key)
        }
    }

    /// One event loop unless told otherwise; 1…64 accepted, anything else refused in one line.
    func testEventLoops() throws {
        XCTAssertEqual(RelayConfiguration().eventLoops, 1)
        XCTAssertEqual(try RelayConfiguration.load(file: try write("event-loops = 64\n")).eventLoops, 64)
        for bad in ["0", "65", "-1", "two", "1.5"] {
            let message = try loadError("event-loops = \(bad)")
            XCTAssertTrue(message.contains("event-loops must be between 1 and 64"), message)
            XCTAssertFalse(message.contains("\n"), message)
        }
    }

    /// Unset, the per-sender and per-address mail quotas are shares of the relay's total.
    func testMailboxSharesDefaultToFractionsOfTheTotal() throws {
        var c = RelayConfiguration()
        XCTAssertEqual(c.mailboxQuotas.bytesPerSender, (256 << 20) / 64)
        XCTAssertEqual(c.mailboxQuotas.bytesPerAddress, (256 << 20) / 16)
        XCTAssertEqual(c.mailboxQuotas.minimumChargedBytes, 1024)
        XCTAssertEqual(c.maximumClientsPerAddress, 64)
        c = try RelayConfiguration.load(file: try write("mailbox-total-bytes = 4m\n"))
        XCTAssertEqual(c.mailboxQuotas.bytesPerSender, 64 * 1024)
        XCTAssertEqual(c.mailboxQuotas.bytesPerAddress, 256 * 1024)
        c = try RelayConfiguration.load(file: try write("mailbox-total-bytes = 10\n"))
        XCTAssertEqual(c.mailboxQuotas.bytesPerSender, 1, "never zero")
        XCTAssertEqual(try loadError("mailbox-item-charge = 0"),
                       "relay.conf:1: mailbox-item-charge must be a positive number of bytes with an optional k, m or g suffix, got '0'")
        XCTAssertEqual(try loadError("max-clients-per-address = 0"),
                       "relay.conf:1: max-clients-per-address must be a positive number, got '0'")
    }

    func testEmptyFileKeepsTheBase() throws {
        var base = RelayConfiguration()
        base.maximumClients = 7
        base.metricsHost = nil
        let c = try RelayConfiguration.load(file: try write("\n\n# nothing\n"), into: base)
        XCTAssertEqual(c, base)
    }

    func testFileOverridesOnlyWhatItSets() throws {
        var base = RelayConfiguration()
        base.maximumClients = 7
        let c = try RelayConfiguration.load(file: try write("idle-timeout = 1h\n"), into: base)
        XCTAssertEqual(c.maximumClients, 7)
        XCTAssertEqual(c.idleTimeoutSeconds, 3600)
        XCTAssertEqual(c.listenPort, RelayConfiguration().listenPort)
    }

    func testCommentsQuotesAndWhitespace() throws {
        let c = try RelayConfiguration.load(file: try write("""
            # a relay
              # an indented comment
            \t
            max-clients=12   # trailing comment
            data-dir = "/srv/my relay # not a comment"   # but this is
            public-address = "say \\"hi\\" \\\\ there"
            log-level="warning"
            max-pending\t=\t9\r
            listen = [::1]:7000
            metrics = 9200
            """))
        XCTAssertEqual(c.maximumClients, 12)
        XCTAssertEqual(c.dataDirectory, "/srv/my relay # not a comment")
        XCTAssertEqual(c.publicAddress, #"say "hi" \ there"#)
        XCTAssertEqual(c.logLevel, "warning")
        XCTAssertEqual(c.maximumPendingConnections, 9)
        XCTAssertEqual(c.listenHost, "::1")
        XCTAssertEqual(c.listenPort, 7000)
        XCTAssertEqual(c.metricsHost, "127.0.0.1", "a bare port keeps metrics on loopback")
        XCTAssertEqual(c.metricsPort, 9200)
    }

    func testWindowsLineEndingsCountLinesRight() throws {
        let c = try RelayConfiguration.load(file: try write("# x\r\nmax-clients = 4\r\n\r\nmax-pending = 3\r\n"))
        XCTAssertEqual(c.maximumClients, 4)
        XCTAssertEqual(c.maximumPendingConnections, 3)
        XCTAssertEqual(try loadError("# x\r\n\r\nmax-pending = x\r\n"), "relay.conf:3: max-pending must be a positive number, got 'x'")
    }

    func testHashWithoutSpaceBeforeItIsPartOfTheValue() throws {
        let c = try RelayConfiguration.load(file: try write("data-dir = /srv/relay#1 # comment\n"))
        XCTAssertEqual(c.dataDirectory, "/srv/relay#1")
    }

    func testUTF8ByteOrderMarkAndNonASCIIValues() throws {
        let c = try RelayConfiguration.load(file: try write("\u{FEFF}data-dir = /srv/réseau\n"))
        XCTAssertEqual(c.dataDirectory, "/srv/réseau")
    }

    func testMetricsOff() throws {
        let c = try RelayConfiguration.load(file: try write("metrics = off\n"))
        XCTAssertNil(c.metricsHost)
    }

    func testSizeSuffixes() throws {
        func rate(_ text: String) throws -> Int {
            var c = RelayConfiguration()
            try c.apply(key: "client-rate", value: text, origin: "test")
            return c.clientBytesPerSecond
        }
        XCTAssertEqual(try rate("0"), 0, "0 = unlimited")
        XCTAssertEqual(try rate("1000"), 1000)
        XCTAssertEqual(try rate("1k"), 1024)
        XCTAssertEqual(try rate("3K"), 3072)
        XCTAssertEqual(try rate("2m"), 2 * 1_048_576)
        XCTAssertEqual(try rate("5M"), 5 * 1_048_576)
        XCTAssertEqual(try rate("1g"), 1 << 30)
        XCTAssertEqual(try rate("2G"), 2 << 30)
        for bad in ["k", "1kb", "1.5m", "-1", "+1", "1 k", "1t", "", "99999999999999999999", "9999999999999g"] {
            XCTAssertThrowsError(try rate(bad), bad)
        }
        var c = RelayConfiguration()
        XCTAssertThrowsError(try c.apply(key: "tunnel-queue", value: "0", origin: "test"), "only client-rate may be 0")
    }

    func testDurations() throws {
        func ttl(_ text: String) throws -> Int64 {
            var c = RelayConfiguration()
            try c.apply(key: "mailbox-ttl", value: text, origin: "test")
            return c.mailboxTTLSeconds
        }
        XCTAssertEqual(try ttl("7d"), 7 * 86_400)
        XCTAssertEqual(try ttl("12h"), 12 * 3600)
        XCTAssertEqual(try ttl("30m"), 1800)
        XCTAssertEqual(try ttl("45s"), 45)
        XCTAssertEqual(try ttl("1h30m"), 5400)
        XCTAssertEqual(try ttl("600"), 600)
        XCTAssertEqual(try ttl("2000ms"), 2)
        for bad in ["0", "0s", "1500ms", "abc", "5x", "-5", "", "400d"] {
            XCTAssertThrowsError(try ttl(bad), bad)
        }
    }

    func testErrorsNameFileAndLine() throws {
        XCTAssertEqual(try loadError("max-clients = 5\n\n# c\n\n\n\nmax-client = 5\n"),
                       "relay.conf:7: unknown key 'max-client' (did you mean 'max-clients'?)")
        XCTAssertEqual(try loadError("# x\n\nmax-clients = abc\n"),
                       "relay.conf:3: max-clients must be a positive number, got 'abc'")
        XCTAssertEqual(try loadError("bogus = 1\n"), "relay.conf:1: unknown key 'bogus'")
        XCTAssertEqual(try loadError("max-clients = 0"), "relay.conf:1: max-clients must be a positive number, got '0'")
        XCTAssertEqual(try loadError("max-tunnels-per-client = -3"),
                       "relay.conf:1: max-tunnels-per-client must be a positive number, got '-3'")
        XCTAssertEqual(try loadError("log-format = xml"), "relay.conf:1: log-format must be text or json, got 'xml'")
        XCTAssertEqual(try loadError("log-level = loud"),
                       "relay.conf:1: log-level must be one of trace|debug|info|notice|warning|error|critical, got 'loud'")
        XCTAssertEqual(try loadError("\nmax-clients = 1\nmax-clients = 2\n"),
                       "relay.conf:3: 'max-clients' is already set on line 2")
        XCTAssertEqual(try loadError("just some words"), "relay.conf:1: expected 'key = value', got 'just some words'")
        XCTAssertEqual(try loadError(" = 5"), "relay.conf:1: a key is missing before '='")
        XCTAssertEqual(try loadError("data-dir ="), "relay.conf:1: data-dir needs a value")
        XCTAssertEqual(try loadError("data-dir = \"/x"), "relay.conf:1: data-dir: the quoted value has no closing quote")
        XCTAssertEqual(try loadError("data-dir = \"/x\" y"), "relay.conf:1: data-dir: unexpected text after the closing quote")
        XCTAssertEqual(try loadError("data-dir = /x\"y\""), "relay.conf:1: data-dir: a quote may only surround the whole value")
        XCTAssertEqual(try loadError("listen = 0.0.0.0:0"),
                       "relay.conf:1: listen must be host:port with a port from 1 to 65535, got '0.0.0.0:0'")
        XCTAssertTrue(try loadError("listen = host:99999").hasPrefix("relay.conf:1: listen: malformed address 'host:99999'"))
        XCTAssertTrue(try loadError("metrics = nope").hasPrefix("relay.conf:1: metrics: malformed address"))
        XCTAssertTrue(try loadError("\n\nidle-timeout = soon").hasPrefix("relay.conf:3: idle-timeout: 'soon' is not a duration"))
        XCTAssertEqual(try loadError("handshake-timeout = 1500ms"),
                       "relay.conf:1: handshake-timeout must be a whole number of seconds, got '1500ms'")
        XCTAssertEqual(try loadError("tunnel-join-timeout = 0"), "relay.conf:1: tunnel-join-timeout must be longer than zero, got '0'")
        XCTAssertEqual(try loadError("mailbox-total-bytes = 1.5g"),
                       "relay.conf:1: mailbox-total-bytes must be a positive number of bytes with an optional k, m or g suffix, got '1.5g'")
    }

    func testApplyUsesTheOriginGiven() {
        var c = RelayConfiguration()
        XCTAssertThrowsError(try c.apply(key: "max-clients", value: "x", origin: "--max-clients")) {
            XCTAssertEqual(($0 as? TandemError)?.message, "--max-clients: max-clients must be a positive number, got 'x'")
        }
    }

    func testFileProblems() throws {
        let missing = "/nonexistent-\(UUID().uuidString)/relay.conf"
        XCTAssertThrowsError(try RelayConfiguration.load(file: missing)) {
            let e = $0 as? TandemError
            XCTAssertEqual(e?.exitCode, TandemError.usageExitCode)
            XCTAssertTrue(e?.message.hasPrefix("cannot read config file \(missing)") == true, "\($0)")
        }
        let directory = FileManager.default.temporaryDirectory.path
        XCTAssertThrowsError(try RelayConfiguration.load(file: directory)) {
            XCTAssertTrue("\($0)".hasPrefix("cannot read config file \(directory)"), "\($0)")
        }
        let path = try write("")
        try Data([0x6C, 0x6F, 0x67, 0xFF, 0xFE]).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try RelayConfiguration.load(file: path)) {
            XCTAssertEqual("\($0)", "cannot read config file \(path): not UTF-8 text")
        }
    }
}
