/// The rules for names the vault stores (item file names, album names). They are checked when a name
/// comes in and again when the index is loaded, so a name from disk is as safe as one typed.
public enum VaultNames {
    /// The longest name, in UTF-8 bytes (the usual file-system limit for one path component).
    public static let maximumBytes = 255

    /// Throws `.invalidName` unless `name` is non-empty, at most 255 UTF-8 bytes and free of control
    /// characters (NUL included), which would corrupt terminal output and tab-separated listings, and
    /// (unless `stored`) of Unicode format characters (category Cf: bidi overrides and isolates, zero
    /// width spaces, ...), which can make a name read as another (`photo\u{202E}gpj.exe`). The zero
    /// width joiner (U+200D) is allowed: emoji sequences need it.
    ///
    /// `stored`: the name was already in the vault (loading the index, an item edited without
    /// renaming); format characters are let through so that a vault written before this rule opens.
    public static func validate(_ name: String, what: String = "name", stored: Bool = false) throws {
        let bytes = name.utf8.count
        guard bytes > 0 else { throw VaultError(.invalidName, "\(what) is empty") }
        guard bytes <= maximumBytes else {
            throw VaultError(.invalidName, "\(what) is \(bytes) bytes long (at most \(maximumBytes))")
        }
        for scalar in name.unicodeScalars where scalar.properties.generalCategory == .control {
            throw VaultError(.invalidName, "\(what) contains a control character (U+\(hex(scalar)))")
        }
        guard !stored else { return }
        for scalar in name.unicodeScalars where scalar.properties.generalCategory == .format && scalar.value != 0x200D {
            throw VaultError(.invalidName, "\(what) contains an invisible formatting character (U+\(hex(scalar))), "
                             + "which can make a name read as another")
        }
    }

    private static func hex(_ scalar: Unicode.Scalar) -> String {
        let digits = String(scalar.value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// An item name is also a file name on export: on top of `validate`, no "/" and not "." or "..",
    /// so exporting into a directory can never write outside it.
    public static func validateItemName(_ name: String, stored: Bool = false) throws {
        try validate(name, what: "item name", stored: stored)
        guard !name.contains("/"), name != ".", name != ".." else {
            throw VaultError(.invalidName, "item name must not contain '/' or be '.' or '..'")
        }
    }

    public static func validateAlbumName(_ name: String, stored: Bool = false) throws {
        try validate(name, what: "album name", stored: stored)
    }
}
