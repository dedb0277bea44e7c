#!/usr/bin/env bash
# The resource-server benchmark (issue 17): examples/protected_apis.rs verifying a few
# tokens over and over, as an API sees a handful of clients' cached tokens.
#
#   bench/api.sh [--apis PATH] [--tessera PATH] [--tokens N] [--duration S] [--warmup S]
#                [--connections C] [--limits off|open|counted] [--redis-url URL]
#
# Starts a Tessera with its demo client (on core 1, idle once the tokens are issued), takes N
# tokens (default 10) for market-data-api from it, starts the protected APIs on core 0
# (taskset -c 0) for that issuer, and runs wrk on core 1 (taskset -c 1) for --duration
# seconds (default 10, after --warmup 3) with C connections (default 32) against
# GET /market-data/v1/quotes, the tokens in turn (bench/api.lua). Prints requests/s, the
# APIs' CPU per request and the cores' load. A run with a non-2xx answer or a socket error
# is INVALID.
#
# --limits:  the plan limits (issue 27). `off`: the APIs run with --no-plan-limits. `open`
#            (default): enforced, the demo plan has none for market-data-api (the document
#            is looked up, nothing counted). `counted`: the demo plan gets a rate and a daily
#            quota far above what the run reaches, so every request is counted (GCRA, quota,
#            the RateLimit fields); with --redis-url, counted in that Redis.
# --apis:    measure this protected_apis binary (e.g. one built from another commit) instead
#            of this tree's; --tessera likewise for the issuer.
#
# Honours CARGO_TARGET_DIR. Every process it starts is stopped on exit; all traffic stays on
# 127.0.0.1.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

apis=
tessera=
tokens=10
duration=10
warmup=3
connections=32
limits=open
redis_url=

while [ $# -gt 0 ]; do
	case "$1" in
	--apis) apis=${2:?}; shift 2 ;;
	--tessera) tessera=${2:?}; shift 2 ;;
	--tokens) tokens=${2:?}; shift 2 ;;
	--duration) duration=${2:?}; shift 2 ;;
	--warmup) warmup=${2:?}; shift 2 ;;
	--connections) connections=${2:?}; shift 2 ;;
	--limits) limits=${2:?}; shift 2 ;;
	--redis-url) redis_url=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done

for tool in wrk jq curl taskset; do
	command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores" >&2; exit 1; }

target=${CARGO_TARGET_DIR:-$root/target}
if [ -z "$apis" ] || [ -z "$tessera" ]; then
	echo "== building tessera and protected_apis (release)" >&2
	cargo build --release --bin tessera --example protected_apis --quiet
fi
apis=${apis:-$target/release/examples/protected_apis}
tessera=${tessera:-$target/release/tessera}

work=$(mktemp -d)
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# Waits until the file $1 has a line matching $2, at most 30 s.
wait_line() {
	for _ in $(seq 1 300); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "timed out waiting for '$2' in $1" >&2
	cat "$1" >&2
	return 1
}

RUST_LOG=warn TESSERA_DATABASE_URL="sqlite://$work/tessera.db" taskset -c 1 "$tessera" serve --demo \
	--listen 127.0.0.1:0 >"$work/tessera.out" 2>"$work/tessera.err" &
pids+=($!)
wait_line "$work/tessera.out" '^  client_secret: '
issuer=$(sed -n 's/^tessera listening on //p' "$work/tessera.out" | head -n1)
id=$(awk '/^  client_id:/ { print $2; exit }' "$work/tessera.out")
apis_args=()
case "$limits" in
off) apis_args+=(--no-plan-limits) ;;
open) ;;
counted)
	# The demo client's plan, full, gets limits that count every request and refuse none.
	scopes=$(curl -fsS "$issuer/.well-known/oauth-authorization-server" | jq -r '.scopes_supported | join(" ")')
	TESSERA_DATABASE_URL="sqlite://$work/tessera.db" "$tessera" plan set full --scopes "$scopes" \
		--api-rate market-data-api=1000000/sec --api-quota market-data-api=1000000000/day >/dev/null
	for _ in $(seq 1 100); do
		curl -fsS "$issuer/api-limits/market-data-api" | jq -e '.plans.full.rate' >/dev/null 2>&1 && break
		sleep 0.1
	done
	curl -fsS "$issuer/api-limits/market-data-api" | jq -e '.plans.full.rate' >/dev/null ||
		{ echo "the plan limits did not reach the issuer" >&2; exit 1; }
	[ -n "$redis_url" ] && apis_args+=(--redis-url "$redis_url")
	;;
*) echo "--limits off, open or counted" >&2; exit 2 ;;
esac
secret=$(awk '/^  client_secret:/ { print $2; exit }' "$work/tessera.out")
for _ in $(seq 1 "$tokens"); do
	curl -fsS -u "$id:$secret" -d grant_type=client_credentials -d scope=market-data-api \
		"$issuer/connect/token" | jq -r .access_token
done >"$work/tokens"

taskset -c 0 "$apis" --issuer "$issuer" --listen 127.0.0.1:0 "${apis_args[@]}" >"$work/apis.out" 2>"$work/apis.err" &
apis_pid=$!
pids+=("$apis_pid")
wait_line "$work/apis.out" 'http://127.0.0.1:'
base=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/apis.out" | head -n1)
url="$base/market-data/v1/quotes"
curl -fsS -o /dev/null -H "Authorization: Bearer $(head -n1 "$work/tokens")" "$url"

cpu_ticks() {
	local stat
	stat=$(cat "/proc/$1/stat")
	stat=${stat##*) }
	awk '{ print $12 + $13 }' <<<"$stat"
}
core_ticks() {
	awk -v cpu="cpu$1" '$1 == cpu { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6 }' /proc/stat
}
load() {
	BENCH_TOKEN_FILE=$work/tokens taskset -c 1 wrk -t1 -c"$connections" -d"${1}s" --timeout 5s \
		-s bench/api.lua "$url"
}

echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
[ "$warmup" -gt 0 ] && load "$warmup" >/dev/null
t0=$(cpu_ticks "$apis_pid")
read -r c0 ct0 < <(core_ticks 0)
read -r g0 gt0 < <(core_ticks 1)
load "$duration" --latency >"$work/wrk.txt"
t1=$(cpu_ticks "$apis_pid")
read -r c1 ct1 < <(core_ticks 0)
read -r g1 gt1 < <(core_ticks 1)

line=$(grep '^RESULT ' "$work/wrk.txt") || { cat "$work/wrk.txt" >&2; exit 1; }
requests= duration_us= non2xx= socket_errors= p50_us= p99_us= max_us=
eval "$(tr ' ' '\n' <<<"${line#RESULT }" | grep -E '^[a-z0-9_]+=[0-9]+$')"
verdict=valid
if [ "$non2xx" -gt 0 ] || [ "$socket_errors" -gt 0 ] || [ "$requests" -eq 0 ]; then
	verdict="INVALID (non-2xx $non2xx, socket errors $socket_errors)"
fi
awk -v req="$requests" -v us="$duration_us" -v p50="$p50_us" -v p99="$p99_us" \
	-v ticks=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$tokens" -v conns="$connections" \
	-v c=$((c1 - c0)) -v ct=$((ct1 - ct0)) -v g=$((g1 - g0)) -v gt=$((gt1 - gt0)) \
	-v verdict="$verdict" -v lim="$limits${redis_url:+ (Redis)}" -v loadavg="$(cut -d' ' -f1-3 /proc/loadavg)" '
	BEGIN {
		secs = us / 1e6; cpu = ticks / hz
		printf "limits %s: %d tokens, %d connections: %.0f requests/s, p50 %.2f ms, p99 %.2f ms, APIs CPU %.0f%%, %.1f µs CPU/request  %s\n",
			lim, n, conns, req / secs, p50 / 1000, p99 / 1000, cpu / secs * 100, cpu / req * 1e6, verdict
		printf "core 0 busy %.0f%%, core 1 (wrk, issuer) busy %.0f%%, load average %s\n",
			ct ? c / ct * 100 : 0, gt ? g / gt * 100 : 0, loadavg
	}'
