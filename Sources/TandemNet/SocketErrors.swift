import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Describes a socket error in a short phrase.
package func describe(_ error: Error) -> String {
    if let io = error as? IOError {
        switch io.errnoCode {
        case ECONNREFUSED: return "connection refused"
        case EADDRINUSE: return "address already in use"
        case EACCES: return "permission denied"
        case EHOSTUNREACH, ENETUNREACH: return "host unreachable"
        case EADDRNOTAVAIL: return "address not available"
        default: return "\(io)"
        }
    }
    if let connect = error as? NIOConnectionError {
        if let first = connect.connectionErrors.first { return describe(first.error) }
        if connect.dnsAAAAError != nil || connect.dnsAError != nil { return "cannot resolve \(connect.host)" }
        return "cannot connect"
    }
    if error is ChannelError, case ChannelError.connectTimeout = error { return "connection timed out" }
    return "\(error)"
}
