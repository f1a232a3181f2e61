import Foundation
import GRDB

/// One conversation as the inbox shows it: who, how many of their messages are unread, the newest
/// message. Read-only (`message.conversations`, the dashboard's Messages page).
public struct ConversationSummary: Sendable, Equatable {
    public var conversation: ConversationRow
    /// Inbound messages stored but not yet shown (`received`).
    public var unread: Int
    /// The newest message in display order, if any.
    public var newest: StoredMessage?
}

extension StoreReading {
    /// Every conversation with its unread count and newest message, the most recent first, at most
    /// `limit`. Unread counts use the partial index `message_unread`.
    public func conversationSummaries(limit: Int = 200) throws -> [ConversationSummary] {
        try read { db in
            let conversations = try ConversationRow.fetchAll(db, sql: "SELECT * FROM conversation LIMIT ?", arguments: [max(0, min(limit, 1000))])
            var out: [ConversationSummary] = []
            for c in conversations {
                guard let cid = c.id else { continue }
                let unread = try Int.fetchOne(db, sql: "SELECT count(*) FROM message WHERE conversationId = ? AND state = 'received'",
                                              arguments: [cid]) ?? 0
                let newest = try StoredMessage.fetchOne(db, sql: """
                    SELECT * FROM message WHERE conversationId = ? AND state != 'held' ORDER BY lamport DESC, author DESC, seq DESC LIMIT 1
                    """, arguments: [cid])
                out.append(ConversationSummary(conversation: c, unread: unread, newest: newest))
            }
            return out.sorted { ($0.newest?.sentAtMs ?? $0.conversation.createdAtMs) > ($1.newest?.sentAtMs ?? $1.conversation.createdAtMs) }
        }
    }
}
