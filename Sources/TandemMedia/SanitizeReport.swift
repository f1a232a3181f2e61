/// What `PhotoProcessor.sanitizedCopy` did, for the import to record and show.
public struct SanitizeReport: Equatable, Sendable {
    public let format: PhotoFormat
    /// The copy holds no GPS data (it was removed, or there was none). False only when a format's
    /// metadata could not be rewritten (none today).
    public let strippedGPS: Bool
    /// The copy holds no device or owner data (make, model, serial numbers, software, maker notes…).
    public let strippedDevice: Bool
    /// The image data is byte-identical to the original's (JPEG, PNG, and HEIC rewritten in place);
    /// false when the photo was re-encoded (a HEIC whose container the in-place rewrite refused).
    public let lossless: Bool
    /// Why the in-place rewrite refused the file, when it was re-encoded instead (for the log).
    public let reencodedBecause: String?

    public init(format: PhotoFormat, strippedGPS: Bool, strippedDevice: Bool, lossless: Bool, reencodedBecause: String? = nil) {
        self.format = format
        self.strippedGPS = strippedGPS
        self.strippedDevice = strippedDevice
        self.lossless = lossless
        self.reencodedBecause = reencodedBecause
    }
}
