#!/usr/bin/env bash
# Instructions per token (issue 31 item 2): a figure that does not move with the machine's
# noise. Runs Tessera and the floor server (bench/floor) under `valgrind --tool=callgrind`,
# sends each a fixed number of token requests over one keep-alive HTTP/1.1 connection, and
# prints the instructions each executed per token and their ratio.
#
#   bench/instructions.sh [--requests N] [--bin PATH] [--default-timers] [--keep DIR]
#
# Each server runs twice, for N and for 3N requests; the difference of the two totals over
# 2N is the cost of a token with start-up, shutdown and the warm-up of the first requests
# taken out. Tessera runs on a fresh SQLite database with one plan and one client, its
# background work (registry sync, housekeeping, full reloads) set an hour apart so that no
# timer fires during a run (work that grows with wall time would make the figure depend on
# how fast the machine was). Both answer the same request with a token of the same claims
# and one Ed25519 signature. Callgrind counts instructions in user space: the kernel's
# share (sockets, futexes) is not in the figure, for either server.
#
# --requests N: the smaller run's requests (default 2000); a run takes about a minute.
# --bin PATH:   measure this tessera binary instead of building this tree's.
# --default-timers: serve with the timers at their defaults (the change-log poll every
#               250 ms, housekeeping every 30 s), for a binary older than `serve --config`;
#               their work then falls in the figure (about the same for every binary, as
#               the runs take about as long), so compare such runs only with each other.
# --keep DIR:   keep the four callgrind outputs there (tessera-N.cg, tessera-3N.cg, floor-...),
#               for a profile: `callgrind_annotate --inclusive=yes DIR/tessera-N.cg` on a
#               binary with symbols (`cargo build --profile profiling`).
#
# Needs valgrind, python3, jq and curl. A regression of more than 3% in Tessera's instructions
# per token is treated as one (BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."

requests=2000
bin=""
default_timers=""
keep=""
while [ $# -gt 0 ]; do
	case $1 in
	--requests) requests=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--default-timers) default_timers=1; shift ;;
	--keep) keep=$2; shift 2 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
for tool in valgrind python3 jq curl; do
	command -v "$tool" >/dev/null || { echo "bench/instructions.sh needs $tool" >&2; exit 1; }
done

target_dir=${CARGO_TARGET_DIR:-target}
if [ -z "$bin" ]; then
	cargo build --release --bin tessera --quiet
	bin="$target_dir/release/tessera"
fi
cargo build --release -p tessera-bench-floor --bin floor --quiet
floor="$target_dir/release/floor"

# The scratch directory, the database, the client and the configuration.
# shellcheck source=bench/one-client.sh
source bench/one-client.sh

# send URL COUNT: COUNT token requests over one connection; fails on any answer but 200.
send() {
	python3 - "$1" "$2" "$id" "$secret" <<'EOF'
import base64, http.client, sys, urllib.parse
url, count, cid, secret = urllib.parse.urlsplit(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
basic = base64.b64encode(f"{cid}:{secret}".encode()).decode()
headers = {"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"}
body = "grant_type=client_credentials&scope=market-data-api%20news-api"
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
for i in range(count):
    conn.request("POST", url.path, body, headers)
    answer = conn.getresponse()
    answer.read()
    if answer.status != 200:
        sys.exit(f"request {i}: {answer.status}")
EOF
}

# measure NAME COUNT: starts server NAME under callgrind, sends COUNT requests, stops it,
# prints the instructions it executed in all.
measure() {
	local name=$1 count=$2 out="$work/$1-$2"
	case $name in
	tessera)
		local settings=(--config "$work/tessera.toml")
		if [ -n "$default_timers" ]; then
			settings=(--listen 127.0.0.1:0 --database "sqlite://$work/tessera.db")
		fi
		valgrind --tool=callgrind --callgrind-out-file="$out.cg" "$bin" serve \
			"${settings[@]}" >"$out.stdout" 2>"$out.stderr" &
		;;
	floor)
		valgrind --tool=callgrind --callgrind-out-file="$out.cg" "$floor" 127.0.0.1:0 "$id" "$secret" \
			>"$out.stdout" 2>"$out.stderr" &
		;;
	esac
	server_pid=$!
	local url=""
	for _ in $(seq 1 600); do
		url=$(sed -n "s/^$name listening on //p" "$out.stdout" | head -n1)
		[ -n "$url" ] && break
		kill -0 "$server_pid" 2>/dev/null || { cat "$out.stderr" >&2; exit 1; }
		sleep 0.1
	done
	[ -n "$url" ] || { echo "$name did not start under valgrind" >&2; exit 1; }
	# Tessera may listen before its registry is loaded (slower under valgrind): wait until
	# it says it is ready, so that no request finds the client unknown.
	if [ "$name" = tessera ]; then
		for _ in $(seq 1 600); do
			[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")" = 200 ] && break
			sleep 0.1
		done
	fi
	send "$url/connect/token" "$count"
	kill -TERM "$server_pid"
	wait "$server_pid" || true
	server_pid=""
	if [ -n "$keep" ]; then mkdir -p "$keep" && cp "$out.cg" "$keep/"; fi
	# The totals line of the callgrind output: instructions executed (Ir).
	awk '/^(summary|totals):/ { print $2; exit }' "$out.cg"
}

echo "instructions per token: $(date -u +%Y-%m-%dT%H:%M:%SZ), $requests and $((3 * requests)) requests per server, binary $bin"
declare -A per_token
for name in tessera floor; do
	small=$(measure "$name" "$requests")
	large=$(measure "$name" $((3 * requests)))
	per_token[$name]=$(((large - small) / (2 * requests)))
	printf '%-8s %12d instructions per token (%d and %d in all)\n' "$name" "${per_token[$name]}" "$small" "$large"
done
awk -v t="${per_token[tessera]}" -v f="${per_token[floor]}" \
	'BEGIN { printf "ratio tessera/floor: %.2f (instructions per token; the floor ratio in tokens/s is about its inverse)\n", t / f }'
