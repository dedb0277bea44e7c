#!/usr/bin/env bash
# Mutation testing of the modules that decide who gets a token and who may call the admin
# API (docs/testing.md has the results and the reasons for each surviving mutant).
#
# Too slow for every CI run: every server mutant rebuilds tessera-server and its test
# binaries (15 to 40 s each on a 2-core machine). Run it by hand after changing one of these
# modules:
#
#   scripts/mutants.sh [PART...]      default: every part below
#
# Each part names a package, its files, and the tests that judge its mutants: the package's
# own tests, narrowed to the ones that exercise those files where the whole set would take
# minutes per mutant. Outcomes go to mutants.out/PART/mutants.out/: caught.txt, missed.txt,
# timeout.txt, unviable.txt, outcomes.json, and a log per mutant.
#
# --in-place builds the mutants in this work tree with its warm target/ rather than in a
# cold copy: do not edit files while it runs, and check `git status` if it was interrupted.
# Needs cargo-mutants (`cargo install cargo-mutants --locked`; 27.1.0 was used) and the test
# services of the README (PostgreSQL and Redis).
set -euo pipefail
cd "$(dirname "$0")/.."

# A mutant whose tests run longer than this (seconds) is a timeout, e.g. an endless loop.
TIMEOUT=${MUTANTS_TIMEOUT:-120}
# More cargo-mutants options, e.g. a one-in-three sample of a large part:
#   MUTANTS_ARGS="--shard 0/3 --sharding round-robin" scripts/mutants.sh server-mtls
read -r -a EXTRA <<<"${MUTANTS_ARGS:-}"

# run PART PACKAGE "FILE..." [CARGO TEST ARGS...]
run() {
    local part=$1 package=$2 files=$3
    shift 3
    local args=()
    for file in $files; do args+=(--file "$file"); done
    if [ $# -gt 0 ]; then args+=(-- "$@"); fi
    mkdir -p "mutants.out/$part"
    echo "== $part"
    local status=0
    cargo mutants --in-place --package "$package" --timeout "$TIMEOUT" "${EXTRA[@]}" \
        --output "mutants.out/$part" "${args[@]}" || status=$?
    # 2: some mutants were missed, 3: some timed out; both are outcomes, written above.
    # Anything else (bad usage, tests failing before any mutation) stops here.
    case $status in
        0 | 2 | 3) ;;
        *) exit "$status" ;;
    esac
}

P=crates/tessera-proto/src
V=crates/tessera-verify/src
S=crates/tessera-server/src

part() {
    case $1 in
        proto) run proto tessera-proto "$P/form.rs $P/client.rs $P/scope.rs $P/jws.rs" ;;
        # The verify kit: token checks, binding, DPoP proofs and the replay memory; its own
        # unit tests and tests/api (the extractors behind a router, with real proofs).
        verify)
            run verify tessera-verify "$V/validate.rs $V/verifier.rs $V/request.rs $V/dpop.rs $V/binding.rs"
            ;;
        # The grant, client authentication (secrets) and the token route.
        server-auth)
            run server-auth tessera-server "$S/grant/mod.rs $S/grant/client_auth.rs $S/routes/token.rs" \
                --lib --test api
            ;;
        server-limits) run server-limits tessera-server "$S/limits/mod.rs" --lib --test api ;;
        server-secrets) run server-secrets tessera-server "$S/secrets/mod.rs $S/secrets/custody.rs $S/secrets/credentials.rs" --lib --test api ;;
        # Who may call the admin API: tests/api's admin and console tests.
        server-admin-auth)
            run server-admin-auth tessera-server "$S/control/admin/auth.rs" --lib --test api -- admin console
            ;;
        # DPoP at the token endpoint.
        server-dpop) run server-dpop tessera-server "$S/grant/dpop.rs" --lib --test api -- dpop ;;
        # private_key_jwt and federation, their keys' cache and the guarded fetcher.
        server-assertion)
            run server-assertion tessera-server "$S/grant/assertion.rs $S/grant/key_sets.rs $S/fetch.rs" \
                --lib --test api -- assertion federation fetch trust key_sets
            ;;
        # Signing keys: the ring, the bootstrap, reading tokens back (tests/api's key,
        # JWKS, rotation and long-token tests).
        server-keys)
            run server-keys tessera-server "$S/keys.rs" --lib --test api -- key jwks rotat long_token
            ;;
        # The bootstrap's algorithm warning, said at start: the binary's keys tests.
        server-keys-cli)
            local saved=("${EXTRA[@]}")
            EXTRA+=(--test-package tessera --re "in bootstrap")
            run server-keys-cli tessera-server "$S/keys.rs" --test cli -- keys
            EXTRA=("${saved[@]}")
            ;;
        # The registry: the clients, plans and keys kept fresh from the store's changes.
        # Besides its own tests: the organizations' (a client's org), usage (client ids as
        # map keys), discovery (scopes_supported), and the token and audit tests (a scope
        # no plan grants, never named).
        server-registry)
            run server-registry tessera-server "$S/registry/mod.rs $S/registry/clients.rs $S/registry/snapshot.rs $S/registry/sync.rs" \
                --lib --test api -- registry outage sync org usage discovery token audit
            ;;
        # Subject DNs (RFC 4514 parsing, RFC 4517 matching): their unit tests.
        server-dn) run server-dn tessera-server "$S/dn.rs" --lib ;;
        # Certificate client authentication: the binary's end-to-end tests over TLS and
        # through a trusted proxy (tests/cli tls and subject_dn).
        server-mtls)
            local saved=("${EXTRA[@]}")
            EXTRA+=(--test-package tessera)
            run server-mtls tessera-server "$S/mtls.rs" --test cli -- tls subject_dn
            EXTRA=("${saved[@]}")
            ;;
        *)
            echo "unknown part $1" >&2
            exit 64
            ;;
    esac
}

[ $# -gt 0 ] || set -- proto verify server-auth server-limits server-secrets server-admin-auth \
    server-dpop server-assertion server-keys server-keys-cli server-registry server-dn server-mtls
for p in "$@"; do part "$p"; done
