#!/usr/bin/env bash
# Mutation testing of the modules that decide who gets a token (docs/testing.md has the
# results and the reasons for each surviving mutant).
#
# Too slow for every CI run: 20 to 30 minutes for all parts on a 2-core machine, and
# more when the machine is busy, since every server mutant rebuilds tessera-server and its
# test binaries. Run it by hand after changing one of these modules:
#
#   scripts/mutants.sh [PART...]      PART: proto, verify, server (default: all three),
#                                     or one server file: server-auth, server-limits,
#                                     server-token, server-secrets
#
# Each part runs only its own package's tests (the default of cargo mutants; for the server
# that is its unit tests and tests/api, the real server over HTTP) and writes its outcome to
# mutants.out/PART/mutants.out/: caught.txt, missed.txt, timeout.txt, unviable.txt,
# outcomes.json, and a log per mutant.
#
# --in-place builds the mutants in this work tree with its warm target/ rather than in a
# cold copy: do not edit files while it runs, and check `git status` if it was interrupted.
# Needs cargo-mutants (`cargo install cargo-mutants --locked`) and the test services of the
# README (PostgreSQL and Redis, for the server's cluster tests).
set -euo pipefail
cd "$(dirname "$0")/.."

# A mutant whose tests run longer than this (seconds) is a timeout, e.g. an endless loop.
TIMEOUT=${MUTANTS_TIMEOUT:-120}

run() {
    local part=$1 package=$2
    shift 2
    local files=()
    for file in "$@"; do files+=(--file "$file"); done
    mkdir -p "mutants.out/$part"
    echo "== $part"
    local status=0
    cargo mutants --in-place --package "$package" "${files[@]}" --timeout "$TIMEOUT" \
        --output "mutants.out/$part" || status=$?
    # 2: some mutants were missed, 3: some timed out; both are outcomes, written above.
    # Anything else (bad usage, tests failing before any mutation) stops here.
    case $status in
        0 | 2 | 3) ;;
        *) exit "$status" ;;
    esac
}

SERVER=crates/tessera-server/src
declare -A SERVER_FILES=(
    [auth]=$SERVER/auth.rs
    [limits]=$SERVER/limits/mod.rs
    [token]=$SERVER/routes/token.rs
    [secrets]=$SERVER/secrets.rs
)

[ $# -gt 0 ] || set -- proto verify server
for part in "$@"; do
    case $part in
        proto)
            run proto tessera-proto \
                crates/tessera-proto/src/form.rs crates/tessera-proto/src/client.rs \
                crates/tessera-proto/src/scope.rs crates/tessera-proto/src/jws.rs
            ;;
        verify)
            run verify tessera-verify crates/tessera-verify/src/validate.rs
            ;;
        server)
            run server tessera-server "${SERVER_FILES[auth]}" "${SERVER_FILES[limits]}" \
                "${SERVER_FILES[token]}" "${SERVER_FILES[secrets]}"
            ;;
        server-*)
            file=${SERVER_FILES[${part#server-}]:-}
            [ -n "$file" ] || { echo "unknown part $part" >&2; exit 64; }
            run "$part" tessera-server "$file"
            ;;
        *)
            echo "unknown part $part" >&2
            exit 64
            ;;
    esac
done
