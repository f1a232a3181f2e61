import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import TandemNodeCore

/// The vault page's routes (Protocol/web.md "The vault page"). The PIN goes only to the control
/// method `vault.unlock`, so the PIN guard (its count and lockout) rules page attempts as it rules
/// the CLI's. Thumbnails, images and downloads are decrypted per request through `VaultMedia`,
/// which answers only while the vault is open; like every answer they carry `Cache-Control:
/// no-store` (WebGuard), so nothing decrypted stays in the browser's cache.
extension WebDashboard {
    /// An upload's body, at most (the files and the form's fields together).
    static let maximumVaultUploadBytes = 64 << 20
    /// A download (or an image shown whole) from the page, at most; larger items: `tandem vault export`.
    static let maximumDownloadBytes: Int64 = 256 << 20

    func addVaultRoutes(to r: Router<BasicRequestContext>) {
        r.get("/static/vault.js") { _, _ in WebPages.asset(WebVaultAssets.js, type: "text/javascript; charset=utf-8") }
        r.get("/vault/thumb/:id") { [self] request, context in
            try await media(request, context) { vault, id in
                let jpeg = try await vault.thumbnail(of: id)
                return Response(status: .ok, headers: [.contentType: "image/jpeg"], body: .init(byteBuffer: ByteBuffer(bytes: jpeg)))
            }
        }
        r.get("/vault/item/:id") { [self] request, context in
            try await media(request, context) { vault, id in
                let file = try await vault.content(of: id, maximumBytes: Self.maximumDownloadBytes)
                // Shown in the browser only when it is an image the browser decodes; anything else downloads.
                if let type = WebVaultPage.imageType(file.bytes) {
                    return Response(status: .ok, headers: [.contentType: type, .contentDisposition: "inline"],
                                    body: .init(byteBuffer: ByteBuffer(bytes: file.bytes)))
                }
                return Self.attachment(file)
            }
        }
        r.get("/vault/download/:id") { [self] request, context in
            try await media(request, context) { vault, id in Self.attachment(try await vault.content(of: id, maximumBytes: Self.maximumDownloadBytes)) }
        }
        r.post("/vault/unlock") { [self] request, _ in
            try await action(request) { form in
                do {
                    _ = try await router.call("vault.unlock", ["pin": .string(form["pin"] ?? "")])
                    return ("The vault is open.", "/vault")
                } catch {
                    return (ControlError.from(error).message.capitalizedFirst + ".", "/vault")
                }
            }
        }
        r.post("/vault/lock") { [self] request, _ in
            try await action(request) { _ in
                do {
                    _ = try await router.call("vault.lock")
                    return ("The vault is locked.", "/vault")
                } catch {
                    return (ControlError.from(error).message.capitalizedFirst + ".", "/vault")
                }
            }
        }
        r.post("/vault/backup/push") { [self] request, _ in
            try await action(request) { form in
                do {
                    let to = (form["to"] ?? "").trimmingCharacters(in: .whitespaces)
                    guard !to.isEmpty else { throw ControlError.invalid("choose the friend to push to") }
                    // Started in the background: the page follows it through the event stream.
                    try await router.stream("backup.push", ["to": .string(to), "background": true]) { _ in }
                    return ("Backup push started.", "/vault")
                } catch {
                    return (ControlError.from(error).message.capitalizedFirst + ".", "/vault")
                }
            }
        }
        r.post("/vault/upload") { [self] request, _ in try await upload(request) }
    }

    /// A request for an item's bytes: a session, the vault's bytes interface, and an open vault.
    func media(_ request: Request, _ context: BasicRequestContext,
               _ body: (any VaultMedia, String) async throws -> Response) async throws -> Response {
        guard sessions.session(sessionID(request), nowMs: webNowMs()) != nil else {
            return WebPages.plain(.unauthorized, "Not signed in.")
        }
        guard let vault else { return WebPages.plain(.notFound, "This node has no vault.") }
        let id = try context.parameters.require("id")
        guard WebVaultPage.isItemRef(id) else { return WebPages.plain(.badRequest, "Not an item.") }
        do {
            return try await body(vault, id)
        } catch {
            let e = ControlError.from(error)
            switch e.code {
            case "vault_locked": return WebPages.plain(.forbidden, "Refused: the vault is locked.")
            case "no_vault", "not_found": return WebPages.plain(.notFound, e.message.capitalizedFirst + ".")
            default: return WebPages.plain(.badRequest, e.message.capitalizedFirst + ".")
            }
        }
    }

    static func attachment(_ file: VaultMediaFile) -> Response {
        Response(status: .ok,
                 headers: [.contentType: "application/octet-stream", .contentDisposition: WebVaultPage.contentDisposition(file.name)],
                 body: .init(byteBuffer: ByteBuffer(bytes: file.bytes)))
    }

    /// `/vault/upload`: a multipart form (CSRF token, album, one or more files), bounded; each
    /// file goes through the vault's import.
    func upload(_ request: Request) async throws -> Response {
        let id = sessionID(request)
        guard sessions.session(id, nowMs: webNowMs()) != nil else {
            return WebPages.plain(.unauthorized, "Not signed in. Run `tandem web` for a login link.")
        }
        guard let boundary = WebMultipart.boundary(request.headers[.contentType]) else {
            return WebPages.plain(.badRequest, "An upload is a multipart form.")
        }
        var request = request
        let bytes: ByteBuffer
        do {
            bytes = try await request.collectBody(upTo: Self.maximumVaultUploadBytes)
        } catch where error is NIOTooManyBytesError || (error as? HTTPError)?.status == .contentTooLarge {
            sessions.setFlash(id, "Refused: an upload from the page is at most \(Self.maximumVaultUploadBytes >> 20) MiB (use tandem vault import for more).")
            return Response(status: .seeOther, headers: [.location: "/vault"])
        }
        let parts: [WebMultipart.Part]
        do {
            parts = try WebMultipart.parse(Array(buffer: bytes), boundary: boundary)
        } catch {
            return WebPages.plain(.badRequest, "Refused: \(error).")
        }
        let csrf = parts.first { $0.name == "csrf" && $0.filename == nil }.map { String(decoding: $0.body, as: UTF8.self) }
        guard sessions.checkCSRF(id, csrf, nowMs: webNowMs()) else {
            return WebPages.plain(.forbidden, "Refused: the form's CSRF token is missing or wrong. Reload the page and try again.")
        }
        let albumText = parts.first { $0.name == "album" && $0.filename == nil }
            .map { String(decoding: $0.body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        let files = parts.filter { $0.name == "file" && !($0.filename ?? "").isEmpty }
        var notice: String
        if let vault, !files.isEmpty {
            var count = 0
            var problems: [String] = []
            for f in files {
                do {
                    let answer = try await vault.importUpload(name: f.filename ?? "upload", bytes: f.body, album: albumText.isEmpty ? nil : albumText)
                    count += answer["items"]?.arrayValue?.count ?? 0
                } catch {
                    problems.append("\(f.filename ?? "upload"): \(ControlError.from(error).message)")
                }
            }
            notice = "Added \(count) \(count == 1 ? "item" : "items") to the vault."
            if !problems.isEmpty { notice += " Not added: " + problems.joined(separator: "; ") + "." }
        } else {
            notice = vault == nil ? "This node has no vault." : "Choose a file to add."
        }
        sessions.setFlash(id, notice)
        return Response(status: .seeOther, headers: [.location: albumText.isEmpty ? "/vault" : "/vault?album=\(WebVaultPage.queryEscape(albumText))"])
    }
}

/// The vault page's view: the control answers (`vault.status`, `vault.list`, `vault.album`,
/// `backup.status`, `friend.list`) turned into what its template shows.
enum WebVaultPage {
    /// Items shown in the grid, at most (newest first).
    static let gridLimit = 300

    static func view(load: (String, JSONValue) async -> JSONValue, query: [String: String]) async -> [String: Any] {
        let status = await load("vault.status", [:])
        let initialized = status["initialized"]?.boolValue ?? false
        let open = initialized && status["locked"]?.boolValue == false
        let failures = status["failed_attempts"]?.intValue ?? 0
        let retryMs = status["retry_in_ms"]?.intValue
        var view: [String: Any] = [
            "initialized": initialized, "locked": initialized && !open, "open": open,
            "failures": failures, "hasFailures": failures > 0, "failuresText": "\(failures) wrong \(failures == 1 ? "try" : "tries") in a row",
            "lockedOut": retryMs != nil, "retryMs": retryMs ?? 0, "retryText": spoken(ms: retryMs ?? 0),
            "keys": ["1", "2", "3", "4", "5", "6", "7", "8", "9"].map { ["key": $0] },
        ]
        if open {
            let album = query["album"].flatMap { $0.isEmpty ? nil : $0 }
            let list = await load("vault.list", album.map { ["album": .string($0)] } ?? [:])
            let albums = await load("vault.album", ["action": "list"])
            let all = list["items"]?.arrayValue ?? []
            let items = all.prefix(gridLimit).map { item -> [String: Any] in
                let id = item["id"]?.stringValue ?? ""
                let name = item["name"]?.stringValue ?? ""
                return ["id": id, "name": name, "thumb": item["thumbnail"]?.boolValue ?? false,
                        "type": item["type"]?.stringValue ?? "", "size": size(item["size"]?.intValue ?? 0),
                        "favorite": item["favorite"]?.boolValue ?? false]
            }
            let albumList = (albums["albums"]?.arrayValue ?? []).map { a -> [String: Any] in
                let name = a["name"]?.stringValue ?? ""
                return ["name": name, "items": a["items"]?.intValue ?? 0, "href": "/vault?album=\(queryEscape(name))", "current": name == album]
            }
            view["items"] = items
            view["hasItems"] = !items.isEmpty
            view["itemCount"] = "\(all.count) \(all.count == 1 ? "item" : "items")"
            view["cut"] = all.count > gridLimit
            view["albums"] = albumList
            view["hasAlbums"] = !albumList.isEmpty
            view["album"] = album ?? ""
            view["inAlbum"] = album != nil
            view["allCurrent"] = album == nil
            let total = status["items"]?.intValue ?? 0
            view["totalText"] = "\(total) \(total == 1 ? "item" : "items"), \(size(status["bytes"]?.intValue ?? 0))"
            let autoLock = status["auto_lock_ms"]?.intValue ?? 0
            view["autoLock"] = autoLock > 0 ? "It locks itself after \(spoken(ms: autoLock)) unused." : ""
        }
        let backups = await load("backup.status", [:])
        let friends = await load("friend.list", [:])
        var names: [String: String] = [:]
        for f in friends["friends"]?.arrayValue ?? [] {
            if let id = f["id"]?.stringValue, let name = f["name"]?.stringValue, !name.isEmpty { names[id] = name }
        }
        let holders = (backups["holders"]?.arrayValue ?? []).map { h -> [String: Any] in
            let id = h["id"]?.stringValue ?? ""
            let pushing = h["pushing"]?.objectValue
            let done = pushing?["done"]?.intValue ?? 0
            let total = pushing?["total"]?.intValue ?? 0
            let last = h["copy_at_ms"]?.intValue
            let lastPush = h["last_push"]
            return [
                "id": id, "name": names[id] ?? String(id.prefix(12)) + "…",
                "quota": size(h["quota_bytes"]?.intValue ?? 0),
                "lastPush": last.map { "last push \(localTime(ms: $0)), \(size(lastPush?["total_bytes"]?.intValue ?? 0))" } ?? "never pushed",
                "pushed": last != nil,
                "pushing": pushing != nil, "done": done, "total": max(total, 1),
                "progressText": total > 0 ? "\(size(done)) of \(size(total))" : "starting…",
                "pending": h["pending"]?.boolValue ?? false && pushing == nil,
            ]
        }
        view["holders"] = holders
        view["hasHolders"] = !holders.isEmpty
        return view
    }

    /// An item reference as a URL carries it: an id or id prefix (letters, digits, '-', '_').
    static func isItemRef(_ s: String) -> Bool {
        !s.isEmpty && s.count <= 128 && s.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" }
            && s.allSatisfy(\.isASCII)
    }

    /// The image type a browser shows inline, from the first bytes (never from the name).
    static func imageType(_ b: [UInt8]) -> String? {
        if b.starts(with: [0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if b.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if b.starts(with: Array("GIF8".utf8)) { return "image/gif" }
        if b.count >= 12, b.starts(with: Array("RIFF".utf8)), Array(b[8..<12]) == Array("WEBP".utf8) { return "image/webp" }
        return nil
    }

    /// `attachment; filename="…"; filename*=UTF-8''…` with the name made safe for a header.
    static func contentDisposition(_ name: String) -> String {
        let plain = String(name.unicodeScalars.map { ($0.isASCII && $0.value >= 0x20 && $0 != "\"" && $0 != "\\" && $0.value != 0x7F) ? Character($0) : "_" })
        let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: ".-_~"))) ?? "download"
        return "attachment; filename=\"\(plain.isEmpty ? "download" : plain)\"; filename*=UTF-8''\(encoded)"
    }

    static func queryEscape(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    /// "today 07:12", "2026-11-28 23:42": local time.
    static func localTime(ms: Int64, now: Date = Date()) -> String {
        let date = Date(timeIntervalSince1970: Double(ms) / 1000)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = .current
        if calendar.isDate(date, inSameDayAs: now) {
            f.dateFormat = "HH:mm"
            return "today " + f.string(from: date)
        }
        f.dateFormat = "yyyy-MM-dd HH:mm"
        return f.string(from: date)
    }

    /// "812 B", "1.4 MB", "2.0 GB" (decimal units).
    /// As the CLI shows sizes: binary units for a whole number of KiB (a quota given as 1GiB reads
    /// "1 GiB"), decimal ones otherwise.
    static func size(_ bytes: Int64) -> String {
        let b = max(0, bytes)
        let binary = b >= 1024 && b % 1024 == 0
        let step: Double = binary ? 1024 : 1000
        if Double(b) < step { return "\(b) B" }
        let units = binary ? ["KiB", "MiB", "GiB", "TiB"] : ["kB", "MB", "GB", "TB"]
        var v = Double(b) / step
        var i = 0
        while v >= step, i < units.count - 1 { v /= step; i += 1 }
        if v == v.rounded() { return String(format: "%.0f %@", v, units[i]) }
        return String(format: v < 10 ? "%.1f %@" : "%.0f %@", v, units[i])
    }

    /// "30 s", "2 min", "1 h 5 min" (rounded up).
    static func spoken(ms: Int64) -> String {
        let s = (max(0, ms) + 999) / 1000
        if s < 60 { return "\(s) s" }
        let m = (s + 59) / 60
        if m < 60 { return "\(m) min" }
        return m % 60 == 0 ? "\(m / 60) h" : "\(m / 60) h \(m % 60) min"
    }
}
