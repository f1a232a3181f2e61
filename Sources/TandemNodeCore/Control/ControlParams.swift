import Foundation
import TandemProtocol

/// What every feature's control methods read from their parameters and write into answers.
package enum ControlParams {
    /// The Tandem ID in parameter `name`, checked (`invalidArgument` when missing or not an ID).
    package static func key(_ params: JSONValue, _ name: String = "id") throws -> [UInt8] {
        guard let text = params[name]?.stringValue else {
            throw NodeError.invalidArgument("missing parameter '\(name)'")
        }
        do {
            return try NodeID.parse(text)
        } catch {
            throw NodeError.invalidArgument("'\(text)' is not a Tandem ID: \(error)")
        }
    }
}

extension JSONValue {
    /// An instant (ms since the epoch) as ISO 8601 UTC with milliseconds; null for nil.
    public static func iso(_ ms: Int64?) -> JSONValue {
        guard let ms else { return .null }
        return .string(ISOTime.utc(ms))
    }
}
