import TandemStore
import TandemNodeCore

/// What a challenge started with `--mode` asks of local focus (the core's declared interface).
extension FocusService: ChallengeModeLocks {}
