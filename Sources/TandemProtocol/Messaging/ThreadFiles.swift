// Files in a challenge's thread (Protocol/messages.md 7.7): who may offer one, where its chunks come
// from, who the inviter forwards the offer to and who may fetch from whom. Pure: the node looks up the
// challenge (inviter, participants) and carries out the answers.

/// The thread a file is offered in, as the receiving (or serving) node sees it.
public struct ThreadFileRoute: Equatable, Sendable {
    /// The node the chunks are fetched from: the one the offer came from (the author, or the
    /// inviter that forwarded it). Always a friend: FILE_REQUEST and FILE_CHUNK stay on a link
    /// between friends.
    public let fetchFrom: [UInt8]
    /// The participants the inviter forwards the author's envelope to, byte for byte (every one
    /// but itself and the author); empty unless this node is the inviter and not the author.
    public let forwardTo: [[UInt8]]
    /// This node is the inviter relaying another participant's file: it fetches the file whatever
    /// its auto-accept limit says and serves it to `forwardTo` once it holds it whole.
    public let serves: Bool

    public init(fetchFrom: [UInt8], forwardTo: [[UInt8]], serves: Bool) {
        self.fetchFrom = fetchFrom
        self.forwardTo = forwardTo
        self.serves = serves
    }

    /// An offer signed by `author` that reached `me` from `sender` (the author itself, or the
    /// forwarder of a FORWARD), in the thread of a challenge we hold with `inviter` and
    /// `participants`. nil: refused (dropped) — not a thread we take part in, an author who is not a
    /// participant, our own offer, or a frame that did not come the way 4 allows (directly only to
    /// or from the inviter; forwarded only by the inviter).
    /// The author's signature is checked before (FORWARD's decoder, or README 5.5 for a direct frame).
    public static func receive(me: [UInt8], inviter: [UInt8], participants: [[UInt8]], author: [UInt8],
                               sender: [UInt8]) -> ThreadFileRoute? {
        guard participants.contains(me), participants.contains(author), participants.contains(inviter), author != me else { return nil }
        if sender == author {
            // Directly: an author writes to the inviter; the inviter writes to each participant.
            guard me == inviter || author == inviter else { return nil }
            let others = me == inviter ? participants.filter { $0 != me && $0 != author } : []
            return ThreadFileRoute(fetchFrom: author, forwardTo: dedup(others), serves: !others.isEmpty)
        }
        // Forwarded: only by the inviter, never to itself and never its own frame (the decoder refuses that).
        guard sender == inviter, me != inviter, author != inviter else { return nil }
        return ThreadFileRoute(fetchFrom: inviter, forwardTo: [], serves: false)
    }

    /// Where `me`'s own offer in the thread goes: to the inviter (who forwards it), or, when `me` is
    /// the inviter, to every other participant directly (one envelope each, one message id).
    public static func offerRecipients(me: [UInt8], inviter: [UInt8], participants: [[UInt8]]) -> [[UInt8]] {
        me == inviter ? dedup(participants.filter { $0 != me }) : [inviter]
    }

    /// Whether `requester` may fetch from `me` a thread file by `author`: our own offer, by the
    /// inviter to each participant (`me` is the inviter) or by another author to the inviter only;
    /// a file we relay as the inviter, to every participant but its author.
    public static func mayFetch(requester: [UInt8], me: [UInt8], inviter: [UInt8], participants: [[UInt8]],
                                author: [UInt8]) -> Bool {
        guard requester != me, participants.contains(requester), participants.contains(me) else { return false }
        if author == me { return me == inviter || requester == inviter }
        return me == inviter && requester != author
    }

    private static func dedup(_ keys: [[UInt8]]) -> [[UInt8]] {
        var seen: Set<[UInt8]> = []
        return keys.filter { seen.insert($0).inserted }
    }
}
