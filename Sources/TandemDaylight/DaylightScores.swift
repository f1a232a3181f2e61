import Foundation
import TandemMedia

/// What the daylight check measures in a photo, from its pixels alone (scaled to at most 256 pixels
/// a side). The frame is read as sky above ground: the upper 30 % is where the sky should be, the
/// lower 20 % where the ground should be, the top 5 % is the edge a screen's dark room shows in.
/// Brightness is sRGB luma in 0…1; shares are fractions of a region's pixels.
struct DaylightScores: Sendable, Equatable {
    /// Mean luma of the whole frame.
    var brightness = 0.0
    /// Mean luma of the upper 30 %.
    var topBrightness = 0.0
    /// Mean luma of the lower 20 %.
    var bottomBrightness = 0.0
    /// Upper 30 %: pixels of blue sky (hue 185°–250°, some saturation, not dark).
    var blueSkyShare = 0.0
    /// Upper 30 %: pixels of sky of any kind, blue or a bright grey-white (overcast, clouds).
    var skyShare = 0.0
    /// Mean HSV saturation of the upper 30 %.
    var topSaturation = 0.0
    /// Correlated colour temperature of the whole frame's mean colour (McCamy), kelvin.
    var colourTemperature = 0.0
    /// Upper 30 %: orange-red pixels (a sunset's glow, sodium street lights, lamps).
    var warmSkyShare = 0.0
    /// (top − bottom) / (top + bottom) of the two regions' mean luma: sky brighter than ground > 0.
    var skyGroundContrast = 0.0
    /// Distance between the mean colours of the upper 30 % and the lower 20 % (RGB, 0…√3).
    var skyGroundDifference = 0.0
    /// Lower 20 %: pixels that would count as blue sky (a blue wall, a screen's sky).
    var bottomBlueShare = 0.0
    /// Top 5 %: dark pixels (a room around a screen or a print).
    var topEdgeDarkShare = 0.0
    /// Upper 30 %: the mean size of the chroma's second difference, per mille (a screen's moiré and
    /// pixel grid ripple the colour; a sky is smooth).
    var chromaRipple = 0.0
    /// How far brightness, sky-against-ground contrast and difference, and colour temperature
    /// together sit inside the daylight photos' range, as one number (filled in by
    /// `DaylightThresholds.decide`: each score scaled so the training daylight photos' 10th
    /// percentile is 0 and their median 1, capped to −3…1, averaged). A scene weak on all of them at
    /// once — a white wall under a daylight lamp — scores low even when each alone would pass.
    var evidence = 0.0

    /// The scores by the names the JSON report uses.
    var named: [String: Double] {
        [
            "brightness": brightness,
            "top_brightness": topBrightness,
            "bottom_brightness": bottomBrightness,
            "blue_sky_share": blueSkyShare,
            "sky_share": skyShare,
            "top_saturation": topSaturation,
            "colour_temperature": colourTemperature,
            "warm_sky_share": warmSkyShare,
            "sky_ground_contrast": skyGroundContrast,
            "sky_ground_difference": skyGroundDifference,
            "bottom_blue_share": bottomBlueShare,
            "top_edge_dark_share": topEdgeDarkShare,
            "chroma_ripple": chromaRipple,
            "daylight_evidence": evidence,
        ]
    }

    /// sRGB byte → linear light.
    private static let linear: [Double] = (0..<256).map { i in
        let v = Double(i) / 255
        return v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4)
    }

    init() {}

    init(_ pixels: PhotoPixels) {
        let w = pixels.width, h = pixels.height
        let topEnd = max(1, Int((Double(h) * 0.30).rounded(.up)))
        let bottomStart = min(h - 1, Int((Double(h) * 0.80).rounded(.down)))
        let edgeEnd = max(1, Int((Double(h) * 0.05).rounded(.up)))
        let rgb = pixels.rgb

        var lumaSum = 0.0, topLuma = 0.0, bottomLuma = 0.0
        var topCount = 0, bottomCount = 0, edgeCount = 0
        var blue = 0, sky = 0, warm = 0, bottomBlue = 0, edgeDark = 0
        var satSum = 0.0
        var linR = 0.0, linG = 0.0, linB = 0.0
        var topMean = (0.0, 0.0, 0.0), bottomMean = (0.0, 0.0, 0.0)
        var ripple = 0.0, rippleCount = 0

        rgb.withUnsafeBufferPointer { p in
            for y in 0..<h {
                let inTop = y < topEnd, inBottom = y >= bottomStart, inEdge = y < edgeEnd
                for x in 0..<w {
                    let i = (y * w + x) * 3
                    let rb = p[i], gb = p[i + 1], bb = p[i + 2]
                    let r = Double(rb) / 255, g = Double(gb) / 255, b = Double(bb) / 255
                    let luma = 0.2126 * r + 0.7152 * g + 0.0722 * b
                    lumaSum += luma
                    linR += Self.linear[Int(rb)]; linG += Self.linear[Int(gb)]; linB += Self.linear[Int(bb)]
                    let (hue, sat, value) = Self.hsv(r, g, b)
                    let isBlue = value >= 0.35 && sat >= 0.10 && sat <= 0.92 && hue >= 185 && hue <= 250
                    if inTop {
                        topCount += 1
                        topLuma += luma
                        satSum += sat
                        topMean.0 += r; topMean.1 += g; topMean.2 += b
                        if isBlue { blue += 1 }
                        if isBlue || (luma >= 0.55 && sat <= 0.22) { sky += 1 }
                        if value >= 0.25 && sat >= 0.30 && (hue <= 50 || hue >= 320) { warm += 1 }
                        if x > 0, x < w - 1, y > 0 {
                            // Chroma (b − r) second differences across and down.
                            let c = Int(bb) - Int(rb)
                            let left = Int(p[i - 1]) - Int(p[i - 3]), right = Int(p[i + 5]) - Int(p[i + 3])
                            let up = Int(p[i - w * 3 + 2]) - Int(p[i - w * 3])
                            let downIndex = i + w * 3
                            let down = downIndex + 2 < p.count ? Int(p[downIndex + 2]) - Int(p[downIndex]) : c
                            ripple += Double(abs(left - 2 * c + right) + abs(up - 2 * c + down))
                            rippleCount += 1
                        }
                    }
                    if inBottom {
                        bottomCount += 1
                        bottomLuma += luma
                        bottomMean.0 += r; bottomMean.1 += g; bottomMean.2 += b
                        if isBlue { bottomBlue += 1 }
                    }
                    if inEdge {
                        edgeCount += 1
                        if luma < 0.20 { edgeDark += 1 }
                    }
                }
            }
        }
        let n = Double(w * h)
        brightness = lumaSum / n
        let tc = Double(max(topCount, 1)), bc = Double(max(bottomCount, 1))
        topBrightness = topLuma / tc
        bottomBrightness = bottomLuma / bc
        blueSkyShare = Double(blue) / tc
        skyShare = Double(sky) / tc
        topSaturation = satSum / tc
        warmSkyShare = Double(warm) / tc
        bottomBlueShare = Double(bottomBlue) / bc
        topEdgeDarkShare = Double(edgeDark) / Double(max(edgeCount, 1))
        let lumaTotal = topBrightness + bottomBrightness
        skyGroundContrast = lumaTotal > 0.001 ? (topBrightness - bottomBrightness) / lumaTotal : 0
        let dr = topMean.0 / tc - bottomMean.0 / bc, dg = topMean.1 / tc - bottomMean.1 / bc, db = topMean.2 / tc - bottomMean.2 / bc
        skyGroundDifference = (dr * dr + dg * dg + db * db).squareRoot()
        colourTemperature = Self.mcCamy(linR / n, linG / n, linB / n)
        chromaRipple = rippleCount > 0 ? ripple / Double(rippleCount) / 255 * 1000 / 4 : 0
    }

    /// HSV: hue in degrees 0…360, saturation and value 0…1.
    @inline(__always)
    static func hsv(_ r: Double, _ g: Double, _ b: Double) -> (Double, Double, Double) {
        let mx = max(r, g, b), mn = min(r, g, b), d = mx - mn
        let sat = mx > 0 ? d / mx : 0
        guard d > 1e-9 else { return (0, sat, mx) }
        var hue: Double
        if mx == r { hue = 60 * ((g - b) / d) } else if mx == g { hue = 60 * ((b - r) / d + 2) } else { hue = 60 * ((r - g) / d + 4) }
        if hue < 0 { hue += 360 }
        return (hue, sat, mx)
    }

    /// McCamy's approximation of the correlated colour temperature from linear sRGB (D65): to XYZ,
    /// to chromaticity, n = (x − 0.3320) / (0.1858 − y), CCT = 449n³ + 3525n² + 6823.3n + 5520.33
    /// (D65 gives 6 500 K).
    /// Clamped to 1 000…20 000 K (outside it, and for near-black frames, the formula means nothing).
    static func mcCamy(_ r: Double, _ g: Double, _ b: Double) -> Double {
        let x = 0.4124 * r + 0.3576 * g + 0.1805 * b
        let y = 0.2126 * r + 0.7152 * g + 0.0722 * b
        let z = 0.0193 * r + 0.1192 * g + 0.9505 * b
        let sum = x + y + z
        guard sum > 1e-6 else { return 1000 }
        let cx = x / sum, cy = y / sum
        guard abs(0.1858 - cy) > 1e-6 else { return 20000 }
        let n = (cx - 0.3320) / (0.1858 - cy)
        let cct = 449 * n * n * n + 3525 * n * n + 6823.3 * n + 5520.33
        return min(20000, max(1000, cct))
    }
}
