#!/usr/bin/env bash
# New connections (issue 31): what a token costs the server when it comes on a new TLS
# connection, as it does for machine clients that fetch one token an hour, with a full
# handshake and with a resumed one, beside the kept-alive figure; for each key type of the
# server's certificate.
#
#   bench/newconn.sh [--requests N] [--concurrency C] [--clients N] [--keys "p256 ed25519 rsa2048"]
#                    [--modes "full resumed keepalive"] [--tls 1.3|1.2] [--bin PATH] [--ticket-key-file]
#
# Builds tessera and bench/floor's tls_load (release), makes a temporary database with a
# plan and N clients (default 10), and for each key type a self-signed certificate for
# localhost with openssl. For each, starts `tessera serve` over HTTPS on core 0 (default
# log), then runs tls_load on core 1 in three modes, each after a warm-up of a tenth:
#   full       a new connection per token, resumption off in the client: full handshakes;
#   resumed    a new connection per token, the client offering the ticket of a previous
#              connection: resumed handshakes (tls_load counts them by kind);
#   keepalive  C kept-alive connections.
# The figure that counts is the server's CPU time per token, utime + stime of its process
# across the measured run (/proc/PID/stat), which a machine shared with other work disturbs
# far less than tokens per wall-clock second; tokens per core-second is its inverse. Wall
# tokens/s is printed too, bound by the load generator's own handshakes.
#
# --keys, --modes: some of the key types and modes, in this order (to alternate them).
# --ticket-key-file: serve with --tls-ticket-key-file (a fresh key), to measure the shared
#                    ticket keys instead of rustls' own.
# --bin: measure this tessera binary instead of building this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."

requests=20000
concurrency=8
clients=10
keys="p256 ed25519 rsa2048"
modes="full resumed keepalive"
tls=1.3
bin=
ticket_key_file=0
while [ $# -gt 0 ]; do
	case $1 in
	--requests) requests=$2; shift 2 ;;
	--concurrency) concurrency=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--keys) keys=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--tls) tls=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--ticket-key-file) ticket_key_file=1; shift ;;
	*) echo "unknown argument $1" >&2; exit 64 ;;
	esac
done
for tool in openssl jq taskset; do
	command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done

target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
if [ -z "$bin" ]; then
	cargo build --release --bin tessera --quiet
	bin="$target_dir/release/tessera"
fi
cargo build --release -p tessera-bench-floor --bin tls_load --quiet
load="$target_dir/release/tls_load"

work=$(mktemp -d)
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

export TESSERA_DATABASE_URL="sqlite://$work/bench.db"
"$bin" keys rotate --activate-in 0 --alg EdDSA >/dev/null
"$bin" plan set bench --scopes "market-data-api news-api oms-api" >/dev/null
"$bin" client create --plan bench --count "$clients" --json >"$work/clients.jsonl"
jq -r '"Basic " + ("\(.client_id):\(.client_secret)" | @base64)' "$work/clients.jsonl" >"$work/auth.txt"
serve_args=()
if [ "$ticket_key_file" = 1 ]; then
	openssl rand -hex 32 >"$work/tickets.keys"
	serve_args=(--tls-ticket-key-file "$work/tickets.keys")
fi

clk_tck=$(getconf CLK_TCK)
# utime + stime of a process, all its threads, in clock ticks.
cpu_ticks() {
	local stat
	stat=$(cat "/proc/$1/stat")
	stat=${stat##*) }
	awk '{ print $12 + $13 }' <<<"$stat"
}

certificate() {
	local key=$1 new
	case $key in
	p256) new=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
	ed25519) new=(-newkey ed25519) ;;
	rsa2048) new=(-newkey rsa:2048) ;;
	*) echo "unknown key type $key" >&2; exit 64 ;;
	esac
	openssl req -x509 "${new[@]}" -nodes -days 2 -subj /CN=localhost \
		-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" \
		-keyout "$work/$key.key" -out "$work/$key.pem" 2>/dev/null
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); TLS $tls; $requests tokens per run, $concurrency at a time"
printf '%-8s %-9s %7s %7s %7s %7s %10s %9s %12s\n' key mode tokens failed full resumed "wall tok/s" "µs/token" "tokens/core-s"
for key in $keys; do
	certificate "$key"
	taskset -c 0 "$bin" serve --listen 127.0.0.1:0 --tls-cert "$work/$key.pem" --tls-key "$work/$key.key" \
		"${serve_args[@]}" >"$work/serve.out" 2>"$work/serve.err" &
	server_pid=$!
	for _ in $(seq 1 300); do
		grep -q '^tessera listening on ' "$work/serve.out" 2>/dev/null && break
		kill -0 "$server_pid" || { cat "$work/serve.err" >&2; exit 1; }
		sleep 0.1
	done
	addr=$(sed -n 's|^tessera listening on https://||p' "$work/serve.out" | head -n1)
	[ -n "$addr" ] || { echo "tessera did not start; see $work/serve.err" >&2; exit 1; }
	for mode in $modes; do
		run() {
			taskset -c 1 "$load" --addr "$addr" --ca "$work/$key.pem" --auth-file "$work/auth.txt" \
				--mode "$mode" --tls "$tls" --concurrency "$concurrency" --requests "$1"
		}
		run $((requests / 10)) >/dev/null
		t0=$(cpu_ticks "$server_pid")
		line=$(run "$requests")
		t1=$(cpu_ticks "$server_pid")
		eval "$(sed -n 's/^RESULT //p' <<<"$line" | tr ' ' '\n' | sed 's/^/r_/')"
		[ "$r_failed" = 0 ] || { echo "$key $mode: $r_failed requests failed: not a figure" >&2; exit 1; }
		awk -v key="$key" -v mode="$mode" -v n="$r_requests" -v failed="$r_failed" -v full="$r_full" \
			-v resumed="$r_resumed" -v s="$r_seconds" -v ticks=$((t1 - t0)) -v hz="$clk_tck" 'BEGIN {
				cpu = ticks / hz
				printf "%-8s %-9s %7d %7d %7d %7d %10.0f %9.1f %12.0f\n", key, mode, n, failed, full, resumed,
					n / s, cpu / n * 1e6, n / cpu
			}'
	done
	kill "$server_pid"
	wait "$server_pid" 2>/dev/null || true
	server_pid=
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
