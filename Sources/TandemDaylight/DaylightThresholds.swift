import Foundation

/// The daylight check's rules: one check per score, in the order their reasons are given. A value
/// past a check's `reject` bound is not daylight; one between `reject` and `borderline` is
/// ambiguous. The numbers were chosen by Tests/daylight/tune_thresholds.py on the generated training
/// seeds 1 and 2 (Protocol/daylight.md): the `borderline` bounds are tightened until no training
/// photo of another kind is accepted, the `reject` bounds lie 15 % of the daylight photos' spread
/// further out. Regenerate them with the script rather than editing them by hand.
struct DaylightThresholds: Sendable {
    /// A photo is judged as a blue sky when at least this share of its upper part is blue sky, and
    /// as a grey one (overcast, hazy, mostly cloud) otherwise; each kind has its own bounds.
    static let blueRoute = 0.5

    struct Bound: Sendable {
        let reject: Double
        let borderline: Double
    }

    struct Check: Sendable {
        /// The score's name in the report.
        let score: String
        let value: @Sendable (DaylightScores) -> Double
        /// True: daylight needs at least the bound; false: at most.
        let atLeast: Bool
        /// The bounds for a blue sky and for a grey one.
        let blue: Bound
        let grey: Bound
        /// Why a photo failing this check is not daylight, given its value.
        let why: @Sendable (Double) -> String

        func failed(_ v: Double, _ b: Bound) -> Bool { atLeast ? v < b.reject : v > b.reject }
        func borderlineHit(_ v: Double, _ b: Bound) -> Bool { atLeast ? v < b.borderline : v > b.borderline }
    }

    let checks: [Check]

    /// Per evidence score, blue and grey sky: (10th percentile, median) of the training daylight photos.
    struct EvidenceScale: Sendable {
        let topBrightness: (blue: (Double, Double), grey: (Double, Double))
        let skyGroundContrast: (blue: (Double, Double), grey: (Double, Double))
        let skyGroundDifference: (blue: (Double, Double), grey: (Double, Double))
        let colourTemperature: (blue: (Double, Double), grey: (Double, Double))
    }

    /// The verdict and its reason; fills in `s.evidence` first.
    func decide(_ s: inout DaylightScores) -> (DaylightVerdict, String) {
        let blueSky = s.blueSkyShare >= Self.blueRoute
        s.evidence = Self.evidence(s, blueSky: blueSky)
        var firstBorderline: (Check, Double)?
        for check in checks {
            let v = check.value(s)
            let bound = blueSky ? check.blue : check.grey
            if check.failed(v, bound) { return (.notDaylight, check.why(v)) }
            if firstBorderline == nil, check.borderlineHit(v, bound) { firstBorderline = (check, v) }
        }
        if let (check, v) = firstBorderline {
            return (.ambiguous, "borderline: \(check.why(v)); take another photo outside with open sky in the upper third and the ground below")
        }
        return (.daylight, String(format: "daylight: %@ sky in %.0f %% of the upper part, brightness %.2f, %.0f K, brighter than the ground",
                                  blueSky ? "blue" : "grey", s.skyShare * 100, s.topBrightness, s.colourTemperature))
    }

    private static func pct(_ v: Double) -> String { String(format: "%.0f %%", v * 100) }
    private static func num(_ v: Double) -> String { String(format: "%.2f", v) }

    // BEGIN TUNED (Tests/daylight/tune_thresholds.py writes this list)
    static let standard = DaylightThresholds(checks: [
        check("top_brightness", \.topBrightness, atLeast: true, blue: (0.234324, 0.283285), grey: (0.407421, 0.442066)),
        check("colour_temperature", \.colourTemperature, atLeast: true, blue: (4562, 5626), grey: (5869, 6064)),
        check("warm_sky_share", \.warmSkyShare, atLeast: false, blue: (0.0713317, 0.0713317), grey: (0.0834644, 0.0834644)),
        check("top_edge_dark_share", \.topEdgeDarkShare, atLeast: false, blue: (0.227479, 0.214318), grey: (0.21, 0.2048)),
        check("sky_ground_difference", \.skyGroundDifference, atLeast: true, blue: (0.320431, 0.379424), grey: (0.0336043, 0.154185)),
        check("bottom_blue_share", \.bottomBlueShare, atLeast: false, blue: (1.02, 1.02), grey: (1.0026, 1.0026)),
        check("sky_share", \.skyShare, atLeast: true, blue: (0.797349, 0.803683), grey: (0.803035, 0.813702)),
        check("sky_ground_contrast", \.skyGroundContrast, atLeast: true, blue: (0.0852494, 0.126235), grey: (-0.0867004, -0.0101007)),
        check("chroma_ripple", \.chromaRipple, atLeast: false, blue: (10.0329, 9.39497), grey: (5.79146, 5.64014)),
        check("top_saturation", \.topSaturation, atLeast: false, blue: (0.754013, 0.699415), grey: (0.324432, 0.310619)),
        check("daylight_evidence", \.evidence, atLeast: true, blue: (-0.324345, -0.222627), grey: (0.0160716, 0.115246)),
    ])
    static let evidenceScale = EvidenceScale(topBrightness: (blue: (0.446688, 0.567912), grey: (0.766002, 0.899147)),
                                             skyGroundContrast: (blue: (0.373996, 0.534614), grey: (0.238106, 0.61163)),
                                             skyGroundDifference: (blue: (0.623166, 0.790348), grey: (0.601032, 1.17314)),
                                             colourTemperature: (blue: (7781, 10092), grey: (6138, 6643)))
    // END TUNED

    /// `DaylightScores.evidence`: the mean of the scaled scores.
    static func evidence(_ s: DaylightScores, blueSky: Bool) -> Double {
        let values: [(Double, (Double, Double))] = [
            (s.topBrightness, blueSky ? evidenceScale.topBrightness.blue : evidenceScale.topBrightness.grey),
            (s.skyGroundContrast, blueSky ? evidenceScale.skyGroundContrast.blue : evidenceScale.skyGroundContrast.grey),
            (s.skyGroundDifference, blueSky ? evidenceScale.skyGroundDifference.blue : evidenceScale.skyGroundDifference.grey),
            (s.colourTemperature, blueSky ? evidenceScale.colourTemperature.blue : evidenceScale.colourTemperature.grey),
        ]
        var sum = 0.0
        for (v, (lo, hi)) in values {
            let scaled = hi > lo ? (v - lo) / (hi - lo) : 0
            sum += min(1, max(-3, scaled))
        }
        return sum / Double(values.count)
    }

    /// The reasons, by score name.
    static let reasons: [String: @Sendable (Double) -> String] = [
        "top_brightness": { "the upper part of the photo is dark (brightness \(num($0))): night, a dark room or dusk, not daylight sky" },
        "colour_temperature": { String(format: "the light is warmer than daylight (%.0f K): lamps, street lights or a sunset", $0) },
        "warm_sky_share": { "the upper part is orange or red (\(pct($0))): a sunset's glow or lamps, not daylight sky" },
        "top_edge_dark_share": { "the top edge of the photo is dark (\(pct($0))) around a brighter area: a screen or a print in a room, not the sky" },
        "sky_ground_difference": { "the top and the bottom of the photo look alike (difference \(num($0))): a wall or a screen, not sky above ground" },
        "bottom_blue_share": { "the bottom of the photo is blue too (\(pct($0))): a wall or a screen, not the ground" },
        "sky_share": { "little sky in the upper part of the photo (\(pct($0))): point the camera so open sky fills the upper third" },
        "sky_ground_contrast": { "the upper part is not much brighter than the lower (contrast \(num($0))): not sky above the ground outdoors" },
        "chroma_ripple": { String(format: "the sky has a fine colour ripple (%.1f): the moiré of a photographed screen", $0) },
        "daylight_evidence": { "brightness, colour and the contrast of sky against ground are all weak together (evidence \(num($0))): more like a bright wall or room than the sky" },
        "top_saturation": { "the upper part's colours are too strong or too weak for the sky (saturation \(num($0)))" },
    ]

    static func check(_ score: String, _ value: @escaping @Sendable (DaylightScores) -> Double, atLeast: Bool,
                      blue: (Double, Double), grey: (Double, Double)) -> Check {
        Check(score: score, value: value, atLeast: atLeast,
              blue: Bound(reject: blue.0, borderline: blue.1), grey: Bound(reject: grey.0, borderline: grey.1),
              why: reasons[score] ?? { "\(score) \($0)" })
    }
}
