import Foundation
import TandemProtocol

/// Object keys through the control socket (placeholder until TandemKeys lands).
struct ObjectSession: Sendable {}

extension FocusService {
    func objectInput(_ action: KeyAction, _ params: JSONValue) async throws -> JSONValue {
        throw NodeError.refused("object keys are not available in this build")
    }
}
