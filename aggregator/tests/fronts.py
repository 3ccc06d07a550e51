"""Loopback fronts before a private tansu, which serves neither TLS nor
usable SASL (its --cert/--key exclude each other; PLAIN fails with
NoSharedMechanism; SCRAM users cannot be stored in memory).

- `tls LISTEN UPSTREAM CERT KEY [CLIENT_CA]` (tests/tls.rs): terminates TLS
  and pipes to the broker in clear; with CLIENT_CA, a client certificate
  that CA signed is required (mutual TLS).
- `sasl LISTEN UPSTREAM MECHANISM USER PASSWORD` (tests/sasl.rs): performs
  the SASL exchange itself — PLAIN, or SCRAM-SHA-256/512 (RFC 5802/7677) —
  and refuses wrong credentials before forwarding anything but
  ApiVersions; an authenticated connection is piped to the broker as is.

Prints `ready` once listening.
"""
import asyncio
import base64
import hashlib
import hmac
import os
import ssl
import struct
import sys

MODE, LISTEN, UPSTREAM = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if MODE == "sasl":
    MECHANISM, USER, PASSWORD = sys.argv[4], sys.argv[5], sys.argv[6]
    HASH = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}.get(MECHANISM)
SALT, ITERATIONS = os.urandom(16), 4096


async def read_frame(r):
    size = struct.unpack(">i", await r.readexactly(4))[0]
    return await r.readexactly(size)


def frame(body):
    return struct.pack(">i", len(body)) + body


def kstring(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def header(body):
    """api key, version, correlation id, and the offset past the client id."""
    key, version, corr = struct.unpack(">hhi", body[:8])
    n = struct.unpack(">h", body[8:10])[0]
    return key, version, corr, 10 + max(n, 0)


def hmac_(key, msg):
    return hmac.new(key, msg, HASH).digest()


class Scram:
    def __init__(self):
        self.step = 0

    def next(self, data):
        """The server's answer, or None when the client failed."""
        text = data.decode()
        if self.step == 0:
            self.step = 1
            bare = text.split(",", 2)[2]
            attrs = dict(a.split("=", 1) for a in bare.split(","))
            if attrs.get("n") != USER:
                return None
            self.nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
            self.client_first_bare = bare
            self.server_first = "r=%s,s=%s,i=%d" % (
                self.nonce, base64.b64encode(SALT).decode(), ITERATIONS)
            return self.server_first.encode()
        attrs = dict(a.split("=", 1) for a in text.split(","))
        if attrs.get("r") != self.nonce:
            return None
        without_proof = text[: text.rindex(",p=")]
        auth = ",".join([self.client_first_bare, self.server_first, without_proof]).encode()
        salted = hashlib.pbkdf2_hmac(HASH().name, PASSWORD.encode(), SALT, ITERATIONS)
        client_key = hmac_(salted, b"Client Key")
        stored = HASH(client_key).digest()
        signature = hmac_(stored, auth)
        proof = base64.b64decode(attrs["p"])
        if HASH(bytes(a ^ b for a, b in zip(proof, signature))).digest() != stored:
            return None
        server_sig = hmac_(hmac_(salted, b"Server Key"), auth)
        self.step = 2
        return b"v=" + base64.b64encode(server_sig)


async def pipe(r, w):
    try:
        while True:
            data = await r.read(65536)
            if not data:
                break
            w.write(data)
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()


async def tls_handle(r, w):
    try:
        ur, uw = await asyncio.open_connection("127.0.0.1", UPSTREAM)
    except Exception:
        w.close()
        return
    await asyncio.gather(pipe(r, uw), pipe(ur, w))


async def sasl_handle(r, w):
    try:
        ur, uw = await asyncio.open_connection("127.0.0.1", UPSTREAM)
    except Exception:
        w.close()
        return
    scram = Scram()
    try:
        while True:
            body = await read_frame(r)
            key, version, corr, at = header(body)
            if key == 18:  # ApiVersions: the broker's answer.
                uw.write(frame(body))
                await uw.drain()
                w.write(frame(await read_frame(ur)))
            elif key == 17:  # SaslHandshake
                asked = body[at + 2: at + 2 + struct.unpack(">h", body[at:at + 2])[0]].decode()
                err = 0 if asked == MECHANISM else 33
                w.write(frame(struct.pack(">ihi", corr, err, 1) + kstring(MECHANISM)))
            elif key == 36 and version <= 1:  # SaslAuthenticate
                n = struct.unpack(">i", body[at:at + 4])[0]
                data = body[at + 4: at + 4 + n]
                if MECHANISM == "PLAIN":
                    parts = data.split(b"\0")
                    ok = len(parts) == 3 and parts[1:] == [USER.encode(), PASSWORD.encode()]
                    answer, done = (b"" if ok else None), True
                else:
                    answer = scram.next(data)
                    done = scram.step == 2
                if answer is None:
                    msg = kstring("Authentication failed: invalid credentials")
                    out = struct.pack(">ih", corr, 58) + msg + struct.pack(">i", 0)
                    if version >= 1:
                        out += struct.pack(">q", 0)
                    w.write(frame(out))
                    await w.drain()
                    break
                out = struct.pack(">ih", corr, 0) + struct.pack(">h", -1)
                out += struct.pack(">i", len(answer)) + answer
                if version >= 1:
                    out += struct.pack(">q", 0)
                w.write(frame(out))
                await w.drain()
                if done:
                    await asyncio.gather(pipe(r, uw), pipe(ur, w))
                    return
            else:  # anything else before authenticating: refused
                break
            await w.drain()
    except Exception:
        pass
    w.close()
    uw.close()


async def main():
    if MODE == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[4], sys.argv[5])
        if len(sys.argv) > 6 and sys.argv[6]:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(sys.argv[6])
        srv = await asyncio.start_server(tls_handle, "127.0.0.1", LISTEN, ssl=ctx)
    else:
        srv = await asyncio.start_server(sasl_handle, "127.0.0.1", LISTEN)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()


asyncio.run(main())
