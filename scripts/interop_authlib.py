"""private_key_jwt interop: Authlib (authlib.oauth2.rfc7523.PrivateKeyJWT) with requests'
OAuth2Session gets tokens from a running Tessera. Run by scripts/interop.sh, which passes
the commands:

    interop_authlib.py keys DIR        writes DIR/jwks.json (public keys, a kid each) and
                                       DIR/<kid>.pem (private keys), made with cryptography
    interop_authlib.py fetch BASE ID DIR
                                       gets tokens as client ID from the Tessera at BASE
    interop_authlib.py with-key BASE ID PEM
                                       gets a token with the Ed25519 key PEM that
                                       `tessera keys generate-client-key` wrote
    interop_authlib.py secret-basic BASE ID SECRET
                                       runs the client_secret_basic snippet of
                                       docs/client-kit.md as client ID, as written but for
                                       its last line (a request to an API that is not here)

Each check prints one line; any failure ends the run with a non-zero status.
"""

import json
import os
import sys
import time
import warnings
from pathlib import Path

from authlib.integrations.requests_client import OAuth2Session, OAuthError
from authlib.oauth2.rfc7523 import PrivateKeyJWT, private_key_jwt_sign
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from joserfc.jwk import ECKey, OKPKey, RSAKey

# kid -> (alg, key type); one client holds them all in its JWK Set.
KEYS = {
    "ed": ("EdDSA", OKPKey),
    "ec": ("ES256", ECKey),
    "rsa": ("RS256", RSAKey),
    "pss": ("PS256", RSAKey),
}
SCOPE = "news-api"

# joserfc warns that RFC 9864 deprecates "EdDSA" for the fully-specified "Ed25519"; Tessera
# names Ed25519 signatures "EdDSA" (RFC 8037), which is what is tested here.
warnings.filterwarnings("ignore", message="EdDSA is deprecated")


def make_keys(out: Path) -> None:
    private = {
        "ed": ed25519.Ed25519PrivateKey.generate(),
        "ec": ec.generate_private_key(ec.SECP256R1()),
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "pss": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    }
    keys = []
    for kid, key in private.items():
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        (out / f"{kid}.pem").write_bytes(pem)
        alg, kind = KEYS[kid]
        public = kind.import_key(pem).as_dict(private=False)
        keys.append({**public, "kid": kid, "alg": alg, "use": "sig"})
    (out / "jwks.json").write_text(json.dumps({"keys": keys}))


class ShortLivedPrivateKeyJWT(PrivateKeyJWT):
    """PrivateKeyJWT whose assertions live 60 s, not Authlib's default hour: Tessera takes
    assertions that expire within 5 minutes (RFC 7523 section 3 lets the server bound it)."""

    def sign(self, auth, token_endpoint):
        return private_key_jwt_sign(
            auth.client_secret,
            client_id=auth.client_id,
            token_endpoint=token_endpoint,
            alg=self.alg,
            claims=self.claims,
            header=self.headers,
            expires_in=60,
        )


def session(client_id, key, auth):
    s = OAuth2Session(
        client_id,
        key,
        token_endpoint_auth_method="private_key_jwt",
        scope=SCOPE,
    )
    s.register_client_auth_method(auth)
    return s


def fetch(base: str, client_id: str, keys: Path) -> None:
    token_endpoint = f"{base}/connect/token"
    key = {
        kid: kind.import_key((keys / f"{kid}.pem").read_bytes())
        for kid, (_, kind) in KEYS.items()
    }

    def granted(what, s):
        token = s.fetch_token(token_endpoint, grant_type="client_credentials")
        assert token["token_type"] == "Bearer", token
        assert token["access_token"].count(".") == 2, token
        assert token["scope"] == SCOPE, token
        print(f"interop: ok: {what}")

    def refused(what, s, said):
        try:
            s.fetch_token(token_endpoint, grant_type="client_credentials")
        except OAuthError as e:
            assert e.error == "invalid_client", (what, e.error, e.description)
            assert said in (e.description or ""), (what, e.description)
            print(f"interop: ok: {what}: refused, {e.description}")
            return
        raise AssertionError(f"{what}: a token, where a refusal was expected")

    # aud = the issuer identifier (the value RFC 7523bis asks for), every algorithm, the
    # kid in the header or not.
    for kid, (alg, _) in KEYS.items():
        auth = ShortLivedPrivateKeyJWT(base, headers={"kid": kid}, alg=alg)
        granted(f"{alg}, aud = issuer, kid {kid}", session(client_id, key[kid], auth))
    s = session(client_id, key["ed"], ShortLivedPrivateKeyJWT(base, alg="EdDSA"))
    granted("EdDSA, aud = issuer, no kid", s)
    # Two requests of one session: two assertions, each with its own jti.
    granted("EdDSA, aud = issuer, again (a new jti)", s)

    # Authlib's default audience: the URL the request goes to, the token endpoint.
    for kid in ("rsa", "ed"):
        alg = KEYS[kid][0]
        s = session(client_id, key[kid], ShortLivedPrivateKeyJWT(alg=alg))
        granted(f"{alg}, Authlib's default aud = token endpoint URL", s)

    # Authlib as it comes (RS256, aud = token endpoint): its assertions live an hour, past
    # the 5 minutes Tessera accepts, hence the subclass above.
    s = session(client_id, key["rsa"], PrivateKeyJWT(token_endpoint))
    refused("Authlib's default 1-hour assertion", s, "longer than 5 minutes")

    # Extra claims given to PrivateKeyJWT: Authlib writes its jti into that very dict and
    # sends it again with every later assertion, which Tessera refuses as a replay. (Hence
    # the README: no claims= with PrivateKeyJWT.)
    s = session(
        client_id,
        key["ed"],
        ShortLivedPrivateKeyJWT(base, claims={"purpose": "interop"}, alg="EdDSA"),
    )
    granted("EdDSA with claims=, first request", s)
    refused("EdDSA with claims=, second request (Authlib reuses the jti)", s, "used before")

    # Another key under a registered kid, and another audience, are refused.
    stranger = OKPKey.generate_key("Ed25519")
    s = session(client_id, stranger, ShortLivedPrivateKeyJWT(base, headers={"kid": "ed"}, alg="EdDSA"))
    refused("a key the client has not registered", s, "signature does not verify")
    s = session(client_id, key["ed"], ShortLivedPrivateKeyJWT("https://elsewhere.example", alg="EdDSA"))
    refused("aud = another server", s, "aud")


def with_key(base: str, client_id: str, pem: Path) -> None:
    key = OKPKey.import_key(pem.read_bytes())
    s = session(client_id, key, ShortLivedPrivateKeyJWT(base, alg="EdDSA"))
    token = s.fetch_token(f"{base}/connect/token", grant_type="client_credentials")
    assert token["token_type"] == "Bearer", token
    print("interop: ok: Authlib signs with the key tessera keys generate-client-key wrote")


def secret_basic(base: str, client_id: str, secret: str) -> None:
    text = (Path(__file__).resolve().parent.parent / "docs/client-kit.md").read_text()
    start = text.index("Python, with Authlib (`pip install authlib requests`")
    block = text[text.index("```python\n", start) + len("```python\n") :]
    lines = block[: block.index("```")].splitlines()
    kept = [line for line in lines if "api.example.com" not in line]
    assert len(kept) == len(lines) - 1, "the snippet's last line moved"
    os.environ.update(
        TESSERA_AUTH_URL=base, TESSERA_CLIENT_ID=client_id, TESSERA_CLIENT_SECRET=secret
    )
    scope = {}
    exec("\n".join(kept), scope)  # noqa: S102 - the documentation's own code
    s = scope["session"]
    first = s.token["access_token"]
    assert s.token["token_type"] == "Bearer" and first.count(".") == 2, s.token
    # A request re-fetches the token only once it is within `leeway` (30 s) of its end.
    s.get(f"{base}/.well-known/jwks.json").raise_for_status()
    assert s.token["access_token"] == first, "re-fetched a token that was still good"
    s.token["expires_at"] = int(time.time()) + 29
    s.get(f"{base}/.well-known/jwks.json").raise_for_status()
    assert s.token["access_token"] != first, "kept a token 29 s from its end"
    print("interop: ok: Authlib's client_secret_basic snippet (docs/client-kit.md)")


def main() -> None:
    command = sys.argv[1]
    if command == "keys":
        make_keys(Path(sys.argv[2]))
    elif command == "fetch":
        fetch(sys.argv[2].rstrip("/"), sys.argv[3], Path(sys.argv[4]))
    elif command == "with-key":
        with_key(sys.argv[2].rstrip("/"), sys.argv[3], Path(sys.argv[4]))
    elif command == "secret-basic":
        secret_basic(sys.argv[2].rstrip("/"), sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
