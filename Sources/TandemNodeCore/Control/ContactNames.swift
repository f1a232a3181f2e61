import Foundation
import TandemProtocol
import TandemStore

/// How a person names a contact on the command line and the dashboard: a Tandem ID (or share
/// code's ID), a local nickname (`tandem friend nick`) or the contact's display name — each
/// compared without case. A name that fits several contacts is refused with the candidates, so a
/// message or an invitation never goes to the wrong Bob.
package enum ContactNames {
    /// The key `text` names among the contacts of `relationships`. An ID is returned as given when
    /// `anyID` (the caller checks the relationship itself and words its own refusal).
    package static func resolve(_ text: String, among relationships: [Relationship], in r: StoreReading,
                                anyID: Bool = false) throws -> [UInt8] {
        let trimmed = trimmedWhitespace(text)
        guard !trimmed.isEmpty else { throw NodeError.invalidArgument("a contact is named by its Tandem ID, nickname or display name") }
        if let key = try? NodeID.parse(trimmed) {  // not an ID: a name, below
            if anyID { return key }
            guard let c = try r.contact(key), relationships.contains(c.relationship) else {
                throw NodeError.nothingToActOn("\(NodeID(publicKey: key).display) is not \(noun(relationships))")
            }
            return key
        }
        let contacts = try r.contacts(relationships)
        let nicks = try r.nicknames()
        let byNick = contacts.filter { nicks[$0.publicKey].map { $0.caseInsensitiveCompare(trimmed) == .orderedSame } ?? false }
        let matches = byNick.isEmpty
            ? contacts.filter { !$0.displayName.isEmpty && $0.displayName.caseInsensitiveCompare(trimmed) == .orderedSame }
            : byNick
        guard let first = matches.first else {
            throw NodeError.nothingToActOn("no \(noun(relationships, article: false)) named '\(trimmed.terminalSafe)' (see tandem friend list)")
        }
        guard matches.count == 1 else {
            let list = matches.map { label($0, nickname: nicks[$0.publicKey]) + " " + NodeID(publicKey: $0.key).canonical }
            throw NodeError.invalidArgument("'\(trimmed.terminalSafe)' names several contacts; give the ID or set a nickname "
                                            + "(tandem friend nick ID NAME): " + list.joined(separator: ", "))
        }
        return first.key
    }

    /// `text.trimmingCharacters(in: .whitespaces)`, without Foundation's pass over it when it
    /// starts and ends with printable ASCII other than a space (an ID or a plain name: nothing to
    /// trim; the pass was 38,000 instructions of a lone message.send, messages.md 11.6, session 12).
    static func trimmedWhitespace(_ text: String) -> String {
        if let first = text.utf8.first, let last = text.utf8.last, (0x21..<0x7f).contains(first), (0x21..<0x7f).contains(last) {
            return text
        }
        return text.trimmingCharacters(in: .whitespaces)
    }

    /// The contact in parameter `name` of a control call, as `resolve`.
    package static func resolve(_ params: JSONValue, _ name: String = "id", among relationships: [Relationship],
                                in r: StoreReading, anyID: Bool = false) throws -> [UInt8] {
        guard let text = params[name]?.stringValue else { throw NodeError.invalidArgument("missing parameter '\(name)'") }
        return try resolve(text, among: relationships, in: r, anyID: anyID)
    }

    /// What a person reads for a contact: the nickname, else the display name, else the ID's
    /// short form; made safe for a terminal.
    package static func label(_ c: Contact?, nickname: String?, key: [UInt8]? = nil) -> String {
        if let nickname, !nickname.isEmpty { return nickname.terminalSafe }
        if let name = c?.displayName, !name.isEmpty { return name.terminalSafe }
        let k = c?.key ?? key ?? []
        return k.count == 32 ? "tdm1-" + NodeID(publicKey: k).short : "?"
    }

    /// The label of `key` as the store knows it (see `label`).
    package static func label(of key: [UInt8], in r: StoreReading) -> String {
        let c = try? r.contact(key)  // unreadable: the ID's short form is still a name
        let nick = try? r.nickname(key)  // as above
        return label(c ?? nil, nickname: nick ?? nil, key: key)
    }

    /// A nickname as given: one line, at most 64 bytes, no control or format characters.
    package static func checkNickname(_ text: String) throws -> String {
        let t = text.trimmingCharacters(in: .whitespaces)
        guard !t.isEmpty, t.utf8.count <= 64 else { throw NodeError.invalidArgument("a nickname is 1 to 64 bytes") }
        guard t.unicodeScalars.allSatisfy({ !$0.properties.generalCategory.isControlOrFormat }) else {
            throw NodeError.invalidArgument("a nickname has no control or format characters")
        }
        guard (try? NodeID.parse(t)) == nil else { throw NodeError.invalidArgument("a nickname cannot be a Tandem ID") }
        return t
    }

    private static func noun(_ relationships: [Relationship], article: Bool = true) -> String {
        switch relationships {
        case [.friend]: return article ? "your friend" : "friend"
        case [.pending]: return article ? "a pending friend request" : "pending request"
        case [.blocked]: return article ? "blocked" : "blocked contact"
        default: return article ? "a contact of yours" : "contact"
        }
    }
}

private extension Unicode.GeneralCategory {
    var isControlOrFormat: Bool {
        switch self {
        case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .privateUse, .unassigned: return true
        default: return false
        }
    }
}
