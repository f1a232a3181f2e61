import Foundation
import Sodium
import TandemProtocol
import TandemStore
import TandemNodeCore

/// What one holder has of the node being restored (backup.md 8.1): its newest kit that opens as
/// the owner's, and its snapshots whose headers the owner signed, newest generation first.
public struct HolderCopy: Sendable {
    public var holder: NodeID
    /// How the holder is named to the person: the display name the kit gives it, or its short ID.
    public var name: String
    /// The way it was reached (nil when it was not).
    var way: RestoreClient.Options?
    var kit: RecoveryKit.Opened?
    /// Signed snapshots, newest generation first.
    public var snapshots: [BackupSnapshotSummary] = []
    /// Summaries left out: unsigned, or signed by someone else.
    public var unsigned = 0
    /// Why nothing could be asked (unreachable, no offer, …); nil when it answered.
    public var error: String?
    /// Ways to it that did not connect, each with its error (reported as passed over).
    public var waysFailed: [String] = []

    public var newest: BackupSnapshotSummary? { snapshots.first }

    public var json: JSONValue {
        var o: [String: JSONValue] = ["friend": .string(name), "id": .string(holder.canonical)]
        if let n = newest {
            o["generation"] = .int(Int64(clamping: n.generation))
            o["created_at_ms"] = .int(Int64(clamping: n.createdAtMs))
            o["total_bytes"] = .int(n.totalBytes)
        }
        if let k = kit {
            o["kit_generation"] = .int(Int64(clamping: k.generation))
            o["kit_created_at_ms"] = .int(Int64(clamping: k.createdAtMs))
        }
        if unsigned > 0 { o["unsigned_snapshots"] = .int(Int64(unsigned)) }
        if let error { o["error"] = .string(error) }
        return .object(o)
    }
}

/// The freshness decision of a restore (backup.md 8.1), pure: which kit and which holders' vaults,
/// in which order, and the sentence that tells the person what was found.
public enum RestoreFreshness {
    /// Snapshots the owner signed, newest generation first (then newest owner-signed time).
    public static func signed(_ list: [BackupSnapshotSummary], owner: [UInt8]) -> (signed: [BackupSnapshotSummary], unsigned: Int) {
        let ok = list.filter { $0.isSigned(by: owner) }
        return (ok.sorted { ($0.generation, $0.createdAtMs) > ($1.generation, $1.createdAtMs) }, list.count - ok.count)
    }

    /// Holders in the order to restore the vault from: highest signed generation first; equal
    /// generations keep the survey's order (the holder the person named comes first).
    public static func order(_ copies: [HolderCopy]) -> [HolderCopy] {
        let indexed = copies.enumerated().filter { $0.element.newest != nil }
        return indexed.sorted { a, b in
            let ga = a.element.newest!.generation, gb = b.element.newest!.generation
            return ga != gb ? ga > gb : a.offset < b.offset
        }.map(\.element)
    }

    /// Why what a holder states exceeds the owner's signed header (backup.md 8.2), or nil: each
    /// index blob must have its signed size, and index blobs and packs together fit the signed
    /// total and count. Checked before anything is fetched.
    public static func exceedsSignedSizes(_ s: BackupSnapshotSummary, indexSizes: [Int64], packSizes: [Int64]) -> String? {
        guard indexSizes == s.indexSizes else { return "the holder states other index sizes than the owner signed" }
        var total: Int64 = 0
        for size in indexSizes + packSizes {
            let (sum, overflow) = total.addingReportingOverflow(max(size, 0))
            guard !overflow else { return "the holder's sizes overflow" }
            total = sum
        }
        let count = indexSizes.count + packSizes.count
        guard total <= s.totalBytes, count <= s.blobCount else {
            return "the holder's sizes (\(total) bytes in \(count) blobs) exceed the owner's signed record "
                + "(\(s.totalBytes) bytes in \(s.blobCount))"
        }
        return nil
    }

    /// The newest kit among those found (same identity as `first`), else `first`.
    static func newestKit(first: RecoveryKit.Opened, copies: [HolderCopy]) -> RecoveryKit.Opened {
        var best = first
        for c in copies {
            guard let k = c.kit, k.identity.publicKey == first.identity.publicKey, k.generation > best.generation else { continue }
            best = k
        }
        return best
    }

    /// "newest copy: generation 12 from 2026-11-28 21:04 UTC at alice; bob holds 9 (3 older) from …; carol: unreachable".
    public static func sentence(_ copies: [HolderCopy], describe: (UInt64) -> String = RestoreFreshness.utc) -> String {
        let ordered = order(copies)
        guard let best = ordered.first, let n = best.newest else {
            let reasons = copies.compactMap { c in c.error.map { "\(c.name): \($0)" } }
            return "no friend holds a signed copy of this node's vault" + (reasons.isEmpty ? "" : " (" + reasons.joined(separator: "; ") + ")")
        }
        var parts = ["newest copy: generation \(n.generation) from \(describe(n.createdAtMs)) at \(best.name)"]
        for c in ordered.dropFirst() {
            let m = c.newest!
            let behind = n.generation - min(m.generation, n.generation)
            parts.append("\(c.name) holds \(behind == 0 ? "the same generation" : "\(m.generation) (\(behind) older)") from \(describe(m.createdAtMs))")
        }
        for c in copies where c.newest == nil {
            parts.append("\(c.name): \(c.error ?? "no signed snapshot")")
        }
        return parts.joined(separator: "; ")
    }

    public static func utc(_ ms: UInt64) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd HH:mm 'UTC'"
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}

extension RestoreClient {
    /// Asks every holder it can reach, as the old identity, for its newest kit and its snapshots
    /// (each friend at most `surveyTimeout`, all at once). A friend reached several ways is asked
    /// at the first way that connects.
    func survey(_ ways: [Options], identity: SigningKeyPair, friends: [RestoredFriend],
                events: @escaping @Sendable (Event) -> Void) async -> [HolderCopy] {
        var byHolder: [(NodeID, [Options])] = []
        for w in ways {
            if let i = byHolder.firstIndex(where: { $0.0 == w.holder }) { byHolder[i].1.append(w) } else { byHolder.append((w.holder, [w])) }
        }
        let names = Dictionary(friends.map { ($0.publicKey, $0.displayName) }, uniquingKeysWith: { a, _ in a })
        return await withTaskGroup(of: (Int, HolderCopy).self) { group in
            for (i, entry) in byHolder.enumerated() {
                let (holder, holderWays) = entry
                let display = names[holder.publicKey].flatMap { $0.isEmpty ? nil : $0.terminalSafe } ?? "\(holder.short)…"
                group.addTask {
                    let copy = await withSurveyTimeout(holder: holder, name: display) {
                        await self.askOne(holder: holder, name: display, ways: holderWays, identity: identity)
                    }
                    return (i, copy)
                }
            }
            var out: [(Int, HolderCopy)] = []
            for await r in group { out.append(r) }
            return out.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }

    static let surveyTimeout: Duration = .seconds(25)

    private func withSurveyTimeout(holder: NodeID, name: String, _ body: @escaping @Sendable () async -> HolderCopy) async -> HolderCopy {
        await withTaskGroup(of: HolderCopy?.self) { group in
            group.addTask { await body() }
            group.addTask {
                try? await Task.sleep(for: Self.surveyTimeout)  // cancelled when the body answered first
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? HolderCopy(holder: holder, name: name, error: "did not answer within \(Self.surveyTimeout)")
        }
    }

    private func askOne(holder: NodeID, name: String, ways: [Options], identity: SigningKeyPair) async -> HolderCopy {
        var copy = HolderCopy(holder: holder, name: name)
        var lastError = "unreachable"
        for way in ways {
            let link: RestoreLink
            do {
                link = try await connect(way, as: identity)
            } catch is CancellationError {
                copy.error = "cancelled"
                return copy
            } catch {
                lastError = "\(error)"
                copy.waysFailed.append("\(way.holderText): \(error)")
                continue
            }
            defer { link.close() }
            copy.way = way
            // The kit (any key may ask; as the owner is as good as any).
            copy.kit = try? await newestKit(link, code: way.code, owner: identity.publicKey)  // none, or none that opens: no kit here
            do {
                let list = try await link.request("BACKUP_LIST", make: { id in
                    (.backupList, BackupListQueryMessage(requestID: id).payload)
                }, match: { a, id -> BackupListReplyMessage? in
                    if case .list(let m) = a, m.requestID == id { return m }
                    return nil
                })
                switch list.status {
                case .ok:
                    (copy.snapshots, copy.unsigned) = RestoreFreshness.signed(list.snapshots, owner: identity.publicKey)
                    if copy.snapshots.isEmpty { copy.error = copy.unsigned > 0 ? "no snapshot signed by this node" : "no snapshot" }
                case .noOffer:
                    copy.error = "holds no backup of this node"
                case .unspecified, .complete, .overQuota, .outOfOrder, .hashMismatch, .tooManyPartial, .sizeMismatch, .missingBlobs,
                     .snapshotLimit, .conflict, .notFound, .busy, .badRequest:
                    copy.error = "refused the list (\(list.status))"
                }
            } catch {
                copy.error = "\(error)"
            }
            return copy
        }
        copy.error = lastError
        return copy
    }

    /// The newest kit under the code's locator at this holder that opens as `owner`'s, if any.
    func newestKit(_ link: RestoreLink, code: RecoveryCode, owner: [UInt8]) async throws -> RecoveryKit.Opened? {
        let locator = RecoveryKitSeal.locator(code)
        var best: RecoveryKit.Opened?
        var index = 0
        var count = 1
        while index < min(count, BackupLimits.kitsPerLocator) {
            let i = index
            let answer = try await link.kit(locator: locator, index: i)
            guard answer.status == .ok else { break }
            count = answer.count
            if answer.owner == owner, let k = try? RecoveryKit.open(answer.sealedKit, code: code, owner: answer.owner),  // another owner's or bogus: skipped
               k.generation >= (best?.generation ?? 0) {
                best = k
            }
            index += 1
        }
        return best
    }
}
