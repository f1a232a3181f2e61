import Foundation
import Hummingbird
import NIOCore
import NIOPosix
import TandemMedia
import TandemNodeCore

/// Forms that carry a file (`multipart/form-data`): a key shown as a QR photo or a key file on the
/// Focus page, a daylight photo on the Bedtime page. Same session, CSRF and Origin rules as every
/// other post. The file is decoded here as the CLI decodes `--qr` (libvips and zbar, on a thread
/// pool, never on an event loop), and what reaches the node is the same control call the CLI
/// makes (`tag_b64`, or a photo path for `bedtime.daylight`).
extension WebDashboard {
    /// A phone photo is a few MiB; the vault's import limits apply to the image itself.
    static let maximumUploadBytes = 24 << 20

    func registerUploads(on r: Router<BasicRequestContext>) {
        r.post("/focus/key-upload") { [self] request, _ in try await upload(request, back: "/focus") { try await keyUpload($0) } }
        r.post("/bedtime/daylight") { [self] request, _ in try await upload(request, back: "/bedtime") { try await daylightUpload($0) } }
    }

    func upload(_ request: Request, back: String, _ body: (WebUploadForm) async throws -> String) async throws -> Response {
        let id = sessionID(request)
        // No session, no upload: a stranger's body is never buffered or parsed.
        guard sessions.session(id, nowMs: webNowMs()) != nil else {
            return WebPages.plain(.unauthorized, "Not signed in. Run `tandem web` for a login link.")
        }
        var request = request
        let bytes = try await request.collectBody(upTo: Self.maximumUploadBytes)
        guard let form = WebUploadForm.parse(Array(buffer: bytes), contentType: request.headers[.contentType]) else {
            return WebPages.plain(.badRequest, "This form must be sent as multipart/form-data.")
        }
        guard sessions.checkCSRF(id, form.field("csrf"), nowMs: webNowMs()) else {
            return WebPages.plain(.forbidden, "Refused: the form's CSRF token is missing or wrong. Reload the page and try again.")
        }
        let notice: String
        do {
            notice = try await body(form)
        } catch {
            notice = ControlError.from(error).message.capitalizedFirst
        }
        sessions.setFlash(id, notice)
        return Response(status: .seeOther, headers: [.location: back])
    }

    /// An uploaded file in a private temporary file for the length of `body`.
    func withTemporaryFile<T>(_ bytes: [UInt8], _ body: (String) async throws -> T) async throws -> T {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("tandem-web-\(UInt64.random(in: 0...UInt64.max))-\(getpid())").path
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes), attributes: [.posixPermissions: 0o600]) else {
            throw ControlError(code: "failed", message: "cannot keep the upload in \(FileManager.default.temporaryDirectory.path)", exitCode: 1)
        }
        defer { try? FileManager.default.removeItem(atPath: path) }  // a leftover temporary file is harmless; nothing to report
        return try await body(path)
    }

    /// The tag payload a QR photo or a key file carries.
    func keyPayload(_ form: WebUploadForm) async throws -> [UInt8] {
        if let photo = form.file("qr") {
            let codes: [[UInt8]]
            do {
                codes = try await withTemporaryFile(photo.body) { path in
                    try await NIOThreadPool.singleton.runIfActive { try QRDecoder.payloads(inImageAt: path) }
                }
            } catch let e as MediaError {
                throw ControlError.invalid("cannot read the QR photo: \(e)")
            }
            guard let first = codes.first else {
                throw ControlError.invalid("no QR code found in the photo (fill more of it with the code, in focus and lit evenly)")
            }
            return first
        }
        if let file = form.file("keyfile") {
            var data = file.body
            if data.last == 0x0A { data.removeLast() }
            if data.last == 0x0D { data.removeLast() }
            guard !data.isEmpty else { throw ControlError.invalid("the key file is empty") }
            guard data.count <= 4096 else { throw ControlError.invalid("the key file is longer than 4096 bytes: it is not a tag's payload") }
            return data
        }
        throw ControlError.invalid("choose a photo of the key's QR code or a key file")
    }

    func keyUpload(_ form: WebUploadForm) async throws -> String {
        let payload = try await keyPayload(form)
        let tag = JSONValue.string(Data(payload).base64EncodedString())
        switch form.field("action") ?? "unlock" {
        case "unlock":
            _ = try await router.call("lock.unlock", ["tag_b64": tag])
            return "Unlocked."
        case "temp_unlock":
            let r = try await router.call("lock.temp_unlock", ["tag_b64": tag])
            return (r["temporary"]?["until"]?.stringValue).map { "Temporary items open until \(WebViews.shortTime($0))." } ?? "Temporary items open."
        case "lock":
            var params: [String: JSONValue] = ["tag_b64": tag]
            if let mode = form.field("mode")?.trimmingCharacters(in: .whitespaces), !mode.isEmpty { params["mode"] = .string(mode) }
            _ = try await router.call("lock.lock", .object(params))
            return "Locked."
        default:
            throw ControlError.invalid("choose unlock, temporary unlock or lock")
        }
    }

    func daylightUpload(_ form: WebUploadForm) async throws -> String {
        guard let photo = form.file("photo") else { throw ControlError.invalid("choose a photo of the daylight sky") }
        _ = try await withTemporaryFile(photo.body) { path in try await router.call("bedtime.daylight", ["photo": .string(path)]) }
        return "Good morning: bedtime is over, the mode is unlocked."
    }
}
