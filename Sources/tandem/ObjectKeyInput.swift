import Foundation
import TandemNet
import TandemNode
import TandemProtocol

/// Object key frames, one request per frame (placeholder until TandemKeys lands).
func presentObject(_ client: ControlClient, _ common: CommonOptions, _ input: KeyInputOptions, _ method: String,
                   _ params: [String: JSONValue], finish: Bool, restart: Bool, quiet: Bool) async throws -> JSONValue {
    throw TandemError("object keys are not available in this build", exitCode: 1)
}
