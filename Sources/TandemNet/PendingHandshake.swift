import NIOConcurrencyHelpers
import NIOCore
import TandemProtocol

/// Gives an inbound connection's handshake slot back once: when the handshake finishes or the
/// connection closes, whichever comes first.
package final class PendingHandshake: ChannelInboundHandler {
    package typealias InboundIn = NIOAny
    private let book: NIOLockedValueBox<HandshakeBook>
    private let address: String
    private var left = false

    package init(book: NIOLockedValueBox<HandshakeBook>, address: String) {
        self.book = book
        self.address = address
    }

    private func leave() {
        guard !left else { return }
        left = true
        book.withLockedValue { $0.leave(address: address) }
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SecureChannelEstablished { leave() }
        context.fireUserInboundEventTriggered(event)
    }

    package func channelInactive(context: ChannelHandlerContext) {
        leave()
        context.fireChannelInactive()
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        leave()
    }
}
