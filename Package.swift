// swift-tools-version:6.0
import PackageDescription

/// What the node's core builds on; its feature modules get the same, plus the core.
let nodeCoreDependencies: [Target.Dependency] = [
    "Sodium",
    "TandemProtocol",
    "TandemNet",
    "TandemStore",
    "TandemVault",
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "NIOPosix", package: "swift-nio"),
    .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
    .product(name: "Logging", package: "swift-log"),
    .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
]

/// A feature module of the node (Sources/TandemNode/README.md): the core and the libraries under
/// it, plus what the feature itself needs — never another feature module.
func nodeFeature(_ name: String, _ extra: [Target.Dependency] = []) -> Target {
    .target(
        name: name,
        dependencies: ["TandemNodeCore"] + nodeCoreDependencies + extra
    )
}

let package = Package(
    name: "Tandem",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "tandem", targets: ["tandem"]),
        .executable(name: "tandem-bench", targets: ["tandem-bench"]),
        .executable(name: "tandem-relay", targets: ["tandem-relay"]),
        .library(name: "TandemProtocol", targets: ["TandemProtocol"]),
        .library(name: "TandemNet", targets: ["TandemNet"]),
        .library(name: "TandemNode", targets: ["TandemNode"]),
        .library(name: "TandemVault", targets: ["TandemVault"]),
        .library(name: "TandemMedia", targets: ["TandemMedia"]),
        .library(name: "TandemKeys", targets: ["TandemKeys"]),
        .library(name: "TandemBlocking", targets: ["TandemBlocking"]),
        .library(name: "TandemDaylight", targets: ["TandemDaylight"]),
    ],
    // Exact versions: this is an application, and Package.resolved is not committed (a resolve
    // here pins the commit ids of this machine's package copies). Raise a version here, on purpose.
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", exact: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", exact: "1.35.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-protobuf.git", exact: "1.39.0"),
        // The local web dashboard (NodeWeb): the HTTP server and its templates.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", exact: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", exact: "2.1.1"),
        // The dashboard's TLS (HummingbirdTLS); pinned here so its BoringSSL is one we chose.
        .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]
        ),
        .target(name: "Sodium", dependencies: ["CSodium"]),
        .systemLibrary(
            name: "CZstd",
            pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"]), .brew(["zstd"])]
        ),
        // The vault's storage: chunking, blob encryption, packs, the encrypted index, the keys file.
        // Pure storage: no networking, no node, no GRDB.
        // Threads for the libraries below the node (no NIO there): `WorkerPool`, a fixed set of
        // named threads with `@Sendable` jobs and `Sendable` results, fork-join (`map`) and
        // background jobs (`submit`), shut down by its owner; `WorkerPool.shared` for fork-join.
        .target(name: "TandemThreads"),
        .target(name: "TandemVault", dependencies: ["Sodium", "CZstd", "TandemThreads"]),
        .systemLibrary(
            name: "CVips",
            pkgConfig: "vips",
            providers: [.apt(["libvips-dev"]), .brew(["vips"])]
        ),
        // What the vault does to a photo on import: sniffing, the thumbnail, the capture date, and a
        // copy without GPS and device data. Pure: files in, bytes or files out; no vault, no node.
        .systemLibrary(
            name: "CZbar",
            pkgConfig: "zbar",
            providers: [.apt(["libzbar-dev"]), .brew(["zbar"])]
        ),
        .target(name: "TandemMedia", dependencies: ["CVips", "CZbar"]),
        // QR encoding for the printed recovery sheet: libqrencode does the Reed-Solomon error
        // correction, masking and version choice (not worth writing by hand).
        .systemLibrary(
            name: "CQrencode",
            pkgConfig: "libqrencode",
            providers: [.apt(["libqrencode-dev"]), .brew(["qrencode"])]
        ),
        // The recovery sheet as a page to print: the recovery code and the holders' share codes as
        // QR codes (PNG through libvips) and a one-page PDF with the text. Pure: strings in, bytes out.
        .target(name: "TandemSheet", dependencies: ["CQrencode", "CVips"]),
        // The daylight check (issue 35): is a photo one of daylight sky above the ground? Scores,
        // thresholds, verdict and reason, and the synthetic scenes its tests and tandem-bench use.
        // Pure: a photo (decoded by TandemMedia) in, a report out; no clock, no node.
        .target(name: "TandemDaylight", dependencies: ["TandemMedia"]),
        // Object keys (issue 14): point-cloud frames (PLY, XYZ), shape features, the two-stage
        // verifier (descriptors, then alignment and ICP against the enrolled model), and the
        // synthetic shapes tests and tandem-bench use. Pure Swift: bytes in, values out.
        // Optimised in debug builds too: enrolment and verification are arithmetic over thousands of
        // points, 20–50× slower unoptimised, and `make test` drives them through debug binaries.
        .target(name: "TandemKeys", dependencies: ["TandemThreads"], swiftSettings: [.unsafeFlags(["-O"], .when(configuration: .debug))]),
        // Blocking on the machine while a mode is locked (issue 14): the managed hosts-file block,
        // the app guard (stops blocked processes), and hooks. Linux; no node, no store.
        .target(name: "TandemBlocking", dependencies: ["TandemThreads"]),
        .target(
            name: "TandemProtocol",
            dependencies: [
                "Sodium",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ]
        ),
        // The transport: secure channel, frame codec, peer links and their limits, connectors,
        // the relay client's session, and one quiescing TCP server. No store, no services.
        .target(
            name: "TandemNet",
            dependencies: [
                "Sodium",
                "TandemProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "TandemStore",
            dependencies: [
                "TandemProtocol",
                // DataDirectory's neighbour PrivateDatabaseFile (the relay's mailbox uses it too).
                "TandemNet",
                .product(name: "GRDB", package: "GRDB.swift"),
                // sqlite3_wal_hook (WriteAheadLogSize.swift): the checkpoint after a step.
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        // The node's core (Sources/TandemNode/README.md): the core actor and its executor, the store
        // step, the Outbox, the event bus and signals, peer links, presence, relays, discovery, the
        // control socket, the frame router, and the declared interfaces between features.
        .target(
            name: "TandemNodeCore",
            dependencies: nodeCoreDependencies
        ),
        // One module per feature, each on the core and never on another feature (what one needs
        // of another is a protocol in TandemNodeCore/Interfaces, handed over by the wiring).
        // Friend requests, contact records, blocking, discoverability.
        nodeFeature("NodeFriends"),
        // Challenges, solo sessions, countdowns, early exits and the ledger.
        nodeFeature("NodeChallenges"),
        // Backups at friends, what this node holds for them, the recovery kit and whole-node restore.
        nodeFeature("NodeBackup", [.product(name: "SwiftProtobuf", package: "swift-protobuf")]),
        // The vault service: PIN, decoy, import/export, auto-lock.
        nodeFeature("NodeVault", ["TandemMedia"]),
        // Local focus: modes, keys, the lock machine and its blocking.
        nodeFeature("NodeFocus", ["TandemKeys", "TandemBlocking"]),
        // Messages between friends, a challenge's group thread, reactions, cheers, receipts.
        nodeFeature("NodeMessages", ["TandemBlocking", .product(name: "SwiftProtobuf", package: "swift-protobuf")]),
        // The local web dashboard (issue 36): Hummingbird on loopback, pages that call the same
        // control methods the CLI does, one SSE stream from the event bus. Templates, CSS and JS
        // are compiled in (a lone installed binary has no resource bundle).
        .target(
            name: "NodeWeb",
            dependencies: ["TandemNodeCore", "TandemMedia"] + nodeCoreDependencies + [
                .product(name: "Hummingbird", package: "hummingbird"),
                // HTTPS when the dashboard is served off loopback (--web-tls): swift-nio-ssl, pinned below.
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Mustache", package: "swift-mustache"),
            ]
        ),
        // The node's wiring: builds the core and the features, registers their routes and services.
        .target(
            name: "TandemNode",
            dependencies: [
                "TandemNodeCore",
                "NodeFriends",
                "NodeChallenges",
                "NodeBackup",
                "NodeVault",
                "NodeFocus",
                "NodeMessages",
                "NodeWeb",
                "Sodium",
                "TandemProtocol",
                "TandemNet",
                "TandemStore",
                "TandemKeys",
                "TandemDaylight",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            exclude: ["README.md"]
        ),
        .target(
            name: "TandemRelay",
            dependencies: [
                "Sodium",
                "TandemProtocol",
                "TandemNet",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "tandem-relay",
            dependencies: [
                "TandemNet",
                "TandemRelay",
                "TandemProtocol",
                "Sodium",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "tandem",
            dependencies: [
                "TandemDaylight",
                "TandemVault",
                "TandemKeys",
                "TandemMedia",
                "TandemSheet",
                "TandemNet",
                "TandemNode",
                "TandemNodeCore", "NodeFriends", "NodeChallenges", "NodeBackup", "NodeVault", "NodeFocus", "NodeMessages", "NodeWeb",
                "TandemRelay",
                "TandemProtocol",
                "Sodium",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "tandem-bench",
            dependencies: [
                "TandemDaylight",
                "TandemMedia",
                "TandemVault",
                "TandemKeys",
                "TandemThreads",
                "TandemNet",
                "CSodium",
                "TandemRelay",
                "Sodium",
                "TandemProtocol",
                "TandemNode",
                "TandemNodeCore", "NodeFriends", "NodeChallenges", "NodeBackup", "NodeVault", "NodeFocus", "NodeMessages",
                "TandemStore",
                "NodeWeb",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // libFuzzer entry points (several targets, chosen with TANDEM_FUZZ_TARGET or -target=NAME);
        // fuzzing needs `-Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library` (see `make fuzz`).
        // Without them the executable replays input files. --export-dynamic lets its main find
        // libFuzzer's driver by name. TandemRelay for the RelayBook target, TandemNode for the
        // node targets.
        .executableTarget(
            name: "tandem-fuzz",
            dependencies: [
                "TandemVault",
                "TandemKeys",
                "TandemBlocking",
                "TandemMedia",
                "TandemNet",
                "Sodium",
                "TandemProtocol",
                "TandemNode",
                "TandemNodeCore", "NodeFriends", "NodeChallenges", "NodeBackup", "NodeVault", "NodeFocus", "NodeMessages",
                "TandemStore",
                "NodeWeb",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                "TandemRelay",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            linkerSettings: [.unsafeFlags(["-Xlinker", "--export-dynamic"])]
        ),
        .testTarget(
            name: "SodiumTests",
            dependencies: ["Sodium"]
        ),
        .testTarget(
            name: "TandemVaultTests",
            dependencies: ["TandemVault", "Sodium"]
        ),
        .testTarget(
            name: "TandemMediaTests",
            dependencies: ["TandemMedia", "CVips"]
        ),
        .testTarget(
            name: "TandemSheetTests",
            dependencies: ["TandemSheet", "TandemMedia"]
        ),
        .testTarget(
            name: "TandemDaylightTests",
            dependencies: ["TandemDaylight", "TandemMedia"]
        ),
        .testTarget(
            name: "TandemThreadsTests",
            dependencies: ["TandemThreads"]
        ),
        .testTarget(
            name: "TandemKeysTests",
            dependencies: ["TandemKeys"]
        ),
        .testTarget(
            name: "TandemBlockingTests",
            dependencies: ["TandemBlocking"]
        ),
        .testTarget(
            name: "TandemProtocolTests",
            dependencies: [
                "TandemProtocol",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                "Sodium",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "TandemNetTests",
            dependencies: [
                "TandemNet",
                "TandemProtocol",
                "Sodium",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "TandemStoreTests",
            dependencies: ["TandemStore", "TandemProtocol", "Sodium", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .testTarget(
            name: "TandemRelayTests",
            dependencies: [
                "TandemTestSupport",
                "TandemNet",
                "TandemRelay",
                "TandemNode",
                "TandemNodeCore", "NodeFriends", "NodeChallenges", "NodeBackup", "NodeVault", "NodeFocus", "NodeMessages",
                "TandemProtocol",
                "Sodium",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        // What the in-process loopback suites share (one copy): nodes started on loopback, polling, events.
        .target(
            name: "TandemTestSupport",
            dependencies: ["TandemNode", "TandemNodeCore", "NodeFriends", "NodeChallenges", "NodeBackup", "NodeVault", "NodeFocus", "NodeMessages", "TandemNet", "TandemProtocol", "Sodium",
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "NIOCore", package: "swift-nio")],
            path: "Tests/TandemTestSupport"
        ),
        // The dashboard's request policy, sessions and forms as plain values (its HTTP is tested in Tests/web).
        .testTarget(
            name: "NodeWebTests",
            dependencies: ["NodeWeb", "TandemNodeCore"]
        ),
        .testTarget(
            name: "TandemNodeTests",
            dependencies: [
                "TandemTestSupport",
                "TandemKeys",
                "TandemVault",
                "TandemStore",
                "TandemNet",
                "TandemNode",
                "TandemNodeCore", "NodeFriends", "NodeChallenges", "NodeBackup", "NodeVault", "NodeFocus", "NodeMessages", "NodeWeb",
                "TandemProtocol",
                "Sodium",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ]
        ),
    ]
)
