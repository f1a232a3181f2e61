import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import TandemBlocking
import TandemProtocol

/// Carries the lock's blocking out on the machine (TandemBlocking): the hosts-file block and the
/// app guard follow a *target* (what the state calls for now; the newest one wins, so a restart or
/// a missed edge cannot leave stale blocking behind), the hooks follow the transitions in order.
/// Its own serial queue does the file writes, another runs the hooks: never the core or an event loop.
final class FocusEnforcer: Sendable {
    struct Target: Sendable, Equatable {
        var mode: String?
        var sites: [String]
        var apps: [String]
        /// Blocked apps the temporary unlock lets run now.
        var allowedApps: [String]

        static let none = Target(mode: nil, sites: [], apps: [], allowedApps: [])
    }

    private struct State {
        var target = Target.none
        var applied: Target?
        /// Problems already reported (each once until it goes away).
        var reported: Set<String> = []
    }

    private let hostsFile: HostsFile?
    private let hostsPath: String?
    private let guardian: AppGuard?
    private let hooks: HookRunner?
    private let events: EventBus
    private let logger: Logger
    private let queue = DispatchQueue(label: "tandem.focus.enforcer")
    private let hookQueue = DispatchQueue(label: "tandem.focus.hooks")
    private let state = NIOLockedValueBox(State())

    init(configuration: FocusService.Configuration, events: EventBus, logger: Logger) {
        self.events = events
        self.logger = logger
        hostsPath = configuration.hostsFile
        hostsFile = configuration.hostsFile.map { HostsFile(path: $0) }
        hooks = configuration.hooksDirectory.map { HookRunner(directory: $0, timeoutMs: configuration.hookTimeoutMs) }
        if configuration.appGuard {
            let budget = ReportBudget(perMinute: 20)
            guardian = AppGuard(
                onStop: { p in
                    let fields: [String: JSONValue] = ["pid": .int(Int64(p.pid)), "name": .string(p.name), "path": .string(p.path ?? ""),
                                                       "item": .string(p.item), "signal": .string(p.signal == SIGKILL ? "SIGKILL" : "SIGTERM")]
                    NodeCore.submit { events.emit("focus.app_stopped", fields) }
                },
                onError: { text in
                    // Each process is judged once, so a report per process; still at most 20 events a
                    // minute (a user starting copies by the thousand fills the log, not the event store).
                    logger.warning("app guard", metadata: ["error": "\(text)"])
                    if budget.allow() { NodeCore.submit { [events] in _ = events.emit("focus.blocking_failed", ["error": .string(text), "mode": .null]) } }
                })
        } else {
            guardian = nil
        }
    }

    /// What blocking cannot happen with this process's rights (said once at start; the lock still works).
    func probe() -> [String] {
        var problems = BlockingCapabilities.probe(hostsPath: hostsPath ?? "/")
        if hostsPath == nil { problems.removeAll { $0.hasPrefix("site") } }
        if guardian == nil { problems.removeAll { $0.hasPrefix("app") } }
        for p in problems { NodeCore.submit { [events] in _ = events.emit("focus.blocking_limited", ["what": .string(p)]) } }
        return problems
    }

    func start() { guardian?.start() }
    func stop() { guardian?.stop() }

    /// The blocking the state calls for now (called on the core after every step).
    func setTarget(_ target: Target) {
        state.withLockedValue { $0.target = target }
    }

    /// Brings the machine to the newest target in the background.
    func kick() {
        queue.async { self.reconcile() }
    }

    /// Brings the machine to the newest target and returns what could not be done. `verify`: also
    /// check that the hosts block is still as written (someone may have edited the file) and
    /// restore it if not.
    func sync(verify: Bool = false) async -> [String] {
        await withCheckedContinuation { (c: CheckedContinuation<[String], Never>) in
            queue.async {
                if verify { self.restoreIfTampered() }
                c.resume(returning: self.reconcile())
            }
        }
    }

    /// On the queue: the applied block, if the file no longer holds it exactly, is written again.
    private func restoreIfTampered() {
        let applied = state.withLockedValue { $0.applied }
        guard let hostsFile, let applied, let mode = applied.mode, !applied.sites.isEmpty,
              let text = try? hostsFile.read() else { return }
        guard HostsBlock.applying(mode: mode, domains: applied.sites, to: text) != text else { return }
        do {
            try hostsFile.apply(mode: mode, domains: applied.sites)
            logger.warning("the hosts block was changed while locked; restored", metadata: ["mode": "\(mode)"])
            NodeCore.submit { [events] in _ = events.emit("focus.block_restored", ["mode": .string(mode)]) }
        } catch {
            state.withLockedValue { $0.applied = nil }
        }
    }

    /// On the queue. Writes only what changed; a failure is reported once (event and log) and tried
    /// again at the next reconcile.
    @discardableResult
    private func reconcile() -> [String] {
        let (target, applied) = state.withLockedValue { ($0.target, $0.applied) }
        var problems: [String] = []
        if let hostsFile, applied?.mode != target.mode || applied?.sites != target.sites {
            do {
                let present = HostsBlock.modes(in: try hostsFile.read())
                for m in present where m != target.mode { try hostsFile.remove(mode: m) }
                if let mode = target.mode {
                    if target.sites.isEmpty { try hostsFile.remove(mode: mode) } else { try hostsFile.apply(mode: mode, domains: target.sites) }
                }
            } catch {
                problems.append("site blocking: \(error)")
            }
        }
        if let guardian, applied?.apps != target.apps || applied?.allowedApps != target.allowedApps || applied?.mode != target.mode {
            let rejected = guardian.set(blocked: target.mode == nil ? [] : target.apps, allowed: target.allowedApps)
            if !rejected.isEmpty { problems.append("app blocking: cannot match \(rejected.joined(separator: ", ")) (a name, or an absolute path)") }
        }
        let fresh = state.withLockedValue { s -> [String] in
            if problems.isEmpty { s.applied = target } else { s.applied = nil }
            let new = problems.filter { !s.reported.contains($0) }
            s.reported = Set(problems)
            return new
        }
        for p in fresh {
            logger.error("focus blocking failed", metadata: ["error": "\(p)"])
            NodeCore.submit { [events] in _ = events.emit("focus.blocking_failed", ["error": .string(p), "mode": target.mode.map(JSONValue.string) ?? .null]) }
        }
        return problems
    }

    /// Runs the mode's hooks for a transition, in order after those queued before.
    func hook(mode: FocusMode?, transition: HookTransition, lock: FocusLock, reason: String) {
        guard let hooks, let mode else { return }
        var until: Int64?
        if let t = lock.locked?.temporary?.endsAtMs { until = t } else if case .until(let t)? = lock.locked?.hold { until = t }
        // What is blocked now: nothing once unlocked, less the temporary items while they are open.
        let open = transition == .tempUnlocked ? Set(mode.temporaryItems) : []
        let blocked = transition != .unlocked
        let environment = HookEnvironment(blockedSites: blocked ? mode.blockedSites.filter { !open.contains($0) } : [],
                                          blockedApps: blocked ? mode.blockedApps.filter { !open.contains($0) } : [],
                                          tempItems: mode.temporaryItems, untilMs: until, reason: reason)
        let events = self.events
        let logger = self.logger
        hookQueue.async {
            for r in hooks.run(mode: mode.name, transition: transition, environment: environment) {
                var f: [String: JSONValue] = ["mode": .string(mode.name), "transition": .string(transition.rawValue), "path": .string(r.path),
                                              "exit": r.exitCode.map { .int(Int64($0)) } ?? .null,
                                              "signal": r.signal.map { .int(Int64($0)) } ?? .null,
                                              "timed_out": .bool(r.timedOut), "duration_ms": .int(Int64(r.durationMs))]
                if r.failed {
                    f["stderr"] = .string(String(r.stderr.suffix(2000)))
                    f["stdout"] = .string(String(r.stdout.suffix(2000)))
                    f["error"] = r.error.map(JSONValue.string) ?? .null
                    logger.error("focus hook failed", metadata: ["hook": "\(r)"])
                    NodeCore.submit { [events, f] in _ = events.emit("focus.hook_failed", f) }
                } else {
                    logger.info("focus hook ran", metadata: ["path": "\(r.path)", "transition": "\(transition.rawValue)"])
                    NodeCore.submit { [events, f] in _ = events.emit("focus.hook", f) }
                }
            }
        }
    }
}

/// At most `perMinute` reports in any minute-long window (fixed windows; thread-safe).
final class ReportBudget: Sendable {
    private let state = NIOLockedValueBox((windowStart: ContinuousClock.now, used: 0))
    let perMinute: Int

    init(perMinute: Int) { self.perMinute = perMinute }

    func allow() -> Bool {
        state.withLockedValue { s in
            let now = ContinuousClock.now
            if now - s.windowStart >= .seconds(60) { s = (now, 0) }
            guard s.used < perMinute else { return false }
            s.used += 1
            return true
        }
    }
}
