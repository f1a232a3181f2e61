import TandemNodeCore
import TandemStore

/// What the sends of one batch (`drainSends`, one store step) learn about their recipients, kept
/// for the rest of the batch: the friend a `to` parameter names, and whether a key is a friend.
/// A burst to one friend read the friend's contact three times per send (the name resolved, the
/// friendship checked, the frame's expiry decided); now once per batch (messages.md 11.6).
///
/// Valid for one step only: no send changes a contact, and nothing else runs on the core between
/// the sends of a batch, so what the first send read holds for the last.
@NodeCore
final class SendBatchMemo {
    private var named: [String: [UInt8]] = [:]
    private var friends: [[UInt8]: Bool] = [:]

    /// The friend `text` names, resolved by `resolve` the first time it is asked in this batch.
    func friend(named text: String, _ resolve: () throws -> [UInt8]) rethrows -> [UInt8] {
        if let key = named[text] { return key }
        let key = try resolve()
        named[text] = key
        friends[key] = true
        return key
    }

    /// Whether `key` is a friend, asked of `isFriend` the first time in this batch.
    func isFriend(_ key: [UInt8], _ isFriend: ([UInt8]) -> Bool) -> Bool {
        if let known = friends[key] { return known }
        let known = isFriend(key)
        friends[key] = known
        return known
    }
}
