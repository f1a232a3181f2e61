import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import TandemBlocking
import TandemProtocol
import TandemNodeCore

/// Carries the lock's blocking out on the machine (TandemBlocking): the hosts-file block and the
/// app guard follow a *target* (what the state calls for now; the newest one wins, so a restart or
/// a missed edge cannot leave stale blocking behind), the hooks follow the transitions in order.
/// Two child tasks of `FocusService.run` carry it out (`runReconciler`, `runHooks`), each consuming a
/// bounded stream one job at a time; the blocking work itself (file writes, hook processes) runs on
/// NIO's blocking thread pool, never the core, an event loop or the cooperative pool.
final class FocusEnforcer: Sendable {
    struct Target: Sendable, Equatable {
        var mode: String?
        var sites: [String]
        var apps: [String]
        /// Blocked apps the temporary unlock lets run now.
        var allowedApps: [String]
        /// When a lock held by time ends, and when the temporary unlock ends (for the keeper).
        var untilMs: Int64? = nil
        var allowedUntilMs: Int64? = nil

        static let none = Target(mode: nil, sites: [], apps: [], allowedApps: [])
    }

    private struct State {
        var target = Target.none
        var applied: Target?
        /// Problems already reported (each once until it goes away).
        var reported: Set<String> = []
        /// `sync` callers waiting for the next reconcile, and whether one asked to verify the file.
        var waiters: [CheckedContinuation<[String], Never>] = []
        var verify = false
        /// The reconciler ended (the service stopped): `sync` no longer waits.
        var closed = false
        /// What the keeper was last told.
        var keeperState: KeeperState?
        var keeperPid: pid_t?
    }

    /// A transition's hooks to run, in order.
    private struct HookJob: Sendable {
        var mode: String
        var transition: HookTransition
        var environment: HookEnvironment
    }

    /// At most this many transitions wait for their hooks; more are dropped (logged).
    static let hookBacklog = 256

    private let hostsFile: HostsFile?
    private let hostsPath: String?
    private let guardian: AppGuard?
    private let hooks: HookRunner?
    private let keeper: FocusService.Configuration.Keeper?
    /// The zones the node's resolver answers itself (a locked mode's sites and every name under them).
    let dnsZones = NIOLockedValueBox(DNSBlockList.empty)
    /// The locked mode and when it opens by itself, for the app guard's reports (it runs on its own thread).
    private let current: NIOLockedValueBox<(mode: String?, untilMs: Int64?)>
    private let appUser: uid_t
    private let events: EventBus
    private let logger: Logger
    private let state = NIOLockedValueBox(State())
    /// Wake-ups for the reconciler: the newest target wins, so one pending wake-up is enough.
    private let kicks: AsyncStream<Void>
    private let kickInput: AsyncStream<Void>.Continuation
    private let hookJobs: AsyncStream<HookJob>
    private let hookInput: AsyncStream<HookJob>.Continuation

    init(configuration: FocusService.Configuration, events: EventBus, logger: Logger) {
        self.events = events
        self.logger = logger
        (kicks, kickInput) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (hookJobs, hookInput) = AsyncStream.makeStream(of: HookJob.self, bufferingPolicy: .bufferingOldest(Self.hookBacklog))
        hostsPath = configuration.hostsFile
        hostsFile = configuration.hostsFile.map { HostsFile(path: $0) }
        hooks = configuration.hooksDirectory.map { HookRunner(directory: $0, timeoutMs: configuration.hookTimeoutMs) }
        keeper = configuration.keeper
        appUser = configuration.appGuardUser ?? geteuid()
        let current = NIOLockedValueBox<(mode: String?, untilMs: Int64?)>((nil, nil))
        self.current = current
        if configuration.appGuard {
            let budget = ReportBudget(perMinute: 20)
            let notice = DesktopNotice()
            guardian = AppGuard(
                user: configuration.appGuardUser ?? geteuid(),
                onStop: { p in
                    // Which mode stopped it and when that mode opens by itself (null: with its key,
                    // at a challenge's end or bedtime's morning), so the person is told why.
                    let (mode, until) = current.withLockedValue { $0 }
                    let fields: [String: JSONValue] = ["pid": .int(Int64(p.pid)), "name": .string(p.name), "path": .string(p.path ?? ""),
                                                       "item": .string(p.item), "signal": .string(p.signal == SIGKILL ? "SIGKILL" : "SIGTERM"),
                                                       "mode": mode.map(JSONValue.string) ?? .null, "opens_at": JSONValue.iso(until)]
                    NodeCore.submit { events.emit("focus.app_stopped", fields) }
                    let when = until.map { " until " + FocusEnforcer.clockText($0) } ?? " until its key opens it"
                    notice.show(key: p.name, title: "\(p.name) is blocked",
                                body: "Tandem closed it: mode \(mode ?? "?") is locked\(when).")
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
        var problems = BlockingCapabilities.probe(hostsPath: hostsPath ?? "/", appUser: guardian?.user ?? geteuid())
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
        current.withLockedValue { $0 = (target.mode, target.untilMs) }
        let zones = target.mode == nil ? DNSBlockList.empty : DNSBlockList(sites: target.sites)
        dnsZones.withLockedValue { $0 = zones }
    }

    /// A time people read in a notice: the local clock time ("14:00"), with the date when not today.
    static func clockText(_ ms: Int64) -> String {
        let date = Date(timeIntervalSince1970: Double(ms) / 1000)
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.dateFormat = Calendar.current.isDateInToday(date) ? "HH:mm" : "EEE HH:mm"
        return f.string(from: date)
    }

    /// Brings the machine to the newest target in the background.
    func kick() {
        kickInput.yield()
    }

    /// Brings the machine to the newest target and returns what could not be done. `verify`: also
    /// check that the hosts block is still as written (someone may have edited the file) and
    /// restore it if not. Returns at once (nothing done) once the service stopped.
    func sync(verify: Bool = false) async -> [String] {
        await withCheckedContinuation { (c: CheckedContinuation<[String], Never>) in
            let closed = state.withLockedValue { s in
                guard !s.closed else { return true }
                s.waiters.append(c)
                s.verify = s.verify || verify
                return false
            }
            if closed { c.resume(returning: []) } else { kickInput.yield() }
        }
    }

    /// The reconciler (a child task of `FocusService.run`): one reconcile per wake-up, each on the
    /// blocking pool, until `finish`. Waiting `sync` callers get the result of the first reconcile
    /// that starts after they asked.
    func runReconciler() async {
        for await _ in kicks {
            await reconcileOnce()
        }
        // Finished: whoever still waits gets one last reconcile, later callers none.
        state.withLockedValue { $0.closed = true }
        await reconcileOnce()
    }

    private func reconcileOnce() async {
        let (waiters, verify) = state.withLockedValue { s in
            defer { s.waiters = []; s.verify = false }
            return (s.waiters, s.verify)
        }
        let problems: [String]
        do {
            if Task.isCancelled {
                // Shutting down (the pool refuses a cancelled task's work): the last reconcile
                // runs here, once, so the machine is left as the lock says.
                if verify { restoreIfTampered() }
                problems = reconcile()
            } else {
                problems = try await NIOThreadPool.singleton.runIfActive { [self] in
                    if verify { restoreIfTampered() }
                    return reconcile()
                }
            }
        } catch {
            // The process-wide pool is not running: only at process exit.
            logger.error("focus blocking could not run", metadata: ["error": "\(error)"])
            problems = ["blocking could not run: \(error)"]
        }
        for w in waiters { w.resume(returning: problems) }
    }

    /// The hook runner (a child task of `FocusService.run`): each transition's hooks in order, one
    /// at a time, each bounded by its timeout, on the blocking pool; until `finish`.
    func runHooks() async {
        guard let hooks else {
            for await _ in hookJobs {}
            return
        }
        for await job in hookJobs {
            let results: [HookResult]
            do {
                results = try await NIOThreadPool.singleton.runIfActive {
                    hooks.run(mode: job.mode, transition: job.transition, environment: job.environment)
                }
            } catch {
                logger.error("focus hooks could not run", metadata: ["error": "\(error)"])
                continue
            }
            report(results, mode: job.mode, transition: job.transition)
        }
    }

    /// Ends both child tasks once what is queued is done (the service is stopping).
    func finish() {
        kickInput.finish()
        hookInput.finish()
    }

    /// On the blocking pool: the applied block, if the file no longer holds it exactly, is written again.
    private func restoreIfTampered() {
        let applied = state.withLockedValue { $0.applied }
        guard let hostsFile, let applied, let mode = applied.mode, !applied.sites.isEmpty,
              let text = try? hostsFile.read() else { return }  // unreadable: the reconcile that follows reports it
        guard HostsBlock.applying(mode: mode, domains: applied.sites, to: text) != text else { return }
        do {
            try hostsFile.apply(mode: mode, domains: applied.sites)
            logger.warning("the hosts block was changed while locked; restored", metadata: ["mode": "\(mode)"])
            NodeCore.submit { [events] in _ = events.emit("focus.block_restored", ["mode": .string(mode)]) }
        } catch {
            state.withLockedValue { $0.applied = nil }
        }
    }

    /// On the blocking pool, one at a time. Writes only what changed; a failure is reported once (event and log) and tried
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
        if let keeper, let problem = tellKeeper(keeper, target) { problems.append(problem) }
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

    /// On the blocking pool (from `reconcile`): tells the keeper what is blocked now, and starts it
    /// when a mode is locked and none runs; collects keepers that ended.
    private func tellKeeper(_ keeper: FocusService.Configuration.Keeper, _ target: Target) -> String? {
        // Only the keeper this node started is collected (a wait for any child would take the
        // hook runner's).
        if let pid = state.withLockedValue({ $0.keeperPid }), LockKeeper.reap(pid) { state.withLockedValue { $0.keeperPid = nil } }
        let wanted = KeeperState(mode: target.mode, sites: target.mode == nil ? [] : target.sites, apps: target.mode == nil ? [] : target.apps,
                                 allowedApps: target.allowedApps, allowedUntilMs: target.allowedUntilMs, untilMs: target.untilMs,
                                 hostsPath: hostsPath, appUser: UInt32(appUser), nodePid: getpid())
        if state.withLockedValue({ $0.keeperState }) != wanted {
            do {
                try LockKeeper.write(wanted, directory: keeper.directory)
                state.withLockedValue { $0.keeperState = wanted }
            } catch {
                return "lock keeper: \(error)"
            }
        }
        if target.mode != nil, let pid = LockKeeper.spawn(executable: keeper.executable, directory: keeper.directory) {
            state.withLockedValue { $0.keeperPid = pid }
            logger.info("lock keeper started", metadata: ["pid": "\(pid)", "mode": "\(target.mode ?? "")"])
        }
        return nil
    }

    /// Runs the mode's hooks for a transition, in order after those queued before.
    func hook(mode: FocusMode?, transition: HookTransition, lock: FocusLock, reason: String) {
        guard hooks != nil, let mode else { return }
        var until: Int64?
        if let t = lock.locked?.temporary?.endsAtMs { until = t } else if case .until(let t)? = lock.locked?.hold { until = t }
        // What is blocked now: nothing once unlocked, less the temporary items while they are open.
        let open = transition == .tempUnlocked ? Set(mode.temporaryItems) : []
        let blocked = transition != .unlocked
        let environment = HookEnvironment(blockedSites: blocked ? mode.blockedSites.filter { !open.contains($0) } : [],
                                          blockedApps: blocked ? mode.blockedApps.filter { !open.contains($0) } : [],
                                          tempItems: mode.temporaryItems, untilMs: until, reason: reason)
        if case .dropped = hookInput.yield(HookJob(mode: mode.name, transition: transition, environment: environment)) {
            logger.error("focus hooks dropped: too many transitions waiting", metadata: ["mode": "\(mode.name)", "transition": "\(transition.rawValue)"])
        }
    }

    private func report(_ results: [HookResult], mode: String, transition: HookTransition) {
        let events = self.events
        let logger = self.logger
        for r in results {
            var f: [String: JSONValue] = ["mode": .string(mode), "transition": .string(transition.rawValue), "path": .string(r.path),
                                          "exit": r.exitCode.map { .int(Int64($0)) } ?? .null,
                                          "signal": r.signal.map { .int(Int64($0)) } ?? .null,
                                          "timed_out": .bool(r.timedOut), "duration_ms": .int(Int64(r.durationMs))]
            if r.failed {
                f["stderr"] = .string(String(r.stderr.suffix(2000)))
                f["stdout"] = .string(String(r.stdout.suffix(2000)))
                f["error"] = r.error.map(JSONValue.string) ?? .null
                if r.skipped {
                    logger.warning("focus hook not run", metadata: ["hook": "\(r)"])
                } else {
                    logger.error("focus hook failed", metadata: ["hook": "\(r)"])
                }
                NodeCore.submit { [events, f] in _ = events.emit("focus.hook_failed", f) }
            } else {
                logger.info("focus hook ran", metadata: ["path": "\(r.path)", "transition": "\(transition.rawValue)"])
                NodeCore.submit { [events, f] in _ = events.emit("focus.hook", f) }
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
