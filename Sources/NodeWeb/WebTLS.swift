import Foundation
import NIOSSL
import Sodium
internal import CNIOBoringSSL
import TandemNodeCore

/// The dashboard's TLS (Protocol/web.md "Off loopback"): the person's certificate and key (PEM),
/// or a self-signed one made on first use and kept in the data directory — an ECDSA P-256 key and
/// a certificate for the --web host, 127.0.0.1 and localhost, valid for 825 days. A browser cannot
/// check a self-signed certificate by itself: `tandem web` prints its SHA-256 fingerprint so the
/// person can compare it with what the browser shows.
struct WebTLSMaterial: Sendable {
    let configuration: TLSConfiguration
    /// SHA-256 of the leaf certificate's DER, "AB:CD:…".
    let fingerprint: String

    static let certificateFile = "certificate.pem"
    static let keyFile = "key.pem"

    /// Loads (or, for a self-signed setup without one yet, makes) the certificate and key.
    static func load(_ tls: WebConfiguration.TLS, host: String) throws -> WebTLSMaterial {
        let certPath: String, keyPath: String
        if let c = tls.certificatePath, let k = tls.keyPath {
            (certPath, keyPath) = (c, k)
        } else {
            certPath = (tls.selfSignedDirectory as NSString).appendingPathComponent(certificateFile)
            keyPath = (tls.selfSignedDirectory as NSString).appendingPathComponent(keyFile)
            if !FileManager.default.fileExists(atPath: certPath) || !FileManager.default.fileExists(atPath: keyPath) {
                try makeSelfSigned(directory: tls.selfSignedDirectory, certPath: certPath, keyPath: keyPath, host: host)
            }
        }
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certPath)
        } catch {
            throw NodeError.failed("cannot read the dashboard's TLS certificate \(certPath): \(error)")
        }
        do {
            key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        } catch {
            throw NodeError.failed("cannot read the dashboard's TLS key \(keyPath): \(error)")
        }
        guard let leaf = chain.first else { throw NodeError.failed("\(certPath) holds no certificate") }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) },
                                                                     privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        return WebTLSMaterial(configuration: configuration, fingerprint: fingerprint(try leaf.toDERBytes()))
    }

    static func fingerprint(_ der: [UInt8]) -> String {
        Hash.sha256(der).map { String(format: "%02X", $0) }.joined(separator: ":")
    }

    static func pem(_ label: String, _ der: [UInt8]) -> String {
        let b64 = Data(der).base64EncodedString()
        var lines: [String] = []
        var rest = Substring(b64)
        while !rest.isEmpty {
            lines.append(String(rest.prefix(64)))
            rest = rest.dropFirst(64)
        }
        return "-----BEGIN \(label)-----\n" + lines.joined(separator: "\n") + "\n-----END \(label)-----\n"
    }

    static func der(_ body: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>) -> Int32) throws -> [UInt8] {
        var out: UnsafeMutablePointer<UInt8>?
        let n = body(&out)
        guard n > 0, let out else { throw NodeError.failed("cannot encode the dashboard's certificate") }
        defer { OPENSSL_free(out) }
        return Array(UnsafeBufferPointer(start: out, count: Int(n)))
    }

    /// The DER of a subjectAltName value: each name an iPAddress when it is one, else a dNSName.
    static func subjectAltName(_ names: [String]) -> [UInt8] {
        func length(_ n: Int) -> [UInt8] { n < 128 ? [UInt8(n)] : (n < 256 ? [0x81, UInt8(n)] : [0x82, UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]) }
        func item(_ tag: UInt8, _ bytes: [UInt8]) -> [UInt8] { [tag] + length(bytes.count) + bytes }
        var content: [UInt8] = []
        for name in names {
            var v4 = in_addr()
            var v6 = in6_addr()
            if inet_pton(AF_INET, name, &v4) == 1 {
                content += item(0x87, withUnsafeBytes(of: &v4) { Array($0) })
            } else if inet_pton(AF_INET6, name, &v6) == 1 {
                content += item(0x87, withUnsafeBytes(of: &v6) { Array($0) })
            } else {
                content += item(0x82, Array(name.utf8.prefix(253)))  // a DNS name is at most 253 bytes
            }
        }
        return [0x30] + length(content.count) + content
    }

    /// A new P-256 key and a self-signed certificate for `host`, written 0600 into `directory` (0700).
    static func makeSelfSigned(directory: String, certPath: String, keyPath: String, host: String) throws {
        func fail(_ what: String) -> NodeError { .failed("cannot make the dashboard's self-signed certificate: \(what)") }
        guard let ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1), EC_KEY_generate_key(ec) == 1,
              let pkey = EVP_PKEY_new() else { throw fail("no key") }
        defer { EVP_PKEY_free(pkey) }
        guard EVP_PKEY_assign_EC_KEY(pkey, ec) == 1 else { throw fail("no key") }
        guard let x509 = X509_new() else { throw fail("no certificate") }
        defer { X509_free(x509) }
        guard let serial = ASN1_INTEGER_new() else { throw fail("no serial number") }
        defer { ASN1_INTEGER_free(serial) }
        _ = ASN1_INTEGER_set_uint64(serial, UInt64.random(in: 1...UInt64(Int64.max)))
        var ok = X509_set_version(x509, 2) == 1  // v3
        ok = ok && X509_set_serialNumber(x509, serial) == 1
        ok = ok && X509_gmtime_adj(X509_getm_notBefore(x509), -3600) != nil
        ok = ok && X509_gmtime_adj(X509_getm_notAfter(x509), 825 * 86_400) != nil
        ok = ok && X509_set_pubkey(x509, pkey) == 1
        let name = X509_get_subject_name(x509)
        let cn = Array("Tandem dashboard".utf8)
        ok = ok && X509_NAME_add_entry_by_txt(name, "CN", 0x1001 /* MBSTRING_ASC */, cn, cn.count, -1, 0) == 1
        ok = ok && X509_set_issuer_name(x509, name) == 1
        guard ok else { throw fail("cannot fill in the certificate") }
        // Where a browser or a client checks the name: the --web host, and loopback.
        let bare = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        var names = ["127.0.0.1", "::1", "localhost"]
        if !["0.0.0.0", "::"].contains(bare), !names.contains(bare) { names.append(bare) }
        let san = subjectAltName(names)
        if let value = ASN1_OCTET_STRING_new() {
            defer { ASN1_OCTET_STRING_free(value) }
            if ASN1_OCTET_STRING_set(value, san, Int32(san.count)) == 1,
               let ext = X509_EXTENSION_create_by_NID(nil, NID_subject_alt_name, 0, value) {
                _ = X509_add_ext(x509, ext, -1)
                X509_EXTENSION_free(ext)
            }
        }
        guard X509_sign(x509, pkey, EVP_sha256()) > 0 else { throw fail("cannot sign") }
        let certDER = try der { i2d_X509(x509, $0) }
        let keyDER = try der { i2d_PrivateKey(pkey, $0) }
        let fm = FileManager.default
        do {
            try fm.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            guard fm.createFile(atPath: keyPath, contents: Data(pem("EC PRIVATE KEY", keyDER).utf8), attributes: [.posixPermissions: 0o600]),
                  fm.createFile(atPath: certPath, contents: Data(pem("CERTIFICATE", certDER).utf8), attributes: [.posixPermissions: 0o644])
            else { throw fail("cannot write into \(directory)") }
        } catch let e as NodeError {
            throw e
        } catch {
            throw fail("cannot write into \(directory): \(error.localizedDescription)")
        }
    }
}
