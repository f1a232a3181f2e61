import Foundation
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemVault
import TandemNodeCore

/// The control-socket methods of backups (Protocol/control.md "Backups").
extension BackupService {
    package nonisolated func registerControlMethods(on router: ControlRouter) {
        router.register("backup.offer") { [self] params in
            let friend = try await NodeCore.perform { try ContactNames.resolve(params, among: [.friend], in: self.store, anyID: true) }
            guard let quota = params["quota_bytes"]?.intValue else { throw NodeError.invalidArgument("missing parameter 'quota_bytes'") }
            let version = try await offer(to: friend, quotaBytes: quota)
            return ["to": .string(NodeID(publicKey: friend).canonical), "quota_bytes": .int(quota), "version": .int(Int64(version))]
        }
        router.register("backup.offers") { [self] _ in try await offers() }
        router.register("backup.status") { [self] _ in try await status() }
        router.registerStream("backup.push") { [self] params, writer in
            let result = try await pushCommand(params, writer: writer)
            try await writer.send(["result": result])
        }
        router.register("backup.verify") { [self] params in try await verify(params) }
        router.register("backup.snapshots") { [self] params in try await snapshots(params) }
        router.register("backup.forget") { [self] params in try await forget(params) }
        router.register("backup.schedule") { [self] params in try await scheduleCommand(params) }
        router.register("backup.sheet") { [self] _ in try await sheet() }
    }

    // MARK: - Which holders

    /// The holder named by `from`/`to`, or every holder that offered us space.
    func holders(_ params: JSONValue, _ name: String) async throws -> [[UInt8]] {
        let offered = try await NodeCore.perform { try self.receivedOffers() }.map(\.0)
        if params[name]?.stringValue != nil {
            let key = try await NodeCore.perform { try ContactNames.resolve(params, name, among: [.friend], in: self.store, anyID: true) }
            guard offered.contains(key) else {
                throw NodeError.nothingToActOn("\(NodeID(publicKey: key).display) has not offered to hold your backups")
            }
            return [key]
        }
        guard !offered.isEmpty else {
            throw NodeError.nothingToActOn("no friend has offered to hold your backups yet (they run: tandem backup offer YOUR-ID --quota 10GiB)")
        }
        return offered
    }

    // MARK: - Offers and status

    /// What a person reads for each key (`ContactNames.label`: the nickname, else the display name,
    /// else the ID's short form); answers keep the canonical ID beside it.
    func names(_ keys: [[UInt8]]) async -> [[UInt8]: String] {
        await NodeCore.run {
            Dictionary(keys.map { ($0, ContactNames.label(of: $0, in: self.store)) }, uniquingKeysWith: { a, _ in a })
        }
    }

    func offers() async throws -> JSONValue {
        let received = try await NodeCore.perform { try self.receivedOffers() }
        let given = try await holder.offersGiven()
        let names = await names(given.map(\.owner) + received.map(\.0))
        return [
            "given": .array(given.map {
                ["to": .string(NodeID(publicKey: $0.owner).canonical), "name": .string(names[$0.owner] ?? ""),
                 "quota_bytes": .int($0.quotaBytes), "used_bytes": .int($0.usedBytes),
                 "blobs": .int(Int64($0.blobs)), "snapshots": .int(Int64($0.snapshots)), "kit": .bool($0.hasKit)]
            }),
            "received": .array(received.map { key, o in
                ["from": .string(NodeID(publicKey: key).canonical), "name": .string(names[key] ?? ""), "quota_bytes": .int(o.quotaBytes),
                 "at": JSONValue.iso(o.receivedAtMs)]
            }),
        ]
    }

    func status() async throws -> JSONValue {
        let (received, pushed, pending) = try await NodeCore.perform { () -> ([([UInt8], ReceivedOffer)], [String: PushedRecord], Set<String>) in
            let pushed = try self.store.lastBackupPushes().reduce(into: [String: PushedRecord]()) { acc, stored in
                if let r = PushedRecord(stored: stored) { acc[hexString(Array(stored.record.holder))] = r }
            }
            let pending = Set(try self.store.pendingBackupPushes().map { hexString(Array($0.holder)) })
            return (try self.receivedOffers(), pushed, pending)
        }
        let runningNow = running.withLockedValue { $0 }
        let scheduled = await scheduleStatus()
        let nowMs = Int64(clamping: wallClockMilliseconds())
        let names = await names(received.map(\.0))
        var holders: [JSONValue] = []
        for (key, offer) in received {
            let hex = hexString(key)
            var o: [String: JSONValue] = ["id": .string(NodeID(publicKey: key).canonical), "name": .string(names[key] ?? ""),
                                          "quota_bytes": .int(offer.quotaBytes)]
            if let r = pushed[hex] {
                o["last_push"] = ["at": JSONValue.iso(r.atMs), "snapshot_id": .string(r.snapshotID),
                                  "bytes_sent": .int(r.bytesSent), "total_bytes": .int(r.totalBytes), "blobs": .int(Int64(r.blobs.count))]
                // How old the friend's copy is (backup.md 4.1).
                o["copy_at_ms"] = .int(r.atMs)
                o["age_ms"] = .int(max(0, nowMs - r.atMs))
            } else {
                o["last_push"] = .null
            }
            if let t = runningNow[key] {
                let p = t.progress
                o["pushing"] = ["done": .int(p.done), "total": .int(p.total)]
            } else {
                o["pushing"] = .null
            }
            o["pending"] = .bool(pending.contains(hex))
            for (k, v) in scheduled[key] ?? [:] { o[k] = v }
            holders.append(.object(o))
        }
        let config = schedule.withLockedValue { $0.policy.config }
        return ["holders": .array(holders), "vault": .bool(vaultDirectory.map { VaultKeyFile.exists(in: $0) } ?? false),
                "schedule": ["delay_ms": .int(config.delayMs), "daily": .bool(config.daily)]]
    }

    /// What a recovery sheet lists (`tandem recovery sheet`): each friend holding our backups, with
    /// how a fresh machine reaches it — its share code (through its home relay) and the addresses
    /// where this node last reached it.
    func sheet() async throws -> JSONValue {
        try await NodeCore.perform {
            let names = Dictionary(try self.store.contacts([.friend]).map { (Array($0.publicKey), $0.displayName) }, uniquingKeysWith: { a, _ in a })
            let pushed = Set(try self.store.lastBackupPushes().map { Array($0.record.holder) })
            let holders = try self.receivedOffers().map { key, _ -> JSONValue in
                let id = NodeID(publicKey: key)
                let relay = try self.store.peerRelay(key).map { RelayAddress(id: NodeID(publicKey: $0.publicKey), host: $0.host, port: $0.port) }
                let addresses = try self.store.addresses(key).prefix(2).map { JSONValue.string("\(id.canonical)@\($0.host):\($0.port)") }
                return ["id": .string(id.canonical), "name": .string(names[key] ?? ""),
                        "share_code": relay.map { .string(ShareCode(id: id, relay: $0).description) } ?? .null,
                        "addresses": .array(addresses), "holds_a_copy": .bool(pushed.contains(key))]
            }
            return ["holders": .array(holders)]
        }
    }

    // MARK: - Push

    func pushCommand(_ params: JSONValue, writer: ControlStreamWriter) async throws -> JSONValue {
        let targets = try await holders(params, "to")
        let lanOnly = params["lan_only"]?.boolValue ?? false
        var started: [PushTask] = []
        for h in targets { started.append(try await startPush(to: h, lanOnly: lanOnly)) }
        if params["background"]?.boolValue ?? false {
            return ["started": .array(started.map { .string(NodeID(publicKey: $0.holder).canonical) })]
        }
        // Progress over every push until all end: a child task of this command's, ended with it.
        let (results, failures) = await withTaskGroup(of: Void.self) { group -> ([JSONValue], [String]) in
            group.addTask { [started] in await Self.reportProgress(of: started, to: writer) }
            defer { group.cancelAll() }
            var results: [JSONValue] = []
            var failures: [String] = []
            for t in started {
                do {
                    results.append(try await t.wait().json)
                } catch {
                    failures.append("\(NodeID(publicKey: t.holder).display): \(error)")
                }
            }
            return (results, failures)
        }
        if !failures.isEmpty, results.isEmpty {
            throw NodeError.failed("backup push failed: " + failures.joined(separator: "; "))
        }
        let bytes = results.reduce(Int64(0)) { $0 + ($1["bytes_sent"]?.intValue ?? 0) }
        return ["pushes": .array(results), "bytes_sent": .int(bytes), "failed": .array(failures.map { .string($0) })]
    }

    /// Progress lines over `pushes` every 200 ms until cancelled (one last line then), or until
    /// the client went away.
    private static func reportProgress(of pushes: [PushTask], to writer: ControlStreamWriter) async {
        let clock = ContinuousClock()
        let t0 = clock.now
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: .milliseconds(200))
            } catch {
                // Cancelled: the pushes ended; the line below is the last.
            }
            let (done, total) = pushes.reduce((Int64(0), Int64(0))) { acc, t in
                let p = t.progress
                return (acc.0 + p.done, acc.1 + p.total)
            }
            let seconds = max(0.001, Double((clock.now - t0).components.seconds) + Double((clock.now - t0).components.attoseconds) / 1e18)
            do {
                try await writer.send(["progress": ["done": .int(done), "total": .int(total),
                                                    "bytes_per_second": .int(Int64(Double(done) / seconds))]])
            } catch {
                return  // the client went away: nobody to show progress to
            }
        }
    }

    // MARK: - Verify

    func verify(_ params: JSONValue) async throws -> JSONValue {
        let targets = try await holders(params, "from")
        let all = params["all"]?.boolValue ?? false
        let count = max(1, min(Int(params["count"]?.intValue ?? 32), 100_000))
        let lanOnly = params["lan_only"]?.boolValue ?? false
        guard let vaultDirectory else { throw NodeError.nothingToActOn("there is no vault") }
        var reports: [JSONValue] = []
        var failed = false
        for h in targets {
            let record = try await NodeCore.perform {
                try self.store.lastBackupPush(to: h).flatMap(PushedRecord.init(stored:))
            }
            guard let record else {
                reports.append(["from": .string(NodeID(publicKey: h).canonical), "name": .string(await names([h])[h] ?? ""),
                                "checked": 0, "failures": [],
                                "note": "nothing pushed to this friend yet"])
                continue
            }
            let local = try LocalBlobs.collect(vault: vaultDirectory)
            let known = Set(local.blobs.map(\.name))
            // Blobs the vault no longer has as they were cannot be checked here (restore checks them by hash).
            var candidates = record.blobs.filter { known.contains($0) }
            let unverifiable = record.blobs.count - candidates.count
            candidates.shuffle()
            let chosen = all ? candidates : Array(candidates.prefix(count))
            let sizes = Dictionary(uniqueKeysWithValues: local.blobs.map { ($0.name, $0.size) })
            let link = try await self.link(to: h, lanOnly: lanOnly)
            let ex = BackupExchange(peer: h, link: link, answers: answers)
            var failures: [JSONValue] = []
            var i = 0
            while i < chosen.count {
                // At most 32 challenges and 1 GiB of hashing per request (the holder's budget).
                var batch: [BlobName] = []
                var bytes: Int64 = 0
                while i < chosen.count, batch.count < BackupLimits.challengesPerProve {
                    let size = sizes[chosen[i]] ?? 0
                    if !batch.isEmpty, bytes + size > BackupLimits.proofBudgetBytes { break }
                    batch.append(chosen[i])
                    bytes += size
                    i += 1
                }
                let challenges = batch.map { BackupProofChallenge(name: $0, nonce: Sodium.randomBytes(32)) }
                var proof: BackupProofMessage?
                while proof == nil {
                    let answer = try await ex.request(.backupProve, what: "the proof of storage") {
                        BackupProveMessage(requestID: $0, challenges: challenges).payload
                    }
                    guard case .proof(let p) = answer else { throw NodeError.failed("the holder answered PROVE with another message") }
                    if p.status == .busy {
                        try await Task.sleep(for: .milliseconds(Int64(min(p.retryAfterMs, 120_000))))
                        continue
                    }
                    guard p.status == .ok else {
                        throw NodeError.failed("\(NodeID(publicKey: h).display) refused the proof of storage: \(p.status)")
                    }
                    proof = p
                }
                for c in challenges {
                    let answer = proof!.answers.first { $0.name == c.name }
                    let expected = try local.mac(c.name, nonce: c.nonce)
                    let ok: Bool
                    if let answer, answer.status == .ok, let expected {
                        ok = Sodium.constantTimeEqual(answer.mac, expected)
                    } else {
                        ok = false
                    }
                    if !ok {
                        let why = answer?.status == .ok ? "altered" : "lost"
                        failures.append(["blob": .string(c.name.description), "problem": .string(why)])
                        await events.emit("backup.verify.failed", ["from": .string(NodeID(publicKey: h).canonical), "blob": .string(c.name.description),
                                                             "problem": .string(why)])
                    }
                }
            }
            if !failures.isEmpty { failed = true }
            reports.append(["from": .string(NodeID(publicKey: h).canonical), "name": .string(await names([h])[h] ?? ""),
                            "checked": .int(Int64(chosen.count)),
                            "unverifiable": .int(Int64(unverifiable)), "failures": .array(failures)])
        }
        return ["ok": .bool(!failed), "holders": .array(reports)]
    }

    // MARK: - Snapshots and retention

    func snapshots(_ params: JSONValue) async throws -> JSONValue {
        var out: [JSONValue] = []
        for h in try await holders(params, "from") {
            let ex = BackupExchange(peer: h, link: try await link(to: h, lanOnly: params["lan_only"]?.boolValue ?? false), answers: answers)
            let answer = try await ex.request(.backupList, what: "the snapshot list") { BackupListQueryMessage(requestID: $0).payload }
            guard case .list(let l) = answer else { throw NodeError.failed("the holder answered LIST with another message") }
            try Self.check(l.status, expected: [.ok])
            out.append(["from": .string(NodeID(publicKey: h).canonical), "name": .string(await names([h])[h] ?? ""),
                        "quota_bytes": .int(l.quotaBytes), "used_bytes": .int(l.usedBytes),
                        "snapshots": .array(l.snapshots.map {
                            ["id": .string(hexString($0.snapshotID)), "created": JSONValue.iso(Int64(clamping: $0.createdAtMs)),
                             "blobs": .int(Int64($0.blobCount)), "total_bytes": .int($0.totalBytes)]
                        })])
        }
        return ["holders": .array(out)]
    }

    func forget(_ params: JSONValue) async throws -> JSONValue {
        guard let keep = params["keep_last"]?.intValue, (1...Int64(BackupLimits.snapshotsPerOwner)).contains(keep) else {
            throw NodeError.invalidArgument("--keep-last is 1 to \(BackupLimits.snapshotsPerOwner)")
        }
        var out: [JSONValue] = []
        for h in try await holders(params, "from") {
            let ex = BackupExchange(peer: h, link: try await link(to: h, lanOnly: params["lan_only"]?.boolValue ?? false), answers: answers)
            let answer = try await ex.request(.backupForget, what: "forget") { BackupForgetMessage(requestID: $0, keepLast: Int(keep)).payload }
            guard case .reply(let r) = answer else { throw NodeError.failed("the holder answered FORGET with another message") }
            try Self.check(r.status, expected: [.ok])
            out.append(["from": .string(NodeID(publicKey: h).canonical), "name": .string(await names([h])[h] ?? ""),
                        "freed_blobs": .int(Int64(r.freedBlobs)),
                        "used_bytes": .int(r.usedBytes)])
        }
        return ["holders": .array(out)]
    }
}
