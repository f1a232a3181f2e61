import Foundation
import TandemMedia

/// Synthetic photos for the daylight check's tests and `tandem-bench daylight`: the eight kinds of
/// scene of the labelled set (Tests/daylight/daylight_set.py draws the full set; this is a smaller
/// Swift rendition of the same scenes, seeded and deterministic). Drawn in linear light after
/// exposure (1 = the sensor clips), then noise, clipping and the sRGB curve.
public enum DaylightScenes {
    public enum Kind: String, Sendable, CaseIterable {
        case clear, overcast, dusk, night
        case indoorWarm = "indoor_warm"
        case indoorCold = "indoor_cold"
        case screen
        case blueWall = "blue_wall"

        /// Whether a photo of this kind should pass the daylight check.
        public var isDaylight: Bool { self == .clear || self == .overcast }
    }

    /// A `width` × `height` photo of `kind`, the same for the same seed. `noise`: the sensor noise's
    /// standard deviation in linear light (default: the scene's own); a phone's grain makes a JPEG
    /// as large as a real photo's, which is what decoding time depends on.
    public static func render(_ kind: Kind, seed: UInt64, width: Int, height: Int, noise: Double? = nil) -> PhotoPixels {
        var rng = SceneRandom(seed: seed &* 0x9E37_79B9 &+ UInt64(Kind.allCases.firstIndex(of: kind) ?? 0))
        var canvas = Canvas(width: max(8, width), height: max(8, height))
        switch kind {
        case .clear: drawClear(&canvas, &rng)
        case .overcast: drawOvercast(&canvas, &rng)
        case .dusk: drawDusk(&canvas, &rng)
        case .night: drawNight(&canvas, &rng)
        case .indoorWarm: drawRoom(&canvas, &rng, kelvin: rng.uniform(2400, 3300))
        case .indoorCold: drawRoom(&canvas, &rng, kelvin: rng.uniform(4200, 6500))
        case .screen: drawScreen(&canvas, &rng)
        case .blueWall: drawBlueWall(&canvas, &rng)
        }
        return canvas.finish(noise: noise ?? (kind == .night || kind == .dusk ? 0.02 : 0.006), &rng)
    }

    // MARK: Scenes

    static func drawClear(_ c: inout Canvas, _ rng: inout SceneRandom) {
        let horizon = Horizon(&rng, 0.38, 0.7)
        let level = rng.uniform(0.6, 1.0)
        let zenith = RGB(rng.uniform(0.05, 0.15), rng.uniform(0.16, 0.3), rng.uniform(0.6, 0.95))
        let low = RGB(rng.uniform(0.5, 0.7), rng.uniform(0.65, 0.8), rng.uniform(0.85, 1.0))
        let cloudField = Field(&rng, cells: 6)
        let cover = rng.uniform(0, 0.3)
        let groundLevel = level * rng.uniform(0.1, 0.3)
        let ground = Ground(&rng)
        let sun = (x: rng.uniform(0.1, 0.9), y: rng.uniform(0.0, 0.2), on: rng.next() % 3 == 0)
        c.fill { x, y in
            let h = horizon.at(x)
            if y < h {
                let t = pow(min(1, y / h), 2)
                var sky = zenith.mix(low, t) * level
                let cl = cloudField.at(x, y)
                if cl > 1 - cover { sky = sky.mix(RGB(1, 1, 1.02) * level * 1.05, min(1, (cl - (1 - cover)) / 0.08)) }
                if sun.on {
                    let d: Double = sq(x - sun.x) + sq(y - sun.y)
                    sky = sky + RGB(1, 0.97, 0.9) * (2.5 * exp(-d / 0.004))
                }
                return sky
            }
            return ground.at(x, y) * groundLevel
        }
    }

    static func drawOvercast(_ c: inout Canvas, _ rng: inout SceneRandom) {
        let horizon = Horizon(&rng, 0.38, 0.7)
        let level = rng.uniform(0.65, 1.2)
        let tint = RGB.kelvin(rng.uniform(6200, 8000))
        let texture = Field(&rng, cells: 4)
        let slope = rng.uniform(-0.2, 0.2)
        let groundLevel = level * rng.uniform(0.12, 0.35)
        let ground = Ground(&rng)
        c.fill { x, y in
            let h = horizon.at(x)
            if y < h {
                let gradient: Double = 1 + slope * y / h
                let grain: Double = 1 + 0.1 * (texture.at(x, y) - 0.5)
                return tint * (level * gradient * grain)
            }
            return ground.at(x, y) * groundLevel
        }
    }

    static func drawDusk(_ c: inout Canvas, _ rng: inout SceneRandom) {
        let horizon = Horizon(&rng, 0.45, 0.8)
        let level = rng.uniform(0.15, 0.45)
        let zenith = RGB(0.04, 0.06, rng.uniform(0.15, 0.3))
        let glow = RGB(rng.uniform(0.7, 1.0), rng.uniform(0.25, 0.5), rng.uniform(0.08, 0.3))
        c.fill { x, y in
            let h = horizon.at(x)
            if y < h { return zenith.mix(glow, pow(min(1, y / h), 2.5)) * level }
            return RGB(0.02, 0.018, 0.015) * level
        }
    }

    static func drawNight(_ c: inout Canvas, _ rng: inout SceneRandom) {
        let horizon = Horizon(&rng, 0.35, 0.7)
        let glow = RGB.kelvin(rng.uniform(1900, 3200)) * rng.uniform(0.01, 0.05)
        let lamp = RGB.kelvin(rng.uniform(2000, 4000))
        let lamps = (0..<(2 + Int(rng.next() % 6))).map { _ in (x: rng.uniform(0, 1), y: rng.uniform(0.05, 0.6)) }
        c.fill { x, y in
            var v = y < horizon.at(x) ? glow * (1 + 0.5 * y) : RGB(0.02, 0.018, 0.015)
            for l in lamps {
                let d: Double = sq(x - l.x) + sq(y - l.y)
                let head: Double = 6 * exp(-d / 0.0001) + 0.3 * exp(-d / 0.005)
                let poolDistance: Double = sq(x - l.x) / 0.02 + sq(y - 0.9) / 0.003
                v = v + lamp * (head + 0.3 * exp(-poolDistance))
            }
            return v
        }
    }

    static func drawRoom(_ c: inout Canvas, _ rng: inout SceneRandom, kelvin: Double) {
        let light = RGB.kelvin(kelvin)
        let walls = [RGB(0.7, 0.66, 0.58), RGB(0.8, 0.8, 0.78), RGB(0.55, 0.62, 0.55), RGB(0.5, 0.58, 0.7), RGB(0.85, 0.85, 0.85)]
        let wall = walls[Int(rng.next() % UInt64(walls.count))]
        let ceilingEnd = rng.uniform(-0.05, 0.3)
        let floorStart = rng.uniform(0.65, 1.0)
        let lamp = (x: rng.uniform(0.1, 0.9), y: rng.uniform(-0.1, 0.4), r: rng.uniform(0.1, 0.6))
        let exposure = rng.uniform(0.5, 1.0)
        let boxes = (0..<(1 + Int(rng.next() % 5))).map { _ in
            (x: rng.uniform(-0.1, 0.9), y: rng.uniform(0.1, 0.9), w: rng.uniform(0.05, 0.4), h: rng.uniform(0.05, 0.4),
             colour: RGB(rng.uniform(0.02, 0.7), rng.uniform(0.02, 0.7), rng.uniform(0.02, 0.7)))
        }
        let floor = RGB(rng.uniform(0.15, 0.5), rng.uniform(0.12, 0.4), rng.uniform(0.1, 0.3))
        c.fill { x, y in
            let lampDistance: Double = sq(x - lamp.x) + sq(y - lamp.y)
            let fall: Double = 0.35 + 0.65 * exp(-lampDistance / sq(lamp.r))
            var surface = y < ceilingEnd ? RGB(0.8, 0.8, 0.78) : (y > floorStart ? floor : wall)
            for b in boxes where x > b.x && x < b.x + b.w && y > b.y && y < b.y + b.h { surface = b.colour }
            let bulb: Double = 4 * exp(-lampDistance / 0.0015)
            return (surface * fall + RGB(bulb, bulb, bulb)) * light * exposure
        }
    }

    static func drawScreen(_ c: inout Canvas, _ rng: inout SceneRandom) {
        // The photo on the screen, drawn at the screen's size.
        let sw = rng.uniform(0.5, 0.9), sh = rng.uniform(0.45, 0.8)
        let x0 = rng.uniform(0, 1 - sw), y0 = rng.uniform(0.05, 1 - sh)
        var inner = Canvas(width: max(8, Int(Double(c.width) * sw)), height: max(8, Int(Double(c.height) * sh)))
        drawClear(&inner, &rng)
        let room = RGB.kelvin(rng.uniform(2700, 4500)) * rng.uniform(0.005, 0.04)
        let bezel = rng.next() % 2 == 0 ? 0.01 : rng.uniform(0.2, 0.6)
        let period = rng.uniform(2.5, 6), wave = rng.uniform(0.02, 0.08), amp = rng.uniform(0.1, 0.3)
        let white = RGB.kelvin(rng.uniform(7000, 9000))
        let bez = 0.02
        let width = Double(c.width), height = Double(c.height)
        c.fill { x, y in
            let u = (x - x0) / sw, v = (y - y0) / sh
            if u >= 0, u < 1, v >= 0, v < 1 {
                let ix = min(inner.width - 1, Int(u * Double(inner.width))), iy = min(inner.height - 1, Int(v * Double(inner.height)))
                let px = x * width, py = y * height
                let sub = Int((px.truncatingRemainder(dividingBy: period)) / period * 3)
                let mask = RGB(sub == 0 ? 1.6 : 0.7, sub == 1 ? 1.6 : 0.7, sub == 2 ? 1.6 : 0.7)
                let phase: Double = 2 * Double.pi * (px + py) * wave
                let moire = RGB(1 + amp * sin(phase), 1 + amp * sin(phase + 2.1), 1 + amp * sin(phase + 4.2))
                return inner[ix, iy] * white * mask * moire * 0.8
            }
            if u >= -bez / sw, u < 1 + bez / sw, v >= -bez / sh, v < 1 + bez / sh { return RGB(bezel, bezel, bezel) }
            return room
        }
    }

    static func drawBlueWall(_ c: inout Canvas, _ rng: inout SceneRandom) {
        let paint = RGB(rng.uniform(0.05, 0.25), rng.uniform(0.15, 0.4), rng.uniform(0.5, 0.85))
        let light = RGB.kelvin(rng.uniform(4000, 7000))
        let ax = rng.uniform(-0.15, 0.15), ay = rng.uniform(-0.15, 0.15)
        c.fill { x, y in
            let shade: Double = 1 + ax * (x - 0.5) + ay * (y - 0.5)
            return paint * light * shade
        }
    }

    // MARK: Drawing

    static func sq(_ v: Double) -> Double { v * v }

    struct RGB {
        var r, g, b: Double
        init(_ r: Double, _ g: Double, _ b: Double) { self.r = r; self.g = g; self.b = b }
        static func + (a: RGB, b: RGB) -> RGB { RGB(a.r + b.r, a.g + b.g, a.b + b.b) }
        static func * (a: RGB, k: Double) -> RGB { RGB(a.r * k, a.g * k, a.b * k) }
        static func * (a: RGB, b: RGB) -> RGB { RGB(a.r * b.r, a.g * b.g, a.b * b.b) }
        func mix(_ o: RGB, _ t: Double) -> RGB { self * (1 - t) + o * t }

        /// A black body's colour at `kelvin`, linear, brightest channel 1 (Tanner Helland's fit).
        static func kelvin(_ kelvin: Double) -> RGB {
            let t = kelvin / 100
            let r = t <= 66 ? 255 : 329.7 * pow(t - 60, -0.1332)
            let g = t <= 66 ? 99.47 * log(t) - 161.12 : 288.12 * pow(t - 60, -0.0755)
            let b = t >= 66 ? 255 : (t <= 19 ? 0 : 138.52 * log(t - 10) - 305.04)
            func lin(_ v: Double) -> Double { pow(min(255, max(1, v)) / 255, 2.2) }
            let c = RGB(lin(r), lin(g), lin(b))
            return c * (1 / max(c.r, c.g, c.b))
        }
    }

    struct Canvas {
        let width: Int, height: Int
        var pixels: [RGB]
        init(width: Int, height: Int) {
            self.width = width
            self.height = height
            pixels = Array(repeating: RGB(0, 0, 0), count: width * height)
        }
        subscript(x: Int, y: Int) -> RGB { pixels[y * width + x] }

        /// Every pixel from its centre in 0…1 coordinates.
        mutating func fill(_ f: (Double, Double) -> RGB) {
            for y in 0..<height {
                let fy = (Double(y) + 0.5) / Double(height)
                for x in 0..<width { pixels[y * width + x] = f((Double(x) + 0.5) / Double(width), fy) }
            }
        }

        /// Sensor noise, clipping and the sRGB curve, to 8-bit pixels.
        func finish(noise: Double, _ rng: inout SceneRandom) -> PhotoPixels {
            var out = [UInt8](repeating: 0, count: width * height * 3)
            func encode(_ v: Double, _ rng: inout SceneRandom) -> UInt8 {
                let noisy = min(1, max(0, v + rng.gaussian() * noise * (0.3 + max(0, min(1, v)).squareRoot())))
                let s = noisy <= 0.0031308 ? 12.92 * noisy : 1.055 * pow(noisy, 1 / 2.4) - 0.055
                return UInt8(min(255, max(0, s * 255 + 0.5)))
            }
            for (i, p) in pixels.enumerated() {
                out[i * 3] = encode(p.r, &rng)
                out[i * 3 + 1] = encode(p.g, &rng)
                out[i * 3 + 2] = encode(p.b, &rng)
            }
            return PhotoPixels(width: width, height: height, rgb: out)!
        }
    }

    /// A horizon line: height (0 = top) at x, tilted a little.
    struct Horizon {
        let base: Double, tilt: Double
        init(_ rng: inout SceneRandom, _ lo: Double, _ hi: Double) {
            base = rng.uniform(lo, hi)
            tilt = rng.uniform(-0.06, 0.06)
        }
        func at(_ x: Double) -> Double { base + tilt * (x - 0.5) }
    }

    /// Smooth value noise in 0…1 over the frame: a coarse random grid, bilinearly interpolated.
    struct Field {
        let cells: Int
        let values: [Double]
        init(_ rng: inout SceneRandom, cells: Int) {
            self.cells = cells
            values = (0..<((cells + 1) * (cells + 1))).map { _ in rng.uniform(0, 1) }
        }
        func at(_ x: Double, _ y: Double) -> Double {
            let fx = min(Double(cells) - 1e-9, max(0, x * Double(cells))), fy = min(Double(cells) - 1e-9, max(0, y * Double(cells)))
            let ix = Int(fx), iy = Int(fy), tx = fx - Double(ix), ty = fy - Double(iy)
            let n = cells + 1
            let a = values[iy * n + ix], b = values[iy * n + ix + 1], c = values[(iy + 1) * n + ix], d = values[(iy + 1) * n + ix + 1]
            return (a * (1 - tx) + b * tx) * (1 - ty) + (c * (1 - tx) + d * tx) * ty
        }
    }

    /// Textured ground: a base colour (grass, earth, asphalt, sand) shaded by value noise.
    struct Ground {
        let colour: RGB
        let texture: Field
        init(_ rng: inout SceneRandom) {
            let colours = [RGB(0.10, 0.16, 0.05), RGB(0.20, 0.14, 0.08), RGB(0.12, 0.12, 0.12), RGB(0.30, 0.25, 0.16)]
            colour = colours[Int(rng.next() % UInt64(colours.count))]
            texture = Field(&rng, cells: 24)
        }
        func at(_ x: Double, _ y: Double) -> RGB { colour * (0.55 + 0.9 * texture.at(x, y)) * 2.5 }
    }
}

/// SplitMix64: a small seeded generator (the scenes must be the same on every machine).
struct SceneRandom {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func uniform(_ lo: Double, _ hi: Double) -> Double {
        lo + (hi - lo) * Double(next() >> 11) / Double(1 << 53)
    }
    /// A standard normal deviate (Box–Muller).
    mutating func gaussian() -> Double {
        let u = max(1e-12, uniform(0, 1)), v = uniform(0, 1)
        return (-2 * log(u)).squareRoot() * cos(2 * Double.pi * v)
    }
}
