import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// The control methods of files (Protocol/control.md): send a file, accept or cancel a transfer,
/// what is known of one (where a received file is), and the auto-accept limits.
extension MessageFiles {
    nonisolated package func registerControlMethods(on router: ControlRouter) {
        router.register("message.send_file") { [self] params in try await sendFile(params) }
        router.registerOnCore(in: store, publishing: events, "message.file_accept") { [self] params, step in
            let t = try transfer(params, step)
            guard let id = FileID(bytes: Array(t.fileId)) else { throw MessageService.usage("not a file id") }
            guard t.direction == .incoming else { throw NodeError.refused("that file is yours: it is offered, not accepted") }
            loadIfNeeded(step)
            try accept(id, step)
            return Self.describe(try step.fileTransfer(id.bytes) ?? t, bytesMoved: try step.fileBytesMoved(id.bytes))
        }
        router.registerOnCore(in: store, publishing: events, "message.file_cancel") { [self] params, step in
            let t = try transfer(params, step)
            guard let id = FileID(bytes: Array(t.fileId)) else { throw MessageService.usage("not a file id") }
            loadIfNeeded(step)
            try cancel(id, step)
            return Self.describe(try step.fileTransfer(id.bytes) ?? t, bytesMoved: try step.fileBytesMoved(id.bytes))
        }
        router.registerOnCore("message.file_info") { [self] params in
            let t = try transfer(params, store)
            return Self.describe(t, bytesMoved: try store.fileBytesMoved(Array(t.fileId)), vault: try store.fileVaultImport(Array(t.fileId)))
        }
        router.register("message.file_to_vault") { [self] params in try await fileToVault(params) }
        router.registerOnCore(in: store, publishing: events, "message.file_settings") { [self] params, step in
            try fileSettings(params, step)
        }
    }

    /// A transfer named by its message's id (or a prefix of at least 6 hex digits), or its file id (prefix).
    func transfer(_ params: JSONValue, _ r: StoreReading) throws -> StoredFileTransfer {
        guard let text = params["id"]?.stringValue?.lowercased(), !text.isEmpty else { throw MessageService.usage("missing parameter 'id'") }
        guard text.count >= 6, text.count <= 32, text.allSatisfy(\.isHexDigit) else {
            throw MessageService.usage("'\(ChatText.terminalSafe(text))' is not a message or file id (hex digits, at least 6)")
        }
        let byMessage = try r.messages(idPrefix: text)
        if byMessage.count == 1, let t = try r.fileTransfer(messageId: Array(byMessage[0].id)) { return t }
        let byFile = try r.fileTransfers(idPrefix: text)
        guard let first = byFile.first else { throw NodeError.nothingToActOn("no file for \(text) (see tandem message list)") }
        guard byFile.count == 1 else { throw MessageService.usage("'\(text)' matches several files; give more digits") }
        return first
    }

    /// A file to send: checked and hashed off the core (the file is read once, in chunks), then
    /// offered in one step with the message it is attached to.
    func sendFile(_ params: JSONValue) async throws -> JSONValue {
        guard let path = params["path"]?.stringValue, path.hasPrefix("/") else {
            throw MessageService.usage("missing parameter 'path' (an absolute path)")
        }
        let text: String?
        if let raw = params["text"]?.stringValue, !raw.isEmpty {
            do {
                text = try ChatText.normalised(raw)
            } catch {
                throw MessageService.usage("the text cannot be sent: \(error.description) (at most \(ChatLimits.textBytes) bytes of UTF-8)")
            }
        } else {
            text = nil
        }
        let target: OfferTarget = try await NodeCore.perform {
            guard let text = params["challenge"]?.stringValue else { return .friend(try self.messages.friendKey(params, "to", self.store)) }
            guard let id = parseHex(text.lowercased()), id.count == 16 else {
                throw MessageService.usage("'\(ChatText.terminalSafe(text))' is not a challenge id (32 hex digits)")
            }
            guard let ch = try self.store.challenge(id), ch.participant(self.me) != nil else { throw NodeError.nothingToActOn("no such challenge") }
            guard ch.participants.contains(where: { $0.key != self.me }) else {
                throw NodeError.nothingToActOn("nobody else takes part in that challenge")
            }
            return .thread(id)
        }
        let name = FileName.sanitised((path as NSString).lastPathComponent)
        let hashed: FileDisk.Hashed
        do {
            hashed = try await disk.hash(path: path)
        } catch let e as FileDisk.HashError {
            throw NodeError.refused("cannot send \(ChatText.terminalSafe(path)): \(e.description)")
        }
        return try await NodeCore.perform {
            defer { self.events.published() }
            return try self.store.step { step in try self.offer(target, path: path, name: name, hashed: hashed, text: text, step) }
        }
    }

    /// The node's or a friend's auto-accept limit (`auto_accept_bytes`; a friend's `null` falls back
    /// to the node's).
    func fileSettings(_ params: JSONValue, _ step: StoreStep) throws -> JSONValue {
        let friend = params["friend"]?.stringValue == nil ? nil : try messages.friendKey(params, "friend", step)
        if let value = params["auto_accept_bytes"] {
            let bytes: Int64?
            switch value {
            case .null: bytes = nil
            default:
                guard let v = value.intValue, v >= 0, UInt64(v) <= ChatLimits.maximumFileBytes else {
                    throw MessageService.usage("'auto_accept_bytes' is from 0 to 4 GiB")
                }
                bytes = v
            }
            if let friend {
                try step.setFileAutoAcceptBytes(peer: friend, bytes, nowMs: now())
            } else {
                guard let bytes else { throw MessageService.usage("the node's limit is a number") }
                try step.setSetting(Self.autoAcceptSetting, String(bytes))
            }
        }
        var out: [String: JSONValue] = ["auto_accept_bytes": .int(autoAcceptBytes(friend ?? [], step))]
        if let friend {
            out["friend"] = idText(friend)
            out["auto_accept_bytes"] = .int(autoAcceptBytes(friend, step))
        }
        return .object(out)
    }

    /// A transfer for `message list` and the file methods: name, size, state
    /// (offered/receiving/received/failed, or offered/sending/sent/failed), percent, bytes moved.
    nonisolated static func describe(_ t: StoredFileTransfer, bytesMoved: Int64? = nil, vault: FileVaultImport? = nil) -> JSONValue {
        let chunks = t.size > 0 ? ChunkTree.chunkCount(size: UInt64(t.size)) : 1
        let have = t.bitmap.reduce(0) { $0 + $1.nonzeroBitCount }
        let incoming = t.direction == .incoming
        let state: String
        switch t.state {
        case .offered: state = "offered"
        case .receiving, .verifying: state = incoming ? "receiving" : "sending"
        case .complete: state = incoming ? "received" : "sent"
        case .failed: state = "failed"
        }
        var out: [String: JSONValue] = [
            "file_id": .string(hexString(Array(t.fileId))), "name": .string(t.name), "size": .int(t.size),
            "direction": .string(incoming ? "in" : "out"), "state": .string(state),
            "percent": .int(Int64(t.state == .complete ? 100 : min(100, have * 100 / max(1, chunks)))),
            "file_hash": .string(hexString(Array(t.fileHash))),
            "message_id": t.messageId.map { .string(hexString(Array($0))) } ?? .null,
            "failure": t.failure.map { .string($0) } ?? .null,
        ]
        if let bytesMoved { out[incoming ? "bytes_received" : "bytes_sent"] = .int(bytesMoved) }
        if let item = vault?.itemId {
            out["vault_item"] = .string(item)  // in the vault; the downloaded copy is gone
        } else if incoming, t.state == .complete, let path = t.path {
            out["path"] = .string(path)
        }
        if vault != nil, vault?.itemId == nil { out["vault"] = t.state == .complete ? "not imported" : "when complete" }
        return .object(out)
    }
}

extension MessageService {
    /// The file attached to message `m`, if any (for `message list`).
    func fileField(_ m: StoredMessage, _ r: StoreReading) -> JSONValue {
        guard let t = health.read("read a file transfer", or: nil, { try r.fileTransfer(messageId: Array(m.id)) }) else { return .null }
        return fileField(t, r)
    }

    /// The `file` field for transfer `t`, already read.
    func fileField(_ t: StoredFileTransfer, _ r: StoreReading) -> JSONValue {
        MessageFiles.describe(t, bytesMoved: try? r.fileBytesMoved(Array(t.fileId)),  // read just above: nil only if the disk fails now
                                     vault: try? r.fileVaultImport(Array(t.fileId)))  // read just above: nil only if the disk fails now
    }
}
