#!/usr/bin/env bash
# API conformance: Schemathesis, a property-based tester, against a running `tessera serve`,
# driven by its own GET /openapi.json (issue 13, docs/testing.md). It generates requests for
# every operation, valid ones and invalid ones, and fails on any 5xx, on a status the
# document does not list for the operation, on a content type, header or body that does not
# match the document.
#
#   scripts/conformance.sh [ARGS...]  about 2 minutes; .ci/run runs it without ARGS, which
#                                     go to `schemathesis run` (e.g. --report har)
#
# Environment:
#   PYTHON                     the Python 3 to build the virtualenv with (default python3)
#   TESSERA_CONFORMANCE_VENV   the virtualenv (default ~/.cache/tessera/schemathesis-venv,
#                              outside the checkout so CI runs on one machine share it)
#   CONFORMANCE_MAX_TIME       seconds Schemathesis may test (default 90)
#   CONFORMANCE_MAX_EXAMPLES   test cases per operation and phase (default 40)
#   CONFORMANCE_SEED           the random seed (default fixed, so a run can be repeated)
#
# The server gets a fresh SQLite database in a temporary folder, with an admin plan and an
# admin client made by the CLI; scripts/conformance.toml hands its Basic credentials to the
# OAuth endpoints and a `tessera-admin` token to the admin API.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
PYTHON=${PYTHON:-python3}
VENV=${TESSERA_CONFORMANCE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/schemathesis-venv}
MAX_TIME=${CONFORMANCE_MAX_TIME:-90}
MAX_EXAMPLES=${CONFORMANCE_MAX_EXAMPLES:-40}
SEED=${CONFORMANCE_SEED:-13}
ISSUER=https://tessera.conformance.test
# Every answer: no 5xx; a status, content type, headers and body as documented. And two of
# the server's promises: an operation that declares a security scheme refuses a request
# without credentials, and a method a path does not have is 405.
CHECKS=not_a_server_error,status_code_conformance,content_type_conformance
CHECKS+=,response_headers_conformance,response_schema_conformance,ignored_auth,unsupported_method

say() { echo "conformance: $*" >&2; }

# The tester: a pinned Schemathesis in a virtualenv, made once and reused while it holds
# that version. No Python is an error, never a reason to skip.
if ! command -v "$PYTHON" >/dev/null; then
    say "no $PYTHON on the PATH: the conformance step needs Python 3 with venv (set PYTHON)"
    exit 1
fi
st="$VENV/bin/schemathesis"
if [[ "$("$st" --version 2>/dev/null)" != "schemathesis, version $SCHEMATHESIS_VERSION" ]]; then
    say "installing Schemathesis $SCHEMATHESIS_VERSION into $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv --clear "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        "schemathesis==$SCHEMATHESIS_VERSION"
    [[ "$("$st" --version)" == "schemathesis, version $SCHEMATHESIS_VERSION" ]]
fi

cargo build --bin tessera
bin=${CARGO_TARGET_DIR:-target}/debug/tessera

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

# The admin plan and client, made by the CLI on the database the server then opens.
db="sqlite://$work/tessera.db"
"$bin" --database "$db" plan set admin --scopes "tessera-admin tessera-admin-read" >/dev/null
client=$("$bin" --database "$db" client create --plan admin --json)
read -r client_id client_secret < <("$PYTHON" -c \
    'import json, sys; c = json.load(sys.stdin); print(c["client_id"], c["client_secret"])' <<<"$client")
[[ -n $client_secret ]] || fail "no admin client"
# An organization with a client, so that the organization operations (issue 28) meet one
# that exists: the hooks send half the requests that name an organization or its client to
# these two.
"$bin" --database "$db" plan set portal --scopes "news-api tessera-org-admin" >/dev/null
"$bin" --database "$db" org create conformance-org --plan portal >/dev/null
org_client=$("$bin" --database "$db" client create --org conformance-org --json)
org_client_id=$("$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["client_id"])' <<<"$org_client")

"$bin" serve --database "$db" --listen 127.0.0.1:0 --issuer "$ISSUER" >"$work/serve.log" 2>&1 &
server=$!
url=
for _ in $(seq 100); do
    url=$(grep -o 'listening on http://[0-9.:]*' "$work/serve.log" | cut -d' ' -f3 || true)
    [[ -n $url ]] && break
    kill -0 "$server" 2>/dev/null || fail "the server exited"
    sleep 0.2
done
[[ -n $url ]] || fail "the server did not say where it listens"

# A token once the server knows the client (it reads the store every second).
token=
for _ in $(seq 50); do
    if answer=$(curl -sf -u "$client_id:$client_secret" -d grant_type=client_credentials \
        -d scope=tessera-admin "$url/connect/token"); then
        token=$("$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["access_token"])' <<<"$answer")
        break
    fi
    sleep 0.2
done
[[ -n $token ]] || fail "no admin token from $url/connect/token"

say "Schemathesis $SCHEMATHESIS_VERSION against $url/openapi.json, at most $MAX_TIME s"
export TESSERA_CONFORMANCE_CLIENT_ID=$client_id
export TESSERA_CONFORMANCE_CLIENT_SECRET=$client_secret
export TESSERA_CONFORMANCE_TOKEN=$token
export TESSERA_CONFORMANCE_ORG=conformance-org
export TESSERA_CONFORMANCE_ORG_CLIENT=$org_client_id
start=$SECONDS
status=0
"$st" --config-file scripts/conformance.toml run "$url/openapi.json" \
    --checks "$CHECKS" \
    --max-time "$MAX_TIME" --max-examples "$MAX_EXAMPLES" --seed "$SEED" \
    --request-timeout 20 --generation-database none --no-color "$@" || status=$?
say "Schemathesis ran $((SECONDS - start)) s"
if [[ $status -ne 0 ]]; then
    fail "Schemathesis found failures (exit $status)"
fi
grep -q ' ERROR ' "$work/serve.log" && fail "the server logged errors"
say "passed"
