"""Loopback fronts before a private tansu, which serves neither TLS nor
usable SASL (its --cert/--key exclude each other; PLAIN fails with
NoSharedMechanism; SCRAM users cannot be stored in memory).

- `tls LISTEN UPSTREAM CERT KEY [CLIENT_CA]` (tests/tls.rs): terminates TLS
  and pipes to the broker in clear; with CLIENT_CA, a client certificate
  that CA signed is required (mutual TLS).
- `pipe LISTEN UPSTREAM` (the pipeline bench's plaintext rounds): the same
  piping without TLS, so TLS is all that differs.
- `sasl LISTEN UPSTREAM MECHANISM USER PASSWORD [TOKEN_PORT]`
  (tests/sasl.rs): performs the SASL exchange itself — PLAIN, SCRAM-SHA-256/512
  (RFC 5802/7677) or OAUTHBEARER (RFC 7628) — and refuses wrong credentials
  before forwarding anything but ApiVersions; an authenticated connection is
  piped to the broker as is. With OAUTHBEARER, USER and PASSWORD are an OAuth
  client's id and secret, and TOKEN_PORT serves the client-credentials token
  endpoint (`POST /token`, HTTP Basic client authentication, RFC 6749 §4.4)
  that issues HMAC-signed JWTs; the front accepts only a bearer token it
  signed, unexpired, whose `sub` is that client.

Prints `ready` once listening.
"""
import asyncio
import base64
import hashlib
import hmac
import json
import os
import ssl
import struct
import sys
import time

MODE, LISTEN, UPSTREAM = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if MODE == "sasl":
    MECHANISM, USER, PASSWORD = sys.argv[4], sys.argv[5], sys.argv[6]
    HASH = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}.get(MECHANISM)
# FRONT_RECORD: a file the SASL front appends each asked mechanism to.
RECORD = os.environ.get("FRONT_RECORD")
SALT, ITERATIONS = os.urandom(16), 4096
JWT_KEY = os.urandom(32)


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


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def jwt(sub, lifetime=3600):
    now = int(time.time())
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = {"sub": sub, "iat": now, "exp": now + lifetime, "scope": "kafka"}
    body = head + "." + b64url(json.dumps(claims).encode())
    return body + "." + b64url(hmac.new(JWT_KEY, body.encode(), hashlib.sha256).digest())


def bearer_ok(data):
    """An OAUTHBEARER client-first message (`n,,^Aauth=Bearer T^A…^A^A`)
    carrying a token this front signed, unexpired, for USER."""
    parts = data.decode(errors="replace").split("\x01")
    auth = [p for p in parts if p.startswith("auth=")]
    if not parts[0].startswith("n,") or len(auth) != 1:
        return False
    scheme, _, token = auth[0][len("auth="):].partition(" ")
    pieces = token.split(".")
    if scheme.lower() != "bearer" or len(pieces) != 3:
        return False
    signed = hmac.new(JWT_KEY, (pieces[0] + "." + pieces[1]).encode(), hashlib.sha256).digest()
    try:
        claims = json.loads(unb64url(pieces[1]))
        good = hmac.compare_digest(unb64url(pieces[2]), signed)
    except Exception:
        return False
    return good and claims.get("sub") == USER and claims.get("exp", 0) > time.time()


async def token_handle(r, w):
    """The OAuth token endpoint: client credentials in HTTP Basic."""
    try:
        head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = dict(
            (k.strip().lower(), v.strip()) for k, _, v in (h.partition(":") for h in head[1:] if h))
        body = (await r.readexactly(int(fields.get("content-length", "0")))).decode()
        form = dict(p.partition("=")[::2] for p in body.split("&") if p)
        want = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()
        if head[0].startswith("POST ") and fields.get("authorization") == want \
                and form.get("grant_type") == "client_credentials":
            status = "200 OK"
            out = json.dumps({"access_token": jwt(USER), "token_type": "Bearer",
                              "expires_in": 3600}).encode()
        else:
            status, out = "401 Unauthorized", b'{"error":"invalid_client"}'
        w.write(("HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                 "Content-Length: %d\r\nConnection: close\r\n\r\n" % (status, len(out))).encode() + out)
        await w.drain()
    except Exception:
        pass
    w.close()


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


async def forward(r, w):
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
                if RECORD:  # every mechanism a client asks for, one a line
                    with open(RECORD, "a") as f:
                        f.write(asked + "\n")
                err = 0 if asked == MECHANISM else 33
                w.write(frame(struct.pack(">ihi", corr, err, 1) + kstring(MECHANISM)))
            elif key == 36 and version <= 1:  # SaslAuthenticate
                n = struct.unpack(">i", body[at:at + 4])[0]
                data = body[at + 4: at + 4 + n]
                if MECHANISM == "PLAIN":
                    parts = data.split(b"\0")
                    ok = len(parts) == 3 and parts[1:] == [USER.encode(), PASSWORD.encode()]
                    answer, done = (b"" if ok else None), True
                elif MECHANISM == "OAUTHBEARER":
                    answer, done = (b"" if bearer_ok(data) else None), True
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
        srv = await asyncio.start_server(forward, "127.0.0.1", LISTEN, ssl=ctx)
    elif MODE == "pipe":
        srv = await asyncio.start_server(forward, "127.0.0.1", LISTEN)
    else:
        srv = await asyncio.start_server(sasl_handle, "127.0.0.1", LISTEN)
        if MECHANISM == "OAUTHBEARER":
            await asyncio.start_server(token_handle, "127.0.0.1", int(sys.argv[7]))
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()


asyncio.run(main())
