import Foundation
import TandemNet
import TandemProtocol

// The mailbox requests of a client link (registration, MAILBOX_PUT, MAILBOX_ACK): each runs on the
// mailbox lane, off the event loops, within the book's per-client and total job limits.

extension RelayServer {
    /// Runs `body` on the mailbox lane if the book admits one more job for `connection`.
    func mailboxJob(_ connection: UInt64, _ body: @escaping @Sendable () -> Void) -> RelayBook.MailboxJob {
        let verdict = book.withLockedValue { $0.startMailboxJob(client: connection) }
        switch verdict {
        case .accepted:
            runMailboxJob { [self] in
                defer { book.withLockedValue { $0.finishMailboxJob(client: connection) } }
                body()
            }
        case .busy, .tooManyFromClient:
            metrics.refused("mailbox_queue")
        }
        return verdict
    }

    /// RELAY_REGISTERED only once the registration is on disk (it is what lets others leave mail
    /// for the node): when the store fails, or the mailbox queue is full, the client is told
    /// goodbye and comes back later, and the link never becomes a home link.
    func register(_ session: Session, connection: UInt64) {
        // A client registered within the hour, with no mail waiting anywhere, is answered at once;
        // anything else goes through the mailbox's queue (a database write or read).
        if mailbox.depth.items == 0, mailbox.isFreshlyRegistered(session.key, nowMs: now()) {
            makeHome(session, connection: connection)
            sendRegistered(session, items: [])
            return
        }
        let verdict = mailboxJob(connection) { [self] in
            let items: [RelayMailbox.Item]
            do {
                try mailbox.register(session.key, nowMs: now())
                items = try mailbox.items(for: session.key)
            } catch {
                metrics.update { $0.registrationsFailed += 1 }
                logger.error("mailbox registration failed", metadata: ["error": "\(error)"])
                goodbye(session.link, reason: "the relay cannot record the registration now", retryAfterMs: 30_000)
                return
            }
            makeHome(session, connection: connection)
            sendRegistered(session, items: items)
        }
        switch verdict {
        case .accepted:
            break
        case .busy, .tooManyFromClient:
            goodbye(session.link, reason: "the relay is busy", retryAfterMs: 5_000)
        }
    }

    func sendRegistered(_ session: Session, items: [RelayMailbox.Item]) {
        var r = Tandem_V1_RelayRegistered()
        r.mailboxItems = UInt32(items.count)
        r.maxTunnels = UInt32(configuration.maximumTunnelsPerClient)
        r.maxBytesPerSecond = UInt64(configuration.clientBytesPerSecond)
        r.mailboxMaxItems = UInt32(configuration.mailboxItemsPerRecipient)
        r.mailboxMaxBytes = UInt64(configuration.mailboxBytesPerRecipient)
        r.mailboxMaxItemBytes = UInt32(configuration.mailboxItemBytes)
        session.link.sendSigned(type: .relayRegistered, payload: (try? r.serializedBytes()) ?? [])
        for item in items { deliver(item, on: session.link) }
    }

    func deliver(_ item: RelayMailbox.Item, on link: any RelayClientLink) {
        var m = Tandem_V1_MailboxItem()
        m.itemID = UInt64(bitPattern: item.id)
        m.sender = Data(item.sender)
        m.sealed = Data(item.sealed)
        m.storedAtMs = UInt64(item.storedAtMs)
        link.sendSigned(type: .mailboxItem, payload: (try? m.serializedBytes()) ?? [])
    }

    func put(_ m: Tandem_V1_MailboxPut, session: Session, connection: UInt64) {
        let recipient = Array(m.recipient)
        guard recipient.count == 32 else { return reply(session.link, m.requestID, .badRequest, "a recipient is a 32-byte key") }
        let sealed = Array(m.sealed)
        // Refused before taking a place in the queue (the mailbox checks them again).
        guard !sealed.isEmpty else {
            metrics.update { $0.mailboxRefused += 1 }
            return reply(session.link, m.requestID, .badRequest, RelayMailbox.Refusal.empty.description)
        }
        guard sealed.count <= mailbox.quotas.itemBytes else {
            metrics.update { $0.mailboxRefused += 1 }
            return reply(session.link, m.requestID, .badRequest, RelayMailbox.Refusal.tooLarge(mailbox.quotas.itemBytes).description)
        }
        let verdict = mailboxJob(connection) { [self] in
            do {
                let id = try mailbox.put(recipient: recipient, sender: session.key, source: session.address, sealed: sealed,
                                         nowMs: now())
                metrics.update { $0.mailboxStored += 1 }
                reply(session.link, m.requestID, .ok, itemID: id)
                // The recipient may be online after all: hand it over now.
                if let home = book.withLockedValue({ $0.homeClient(of: recipient) }),
                   let link = sessions.withLockedValue({ $0[home]?.link }) {
                    deliver(RelayMailbox.Item(id: id, recipient: recipient, sender: session.key, sealed: sealed,
                                              storedAtMs: now()), on: link)
                }
            } catch let refusal as RelayMailbox.Refusal {
                metrics.update { $0.mailboxRefused += 1 }
                let status: Tandem_V1_RelayStatus
                switch refusal {
                case .unknownRecipient: status = .unknownRecipient
                case .empty, .tooLarge: status = .badRequest
                case .recipientFull, .senderQuota, .senderTotal, .addressQuota: status = .limit
                case .relayFull: status = .unavailable
                }
                reply(session.link, m.requestID, status, refusal.description)
            } catch {
                logger.error("mailbox write failed", metadata: ["error": "\(error)"])
                reply(session.link, m.requestID, .unavailable, "the relay could not store the item")
            }
        }
        switch verdict {
        case .accepted:
            break
        case .busy:
            metrics.update { $0.mailboxRefused += 1 }
            reply(session.link, m.requestID, .unavailable, "the relay is busy; try again later")
        case .tooManyFromClient:
            metrics.update { $0.mailboxRefused += 1 }
            reply(session.link, m.requestID, .limit,
                  "at most \(configuration.mailboxQueueJobsPerClient) mailbox requests of one link may wait at once")
        }
    }

    /// MAILBOX_ACK: the recipient has the items; they are deleted.
    func acknowledge(_ m: Tandem_V1_MailboxAck, session: Session, connection: UInt64) {
        let ids = m.itemIds.prefix(1024).map { Int64(bitPattern: $0) }
        // With the queue full the acknowledgement is dropped: the items come again at the
        // next registration, and the node recognises them (14.4).
        _ = mailboxJob(connection) { [self] in
            do {
                let n = try mailbox.acknowledge(ids, recipient: session.key)
                metrics.update { $0.mailboxDelivered += n }
            } catch {
                logger.error("mailbox acknowledgement failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
