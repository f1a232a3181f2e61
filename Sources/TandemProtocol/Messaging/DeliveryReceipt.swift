import Foundation
import SwiftProtobuf

// DELIVERED (0x050D): the end-to-end receipt for MESSAGEs that came as relay mail (messages.md 2.2).
// A frame from a mailbox has no link to answer on (README 14.4), so its receiver says "stored"
// with a frame of its own, through its outbox (by link, or the author's mailbox in turn).

extension MessageType {
    public static let deliveryReceipt = MessageType(rawValue: 0x050D)
}

/// DELIVERED: the author's MESSAGEs (by envelope id) that the receipt's author stored.
public struct DeliveryReceiptMessage: Equatable, Sendable {
    /// Ids per receipt at most: a mailbox's worth of a conversation in one small frame (4.6 KiB).
    public static let maximumIDs = 256

    public let messageIDs: [[UInt8]]

    public init(messageIDs: [[UInt8]]) {
        precondition((1...Self.maximumIDs).contains(messageIDs.count) && messageIDs.allSatisfy { $0.count == 16 }
                     && Set(messageIDs).count == messageIDs.count)
        self.messageIDs = messageIDs
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.deliveryReceipt
        guard payload.count <= ChatLimits.maximumPayloadBytes else {
            throw PayloadError(t, "payload of \(payload.count) bytes exceeds \(ChatLimits.maximumPayloadBytes)")
        }
        let m: Tandem_V1_DeliveryReceipt
        do {
            m = try Tandem_V1_DeliveryReceipt(serializedBytes: payload)
        } catch {
            throw PayloadError(t, "payload is not a \(Tandem_V1_DeliveryReceipt.protoMessageName)")
        }
        guard (1...Self.maximumIDs).contains(m.messageIds.count) else {
            throw PayloadError(t, "\(m.messageIds.count) message ids, not 1…\(Self.maximumIDs)")
        }
        var seen = Set<[UInt8]>()
        var ids: [[UInt8]] = []
        for d in m.messageIds {
            guard d.count == 16 else { throw PayloadError(t, "a message id is \(d.count) bytes, not 16") }
            guard seen.insert(Array(d)).inserted else { throw PayloadError(t, "a message id is named twice") }
            ids.append(Array(d))
        }
        messageIDs = ids
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_DeliveryReceipt()
        m.messageIds = messageIDs.map { Data($0) }
        return (try? m.serializedBytes()) ?? []  // validated values always serialize
    }
}
