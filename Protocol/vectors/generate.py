#!/usr/bin/env python3
"""Generates the Tandem protocol test vectors (Protocol/vectors/*.json).

Independent of the Swift implementation: it uses PyNaCl (libsodium primitives only) plus the
Python standard library (hashlib, hmac), and follows Protocol/README.md. Bech32m is written
here from BIP-350's definition. Everything is derived from fixed labels, so two runs write the
same bytes; `--check` fails when the files on disk differ from what would be written.

    python3 Protocol/vectors/generate.py          # (re)write the vectors
    python3 Protocol/vectors/generate.py --check  # verify the committed vectors
"""

import hashlib
import hmac
import json
import os
import struct
import sys

import nacl.bindings as sodium
import nacl.pwhash
import nacl.signing

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------------------------
# Fixed inputs


def label_bytes(label, n=32):
    """Deterministic test bytes: the first n bytes of SHA-256 of a label."""
    return hashlib.sha256(b"tandem-vectors-v1/" + label.encode()).digest()[:n]


NETWORK_KEY_LABEL = b"tandem/network-key/v1"
NETWORK_KEY = hashlib.blake2b(NETWORK_KEY_LABEL, digest_size=32).digest()
# The Secure Scuttlebutt main network key, to show what a handshake from another network looks like.
SSB_NETWORK_KEY = bytes.fromhex("d4a1cb88a66f02f8db635ce26441cc5dac1b08420ceaac230839b755845a9ffb")

NOW_MS = 1767225600000  # 2026-01-01T00:00:00Z, the receiver's clock in frames.json
MAX_SKEW_MS = 10 * 60 * 1000
REPLAY_WINDOW_MS = 24 * 60 * 60 * 1000
MAX_ENVELOPE = 1 << 20

h = bytes.hex


def unhex(s):
    return bytes.fromhex(s)


# ---------------------------------------------------------------------------------------------
# Bech32m (BIP-350), written from the BIP's definition.

CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
BECH32_CONST = 1
BECH32M_CONST = 0x2BC830A3
GEN = [0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3]
HRP = "tdm"
SEPARATORS = [" ", "-", "_", ".", ":", "\t"]
ID_LENGTH = 62


def polymod(values):
    chk = 1
    for v in values:
        top = chk >> 25
        chk = ((chk & 0x1FFFFFF) << 5) ^ v
        for i in range(5):
            if (top >> i) & 1:
                chk ^= GEN[i]
    return chk


def hrp_expand(hrp):
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def create_checksum(hrp, data, const):
    pm = polymod(hrp_expand(hrp) + data + [0] * 6) ^ const
    return [(pm >> (5 * (5 - i))) & 31 for i in range(6)]


def convert_bits(data, frombits, tobits, pad):
    acc, bits, out = 0, 0, []
    maxv = (1 << tobits) - 1
    for v in data:
        acc = (acc << frombits) | v
        bits += frombits
        while bits >= tobits:
            bits -= tobits
            out.append((acc >> bits) & maxv)
        acc &= (1 << bits) - 1
    if pad:
        if bits:
            out.append((acc << (tobits - bits)) & maxv)
    elif bits >= frombits or acc:
        return None
    return out


def bech32_encode_values(hrp, values, const=BECH32M_CONST):
    return hrp + "1" + "".join(CHARSET[v] for v in values + create_checksum(hrp, values, const))


def text_id(public_key, hrp=HRP, const=BECH32M_CONST):
    return bech32_encode_values(hrp, convert_bits(public_key, 8, 5, True), const)


def display_id(canonical):
    body = canonical[4:]
    return "tdm1-" + "-".join(body[i:i + 5] for i in range(0, len(body), 5))


def parse_id(text):
    """Returns (key, None) or (None, reason). Mirrors Protocol/README.md, 'Text ID'."""
    chars = []
    for c in text:
        if c in SEPARATORS:
            continue
        if ord(c) > 127:
            return None, "non-ascii"
        chars.append(c.lower())
    s = "".join(chars)
    if not s.startswith(HRP + "1"):
        return None, "prefix"
    if len(s) != ID_LENGTH:
        return None, "length"
    values = []
    for c in s[4:]:
        if c not in CHARSET:
            return None, "character"
        values.append(CHARSET.index(c))
    if polymod(hrp_expand(HRP) + values) != BECH32M_CONST:
        return None, "checksum"
    key = convert_bits(values[:-6], 5, 8, False)
    if key is None or len(key) != 32:
        return None, "padding"
    return bytes(key), None


# ---------------------------------------------------------------------------------------------
# Primitives

def sha256(*parts):
    return hashlib.sha256(b"".join(parts)).digest()


def auth(key, msg):
    """HMAC-SHA-512-256 as libsodium's crypto_auth: HMAC-SHA-512 truncated to 32 bytes."""
    return hmac.new(key, msg, hashlib.sha512).digest()[:32]


def secretbox(msg, nonce, key):
    """XSalsa20-Poly1305, combined form: 16-byte MAC then ciphertext."""
    out = sodium.crypto_secretbox_easy(msg, nonce, key)
    assert len(out) == len(msg) + 16
    return out


class Identity:
    def __init__(self, name, seed):
        self.name = name
        self.seed = seed
        self.signing = nacl.signing.SigningKey(seed)
        self.pk = bytes(self.signing.verify_key)
        self.sk64 = seed + self.pk
        self.curve_pk = sodium.crypto_sign_ed25519_pk_to_curve25519(self.pk)
        self.curve_sk = sodium.crypto_sign_ed25519_sk_to_curve25519(self.sk64)
        # Cross-check the conversion against its definition: clamped SHA-512(seed)[0:32].
        d = bytearray(hashlib.sha512(seed).digest()[:32])
        d[0] &= 248
        d[31] &= 127
        d[31] |= 64
        assert bytes(d) == self.curve_sk
        assert sodium.crypto_scalarmult_base(self.curve_sk) == self.curve_pk

    def sign(self, msg):
        return self.signing.sign(msg).signature


IDENTITIES = {name: Identity(name, label_bytes("seed/" + name)) for name in ["alice", "bob", "carol", "dave"]}
IDENTITIES["zero-seed"] = Identity("zero-seed", bytes(32))
ALICE, BOB, CAROL = IDENTITIES["alice"], IDENTITIES["bob"], IDENTITIES["carol"]


# ---------------------------------------------------------------------------------------------
# keys.json

def gen_keys():
    keys = []
    for ident in IDENTITIES.values():
        canonical = text_id(ident.pk)
        assert parse_id(canonical) == (ident.pk, None)
        keys.append({
            "name": ident.name,
            "seed": h(ident.seed),
            "ed25519_public_key": h(ident.pk),
            "ed25519_secret_key": h(ident.sk64),
            "x25519_public_key": h(ident.curve_pk),
            "x25519_secret_key": h(ident.curve_sk),
            "id": canonical,
            "id_display": display_id(canonical),
        })
    return {
        "description": "Ed25519 seeds, the key pairs libsodium derives from them (crypto_sign_seed_keypair), "
                       "their X25519 forms (crypto_sign_ed25519_pk_to_curve25519 / _sk_to_curve25519) and text IDs. "
                       "Seeds are SHA-256(\"tandem-vectors-v1/seed/\" + name), except zero-seed (32 zero bytes).",
        "network_key": {
            "derivation": "BLAKE2b-256 of the ASCII bytes, unkeyed",
            "input": NETWORK_KEY_LABEL.decode(),
            "key": h(NETWORK_KEY),
        },
        "keys": keys,
    }


# ---------------------------------------------------------------------------------------------
# ids.json

def gen_ids():
    valid = []
    raw_keys = [
        ("alice", ALICE.pk),
        ("bob", BOB.pk),
        ("all-zero key", bytes(32)),
        ("all-ones key", b"\xff" * 32),
        ("counting key", bytes(range(32))),
    ]
    for name, key in raw_keys:
        canonical = text_id(key)
        disp = display_id(canonical)
        assert len(canonical) == ID_LENGTH and len(disp) == 74
        variants = [
            canonical.upper(),
            disp,
            disp.upper(),
            canonical[:10].upper() + canonical[10:],
            " ".join(canonical[i:i + 4] for i in range(0, len(canonical), 4)),
            "_".join(canonical[i:i + 8] for i in range(0, len(canonical), 8)),
            canonical[:4] + ":" + canonical[4:33] + "." + canonical[33:],
            "\t" + canonical + " ",
            "tdm1--" + canonical[4:],
        ]
        for v in variants:
            assert parse_id(v) == (key, None), v
        valid.append({
            "name": name,
            "public_key": h(key),
            "id": canonical,
            "id_display": disp,
            "equivalent_inputs": variants,
        })

    good = text_id(ALICE.pk)
    invalid = []

    def bad(name, text, reason):
        key, why = parse_id(text)
        assert key is None and why == reason, (name, text, why)
        invalid.append({"name": name, "input": text, "reason": reason})

    # Every single-character substitution is caught by the checksum; list a few spread over the ID.
    for pos in [4, 5, 20, 33, 47, 55, 61]:
        c = good[pos]
        repl = CHARSET[(CHARSET.index(c) + 1) % 32]
        bad(f"substitution at {pos}", good[:pos] + repl + good[pos + 1:], "checksum")
    # Adjacent swaps (of two different characters).
    swaps = 0
    for pos in range(4, ID_LENGTH - 1):
        if good[pos] != good[pos + 1] and pos % 9 == 4:
            t = good[:pos] + good[pos + 1] + good[pos] + good[pos + 2:]
            bad(f"adjacent swap at {pos}", t, "checksum")
            swaps += 1
    assert swaps >= 4
    # The same key with the checksum of BIP-173 bech32 instead of bech32m.
    bad("bech32 checksum instead of bech32m", text_id(ALICE.pk, const=BECH32_CONST), "checksum")
    # Other human-readable parts, with checksums valid for them.
    bad("hrp tdx", text_id(ALICE.pk, hrp="tdx"), "prefix")
    bad("hrp bc (a Bitcoin-style prefix)", text_id(ALICE.pk, hrp="bc"), "prefix")
    bad("hrp tdm without the 1 separator", "tdm" + good[4:], "prefix")
    # Lengths.
    bad("one character missing", good[:30] + good[31:], "length")
    bad("one character extra", good[:30] + "q" + good[30:], "length")
    bad("empty", "", "prefix")
    bad("prefix only", "tdm1", "length")
    # Characters outside the alphabet (b, i, o, 1 are not in it) and outside ASCII.
    for ch in ["b", "i", "o", "1"]:
        bad(f"character '{ch}'", good[:20] + ch + good[21:], "character")
    bad("non-ASCII character", good[:20] + "\u00e9" + good[21:], "non-ascii")
    bad("separator not in the list (/)", good[:20] + "/" + good[20:], "length")
    # 52 data characters carry 260 bits: the last 4 must be zero. Same key bits, padding 0001, valid checksum.
    values = convert_bits(ALICE.pk, 8, 5, True)
    assert values[-1] & 0x0F == 0
    values[-1] |= 1
    bad("non-zero padding bits", bech32_encode_values(HRP, values), "padding")
    # A valid bech32m string of the right hrp that holds 31 bytes is also too short.
    bad("31-byte key", text_id(ALICE.pk[:31]), "length")

    return {
        "description": "Text IDs. Each valid entry's id and every equivalent_input parse to public_key; "
                       "id is what encoding public_key must produce, id_display its display form. "
                       "Each invalid input must be refused; reason is informative: prefix (does not start with "
                       "tdm1), length (not 62 characters without separators), character (not in the bech32 "
                       "alphabet), non-ascii, checksum (bech32m checksum fails), padding (checksum fine but the "
                       "data is not exactly a 32-byte key).",
        "hrp": HRP,
        "separators": SEPARATORS,
        "valid": valid,
        "invalid": invalid,
    }


# ---------------------------------------------------------------------------------------------
# handshake.json

def shs_transcript(client, server, eph_a_sk, eph_b_sk, key=NETWORK_KEY, expected_server=None):
    """The Secret Handshake between `client` and `server`. `expected_server` is the key the
    client believes it is talking to (default: the real server)."""
    B_pk = (expected_server or server).pk
    B_curve = (expected_server or server).curve_pk
    a_pk = sodium.crypto_scalarmult_base(eph_a_sk)
    b_pk = sodium.crypto_scalarmult_base(eph_b_sk)
    t = {}
    # 1: client hello
    hmac_a = auth(key, a_pk)
    t["msg1"] = hmac_a + a_pk
    # 2: server hello
    hmac_b = auth(key, b_pk)
    t["msg2"] = hmac_b + b_pk
    # 3: client authenticate
    ab = sodium.crypto_scalarmult(eph_a_sk, b_pk)
    assert ab == sodium.crypto_scalarmult(eph_b_sk, a_pk)
    aB = sodium.crypto_scalarmult(eph_a_sk, B_curve)
    sig_a = client.sign(key + B_pk + sha256(ab))
    key3 = sha256(key, ab, aB)
    t["msg3"] = secretbox(sig_a + client.pk, bytes(24), key3)
    # 4: server accept
    Ab = sodium.crypto_scalarmult(client.curve_sk, b_pk)
    assert Ab == sodium.crypto_scalarmult(eph_b_sk, client.curve_pk)
    key4 = sha256(key, ab, aB, Ab)
    sig_b = server.sign(key + sig_a + client.pk + sha256(ab))
    t["msg4"] = secretbox(sig_b, bytes(24), key4)
    t.update(a_pk=a_pk, b_pk=b_pk, hmac_a=hmac_a, hmac_b=hmac_b, ab=ab, aB=aB, Ab=Ab,
             sig_a=sig_a, sig_b=sig_b, key3=key3, key4=key4)
    return t


def session_keys(key4, local_pk, remote_pk, local_hmac, remote_hmac):
    base = sha256(key4)
    return {
        "encrypt_key": h(sha256(base, remote_pk)),
        "encrypt_nonce": h(remote_hmac[:24]),
        "decrypt_key": h(sha256(base, local_pk)),
        "decrypt_nonce": h(local_hmac[:24]),
    }


EPH_CLIENT = label_bytes("ephemeral/client")
EPH_SERVER = label_bytes("ephemeral/server")


def gen_handshake():
    t = shs_transcript(ALICE, BOB, EPH_CLIENT, EPH_SERVER)
    assert [len(t[m]) for m in ["msg1", "msg2", "msg3", "msg4"]] == [64, 64, 112, 80]
    # The server can open message 3 with the key it computes itself.
    aB_server = sodium.crypto_scalarmult(BOB.curve_sk, t["a_pk"])
    assert aB_server == t["aB"]
    assert sodium.crypto_secretbox_open_easy(t["msg3"], bytes(24), t["key3"]) == t["sig_a"] + ALICE.pk
    client_keys = session_keys(t["key4"], ALICE.pk, BOB.pk, t["hmac_a"], t["hmac_b"])
    server_keys = session_keys(t["key4"], BOB.pk, ALICE.pk, t["hmac_b"], t["hmac_a"])
    assert client_keys["encrypt_key"] == server_keys["decrypt_key"]
    assert client_keys["encrypt_nonce"] == server_keys["decrypt_nonce"]
    assert client_keys["decrypt_key"] == server_keys["encrypt_key"]

    # Failures the server (or client) must detect; each closes the connection without reply.
    failures = []
    other = shs_transcript(ALICE, BOB, EPH_CLIENT, EPH_SERVER, key=SSB_NETWORK_KEY)
    failures.append({
        "name": "client hello from another network (Scuttlebutt main network key)",
        "side": "server", "feed": [h(other["msg1"])], "fails_at": 1,
    })
    failures.append({
        "name": "server hello from another network (Scuttlebutt main network key)",
        "side": "client", "feed": [h(other["msg2"])], "fails_at": 1,
    })
    zero = bytes(32)
    failures.append({
        "name": "client hello with a low-order ephemeral key (all zeros) and a valid HMAC",
        "side": "server", "feed": [h(auth(NETWORK_KEY, zero) + zero)], "fails_at": 1,
    })
    wrong = shs_transcript(ALICE, BOB, EPH_CLIENT, EPH_SERVER, expected_server=CAROL)
    failures.append({
        "name": "client expected carol's key but reached bob: bob cannot open message 3",
        "side": "server", "feed": [h(wrong["msg1"]), h(wrong["msg3"])], "fails_at": 2,
    })
    tampered3 = bytearray(t["msg3"])
    tampered3[50] ^= 0x01
    failures.append({
        "name": "message 3 with one bit flipped",
        "side": "server", "feed": [h(t["msg1"]), h(bytes(tampered3))], "fails_at": 2,
    })
    impostor = shs_transcript(ALICE, CAROL, EPH_CLIENT, EPH_SERVER, expected_server=BOB)
    failures.append({
        "name": "carol answers in bob's place: alice (expecting bob) rejects message 4",
        "side": "client", "feed": [h(t["msg2"]), h(impostor["msg4"])], "fails_at": 2,
        "note": "message 4 is boxed with the key alice expects (as if carol knew it) but signed by carol; "
                "alice must refuse it because the signature is not bob's",
    })

    return {
        "description": "A complete Secret Handshake with the Tandem network key, alice (keys.json) as client "
                       "and bob as server. Ephemeral X25519 secret keys are fixed: SHA-256(\"tandem-vectors-v1/"
                       "ephemeral/client\") and .../server. Byte strings are hex. 'failures' are inputs a side "
                       "must refuse: 'feed' are the peer's messages in order (for a client, the first is the "
                       "answer to its own message 1 built from the fixed client ephemeral key; for a server, "
                       "its replies are ignored); 'fails_at' is the 1-based index of the fed message that must "
                       "be rejected (the side's own fixed keys are those of the main transcript).",
        "network_key": h(NETWORK_KEY),
        "client": {
            "name": "alice",
            "seed": h(ALICE.seed),
            "public_key": h(ALICE.pk),
            "ephemeral_secret_key": h(EPH_CLIENT),
            "ephemeral_public_key": h(t["a_pk"]),
        },
        "server": {
            "name": "bob",
            "seed": h(BOB.seed),
            "public_key": h(BOB.pk),
            "ephemeral_secret_key": h(EPH_SERVER),
            "ephemeral_public_key": h(t["b_pk"]),
        },
        "intermediate": {
            "client_hmac": h(t["hmac_a"]),
            "server_hmac": h(t["hmac_b"]),
            "shared_ab": h(t["ab"]),
            "shared_aB": h(t["aB"]),
            "shared_Ab": h(t["Ab"]),
            "sha256_ab": h(sha256(t["ab"])),
            "client_signature": h(t["sig_a"]),
            "message3_box_key": h(t["key3"]),
            "server_signature": h(t["sig_b"]),
            "message4_box_key": h(t["key4"]),
            "box_stream_base": h(sha256(t["key4"])),
        },
        "messages": [
            {"step": 1, "from": "client", "name": "client hello", "hex": h(t["msg1"])},
            {"step": 2, "from": "server", "name": "server hello", "hex": h(t["msg2"])},
            {"step": 3, "from": "client", "name": "client authenticate", "hex": h(t["msg3"])},
            {"step": 4, "from": "server", "name": "server accept", "hex": h(t["msg4"])},
        ],
        "client_session": client_keys,
        "server_session": server_keys,
        "failures": failures,
    }, client_keys


# ---------------------------------------------------------------------------------------------
# boxstream.json

def nonce_add(nonce, n):
    v = (int.from_bytes(nonce, "big") + n) % (1 << 192)
    return v.to_bytes(24, "big")


class BoxWriter:
    def __init__(self, key, nonce):
        self.key, self.nonce = key, nonce

    def box(self, body):
        assert len(body) <= 4096
        sealed = secretbox(body, nonce_add(self.nonce, 1), self.key)
        mac, ct = sealed[:16], sealed[16:]
        header = secretbox(struct.pack(">H", len(body)) + mac, self.nonce, self.key)
        assert len(header) == 34
        info = {"header_nonce": h(self.nonce), "body_length": len(body), "header": h(header)}
        self.nonce = nonce_add(self.nonce, 2)
        return header + ct, info

    def write(self, data):
        chunks = [data[i:i + 4096] for i in range(0, len(data), 4096)] or [b""]
        out, boxes = b"", []
        for c in chunks:
            b, info = self.box(c)
            out += b
            boxes.append(info)
        return out, boxes

    def goodbye(self):
        g = secretbox(bytes(18), self.nonce, self.key)
        nonce = self.nonce
        return g, nonce


def pattern(n):
    return bytes(i % 256 for i in range(n))


def gen_boxstream(client_keys):
    key = unhex(client_keys["encrypt_key"])
    nonce = unhex(client_keys["encrypt_nonce"])
    w = BoxWriter(key, nonce)
    writes = []
    for n in [0, 1, 4096, 4097]:
        data = pattern(n)
        out, boxes = w.write(data)
        writes.append({"plaintext_length": n, "plaintext": h(data), "ciphertext": h(out), "boxes": boxes})
    goodbye, goodbye_nonce = w.goodbye()

    # Carry across bytes of the nonce.
    carry_nonce = bytes(18) + b"\xff" * 5 + b"\xfe"
    wc = BoxWriter(key, carry_nonce)
    carry_writes = []
    for data in [b"\x01", b"\x02"]:
        out, boxes = wc.write(data)
        carry_writes.append({"plaintext_length": 1, "plaintext": h(data), "ciphertext": h(out), "boxes": boxes})
    carry_goodbye, carry_goodbye_nonce = wc.goodbye()
    assert carry_goodbye_nonce == bytes(17) + b"\x01" + bytes(4) + b"\x00\x02"

    # Invalid streams, each from the initial key and nonce.
    invalid = []
    fresh = BoxWriter(key, nonce)
    one, _ = fresh.box(b"\x2a")
    t = bytearray(one)
    t[20] ^= 0x80
    invalid.append({"name": "header bit flipped", "stream": h(bytes(t)), "error": "header_authentication"})
    t = bytearray(one)
    t[34] ^= 0x01
    invalid.append({"name": "body bit flipped", "stream": h(bytes(t)), "error": "body_authentication"})
    # A header that authenticates but announces 4097 body bytes.
    fake_mac = bytes(16)
    header = secretbox(struct.pack(">H", 4097) + fake_mac, nonce, key)
    invalid.append({"name": "header announces 4097 bytes", "stream": h(header), "error": "body_too_long"})
    # Boxes out of order: the second box first.
    w2 = BoxWriter(key, nonce)
    first, _ = w2.box(b"first")
    second, _ = w2.box(b"second")
    invalid.append({"name": "second box sent first", "stream": h(second + first), "error": "header_authentication"})
    # Anything after goodbye.
    w3 = BoxWriter(key, nonce)
    bye, _ = w3.goodbye()
    invalid.append({"name": "data after goodbye", "stream": h(bye + b"\x00"), "error": "data_after_goodbye"})

    return {
        "description": "Box-stream with the client's sending key and nonce from handshake.json. 'writes' are "
                       "consecutive writes on one stream: each write of n bytes is cut into boxes of at most 4096 "
                       "bytes (an empty write makes one empty box); 'ciphertext' is everything the write puts on "
                       "the wire, 'boxes' its boxes (header_nonce is the nonce of the box's header, the body uses "
                       "header_nonce + 1). After the writes the stream says goodbye. Plaintext byte i is i mod 256. "
                       "'carry' starts from a nonce that makes the counter carry across bytes. Each 'invalid' "
                       "stream (from the initial key and nonce) must be refused by a reader with the given error.",
        "key": h(key),
        "nonce": h(nonce),
        "writes": writes,
        "goodbye": {"nonce": h(goodbye_nonce), "bytes": h(goodbye)},
        "carry": {
            "key": h(key),
            "nonce": h(carry_nonce),
            "writes": carry_writes,
            "goodbye": {"nonce": h(carry_goodbye_nonce), "bytes": h(carry_goodbye)},
        },
        "invalid": invalid,
    }


# ---------------------------------------------------------------------------------------------
# frames.json

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_varint(field, value):
    return b"" if value == 0 else varint(field << 3) + varint(value)


def pb_bytes(field, value):
    return b"" if len(value) == 0 else varint(field << 3 | 2) + varint(len(value)) + value


def pb_packed(field, values):
    if not values:
        return b""
    body = b"".join(varint(v) for v in values)
    return varint(field << 3 | 2) + varint(len(body)) + body


ERROR_CODES = {
    "ERROR_CODE_UNSPECIFIED": 0, "UNSUPPORTED_VERSION": 1, "UNKNOWN_TYPE": 2, "BAD_SIGNATURE": 3,
    "WRONG_RECIPIENT": 4, "REPLAYED": 5, "FROM_THE_FUTURE": 6, "MALFORMED": 7, "FRAME_TOO_LARGE": 8,
    "STALE": 9,
}


def enc_ping(nonce, sent_at_ms):
    return pb_varint(1, nonce) + pb_varint(2, sent_at_ms)


def enc_pong(nonce, ping_sent_at_ms, received_at_ms):
    return pb_varint(1, nonce) + pb_varint(2, ping_sent_at_ms) + pb_varint(3, received_at_ms)


def enc_error(code, detail="", ref_message_id=b"", supported_versions=(), ref_type=0):
    return (pb_varint(1, ERROR_CODES[code]) + pb_bytes(2, detail.encode()) + pb_bytes(3, ref_message_id)
            + pb_packed(4, list(supported_versions)) + pb_varint(5, ref_type))


TYPES = {"ERROR": 0x0001, "PING": 0x0002, "PONG": 0x0003}
DOMAIN = b"tandem-frame-v1\x00"
DIGEST_DOMAIN = b"tandem-frame-d1\x00"  # the scheme link-authenticated types replaced: vectors of refusals only


def envelope(author, recipient_pk, type_, msg_id, created_at, payload, version=1, length_field=None,
             sign=True, signer=None):
    assert len(msg_id) == 16 and len(recipient_pk) == 32
    head = (struct.pack(">BH", version, type_) + msg_id + author.pk + recipient_pk
            + struct.pack(">QI", created_at, len(payload) if length_field is None else length_field))
    assert len(head) == 95
    signed = head + payload
    sig = (signer or author).sign(DOMAIN + signed) if sign else bytes(64)
    return signed + sig


def frame(env):
    return struct.pack(">I", len(env)) + env


def mid(label):
    return label_bytes("message-id/" + label, 16)



# A receiver written from Protocol/README.md ("Receiver rules"), used to double-check the
# expectations written by hand in gen_frames.

def pb_valid(payload):
    """True when payload is a well-formed protobuf message (wire format only)."""
    i = 0

    def read_varint():
        nonlocal i
        v, shift = 0, 0
        for _ in range(10):
            if i >= len(payload):
                return None
            b = payload[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v
        return None

    while i < len(payload):
        key = read_varint()
        if key is None or key >> 3 == 0:
            return False
        wt = key & 7
        if wt == 0:
            if read_varint() is None:
                return False
        elif wt == 1 or wt == 5:
            i += 8 if wt == 1 else 4
            if i > len(payload):
                return False
        elif wt == 2:
            n = read_varint()
            if n is None or i + n > len(payload):
                return False
            i += n
        else:
            return False
    return True


PER_AUTHOR_CAPACITY = 4096
WATERMARK_LAG_MS = MAX_SKEW_MS


class ReceiverModel:
    """The receiver of section 5.5, with the per-author replay cache of 5.6. The vectors never
    make it choose between equally large authors, so the model needs no tie-break."""

    def __init__(self, key, link_peer, capacity, max_env):
        self.key, self.link_peer, self.capacity, self.max_env = key, link_peer, capacity, max_env
        self.entries = {}      # author -> {msg_id: created}
        self.floors = {}       # author -> floor
        self.watermark = 0

    def _count(self):
        return sum(len(e) for e in self.entries.values())

    def _evict_oldest(self, author):
        ids = self.entries[author]
        oldest = min(ids, key=lambda k: ids[k])
        self.floors[author] = max(self.floors.get(author, 0), ids.pop(oldest))

    def replay(self, author, msg_id, created, now):
        cutoff = max(now - REPLAY_WINDOW_MS, 0)
        if created < cutoff or created <= self.watermark:
            return "STALE"
        ids = self.entries.setdefault(author, {})
        for k in [k for k, v in ids.items() if v < cutoff]:
            self._evict_oldest(author)
        if created <= self.floors.get(author, 0):
            return "STALE"
        if msg_id in ids:
            return "REPLAYED"
        if len(ids) >= PER_AUTHOR_CAPACITY:
            self._evict_oldest(author)
            if created <= self.floors[author]:
                return "STALE"
        while self._count() >= self.capacity:
            most = max(len(e) for e in self.entries.values())
            largest = [a for a, e in self.entries.items() if len(e) == most]
            others = [a for a in largest if a != author]
            assert len(others) <= 1, "the vectors avoid ties"
            victim = others[0] if others else author
            if most > 1 or victim == author:
                self._evict_oldest(victim)
            else:
                newest = max([self.floors.pop(victim, 0)] + list(self.entries.pop(victim).values()))
                self.watermark = max(self.watermark, min(newest, max(now - WATERMARK_LAG_MS, 0)))
            if created <= self.watermark or created <= self.floors.get(author, 0):
                return "STALE"
        ids[msg_id] = created
        return None

    def feed(self, data, now):
        """(verdict, stage, reply)"""
        def reply(code, verified_author=None, ref=b"", type_=None):
            if type_ == TYPES["ERROR"]:
                return None
            return {"code": code, "recipient": h(verified_author or self.link_peer), "ref_message_id": h(ref),
                    "supported_versions": [1] if code == "UNSUPPORTED_VERSION" else [],
                    "ref_type": type_ if code == "UNKNOWN_TYPE" else 0}

        length = struct.unpack(">I", data[:4])[0]
        if length > self.max_env:
            return "FRAME_TOO_LARGE", "length", reply("FRAME_TOO_LARGE")
        env = data[4:]
        assert len(env) == length
        if not env:
            return "MALFORMED", "verify", reply("MALFORMED")
        if env[0] != 1:
            return "UNSUPPORTED_VERSION", "verify", reply("UNSUPPORTED_VERSION")
        if len(env) < 159:
            return "MALFORMED", "verify", reply("MALFORMED")
        type_ = struct.unpack(">H", env[1:3])[0]
        msg_id, author, recipient = env[3:19], env[19:51], env[51:83]
        created, plen = struct.unpack(">QI", env[83:95])
        if plen != len(env) - 159:
            return "MALFORMED", "verify", reply("MALFORMED", None, msg_id, type_)
        try:
            nacl.signing.VerifyKey(author).verify(DOMAIN + env[:-64], env[-64:])
        except Exception:
            return "BAD_SIGNATURE", "verify", reply("BAD_SIGNATURE", None, msg_id, type_)
        if recipient != self.key:
            return "WRONG_RECIPIENT", "verify", reply("WRONG_RECIPIENT", author, msg_id, type_)
        if created > now and created - now > MAX_SKEW_MS:
            return "FROM_THE_FUTURE", "verify", reply("FROM_THE_FUTURE", author, msg_id, type_)
        verdict = self.replay(author, msg_id, created, now)
        if verdict:
            return verdict, "verify", reply(verdict, author, msg_id, type_)
        if type_ not in TYPES.values():
            return "UNKNOWN_TYPE", "verify", reply("UNKNOWN_TYPE", author, msg_id, type_)
        if not pb_valid(env[95:95 + plen]):
            return "MALFORMED", "payload", reply("MALFORMED", author, msg_id, type_)
        return "ACCEPT", "verify", None


def check_cases(cases):
    for c in cases:
        r = ReceiverModel(unhex(c["receiver"]), unhex(c["link_peer"]), c["replay_capacity"],
                          c["maximum_envelope_length"])
        for i, s in enumerate(c["steps"]):
            verdict, stage, rep = r.feed(unhex(s["frame"]), s["now"])
            got = (verdict, stage, rep if verdict != "ACCEPT" else "-")
            want = (s["expect"], s["stage"], s.get("reply", "-"))
            assert got == want, (c["name"], i, got, want)

def gen_frames():
    created = NOW_MS - 1500
    valid = []

    def add_valid(name, author, recipient, type_name, type_, msg_label, created_at, payload, fields):
        m = mid(msg_label)
        env = envelope(author, recipient.pk, type_, m, created_at, payload)
        valid.append({
            "name": name,
            "author_seed": h(author.seed),
            "author": h(author.pk),
            "recipient": h(recipient.pk),
            "version": 1,
            "type": type_,
            "type_name": type_name,
            "message_id": h(m),
            "created_at": created_at,
            "payload": h(payload),
            "payload_fields": fields,
            "signing_input": h(DOMAIN + env[:-64]),
            "signature": h(env[-64:]),
            "envelope": h(env),
            "frame": h(frame(env)),
        })

    big = 0xFEDCBA9876543210
    add_valid("ping", ALICE, BOB, "PING", 2, "ping", created, enc_ping(big, created),
              {"message": "tandem.v1.Ping", "nonce": str(big), "sent_at_ms": str(created)})
    add_valid("pong", BOB, ALICE, "PONG", 3, "pong", created + 20, enc_pong(big, created, created + 10),
              {"message": "tandem.v1.Pong", "nonce": str(big), "ping_sent_at_ms": str(created),
               "received_at_ms": str(created + 10)})
    add_valid("ping with an empty payload (all fields default)", ALICE, BOB, "PING", 2, "ping-empty", created,
              b"", {"message": "tandem.v1.Ping", "nonce": "0", "sent_at_ms": "0"})
    add_valid("ping with small values (one-byte varints)", ALICE, BOB, "PING", 2, "ping-small", created,
              enc_ping(1, 127), {"message": "tandem.v1.Ping", "nonce": "1", "sent_at_ms": "127"})
    err_unknown = enc_error("UNKNOWN_TYPE", "unknown message type 0x7f04", mid("unknown-type"), (), 0x7f04)
    add_valid("error UNKNOWN_TYPE", BOB, ALICE, "ERROR", 1, "error-unknown-type", created, err_unknown,
              {"message": "tandem.v1.Error", "code": "UNKNOWN_TYPE", "detail": "unknown message type 0x7f04",
               "ref_message_id": h(mid("unknown-type")), "supported_versions": [], "ref_type": 0x7f04})
    err_version = enc_error("UNSUPPORTED_VERSION", "envelope version 2 is not supported", b"", (1,))
    add_valid("error UNSUPPORTED_VERSION", BOB, ALICE, "ERROR", 1, "error-version", created, err_version,
              {"message": "tandem.v1.Error", "code": "UNSUPPORTED_VERSION",
               "detail": "envelope version 2 is not supported", "ref_message_id": "",
               "supported_versions": [1], "ref_type": 0})
    # Unknown protobuf fields are ignored: field 15 (varint 7) and field 16 (bytes "x") after the known ones.
    extended = enc_ping(5, created) + pb_varint(15, 7) + pb_bytes(16, b"x")
    add_valid("ping with unknown protobuf fields (15, 16): they are ignored", ALICE, BOB, "PING", 2,
              "ping-extended", created, extended,
              {"message": "tandem.v1.Ping", "nonce": "5", "sent_at_ms": str(created)})
    add_valid("ping from carol to bob", CAROL, BOB, "PING", 2, "ping-carol", created, enc_ping(9, created),
              {"message": "tandem.v1.Ping", "nonce": "9", "sent_at_ms": str(created)})
    # PRESENCE (Protocol/README.md 12.7): without health (not shared: field 3 absent), and with a
    # shared health, 0 included (dead: present and 0, never "absent").
    for label, health in (("health not shared", None), ("shared health 35 (weak)", 35), ("shared health 0 (dead)", 0)):
        body = pb_varint(1, 1) + pb_varint(2, 10) + ((varint(3 << 3) + varint(health)) if health is not None else b"")
        fields = {"message": "tandem.v1.Presence", "status": "IDLE", "heartbeat_seconds": 10}
        if health is not None:
            fields["health"] = health
        add_valid(f"PRESENCE, {label}", ALICE, BOB, "PRESENCE", 0x0106, f"presence-{health}", created, body, fields)
    # A PRESENCE that announces ACKS (field 4, README 12.5), and an ACKS of two of alice's frames.
    add_valid("PRESENCE, takes ACKS", ALICE, BOB, "PRESENCE", 0x0106, "presence-acks", created,
              pb_varint(1, 1) + pb_varint(2, 10) + pb_varint(4, 1),
              {"message": "tandem.v1.Presence", "status": "IDLE", "heartbeat_seconds": 10, "takes_acks": 1})
    acked = [label_bytes("acks-1", 16), label_bytes("acks-2", 16)]
    add_valid("ACKS of two frames", BOB, ALICE, "ACKS", 0x0108, "acks", created, pb_rep_bytes(1, acked),
              {"message": "tandem.v1.Acks", "message_ids": ",".join(h(i) for i in acked)})
    gen_message_frames(add_valid, created)

    # Receiver checks: bob receives over a link whose authenticated peer is alice.
    cases = []

    def case(name, steps, capacity=100_000, max_env=MAX_ENVELOPE):
        cases.append({"name": name, "receiver": h(BOB.pk), "link_peer": h(ALICE.pk),
                      "replay_capacity": capacity, "maximum_envelope_length": max_env, "steps": steps})

    def step(frame_bytes, now, expect, reply=None, stage="verify"):
        s = {"frame": h(frame_bytes), "now": now, "stage": stage, "expect": expect}
        if expect != "ACCEPT":
            s["reply"] = reply
        return s

    def reply(code, recipient, ref=b"", versions=(), ref_type=0):
        return {"code": code, "recipient": h(recipient), "ref_message_id": h(ref),
                "supported_versions": list(versions), "ref_type": ref_type}

    ping_env = unhex(valid[0]["envelope"])
    m_ping = mid("ping")
    case("valid ping is accepted", [step(frame(ping_env), NOW_MS, "ACCEPT")])

    bad_sig = bytearray(ping_env)
    bad_sig[-1] ^= 0x01
    case("signature bit flipped", [step(frame(bytes(bad_sig)), NOW_MS, "BAD_SIGNATURE",
                                        reply("BAD_SIGNATURE", ALICE.pk, m_ping))])
    bad_payload = bytearray(ping_env)
    bad_payload[96] ^= 0x01
    case("payload byte changed after signing", [step(frame(bytes(bad_payload)), NOW_MS, "BAD_SIGNATURE",
                                                     reply("BAD_SIGNATURE", ALICE.pk, m_ping))])
    m = mid("forged")
    forged = envelope(CAROL, BOB.pk, 2, m, created, enc_ping(1, created), signer=ALICE)
    case("author field says carol, signed by alice", [step(frame(forged), NOW_MS, "BAD_SIGNATURE",
                                                           reply("BAD_SIGNATURE", ALICE.pk, m))])
    m = mid("wrong-recipient")
    env = envelope(ALICE, CAROL.pk, 2, m, created, enc_ping(1, created))
    case("addressed to carol", [step(frame(env), NOW_MS, "WRONG_RECIPIENT",
                                     reply("WRONG_RECIPIENT", ALICE.pk, m))])
    m = mid("v2")
    env = envelope(ALICE, BOB.pk, 2, m, created, enc_ping(1, created), version=2)
    case("version 2", [step(frame(env), NOW_MS, "UNSUPPORTED_VERSION",
                            reply("UNSUPPORTED_VERSION", ALICE.pk, b"", (1,)))])
    case("version 0, three bytes long (version is checked before length)",
         [step(frame(b"\x00\x00\x02"), NOW_MS, "UNSUPPORTED_VERSION",
               reply("UNSUPPORTED_VERSION", ALICE.pk, b"", (1,)))])
    m = mid("unknown-type")
    env = envelope(ALICE, BOB.pk, 0x7f04, m, created, b"\x08\x01")
    case("type 0x7f04 (reserved, not known to this version)",
         [step(frame(env), NOW_MS, "UNKNOWN_TYPE", reply("UNKNOWN_TYPE", ALICE.pk, m, (), 0x7f04))])
    m = mid("unknown-type-ffff")
    env = envelope(ALICE, BOB.pk, 0xFFFF, m, created, b"")
    case("type 0xffff", [step(frame(env), NOW_MS, "UNKNOWN_TYPE",
                              reply("UNKNOWN_TYPE", ALICE.pk, m, (), 0xFFFF))])
    m = mid("length-mismatch")
    payload = enc_ping(1, created)
    env = envelope(ALICE, BOB.pk, 2, m, created, payload, length_field=len(payload) + 1)
    case("payload length field one more than the payload",
         [step(frame(env), NOW_MS, "MALFORMED", reply("MALFORMED", ALICE.pk, m))])
    env = envelope(ALICE, BOB.pk, 2, m, created, payload, length_field=len(payload) - 1)
    case("payload length field one less than the payload",
         [step(frame(env), NOW_MS, "MALFORMED", reply("MALFORMED", ALICE.pk, m))])
    env = envelope(ALICE, BOB.pk, 2, m, created, payload, length_field=0xFFFFFFFF)
    case("payload length field 0xffffffff",
         [step(frame(env), NOW_MS, "MALFORMED", reply("MALFORMED", ALICE.pk, m))])
    m = mid("length-mismatch-carol")
    env = envelope(CAROL, BOB.pk, 2, m, created, payload, length_field=len(payload) + 1)
    case("malformed frame whose author field says carol: the reply goes to the link peer (alice), "
         "since no signature has vouched for the author",
         [step(frame(env), NOW_MS, "MALFORMED", reply("MALFORMED", ALICE.pk, m))])
    short = envelope(ALICE, BOB.pk, 2, mid("short"), created, b"")[:158]
    case("158 bytes, one short of the minimum envelope",
         [step(frame(short), NOW_MS, "MALFORMED", reply("MALFORMED", ALICE.pk))])
    case("empty envelope (length prefix 0)", [step(frame(b""), NOW_MS, "MALFORMED", reply("MALFORMED", ALICE.pk))])
    m = mid("malformed-ping")
    env = envelope(ALICE, BOB.pk, 2, m, created, b"\x08\xff")
    case("PING whose payload is not a tandem.v1.Ping (truncated varint)",
         [step(frame(env), NOW_MS, "MALFORMED", reply("MALFORMED", ALICE.pk, m), stage="payload")])

    # Time.
    m = mid("future-edge")
    env = envelope(ALICE, BOB.pk, 2, m, NOW_MS + MAX_SKEW_MS, enc_ping(1, NOW_MS))
    case("created exactly 10 minutes ahead of the receiver: accepted", [step(frame(env), NOW_MS, "ACCEPT")])
    m = mid("future")
    env = envelope(ALICE, BOB.pk, 2, m, NOW_MS + MAX_SKEW_MS + 1, enc_ping(1, NOW_MS))
    case("created 10 minutes and 1 ms ahead", [step(frame(env), NOW_MS, "FROM_THE_FUTURE",
                                                    reply("FROM_THE_FUTURE", ALICE.pk, m))])
    m = mid("stale-edge")
    env = envelope(ALICE, BOB.pk, 2, m, NOW_MS - REPLAY_WINDOW_MS, enc_ping(1, NOW_MS))
    case("created exactly 24 hours before: accepted", [step(frame(env), NOW_MS, "ACCEPT")])
    m = mid("stale")
    env = envelope(ALICE, BOB.pk, 2, m, NOW_MS - REPLAY_WINDOW_MS - 1, enc_ping(1, NOW_MS))
    case("created 24 hours and 1 ms before", [step(frame(env), NOW_MS, "STALE", reply("STALE", ALICE.pk, m))])

    # Replay.
    case("the same frame twice", [
        step(frame(ping_env), NOW_MS, "ACCEPT"),
        step(frame(ping_env), NOW_MS + 1000, "REPLAYED", reply("REPLAYED", ALICE.pk, m_ping)),
    ])
    ids = [mid(f"watermark-{i}") for i in range(4)]
    envs = [envelope(ALICE, BOB.pk, 2, ids[i], NOW_MS - 4000 + 1000 * i, enc_ping(i, NOW_MS)) for i in range(3)]
    late = envelope(ALICE, BOB.pk, 2, ids[3], NOW_MS - 3500, enc_ping(3, NOW_MS))
    case("replay cache of capacity 2, one author: evicting its oldest raises its floor", [
        step(frame(envs[0]), NOW_MS, "ACCEPT"),            # created now-4000
        step(frame(envs[1]), NOW_MS, "ACCEPT"),            # created now-3000
        step(frame(envs[2]), NOW_MS, "ACCEPT"),            # created now-2000; evicts now-4000 -> alice's floor
        step(frame(envs[0]), NOW_MS, "STALE", reply("STALE", ALICE.pk, ids[0])),
        # now-3500 is above the floor, but making room evicts now-3000, which becomes the
        # floor: the frame is now at or below it and is refused.
        step(frame(late), NOW_MS, "STALE", reply("STALE", ALICE.pk, ids[3])),
        step(frame(envs[1]), NOW_MS, "STALE", reply("STALE", ALICE.pk, ids[1])),
        step(frame(envs[2]), NOW_MS, "REPLAYED", reply("REPLAYED", ALICE.pk, ids[2])),
    ], capacity=2)
    # Two authors: the largest share shrinks, and only its author's floor rises.
    cids = [mid(f"share-carol-{i}") for i in range(2)]
    carol = [envelope(CAROL, BOB.pk, 2, cids[i], NOW_MS - 6000 + 1000 * i, enc_ping(i, NOW_MS)) for i in range(2)]
    case("replay cache of capacity 3, two authors: a full cache evicts from the largest share, whose author alone gets a floor", [
        step(frame(envs[0]), NOW_MS, "ACCEPT"),            # alice, created now-4000
        step(frame(envs[1]), NOW_MS, "ACCEPT"),            # alice, created now-3000
        step(frame(carol[0]), NOW_MS, "ACCEPT"),           # carol, created now-6000
        step(frame(envs[2]), NOW_MS, "ACCEPT"),            # alice holds most: her now-4000 goes, her floor
        # Carol's frame created before alice's floor is fresh: alice's floor is hers alone.
        step(frame(carol[1]), NOW_MS, "ACCEPT"),           # carol, created now-5000; alice holds most again
        step(frame(envs[0]), NOW_MS, "STALE", reply("STALE", ALICE.pk, ids[0])),
        step(frame(carol[0]), NOW_MS, "REPLAYED", reply("REPLAYED", CAROL.pk, cids[0])),
    ], capacity=3)

    # Order of the rules: the first rule that fails decides.
    m = mid("order-1")
    env = bytearray(envelope(ALICE, CAROL.pk, 0x7f04, m, NOW_MS + 3600_000, b""))
    env[-5] ^= 0x10
    case("bad signature, wrong recipient, future, unknown type: BAD_SIGNATURE first",
         [step(frame(bytes(env)), NOW_MS, "BAD_SIGNATURE", reply("BAD_SIGNATURE", ALICE.pk, m))])
    m = mid("order-2")
    env = envelope(ALICE, CAROL.pk, 0x7f04, m, NOW_MS + 3600_000, b"")
    case("wrong recipient, future, unknown type: WRONG_RECIPIENT first",
         [step(frame(env), NOW_MS, "WRONG_RECIPIENT", reply("WRONG_RECIPIENT", ALICE.pk, m))])
    m = mid("order-3")
    env = envelope(ALICE, BOB.pk, 0x7f04, m, NOW_MS - REPLAY_WINDOW_MS - 1, b"")
    case("stale and unknown type: STALE first",
         [step(frame(env), NOW_MS, "STALE", reply("STALE", ALICE.pk, m))])
    m = mid("order-4")
    env = envelope(ALICE, BOB.pk, 0x7f04, m, created, b"")
    case("an unknown type is still remembered: the same frame again is REPLAYED", [
        step(frame(env), NOW_MS, "UNKNOWN_TYPE", reply("UNKNOWN_TYPE", ALICE.pk, m, (), 0x7f04)),
        step(frame(env), NOW_MS, "REPLAYED", reply("REPLAYED", ALICE.pk, m)),
    ])

    # ERROR frames are never answered.
    m = mid("error-to-carol")
    env = envelope(ALICE, CAROL.pk, 1, m, created, enc_error("MALFORMED"))
    case("an ERROR frame addressed to carol: rejected, no reply",
         [step(frame(env), NOW_MS, "WRONG_RECIPIENT", None)])

    # Length prefix limits (decided on the 4-byte prefix, before any of the body arrives).
    case("length prefix 1 MiB + 1 (only the prefix is sent)",
         [step(struct.pack(">I", MAX_ENVELOPE + 1), NOW_MS, "FRAME_TOO_LARGE",
               reply("FRAME_TOO_LARGE", ALICE.pk), stage="length")])
    case("length prefix 0xffffffff (only the prefix is sent)",
         [step(b"\xff\xff\xff\xff", NOW_MS, "FRAME_TOO_LARGE", reply("FRAME_TOO_LARGE", ALICE.pk),
               stage="length")])
    m = mid("limit")
    ping = enc_ping(7, created)
    filler = 4096 - 159 - len(ping) - 4  # field 16: 2-byte tag, 2-byte length
    env = envelope(ALICE, BOB.pk, 2, m, created, ping + pb_bytes(16, bytes(filler)))
    assert len(env) == 4096
    case("configured limit 4096: a 4096-byte envelope is accepted",
         [step(frame(env), NOW_MS, "ACCEPT")], max_env=4096)
    case("configured limit 4096: length prefix 4097",
         [step(struct.pack(">I", 4097), NOW_MS, "FRAME_TOO_LARGE", reply("FRAME_TOO_LARGE", ALICE.pk),
               stage="length")], max_env=4096)

    check_cases(cases)
    return {
        "description": "Signed envelopes and frames. 'valid': author_seed signs an envelope with the given fields "
                       "(PING, PONG, ERROR, and one of every signed messaging type of Protocol/messages.md); "
                       "'envelope' is the exact result, 'frame' the same with its u32 big-endian length prefix, "
                       "'signing_input' what Ed25519 signs (\"tandem-frame-v1\\0\" then the envelope up to the "
                       "signature). payload_fields are the decoded protobuf payload; 64-bit values are decimal "
                       "strings. 'receiver_checks': each case is one receiver (its key 'receiver', a replay cache "
                       "of 'replay_capacity', envelope length limit 'maximum_envelope_length', the link's "
                       "authenticated peer 'link_peer'); each step feeds 'frame' (length prefix included) at "
                       "receiver time 'now' (ms since the Unix epoch) and must end in 'expect' (ACCEPT or an "
                       "error code name). 'stage' says which check decides: length (the 4-byte prefix alone), "
                       "verify (the envelope rules), payload (the envelope is accepted, its protobuf payload "
                       "is not: a PING whose payload is not a tandem.v1.Ping). 'reply' is the "
                       "ERROR frame the receiver sends back (its payload fields and recipient), or null for none.",
        "signing_domain": h(DOMAIN),
        "maximum_clock_skew_ms": MAX_SKEW_MS,
        "replay_window_ms": REPLAY_WINDOW_MS,
        "valid": valid,
        "receiver_checks": cases,
    }


def gen_message_frames(add_valid, created):
    """One signed frame of every signed messaging type (Protocol/messages.md 2; FILE_CHUNK is
    link-authenticated and has none). Field values are strings: integers in decimal, bytes in hex."""
    thread = label_bytes("chat/challenge", 16)
    first = mid("chat/message")
    sent_at = created - 500
    text = "ready? 🙂"
    body = pb_varint(2, 1) + pb_varint(3, 1) + pb_bytes(4, text.encode()) + pb_varint(6, sent_at)
    add_valid("MESSAGE, direct", ALICE, BOB, "MESSAGE", 0x0501, "chat/message", created, body,
              {"message": "tandem.v1.ChatMessage", "challenge_id": "", "seq": "1", "lamport": "1", "text": text,
               "reply_to": "", "sent_at_ms": str(sent_at), "expires_after_ms": "0"})
    reply = (pb_bytes(1, thread) + pb_varint(2, 7) + pb_varint(3, 12) + pb_bytes(4, "yes".encode()) + pb_bytes(5, first)
             + pb_varint(6, sent_at) + pb_varint(7, 86_400_000))
    add_valid("MESSAGE in a thread, a reply with a disappearing timer", BOB, ALICE, "MESSAGE", 0x0501, "chat/reply", created,
              reply, {"message": "tandem.v1.ChatMessage", "challenge_id": h(thread), "seq": "7", "lamport": "12",
                      "text": "yes", "reply_to": h(first), "sent_at_ms": str(sent_at), "expires_after_ms": "86400000"})
    # Carol writes to the thread's inviter (alice), who forwards her envelope byte for byte to bob.
    inner_body = pb_bytes(1, thread) + pb_varint(2, 1) + pb_varint(3, 3) + pb_bytes(4, "hi all".encode()) + pb_varint(6, sent_at)
    inner = envelope(CAROL, ALICE.pk, 0x0501, mid("chat/forwarded"), created - 200, inner_body)
    add_valid("FORWARD of carol's thread MESSAGE, from the inviter alice to bob", ALICE, BOB, "FORWARD", 0x0502, "chat/forward",
              created, pb_bytes(1, thread) + pb_bytes(2, inner),
              {"message": "tandem.v1.ChatForward", "challenge_id": h(thread), "envelope": h(inner), "inner_author": h(CAROL.pk),
               "inner_text": "hi all"})
    add_valid("REACTION", BOB, ALICE, "REACTION", 0x0503, "chat/reaction", created,
              pb_bytes(2, first) + pb_bytes(3, "👍".encode()),
              {"message": "tandem.v1.ChatReaction", "challenge_id": "", "message_id": h(first), "emoji": "👍"})
    add_valid("CHEER on alice's result", BOB, ALICE, "CHEER", 0x0504, "chat/cheer", created,
              pb_bytes(1, thread) + pb_bytes(2, ALICE.pk) + pb_bytes(3, "👏".encode()) + pb_bytes(4, "well done".encode()),
              {"message": "tandem.v1.Cheer", "challenge_id": h(thread), "subject": h(ALICE.pk), "emoji": "👏",
               "text": "well done"})
    add_valid("READ", BOB, ALICE, "READ", 0x0505, "chat/read", created, pb_varint(1, 3) + pb_varint(2, created - 100),
              {"message": "tandem.v1.ReadReceipt", "read_up_to_seq": "3", "read_at_ms": str(created - 100)})
    add_valid("RETRACT", ALICE, BOB, "RETRACT", 0x0506, "chat/retract", created, pb_bytes(2, first),
              {"message": "tandem.v1.Retract", "challenge_id": "", "message_id": h(first)})
    ranges = pb_msg(3, pb_varint(1, 1) + pb_varint(2, 2)) + pb_msg(3, pb_varint(1, 5) + pb_varint(2, 5))
    add_valid("GAP_REQUEST", BOB, ALICE, "GAP_REQUEST", 0x0507, "chat/gap", created, pb_bytes(2, ALICE.pk) + ranges,
              {"message": "tandem.v1.GapRequest", "challenge_id": "", "author": h(ALICE.pk), "ranges": "1-2,5-5"})
    add_valid("CONVERSATION_SETTINGS", ALICE, BOB, "CONVERSATION_SETTINGS", 0x0508, "chat/settings", created,
              pb_varint(1, 86_400_000) + pb_varint(2, 2),
              {"message": "tandem.v1.ConversationSettings", "disappear_after_ms": "86400000", "version": "2"})
    file_id = label_bytes("chat/file", 16)
    file_hash = hashlib.blake2b(b"desk", digest_size=32).digest()
    root = label_bytes("chat/chunk-root")
    offer = (pb_bytes(1, file_id) + pb_bytes(2, "desk.jpg".encode()) + pb_varint(3, 300_000) + pb_bytes(4, file_hash)
             + pb_varint(5, 262_144) + pb_bytes(6, root))
    add_valid("FILE_OFFER", ALICE, BOB, "FILE_OFFER", 0x0509, "chat/file-offer", created, offer,
              {"message": "tandem.v1.FileOffer", "file_id": h(file_id), "name": "desk.jpg", "size": "300000",
               "file_hash": h(file_hash), "chunk_size": "262144", "chunk_root": h(root), "message_id": "",
               "challenge_id": ""})
    # A file in a challenge's thread (messages.md 7.7): carol offers it once, to the inviter alice (field 8 =
    # the challenge), attached to her thread MESSAGE; alice forwards carol's envelope byte for byte to bob.
    thread_file = label_bytes("chat/thread-file", 16)
    caption = mid("chat/thread-file-message")
    thread_offer = (pb_bytes(1, thread_file) + pb_bytes(2, "notes.pdf".encode()) + pb_varint(3, 600_000) + pb_bytes(4, file_hash)
                    + pb_varint(5, 262_144) + pb_bytes(6, root) + pb_bytes(7, caption) + pb_bytes(8, thread))
    add_valid("FILE_OFFER in a thread, from carol to the inviter alice", CAROL, ALICE, "FILE_OFFER", 0x0509, "chat/thread-file-offer",
              created, thread_offer,
              {"message": "tandem.v1.FileOffer", "file_id": h(thread_file), "name": "notes.pdf", "size": "600000",
               "file_hash": h(file_hash), "chunk_size": "262144", "chunk_root": h(root), "message_id": h(caption),
               "challenge_id": h(thread)})
    inner_offer = envelope(CAROL, ALICE.pk, 0x0509, mid("chat/thread-file-offer"), created, thread_offer)
    add_valid("FORWARD of carol's thread FILE_OFFER, from the inviter alice to bob", ALICE, BOB, "FORWARD", 0x0502,
              "chat/forward-file", created, pb_bytes(1, thread) + pb_bytes(2, inner_offer),
              {"message": "tandem.v1.ChatForward", "challenge_id": h(thread), "envelope": h(inner_offer), "inner_author": h(CAROL.pk),
               "inner_file_id": h(thread_file), "inner_name": "notes.pdf"})
    add_valid("FILE_REQUEST", BOB, ALICE, "FILE_REQUEST", 0x050A, "chat/file-request", created,
              pb_bytes(1, file_id) + pb_msg(2, pb_varint(2, 2)),
              {"message": "tandem.v1.FileRequest", "file_id": h(file_id), "ranges": "0+2"})
    add_valid("FILE_CANCEL", BOB, ALICE, "FILE_CANCEL", 0x050C, "chat/file-cancel", created, pb_bytes(1, file_id) + pb_varint(2, 1),
              {"message": "tandem.v1.FileCancel", "file_id": h(file_id), "reason": "1"})
    second = label_bytes("chat/delivered-2", 16)
    add_valid("DELIVERED", BOB, ALICE, "DELIVERED", 0x050D, "chat/delivered", created, pb_rep_bytes(1, [first, second]),
              {"message": "tandem.v1.DeliveryReceipt", "message_ids": h(first) + "," + h(second)})


# ---------------------------------------------------------------------------------------------
# identity.json

def gen_identity():
    seed = ALICE.seed
    passphrase = "correct horse battery staple \u00e9t\u00e9".encode()
    salt = label_bytes("identity/salt", 16)
    nonce = label_bytes("identity/nonce", 24)
    ops = nacl.pwhash.argon2id.OPSLIMIT_INTERACTIVE
    mem = nacl.pwhash.argon2id.MEMLIMIT_INTERACTIVE
    key = nacl.pwhash.argon2id.kdf(32, passphrase, salt, opslimit=ops, memlimit=mem)
    ct = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(seed, ALICE.pk, nonce, key)
    assert len(ct) == 48
    plain_file = {"format": "tandem-identity-v1", "public_key": h(ALICE.pk), "seed": h(seed)}
    sealed_file = {
        "encrypted_seed": {
            "aead": "xchacha20poly1305-ietf",
            "ciphertext": h(ct),
            "kdf": "argon2id13",
            "memlimit": mem,
            "nonce": h(nonce),
            "opslimit": ops,
            "salt": h(salt),
        },
        "format": "tandem-identity-v1",
        "public_key": h(ALICE.pk),
    }
    return {
        "description": "identity.key files for alice. 'plain' holds the seed in the clear; 'sealed' holds it "
                       "encrypted: key = Argon2id13(passphrase UTF-8 bytes, salt, opslimit, memlimit, 32 bytes), "
                       "ciphertext = XChaCha20-Poly1305-IETF(seed, additional data = the 32 public key bytes, "
                       "nonce, key), 48 bytes. derived_key is given to check the KDF step alone.",
        "passphrase": passphrase.decode(),
        "derived_key": h(key),
        "plain": plain_file,
        "sealed": sealed_file,
    }


# ---------------------------------------------------------------------------------------------
# relay.json (Protocol/README.md section 14)

RELAY = IDENTITIES["dave"]          # the relay's identity in these vectors
RELAY_DEFAULT_PORT = 7820
JOIN_MAGIC = b"TDMJOIN1"
MAILBOX_MAX_AGE_MS = 8 * 24 * 60 * 60 * 1000
MAILABLE_TYPES = set(range(0x0101, 0x0106)) | set(range(0x0201, 0x0207)) | set(range(0x0501, 0x0507)) | {0x0508, 0x0509, 0x050C, 0x050D}


def parse_relay_address(text):
    """Returns ((key, host, port), None) or (None, reason). Follows section 14.1."""
    text = text.strip()
    if "@" not in text:
        return None, "no-at"
    id_part, host_part = text.rsplit("@", 1)
    key, _ = parse_id(id_part)
    if key is None:
        return None, "id"
    if host_part == "":
        return None, "host"
    port_text = None
    if host_part.startswith("["):
        close = host_part.find("]")
        if close < 0:
            return None, "host"
        host, rest = host_part[1:close], host_part[close + 1:]
        if rest:
            if not rest.startswith(":"):
                return None, "port"
            port_text = rest[1:]
    elif ":" in host_part:
        host, port_text = host_part.rsplit(":", 1)
    else:
        host = host_part
    port = RELAY_DEFAULT_PORT
    if port_text is not None:
        if not port_text or not all(c in "0123456789" for c in port_text):
            return None, "port"
        port = int(port_text)
    if not 1 <= port <= 65535:
        return None, "port"
    if not host or len(host.encode()) > 253 or any(c in host for c in " /@"):
        return None, "host"
    return (key, host, port), None


def relay_address_text(key, host, port):
    return text_id(key) + "@" + ("[" + host + "]" if ":" in host else host) + ":" + str(port)


def parse_share_code(text):
    """Returns ((key, relay or None), None) or (None, reason). Follows section 14.1."""
    body = text.strip()
    if body.lower().startswith("tandem:"):
        body = body[len("tandem:"):]
    relay = None
    if "?relay=" in body:
        body, relay_text = body.split("?relay=", 1)
        relay, why = parse_relay_address(relay_text)
        if relay is None:
            return None, "relay-" + why
    key, _ = parse_id(body)
    if key is None:
        return None, "id"
    return (key, relay), None


def share_code_text(key, relay):
    return "tandem:" + text_id(key) + ("" if relay is None else "?relay=" + relay_address_text(*relay))


def seal_with_ephemeral(message, recipient_curve_pk, ephemeral_sk):
    """crypto_box_seal with a chosen ephemeral key, so the output is reproducible:
    ephemeral_pk || crypto_box(message, BLAKE2b-192(ephemeral_pk || recipient_pk), recipient_pk, ephemeral_sk)."""
    eph_pk = sodium.crypto_scalarmult_base(ephemeral_sk)
    nonce = hashlib.blake2b(eph_pk + recipient_curve_pk, digest_size=24).digest()
    sealed = eph_pk + sodium.crypto_box(message, nonce, recipient_curve_pk, ephemeral_sk)
    assert len(sealed) == len(message) + 48
    return sealed


def open_mail(sealed, me, now):
    """The receiver's checks of section 14.4. Returns "accept" or the reason for dropping the item."""
    try:
        env = sodium.crypto_box_seal_open(sealed, me.curve_pk, me.curve_sk)
    except Exception:
        return "does-not-open"
    if len(env) < 159 or env[0] != 1 or struct.unpack(">I", env[91:95])[0] != len(env) - 159:
        return "not-an-envelope"
    type_ = struct.unpack(">H", env[1:3])[0]
    author, recipient = env[19:51], env[51:83]
    created = struct.unpack(">Q", env[83:91])[0]
    try:
        nacl.signing.VerifyKey(author).verify(DOMAIN + env[:-64], env[-64:])
    except Exception:
        return "bad-signature"
    if recipient != me.pk:
        return "wrong-recipient"
    if type_ not in MAILABLE_TYPES:
        return "not-mailable"
    if created > now and created - now > MAX_SKEW_MS:
        return "future"
    if now > created and now - created > MAILBOX_MAX_AGE_MS:
        return "too-old"
    return "accept"


def gen_relay():
    relay_id = text_id(RELAY.pk)
    addresses = []
    for name, text, expect in [
        ("name and port", relay_id + "@relay.example.org:7900", (RELAY.pk, "relay.example.org", 7900)),
        ("default port", relay_id + "@relay.example.org", (RELAY.pk, "relay.example.org", RELAY_DEFAULT_PORT)),
        ("IPv4 literal", relay_id + "@192.0.2.7:443", (RELAY.pk, "192.0.2.7", 443)),
        ("IPv6 literal", relay_id + "@[2001:db8::7]:7900", (RELAY.pk, "2001:db8::7", 7900)),
        ("IPv6 literal, default port", relay_id + "@[2001:db8::7]", (RELAY.pk, "2001:db8::7", RELAY_DEFAULT_PORT)),
        ("display-form ID", display_id(relay_id) + "@relay.example.org:7820", (RELAY.pk, "relay.example.org", 7820)),
        ("upper-case ID, spaces around", "  " + relay_id.upper() + "@relay.example.org:7820 ", (RELAY.pk, "relay.example.org", 7820)),
        ("port 1", relay_id + "@h:1", (RELAY.pk, "h", 1)),
        ("port 65535", relay_id + "@h:65535", (RELAY.pk, "h", 65535)),
    ]:
        got, why = parse_relay_address(text)
        assert got == expect, (name, got, why)
        addresses.append({"name": name, "input": text, "public_key": h(expect[0]), "host": expect[1],
                          "port": expect[2], "canonical": relay_address_text(*expect)})
    bad_id = relay_id[:10] + ("q" if relay_id[10] != "q" else "p") + relay_id[11:]
    invalid_addresses = []
    for name, text, reason in [
        ("no @", relay_id, "no-at"),
        ("ID with a bad checksum", bad_id + "@relay.example.org:7820", "id"),
        ("nothing after @", relay_id + "@", "host"),
        ("empty port", relay_id + "@relay.example.org:", "port"),
        ("port 0", relay_id + "@relay.example.org:0", "port"),
        ("port 65536", relay_id + "@relay.example.org:65536", "port"),
        ("port not a number", relay_id + "@relay.example.org:http", "port"),
        ("IPv6 without its closing bracket", relay_id + "@[2001:db8::7:7900", "host"),
        ("text after the IPv6 bracket", relay_id + "@[2001:db8::7]7900", "port"),
        ("space in the host", relay_id + "@relay example.org:7820", "host"),
        ("slash in the host", relay_id + "@relay.example.org/x:7820", "host"),
        ("empty host before the port", relay_id + "@:7820", "host"),
    ]:
        got, why = parse_relay_address(text)
        assert got is None and why == reason, (name, got, why)
        invalid_addresses.append({"name": name, "input": text, "reason": reason})

    relay = (RELAY.pk, "relay.example.org", 7820)
    bob_id = text_id(BOB.pk)
    share = []
    for name, text, expect in [
        ("with a relay", "tandem:" + bob_id + "?relay=" + relay_address_text(*relay), (BOB.pk, relay)),
        ("without a relay", "tandem:" + bob_id, (BOB.pk, None)),
        ("a bare ID", bob_id, (BOB.pk, None)),
        ("prefix in upper case, display-form IDs, relay without port",
         "TANDEM:" + display_id(bob_id) + "?relay=" + display_id(relay_id) + "@relay.example.org", (BOB.pk, relay)),
        ("IPv6 relay", "tandem:" + bob_id + "?relay=" + relay_id + "@[2001:db8::7]:7900",
         (BOB.pk, (RELAY.pk, "2001:db8::7", 7900))),
    ]:
        got, why = parse_share_code(text)
        assert got == expect, (name, got, why)
        share.append({"name": name, "input": text, "public_key": h(expect[0]),
                      "relay": None if expect[1] is None else relay_address_text(*expect[1]),
                      "canonical": share_code_text(*expect)})
    invalid_share = []
    for name, text, reason in [
        ("bad ID", "tandem:" + bad_id, "id"),
        ("relay is not an address", "tandem:" + bob_id + "?relay=relay.example.org:7820", "relay-no-at"),
        ("relay port out of range", "tandem:" + bob_id + "?relay=" + relay_id + "@relay.example.org:99999", "relay-port"),
        ("empty", "tandem:", "id"),
    ]:
        got, why = parse_share_code(text)
        assert got is None and why == reason, (name, got, why)
        invalid_share.append({"name": name, "input": text, "reason": reason})

    token = label_bytes("relay/join-token")
    preamble = JOIN_MAGIC + token
    assert len(preamble) == 40
    hello_like = label_bytes("relay/not-a-join", 32) + label_bytes("relay/not-a-join-2", 32)
    classify = [
        {"name": "a whole preamble", "input": h(preamble), "kind": "join", "token": h(token)},
        {"name": "nothing yet", "input": "", "kind": "need_more_data"},
        {"name": "7 bytes of the magic", "input": h(JOIN_MAGIC[:7]), "kind": "need_more_data"},
        {"name": "magic and 31 token bytes", "input": h(preamble[:39]), "kind": "need_more_data"},
        {"name": "a different eighth byte", "input": h(b"TDMJOIN2" + token), "kind": "handshake"},
        {"name": "differs at the fourth byte", "input": h(b"TDMX"), "kind": "handshake"},
        {"name": "64 bytes like a handshake hello", "input": h(hello_like), "kind": "handshake"},
        {"name": "a preamble followed by more bytes before the answer", "input": h(preamble + b"\x00"),
         "kind": "join_then_data"},
    ]

    created = NOW_MS - 60_000
    alice_record = (pb_bytes(1, ALICE.pk) + pb_bytes(2, "Alice".encode()) + pb_bytes(3, b":7810")
                    + pb_bytes(4, relay_address_text(*relay).encode()) + pb_varint(5, 1))
    request_payload = pb_bytes(1, "focus with me?".encode()) + pb_bytes(2, alice_record)
    good_env = envelope(ALICE, BOB.pk, 0x0101, mid("relay/mail"), created, request_payload)
    tampered = good_env[:-1] + bytes([good_env[-1] ^ 1])
    items = []

    def item(name, env, sealed_to, verdicts):
        sealed = seal_with_ephemeral(env, sealed_to.curve_pk, label_bytes("relay/ephemeral/" + name))
        cases = []
        for now, expect in verdicts:
            assert open_mail(sealed, BOB, now) == expect, (name, now, open_mail(sealed, BOB, now))
            cases.append({"now_ms": now, "expect": expect})
        if sealed_to is BOB:
            assert sodium.crypto_box_seal_open(sealed, BOB.curve_pk, BOB.curve_sk) == env
        items.append({"name": name, "envelope": h(env), "ephemeral_secret_key": h(label_bytes("relay/ephemeral/" + name)),
                      "sealed_to": sealed_to.name, "sealed": h(sealed), "cases": cases})

    item("friend request", good_env, BOB, [
        (NOW_MS, "accept"),
        (created + MAILBOX_MAX_AGE_MS, "accept"),
        (created + MAILBOX_MAX_AGE_MS + 1, "too-old"),
        (created - MAX_SKEW_MS, "accept"),
        (created - MAX_SKEW_MS - 1, "future"),
    ])
    item("addressed to carol", envelope(ALICE, CAROL.pk, 0x0101, mid("relay/mail-carol"), created, request_payload),
         BOB, [(NOW_MS, "wrong-recipient")])
    item("a PING is not mail", envelope(ALICE, BOB.pk, 0x0002, mid("relay/mail-ping"), created, enc_ping(7, created)),
         BOB, [(NOW_MS, "not-mailable")])
    item("signature altered", tampered, BOB, [(NOW_MS, "bad-signature")])
    item("sealed to carol", good_env, CAROL, [(NOW_MS, "does-not-open")])

    return {
        "description": "Relays (Protocol/README.md section 14). The relay's key is dave's (keys.json). "
                       "'addresses': relay addresses ID@host:port that parse to public_key, host and port (default "
                       "7820), with their canonical form; 'invalid_addresses' must be refused (reason is informative). "
                       "'share_codes': the same for share codes tandem:ID[?relay=ADDRESS] (relay null: none). "
                       "'join': the 40-byte tunnel join preamble for token, the relay's one-byte answers, and how a "
                       "relay classifies the first bytes of a connection (join: a join carrying token; need_more_data; "
                       "handshake: a Secret Handshake; join_then_data: a join followed by early bytes, which the "
                       "relay closes). 'mail': each item is envelope sealed (crypto_box_seal) to sealed_to's X25519 "
                       "key with the given ephemeral secret key, so the bytes are reproducible (a real sender uses a "
                       "fresh random one); each case says what bob (the receiver) does with the item at now_ms: "
                       "accept, or drop because it does-not-open, bad-signature, wrong-recipient, not-mailable, "
                       "future (more than 10 minutes ahead) or too-old (more than 8 days old).",
        "default_port": RELAY_DEFAULT_PORT,
        "relay_public_key": h(RELAY.pk),
        "addresses": addresses,
        "invalid_addresses": invalid_addresses,
        "share_codes": share,
        "invalid_share_codes": invalid_share,
        "join": {
            "magic": h(JOIN_MAGIC),
            "token": h(token),
            "preamble": h(preamble),
            "answers": {"joined": "00", "unknown_token": "01", "timeout": "02", "refused": "03"},
            "classify": classify,
        },
        "mail": {
            "receiver": "bob",
            "maximum_age_ms": MAILBOX_MAX_AGE_MS,
            "maximum_future_ms": MAX_SKEW_MS,
            "mailable_types": ["%04x" % t for t in sorted(MAILABLE_TYPES)],
            "items": items,
        },
    }



# ---------------------------------------------------------------------------------------------
# backup.json (Protocol/backup.md)

BACKUP_TYPES = {
    "BACKUP_OFFER": 0x0401, "BACKUP_HAVE_QUERY": 0x0402, "BACKUP_HAVE_REPLY": 0x0403, "BACKUP_PIECE": 0x0404,
    "BACKUP_REPLY": 0x0405, "BACKUP_SNAPSHOT": 0x0406, "BACKUP_FORGET": 0x0407, "BACKUP_LIST": 0x0408,
    "BACKUP_LIST_REPLY": 0x0409, "BACKUP_PROVE": 0x040A, "BACKUP_PROOF": 0x040B, "BACKUP_FETCH": 0x040C,
    "BACKUP_FETCHED": 0x040D, "BACKUP_KIT_PUT": 0x040E, "BACKUP_KIT_GET": 0x040F, "BACKUP_KIT": 0x0410,
}


def pb_msg(field, body):
    return varint(field << 3 | 2) + varint(len(body)) + body


def pb_rep_bytes(field, values):
    return b"".join(varint(field << 3 | 2) + varint(len(v)) + v for v in values)


def backup_blob(label, n):
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"tandem-vectors-v1/backup-blob/" + label.encode() + struct.pack(">I", i)).digest()
        i += 1
    return out[:n]


def blob_name(b):
    return hashlib.blake2b(b, digest_size=32).digest()


def gen_backup():
    proofs = []
    for label, size in [("one-byte", 1), ("pack", 5000), ("two-blocks-and-a-byte", 257)]:
        b = backup_blob(label, size)
        nonce = label_bytes("backup-nonce/" + label)
        proofs.append({
            "name": label, "blob": h(b), "size": size, "blob_name": h(blob_name(b)), "nonce": h(nonce),
            "mac": h(hashlib.blake2b(b, digest_size=32, key=nonce).digest()),
        })
    for p in proofs:
        p["name_label"] = p.pop("name")
        p["name"] = p.pop("blob_name")

    code = label_bytes("recovery-code", 16)
    code_text = bech32_encode_values("tdmr", convert_bits(code, 8, 5, True))
    kit_key = hashlib.blake2b(b"tandem/backup/kit-key/v1", digest_size=32, key=code).digest()
    locator = hashlib.blake2b(b"tandem/backup/kit-locator/v1", digest_size=32, key=code).digest()
    plaintext = pb_bytes(1, label_bytes("seed/alice")) + pb_bytes(5, relay_address_text(RELAY.pk, "relay.example.org", 7820).encode()) + pb_varint(7, NOW_MS)
    nonce = label_bytes("backup-kit-nonce", 24)
    sealed = nonce + sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, b"tandem/backup/kit/v1" + locator, nonce, kit_key)

    rid = label_bytes("backup-request", 16)
    b1 = backup_blob("pack", 5000)
    n1 = blob_name(b1)
    names = sorted([n1, blob_name(backup_blob("index", 100)), blob_name(backup_blob("other", 10))])
    snap_id = label_bytes("backup-snapshot", 16)

    def record(blobs, index, total, created=NOW_MS, sid=snap_id):
        return pb_bytes(1, sid) + pb_varint(2, created) + pb_rep_bytes(3, blobs) + pb_rep_bytes(4, index) + pb_varint(5, total)

    good_record = record(names, [names[0]], 5110)
    holding = pb_bytes(1, n1) + pb_varint(2, 5000) + pb_varint(3, 4096)
    summary = pb_bytes(1, snap_id) + pb_varint(2, NOW_MS) + pb_varint(3, 3) + pb_rep_bytes(4, [names[0]]) + pb_varint(5, 5110)
    challenge = pb_bytes(1, n1) + pb_bytes(2, label_bytes("backup-nonce/pack"))
    answer = pb_bytes(1, n1) + pb_varint(2, 1) + pb_bytes(3, hashlib.blake2b(b1, digest_size=32, key=label_bytes("backup-nonce/pack")).digest())
    piece = b1[4096:5000]

    m = []

    def add(name, t, payload, valid, why=""):
        e = {"name": name, "type": "%04x" % BACKUP_TYPES[t], "message": t, "payload": h(payload), "valid": valid}
        if why:
            e["why_invalid"] = why
        m.append(e)

    add("offer 10 GiB", "BACKUP_OFFER", pb_varint(1, 10 << 30) + pb_varint(2, NOW_MS), True)
    add("offer withdrawn", "BACKUP_OFFER", pb_varint(2, NOW_MS), True)
    add("offer over 1 PiB", "BACKUP_OFFER", pb_varint(1, (1 << 50) + 1) + pb_varint(2, NOW_MS), False, "quota_bytes > 2^50")
    add("offer version 0", "BACKUP_OFFER", pb_varint(1, 1), False, "version 0")
    add("have query", "BACKUP_HAVE_QUERY", pb_bytes(1, rid) + pb_rep_bytes(2, names), True)
    add("have query, a name twice", "BACKUP_HAVE_QUERY", pb_bytes(1, rid) + pb_rep_bytes(2, [n1, n1]), False, "duplicate name")
    add("have query, short name", "BACKUP_HAVE_QUERY", pb_bytes(1, rid) + pb_rep_bytes(2, [n1[:31]]), False, "name of 31 bytes")
    add("have reply", "BACKUP_HAVE_REPLY", pb_bytes(1, rid) + pb_varint(2, 1) + pb_msg(3, holding) + pb_varint(4, 1 << 30) + pb_varint(5, 5000), True)
    add("have reply, held > size", "BACKUP_HAVE_REPLY", pb_bytes(1, rid) + pb_msg(3, pb_bytes(1, n1) + pb_varint(2, 10) + pb_varint(3, 11)), False, "held > size")
    add("piece, the last of a blob", "BACKUP_PIECE", pb_bytes(1, rid) + pb_bytes(2, n1) + pb_varint(3, 5000) + pb_varint(4, 4096) + pb_bytes(5, piece), True)
    add("piece past the declared size", "BACKUP_PIECE", pb_bytes(1, rid) + pb_bytes(2, n1) + pb_varint(3, 5000) + pb_varint(4, 4097) + pb_bytes(5, piece), False, "offset + len(data) > size")
    add("piece of a blob over 64 MiB", "BACKUP_PIECE", pb_bytes(1, rid) + pb_bytes(2, n1) + pb_varint(3, (64 << 20) + 1) + pb_bytes(5, b"x"), False, "size > 64 MiB")
    add("piece with no data", "BACKUP_PIECE", pb_bytes(1, rid) + pb_bytes(2, n1) + pb_varint(3, 5000), False, "empty data")
    add("piece, request id of 15 bytes", "BACKUP_PIECE", pb_bytes(1, rid[:15]) + pb_bytes(2, n1) + pb_varint(3, 5000) + pb_bytes(5, b"x"), False, "request id length")
    add("reply complete", "BACKUP_REPLY", pb_bytes(1, rid) + pb_varint(2, 2) + pb_bytes(3, n1) + pb_varint(4, 5000) + pb_varint(5, 1 << 30) + pb_varint(6, 5000), True)
    add("reply busy too long", "BACKUP_REPLY", pb_bytes(1, rid) + pb_varint(2, 13) + pb_varint(7, 3_600_001), False, "retry_after_ms > 1 h")
    add("snapshot", "BACKUP_SNAPSHOT", pb_bytes(1, rid) + pb_msg(2, good_record), True)
    add("snapshot, blobs unsorted", "BACKUP_SNAPSHOT", pb_bytes(1, rid) + pb_msg(2, record(names[::-1], [], 5110)), False, "blobs not strictly increasing")
    add("snapshot, index not a blob", "BACKUP_SNAPSHOT", pb_bytes(1, rid) + pb_msg(2, record(names, [bytes(32)], 5110)), False, "index blob not in blobs")
    add("snapshot from the future", "BACKUP_SNAPSHOT", pb_bytes(1, rid) + pb_msg(2, record(names, [], 5110, created=NOW_MS + 600_001)), False, "created_at_ms > now + 10 min")
    add("snapshot without a record", "BACKUP_SNAPSHOT", pb_bytes(1, rid), False, "no record")
    add("forget keep 3", "BACKUP_FORGET", pb_bytes(1, rid) + pb_varint(2, 3), True)
    add("forget keep 0", "BACKUP_FORGET", pb_bytes(1, rid), False, "keep_last 0")
    add("forget keep 65", "BACKUP_FORGET", pb_bytes(1, rid) + pb_varint(2, 65), False, "keep_last > 64")
    add("list", "BACKUP_LIST", pb_bytes(1, rid), True)
    add("list reply", "BACKUP_LIST_REPLY", pb_bytes(1, rid) + pb_varint(2, 1) + pb_msg(3, summary) + pb_varint(4, 1 << 30) + pb_varint(5, 5110), True)
    add("prove", "BACKUP_PROVE", pb_bytes(1, rid) + pb_msg(2, challenge), True)
    add("prove, nonce of 16 bytes", "BACKUP_PROVE", pb_bytes(1, rid) + pb_msg(2, pb_bytes(1, n1) + pb_bytes(2, bytes(16))), False, "nonce length")
    add("prove, nothing asked", "BACKUP_PROVE", pb_bytes(1, rid), False, "no challenges")
    add("proof", "BACKUP_PROOF", pb_bytes(1, rid) + pb_varint(2, 1) + pb_msg(3, answer), True)
    add("proof, mac without OK", "BACKUP_PROOF", pb_bytes(1, rid) + pb_varint(2, 1) + pb_msg(3, pb_bytes(1, n1) + pb_varint(2, 12) + pb_bytes(3, bytes(32))), False, "mac with NOT_FOUND")
    add("fetch", "BACKUP_FETCH", pb_bytes(1, rid) + pb_bytes(2, n1) + pb_varint(3, 4096) + pb_varint(4, 262_144), True)
    add("fetch too much", "BACKUP_FETCH", pb_bytes(1, rid) + pb_bytes(2, n1) + pb_varint(4, 262_145), False, "length > 256 KiB")
    add("fetched", "BACKUP_FETCHED", pb_bytes(1, rid) + pb_varint(2, 1) + pb_bytes(3, n1) + pb_varint(4, 5000) + pb_varint(5, 4096) + pb_bytes(6, piece), True)
    add("fetched past the size", "BACKUP_FETCHED", pb_bytes(1, rid) + pb_varint(2, 1) + pb_bytes(3, n1) + pb_varint(4, 5000) + pb_varint(5, 4097) + pb_bytes(6, piece), False, "offset + len(data) > size")
    add("kit put", "BACKUP_KIT_PUT", pb_bytes(1, rid) + pb_bytes(2, locator) + pb_varint(3, NOW_MS) + pb_bytes(4, sealed), True)
    add("kit put, 40 bytes", "BACKUP_KIT_PUT", pb_bytes(1, rid) + pb_bytes(2, locator) + pb_varint(3, NOW_MS) + pb_bytes(4, sealed[:40]), False, "sealed kit < 41 bytes")
    add("kit get", "BACKUP_KIT_GET", pb_bytes(1, rid) + pb_bytes(2, locator) + pb_varint(3, 1), True)
    add("kit get, index 4", "BACKUP_KIT_GET", pb_bytes(1, rid) + pb_bytes(2, locator) + pb_varint(3, 4), False, "index > 3")
    add("kit", "BACKUP_KIT", pb_bytes(1, rid) + pb_varint(2, 1) + pb_varint(3, NOW_MS) + pb_bytes(4, sealed) + pb_bytes(5, label_bytes("owner")) + pb_varint(6, 1), True)
    add("kit not found", "BACKUP_KIT", pb_bytes(1, rid) + pb_varint(2, 12), True)
    add("kit, five under one locator", "BACKUP_KIT", pb_bytes(1, rid) + pb_varint(2, 12) + pb_varint(6, 5), False, "count > 4")

    # Link-authenticated envelopes (README 5.4): BACKUP_PIECE and BACKUP_FETCHED carry 64 zero bytes
    # where a signature would be, and a receiver accepts one only on a link whose Secret Handshake
    # proved the author's key; every other type is signed over its bytes.
    link_authenticated = []
    piece_payload = pb_bytes(1, rid) + pb_bytes(2, n1) + pb_varint(3, 5000) + pb_varint(4, 4096) + pb_bytes(5, piece)
    fetched_payload = pb_bytes(1, rid) + pb_varint(2, 1) + pb_bytes(3, n1) + pb_varint(4, 5000) + pb_varint(5, 4096) + pb_bytes(6, piece)
    for name, t, author, recipient, payload in [
        ("piece from alice to bob", "BACKUP_PIECE", ALICE, BOB, piece_payload),
        ("fetched from bob to alice", "BACKUP_FETCHED", BOB, ALICE, fetched_payload),
    ]:
        type_ = BACKUP_TYPES[t]
        msg_id = mid("link-authenticated/" + t)
        head = (struct.pack(">BH", 1, type_) + msg_id + author.pk + recipient.pk
                + struct.pack(">QI", NOW_MS - 1500, len(payload)))
        env = head + payload + bytes(64)
        # What a receiver must refuse with BAD_SIGNATURE, even on the author's own link: the envelope
        # signed as every other type is, and signed under the digest scheme this one replaced.
        signed = head + payload + author.sign(DOMAIN + head + payload)
        digest = hashlib.blake2b(payload, digest_size=32).digest()
        digest_signed = head + payload + author.sign(DIGEST_DOMAIN + head + digest)
        link_authenticated.append({
            "name": name, "type": "%04x" % type_, "message": t, "author_seed": h(author.seed),
            "author": h(author.pk), "recipient": h(recipient.pk), "message_id": h(msg_id),
            "created_at": NOW_MS - 1500, "payload": h(payload), "envelope": h(env),
            "accepted_on_a_link_from": h(author.pk),
            "refused_on_a_link_from": [h(recipient.pk), h(CAROL.pk)],
            "refused_envelopes": [{"why": "signed over its bytes", "envelope": h(signed)},
                                  {"why": "signed under the digest scheme (tandem-frame-d1)", "envelope": h(digest_signed)}],
        })

    return {
        "description": "Backups held by friends (Protocol/backup.md). 'proofs': blob bytes, its name "
                       "blake2b(blob, outlen 32) and the proof of storage mac = blake2b(blob, key = nonce, outlen 32). "
                       "'kit': a recovery code (16 bytes, tdmr1 text), kit_key and locator derived from it, and the kit "
                       "sealed as nonce || xchacha20poly1305(plaintext, key = kit_key, ad = 'tandem/backup/kit/v1' || locator). "
                       "'messages': payloads of each backup message type with whether the validating decoder accepts them "
                       "(receiver clock now_ms); every valid payload is in canonical encoding, so decoding and re-encoding "
                       "gives the same bytes. 'link_authenticated': envelopes of the link-authenticated types (README 5.4): "
                       "the signature field is 64 zero bytes; a receiver accepts the envelope on a link whose handshake "
                       "proved 'accepted_on_a_link_from' (the author) and refuses it with BAD_SIGNATURE on a link from any "
                       "key in 'refused_on_a_link_from' and when it came any other way (relay mail); each of "
                       "'refused_envelopes' (the same header and payload with a real signature) is refused even on the "
                       "author's link.",
        "now_ms": NOW_MS,
        "proofs": proofs,
        "kit": {
            "code": code_text, "code_bytes": h(code), "kit_key": h(kit_key), "locator": h(locator),
            "plaintext": h(plaintext), "nonce": h(nonce), "sealed": h(sealed),
        },
        "messages": m,
        "link_authenticated": link_authenticated,
    }


# ---------------------------------------------------------------------------------------------

def main():
    handshake, client_keys = gen_handshake()
    files = {
        "keys.json": gen_keys(),
        "ids.json": gen_ids(),
        "handshake.json": handshake,
        "boxstream.json": gen_boxstream(client_keys),
        "frames.json": gen_frames(),
        "identity.json": gen_identity(),
        "relay.json": gen_relay(),
        "backup.json": gen_backup(),
    }
    check = "--check" in sys.argv[1:]
    stale = []
    for name, content in files.items():
        text = json.dumps(content, indent=2, ensure_ascii=False) + "\n"
        path = os.path.join(HERE, name)
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(name)
            except FileNotFoundError:
                stale.append(name)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if check:
        if stale:
            print("out of date: " + ", ".join(stale), file=sys.stderr)
            sys.exit(1)
        print("vectors up to date")
    else:
        print("wrote " + ", ".join(files))


if __name__ == "__main__":
    main()
