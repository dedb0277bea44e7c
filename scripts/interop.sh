#!/usr/bin/env bash
# private_key_jwt interop (issue 15): a library people build client assertions with, Python
# Authlib's PrivateKeyJWT (authlib.oauth2.rfc7523) on requests' OAuth2Session, gets tokens
# from a running `tessera serve`; `tessera token --private-key` reads the keys that
# Python's cryptography wrote, and Authlib the key that `tessera keys generate-client-key`
# wrote. scripts/interop_authlib.py holds the checks: aud = issuer
# with EdDSA, ES256, RS256 and PS256; Authlib's default aud (the token endpoint URL);
# refusals of Authlib's default one-hour assertion, of a reused jti, of an unknown key and
# of another audience. The client_secret_basic snippets of docs/client-kit.md run as
# written: Authlib's (scripts/interop_authlib.py secret-basic) and openid-client's (Node.js,
# with the checks of scripts/interop_openid_client.mjs after it).
#
#   scripts/interop.sh     2 to 3 s once the virtualenv exists (10 to 40 s to make it);
#                          .ci/run runs it
#
# Environment:
#   PYTHON                   the Python 3 to build the virtualenv with (default python3)
#   TESSERA_INTEROP_VENV     the virtualenv (default ~/.cache/tessera/interop-venv, outside
#                            the checkout so CI runs on one machine share it)
#
# The server gets a fresh SQLite database in a temporary folder; its issuer is its own
# address, http://127.0.0.1:PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned, all of them, so that a run can be repeated; the virtualenv is made again when
# the pins change.
PINS="Authlib==1.9.10 joserfc==1.8.0 requests==2.34.2 cryptography==50.0.2"
PYTHON=${PYTHON:-python3}
VENV=${TESSERA_INTEROP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/interop-venv}

say() { echo "interop: $*" >&2; }

# No Python is an error, never a reason to skip.
if ! command -v "$PYTHON" >/dev/null; then
    say "no $PYTHON on the PATH: the interop step needs Python 3 with venv (set PYTHON)"
    exit 1
fi
if [[ "$(cat "$VENV/tessera-pins" 2>/dev/null)" != "$PINS" ]]; then
    say "installing $PINS into $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv --clear "$VENV"
    # shellcheck disable=SC2086 # the pins are words
    "$VENV/bin/pip" install --quiet --disable-pip-version-check $PINS
    echo "$PINS" >"$VENV/tessera-pins"
fi
py="$VENV/bin/python"

# openid-client, pinned as the docs say "tested with 6.9" (scripts/interop-node's
# package-lock.json), installed when missing or not the locked version. No Node.js is an
# error too.
NODE_DIR=scripts/interop-node
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    say "no node and npm on the PATH: the interop step needs Node.js 20 or later"
    exit 1
fi
if ! node -e "process.exit(require('./$NODE_DIR/node_modules/openid-client/package.json').version === \
      require('./$NODE_DIR/package-lock.json').packages['node_modules/openid-client'].version ? 0 : 1)" \
    2>/dev/null; then
    say "installing openid-client into $NODE_DIR"
    npm ci --prefix "$NODE_DIR" --no-audit --no-fund --silent
fi

cargo build --bin tessera
bin=${CARGO_TARGET_DIR:-target}/debug/tessera

start=$SECONDS
work=$(mktemp -d)
server=
cleanup() {
    if [[ -n $server ]]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    say "$*"
    say "server log (last 50 lines):"
    tail -n 50 "$work/serve.log" >&2 || true
    exit 1
}

# The client's keys, made on the Python side; only the JWK Set goes to Tessera.
"$py" scripts/interop_authlib.py keys "$work"
db="sqlite://$work/tessera.db"
"$bin" --database "$db" plan set pro --scopes "news-api market-data-api" >/dev/null
client=$("$bin" --database "$db" client create --plan pro --auth-method private_key_jwt \
    --jwks-file "$work/jwks.json" --json)
client_id=$("$py" -c 'import json, sys; print(json.load(sys.stdin)["client_id"])' <<<"$client")
[[ -n $client_id ]] || fail "no client"
# A second client, with a key of Tessera's making.
"$bin" keys generate-client-key --out "$work/tessera.pem" >"$work/tessera-jwks.json"
client=$("$bin" --database "$db" client create --plan pro --auth-method private_key_jwt \
    --jwks-file "$work/tessera-jwks.json" --json)
tessera_keyed=$("$py" -c 'import json, sys; print(json.load(sys.stdin)["client_id"])' <<<"$client")
# A client with a secret, for the client_secret_basic snippets.
client=$("$bin" --database "$db" client create --plan pro --json)
secret_id=$("$py" -c 'import json, sys; print(json.load(sys.stdin)["client_id"])' <<<"$client")
secret=$("$py" -c 'import json, sys; print(json.load(sys.stdin)["client_secret"])' <<<"$client")

"$bin" serve --database "$db" --listen 127.0.0.1:0 >"$work/serve.log" 2>&1 &
server=$!
url=
for _ in $(seq 100); do
    url=$(grep -o 'listening on http://[0-9.:]*' "$work/serve.log" | cut -d' ' -f3 || true)
    [[ -n $url ]] && break
    kill -0 "$server" 2>/dev/null || fail "the server exited"
    sleep 0.1
done
[[ -n $url ]] || fail "the server did not say where it listens"

"$py" scripts/interop_authlib.py fetch "$url" "$client_id" "$work" || fail "Authlib failed"
"$py" scripts/interop_authlib.py with-key "$url" "$tessera_keyed" "$work/tessera.pem" ||
    fail "Authlib failed with the key of tessera keys generate-client-key"

"$py" scripts/interop_authlib.py secret-basic "$url" "$secret_id" "$secret" ||
    fail "Authlib's client_secret_basic snippet failed"
# openid-client's snippet as the docs write it, then its checks, run beside node_modules.
ln -s "$PWD/$NODE_DIR/node_modules" "$work/node_modules"
"$py" - "$work/snippet.mjs" <<'PY'
import sys
text = open("docs/client-kit.md").read()
start = text.index("JavaScript, with openid-client 6")
block = text[text.index("```js\n", start) + len("```js\n"):]
block = block[: block.index("```")]
checks = open("scripts/interop_openid_client.mjs").read()
open(sys.argv[1], "w").write(block + "\n" + checks)
PY
TESSERA_AUTH_URL=$url TESSERA_CLIENT_ID=$secret_id TESSERA_CLIENT_SECRET=$secret \
    node "$work/snippet.mjs" || fail "openid-client's snippet failed"

# The other way round: Tessera's CLI signs with the PKCS #8 PEM keys cryptography wrote.
for kid in ed ec rsa; do
    token=$(TESSERA_CLIENT_ID=$client_id TESSERA_TOKEN_CACHE="$work/tokens.json" \
        "$bin" token --env "$url" --scope news-api --no-cache --private-key "$work/$kid.pem") ||
        fail "tessera token --private-key $kid.pem failed"
    [[ $token == *.*.* ]] || fail "tessera token --private-key $kid.pem printed no token"
    say "ok: tessera token --private-key with cryptography's $kid key"
done

grep -q ' ERROR ' "$work/serve.log" && fail "the server logged errors"
say "passed in $((SECONDS - start)) s after the build"
