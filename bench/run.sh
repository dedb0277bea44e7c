#!/usr/bin/env bash
# The token-endpoint benchmark (issues 6 and 17): Tessera against node-oidc-provider and
# against a floor server, all pinned to one core, issuing EdDSA JWT access tokens over
# keep-alive HTTP/1.1.
#
#   bench/run.sh [--duration S] [--warmup S] [--connections "32 256 1024"] [--clients "10 100000"]
#                [--no-node] [--no-floor] [--profile] [--smoke] [--tls] [--alg EdDSA|ES256|RS256|PS256]
#                [--auth secret|private_key_jwt] [--assertions A] [--bin PATH]
#
# For each client count N, on a fresh temporary database: creates a plan and N clients,
# starts the server on core 0 (taskset -c 0), waits for it, warms up, then runs wrk on core 1
# (taskset -c 1) for --duration seconds against the token endpoint with Basic authentication
# spread over the N clients. Tessera runs twice per N at the first connection count: with its
# default log level (one audit line per token on stderr) and with RUST_LOG=warn; then once,
# default log, at each further connection count. node-oidc-provider runs once per N with the
# same clients, and the floor (bench/floor) once per N with the first client alone, both at
# the first connection count. Every row names its connection count. A run with any non-2xx
# answer or socket error is printed as INVALID, with one exception below.
#
# --connections: wrk's connections, one count or several (default 32). The first count is
#            the measured baseline. The further counts are overload rows: there a 503 from
#            Tessera's in-flight cap ("server busy") is load shed as designed, counted apart
#            as "shed N" and left out of tokens/s; any other non-2xx still makes the row
#            INVALID. wrk connects from 127.0.0.1 alone, which Tessera caps at 1,000
#            connections (--max-connections-per-address): for a count above that, Tessera is
#            started with the cap raised to 10,000, as behind a load balancer. The open-file
#            limit is raised to fit the largest count where the hard limit allows.
# --no-floor: skip the floor. The floor is the least work that answers the same requests
#            with the same tokens: hyper on one thread, Basic decoding of one fixed
#            credential, the same claims and one Ed25519 signature with aws-lc-rs. The run
#            ends with Tessera's tokens/s as a ratio of the floor's (and of node's).
#            Only with --auth secret.
# --profile: at N=10, also records the loaded Tessera with perf for 5 s and prints the top of
#            `perf report --no-children --sort symbol`. Builds the `profiling` profile (the
#            release build with symbols, which the shipped release binary lacks).
# --smoke:   1 s runs, N=10 only, node only if node and npm are installed; exits 0 when every
#            answer was 2xx. Cheap enough for CI.
# --alg:     the signing algorithm of Tessera's key (default EdDSA; node-oidc-provider and
#            the floor keep their own, EdDSA).
# --tls:     also, at the first N, Tessera over HTTPS (a self-signed P-256 certificate, default
#            log): keep-alive HTTP/1.1 (tls-ka), a new connection and TLS handshake per request
#            (tls-new, Connection: close; resumption by session ticket where wrk's OpenSSL
#            offers it), and HTTP/2 through h2load with one client's credentials (tls-h2,
#            installs nghttp2-client when missing).
# --auth:    how clients authenticate: secret (the default, HTTP Basic) or private_key_jwt
#            (RFC 7523: the N clients share one Ed25519 key, and every request carries a
#            fresh signed assertion, since each jti is single-use). The assertions are made
#            by bench/floor/src/mint_assertions.rs after each server start (their aud is its
#            issuer), A for the measured run and as many per second for the warm-up, and
#            sent once each by bench/assertion.lua. Not with node-oidc-provider or --tls.
#            The server (no Redis) remembers at most 200,000 jtis per 12 minutes and refuses
#            assertions beyond: keep warm-up and run under that (about 20 s at 10,000/s),
#            or the run is INVALID.
# --assertions: A, the assertions made for one measured run (default 40,000 per second of
#            --duration, at most 400,000); too few makes the run INVALID (replays refused).
# --bin:     measure this tessera binary instead of building this tree's (e.g. another
#            commit's, built in its own worktree), with this tree's scripts and floor.
#
# Large N (1,000,000): creating the clients takes a while, and Tessera's start-up wait grows
# with N. node-oidc-provider gets a larger heap and start-up wait; if it still does not come
# up, its row says so and the run goes on without it (the floor needs one client only).
#
# Honours CARGO_TARGET_DIR. Results and the perf report go to bench/out/ (BENCH_OUT).
# Every process it starts is stopped on exit. All traffic stays on 127.0.0.1.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
invoked_from=$PWD
cd "$root"

duration=10
warmup=3
connections=32
client_counts="10 100000"
with_node=1
with_floor=1
profile=0
smoke=0
tls=0
alg=EdDSA
auth_method=secret
assertions=
bin=

usage() {
	sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case "$1" in
	--duration) duration=${2:?}; shift 2 ;;
	--warmup) warmup=${2:?}; shift 2 ;;
	--connections) connections=${2:?}; shift 2 ;;
	--clients) client_counts=${2:?}; shift 2 ;;
	--no-node) with_node=0; shift ;;
	--no-floor) with_floor=0; shift ;;
	--profile) profile=1; shift ;;
	--smoke) smoke=1; shift ;;
	--tls) tls=1; shift ;;
	--alg) alg=${2:?}; shift 2 ;;
	--auth) auth_method=${2:?}; shift 2 ;;
	--assertions) assertions=${2:?}; shift 2 ;;
	--bin) bin=${2:?}; shift 2 ;;
	-h | --help) usage 0 ;;
	*) echo "unknown argument: $1" >&2; usage 2 ;;
	esac
done

# shellcheck disable=SC2086 # the counts are lists
for value in "$duration" "$warmup" $connections ${assertions:+"$assertions"}; do
	[[ $value =~ ^[0-9]+$ ]] || { echo "not a whole number: $value" >&2; exit 2; }
done
read -r -a connection_counts <<<"$connections"
[ "${#connection_counts[@]}" -gt 0 ] || { echo "--connections needs a count" >&2; exit 2; }
for value in "${connection_counts[@]}"; do
	[ "$value" -gt 0 ] || { echo "--connections: a count must be at least 1" >&2; exit 2; }
done
base_conns=${connection_counts[0]}
max_conns=$(printf '%s\n' "${connection_counts[@]}" | sort -n | tail -n1)
# The connection count of the wrk runs in progress.
conns=$base_conns
case "$auth_method" in
secret | private_key_jwt) ;;
*) echo "--auth is secret or private_key_jwt, not $auth_method" >&2; exit 2 ;;
esac

if [ "$smoke" = 1 ]; then
	duration=1
	warmup=0
	client_counts=10
	profile=0
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		with_node=0
	fi
fi

if [ "$auth_method" = private_key_jwt ]; then
	if [ "$with_node" = 1 ] || [ "$tls" = 1 ]; then
		echo "--auth private_key_jwt: add --no-node, and leave out --tls" >&2
		exit 2
	fi
	# The floor knows HTTP Basic only.
	with_floor=0
	# Made per run: A for the measured run, as many per second for the warm-up.
	[ -n "$assertions" ] || assertions=$((duration * 40000 < 400000 ? duration * 40000 : 400000))
	[ "$assertions" -gt 0 ] || { echo "--assertions must be at least 1" >&2; exit 2; }
fi

out=${BENCH_OUT:-$root/bench/out}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-bench.XXXXXX")
pids=()

stop_pid() {
	local pid=$1
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		stop_pid "$pid"
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "== $*" >&2; }

# --- tools -------------------------------------------------------------------------------

apt_updated=0
apt_install() {
	local sudo=()
	[ "$(id -u)" = 0 ] || sudo=(sudo)
	if [ "$apt_updated" = 0 ]; then
		"${sudo[@]}" apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
}

# wrk from Debian: no build step, and a Lua hook per response to count non-2xx answers.
command -v wrk >/dev/null || { log "installing wrk"; apt_install wrk; }
command -v jq >/dev/null || { log "installing jq"; apt_install jq; }
command -v curl >/dev/null || { log "installing curl"; apt_install curl; }
command -v taskset >/dev/null || { log "installing util-linux"; apt_install util-linux; }
if [ "$tls" = 1 ] && ! command -v h2load >/dev/null; then
	log "installing nghttp2-client (h2load)"
	apt_install nghttp2-client
fi
if [ "$tls" = 1 ] && ! command -v openssl >/dev/null; then
	log "installing openssl"
	apt_install openssl
fi
if [ "$profile" = 1 ] && ! command -v perf >/dev/null; then
	log "installing linux-perf"
	apt_install linux-perf
fi
if [ "$(nproc)" -lt 2 ]; then
	echo "needs 2 cores: the server on core 0, the load generator on core 1" >&2
	exit 1
fi
# wrk and the server each hold one descriptor per connection, and more besides (the database,
# the log, the listener); the limit is inherited by every process started here.
fds_needed=$((max_conns + 256))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$fds_needed" ]; then
	ulimit -n "$fds_needed" 2>/dev/null || {
		echo "--connections $max_conns needs $fds_needed open files; the hard limit is $(ulimit -Hn)" >&2
		exit 1
	}
fi

target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
if [ -n "$bin" ]; then
	tessera=$(cd "$invoked_from" && realpath "$bin")
	[ -x "$tessera" ] || { echo "not an executable: $bin" >&2; exit 2; }
else
	if [ "$profile" = 1 ]; then
		# The release profile strips symbols: perf needs the profiling profile's (Cargo.toml).
		log "building tessera (profiling: release with symbols)"
		cargo build --profile profiling --bin tessera --quiet
		tessera="$target_dir/profiling/tessera"
	else
		log "building tessera (release)"
		cargo build --release --bin tessera --quiet
		tessera="$target_dir/release/tessera"
	fi
fi
if [ "$with_floor" = 1 ]; then
	log "building the floor (release)"
	cargo build --release -p tessera-bench-floor --quiet
	floor="$target_dir/release/floor"
fi
if [ "$auth_method" = private_key_jwt ]; then
	# Built on its own, with the floor's package: none of its features may reach the
	# measured binary.
	log "building bench/floor/src/mint_assertions.rs (release)"
	cargo build --release -p tessera-bench-floor --bin mint_assertions --quiet
	mint="$target_dir/release/mint_assertions"
fi

if [ "$with_node" = 1 ] && [ ! -d bench/node/node_modules ]; then
	log "installing node-oidc-provider (npm ci)"
	(cd bench/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

clk_tck=$(getconf CLK_TCK)

# --- measuring ---------------------------------------------------------------------------

# utime + stime of a process, all its threads, in clock ticks.
cpu_ticks() {
	local stat
	stat=$(cat "/proc/$1/stat")
	stat=${stat##*) }
	# Fields after the command name: state is field 3, utime 14, stime 15.
	awk '{ print $12 + $13 }' <<<"$stat"
}

# Busy and total ticks of one core, from /proc/stat.
core_ticks() {
	awk -v cpu="cpu$1" '$1 == cpu { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6 }' /proc/stat
}

# Waits until $2 (a command) succeeds, at most $3 seconds, while process $1 lives.
wait_for() {
	local pid=$1 check=$2 seconds=$3
	for _ in $(seq 1 $((seconds * 10))); do
		kill -0 "$pid" 2>/dev/null || return 1
		eval "$check" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

invalid=0
results="$out/results.txt"
: >"$results"

row() { printf '%-8s %7s %5s %-7s %9s %8s %8s %9s %8s %8s %9s  %s\n' "$@"; }

header() {
	row server N conns log tokens/s "p50 ms" "p99 ms" "cpu-s/1k" "µs/tok" "srv cpu" "RSS MiB" verdict | tee -a "$results"
}

# wrk_load URL AUTH PHASE SECONDS [WRK ARGS...]: one wrk run on core 1 with this --auth's
# script. AUTH is the file of Authorization values (secret) or the prefix of the assertion
# files, one per PHASE (private_key_jwt: AUTH.warmup, AUTH.run, AUTH.profile).
wrk_load() {
	local url=$1 auth=$2 phase=$3 seconds=$4
	shift 4
	if [ "$auth_method" = private_key_jwt ]; then
		BENCH_ASSERTION_FILE=$auth.$phase taskset -c 1 wrk -t1 -c"$conns" -d"${seconds}s" --timeout 5s \
			"$@" -s bench/assertion.lua "$url"
	else
		BENCH_CLOSE=${BENCH_CLOSE:-0} BENCH_AUTH_FILE=$auth taskset -c 1 wrk -t1 -c"$conns" -d"${seconds}s" --timeout 5s \
			"$@" -s bench/token.lua "$url"
	fi
}

# run_load NAME N LOGMODE PID URL AUTH: warm-up, then the measured run; prints a row.
run_load() {
	local name=$1 n=$2 mode=$3 pid=$4 url=$5 auth=$6
	local raw="$out/wrk-$name-$n-$mode.txt"
	if [ "$warmup" -gt 0 ]; then
		wrk_load "$url" "$auth" warmup "$warmup" >/dev/null
	fi
	local t0 t1 c0 c1 g0 g1
	t0=$(cpu_ticks "$pid")
	read -r c0 ct0 < <(core_ticks 0)
	read -r g0 gt0 < <(core_ticks 1)
	wrk_load "$url" "$auth" run "$duration" --latency >"$raw"
	t1=$(cpu_ticks "$pid")
	read -r c1 ct1 < <(core_ticks 0)
	read -r g1 gt1 < <(core_ticks 1)
	local hwm
	hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")

	local line
	line=$(grep '^RESULT ' "$raw") || { echo "wrk printed no RESULT; see $raw" >&2; return 1; }
	# The key=value pairs of the RESULT line, digits only, become these locals.
	local requests duration_us non2xx socket_errors p50_us p99_us max_us shed=0
	eval "$(tr ' ' '\n' <<<"${line#RESULT }" | grep -E '^[a-z0-9_]+=[0-9]+$')"

	# Shed answers are load refused as designed in an overload row, and an error anywhere else.
	local verdict=valid tokens=$((requests - shed))
	if [ "$conns" = "$base_conns" ] && [ "$shed" -gt 0 ]; then
		non2xx=$((non2xx + shed))
	elif [ "$shed" -gt 0 ]; then
		verdict="valid, shed $shed (503 busy)"
	fi
	if [ "$non2xx" -gt 0 ] || [ "$socket_errors" -gt 0 ] || [ "$tokens" -le 0 ]; then
		verdict="INVALID (non-2xx $non2xx, socket errors $socket_errors)"
		invalid=1
	fi
	awk -v name="$name" -v n="$n" -v conns="$conns" -v mode="$mode" -v req="$tokens" -v us="$duration_us" \
		-v p50="$p50_us" -v p99="$p99_us" -v max="$max_us" -v ticks=$((t1 - t0)) -v hz="$clk_tck" -v hwm="$hwm" \
		-v c="$((c1 - c0))" -v ct="$((ct1 - ct0))" -v g="$((g1 - g0))" -v gt="$((gt1 - gt0))" \
		-v verdict="$verdict" '
		BEGIN {
			secs = us / 1e6; cpu = ticks / hz
			core0 = ct ? c / ct * 100 : 0; core1 = gt ? g / gt * 100 : 0
			# Not invalid, but not a clean figure either: other work shared the server core,
			# or the generator ran out of core.
			if (core0 - cpu / secs * 100 > 10) verdict = verdict ", NOISY: core 0 shared"
			if (core1 > 90) verdict = verdict ", NOISY: wrk core saturated"
			rate = req / secs
			per1k = req > 0 ? cpu / req * 1000 : 0
			printf "%-8s %7s %5s %-7s %9.0f %8.2f %8.2f %9.4f %8.1f %7.0f%% %9.1f  %s\n",
				name, n, conns, mode, rate, p50 / 1000, p99 / 1000, per1k, per1k * 1000,
				cpu / secs * 100, hwm / 1024, verdict
			# How busy both cores were: core 0 beyond the server is interference.
			printf "         core 0 busy %.0f%% (server %.0f%%), core 1 (wrk) busy %.0f%%, max latency %.1f ms\n",
				core0, cpu / secs * 100, core1, max / 1000
		}' | tee -a "$results"
	echo "$name $n $conns $mode $tokens $duration_us" >>"$work/rates"
}

# --- the servers -------------------------------------------------------------------------

# How long a server may take to load N clients and listen, in seconds: set per N.
start_wait=30

# start_tessera DB LOGMODE [SERVE ARGS...]: starts the server, sets server_pid and server_url.
start_tessera() {
	local db=$1 mode=$2
	shift 2
	local stdout="$work/tessera-$mode.out" env=()
	[ "$mode" = warn ] && env=(RUST_LOG=warn)
	env "${env[@]}" TESSERA_DATABASE_URL="sqlite://$db" taskset -c 0 "$tessera" serve \
		--listen 127.0.0.1:0 --signing-alg "$alg" "$@" >"$stdout" 2>"$work/tessera-$mode.err" &
	server_pid=$!
	pids+=("$server_pid")
	wait_for "$server_pid" "grep -q '^tessera listening on ' '$stdout'" "$start_wait" ||
		{ echo "tessera did not start; see $work/tessera-$mode.err" >&2; cat "$work/tessera-$mode.err" >&2; exit 1; }
	local base
	base=$(sed -n 's/^tessera listening on //p' "$stdout" | head -n1)
	wait_for "$server_pid" "curl -fsS ${CURL_TLS:-} '$base/readyz'" "$start_wait" ||
		{ echo "tessera not ready" >&2; exit 1; }
	server_url="$base/connect/token"
}

# start_node CLIENTS_FILE N: starts node-oidc-provider, sets server_pid and server_url; fails
# (and stops it) when it does not come up in time.
start_node() {
	local clients=$1 n=$2 stdout="$work/node.out" heap=()
	# V8 sizes its old space by the machine's memory (4 GiB with 24 GiB, less with less); a
	# million static clients take about 2.4 GiB.
	[ "$n" -gt 200000 ] && heap=(--max-old-space-size=8192)
	NODE_ENV=production taskset -c 0 node "${heap[@]}" bench/node/server.mjs 0 "$clients" >"$stdout" 2>"$work/node.err" &
	server_pid=$!
	pids+=("$server_pid")
	# Loading 100,000 static clients takes a while; a million, much longer.
	if ! wait_for "$server_pid" "grep -q '^ready ' '$stdout'" "$node_wait"; then
		if kill -0 "$server_pid" 2>/dev/null; then
			node_failure="not ready within $node_wait s"
		else
			node_failure="exited before it was ready"
		fi
		echo "node-oidc-provider (N=$n): $node_failure; its stderr ends:" >&2
		tail -n 20 "$work/node.err" >&2
		stop_server
		return 1
	fi
	server_url="http://127.0.0.1:$(sed -n 's/^ready //p' "$stdout" | head -n1)/token"
}

# start_floor AUTHFILE: starts the floor for the first client of AUTHFILE ("Basic …"), sets
# server_pid and server_url.
start_floor() {
	local stdout="$work/floor.out" credentials
	credentials=$(head -n1 "$1" | sed 's/^Basic //' | base64 -d)
	taskset -c 0 "$floor" 127.0.0.1:0 "${credentials%%:*}" "${credentials#*:}" >"$stdout" 2>"$work/floor.err" &
	server_pid=$!
	pids+=("$server_pid")
	wait_for "$server_pid" "grep -q '^floor listening on ' '$stdout'" 10 ||
		{ echo "the floor did not start:" >&2; cat "$work/floor.err" >&2; exit 1; }
	server_url="$(sed -n 's/^floor listening on //p' "$stdout" | head -n1)/connect/token"
}

stop_server() {
	stop_pid "$server_pid"
	local kept=() pid
	for pid in "${pids[@]}"; do
		[ "$pid" = "$server_pid" ] || kept+=("$pid")
	done
	pids=("${kept[@]+"${kept[@]}"}")
}

# One token request with the first client; prints the JWT header and sets token_claims to
# the names of its claims, fails on non-200.
token_claims=
check_token() {
	local url=$1 auth=$2 token
	if [ "$auth_method" = private_key_jwt ]; then
		token=$(curl -fsS -d grant_type=client_credentials -d scope=market-data-api \
			-d client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer \
			-d client_assertion="$(head -n1 "$auth.check")" "$url" | jq -r .access_token)
	else
		token=$(curl -fsS ${CURL_TLS:-} -H "Authorization: $(head -n1 "$auth")" \
			-d grant_type=client_credentials -d scope=market-data-api "$url" | jq -r .access_token)
	fi
	local head=${token%%.*} claims=${token#*.}
	claims=${claims%%.*}
	echo "   first token's header: $(base64url_decode "$head")" >&2
	token_claims=$(base64url_decode "$claims" | jq -c 'keys')
}

base64url_decode() {
	local data
	data=$(tr '_-' '/+' <<<"$1")
	while [ $((${#data} % 4)) -ne 0 ]; do data="$data="; done
	base64 -d <<<"$data"
}

# mint_assertions N PREFIX ISSUER: fresh assertions of the N clients for this server, on
# core 1 while the server idles: PREFIX.check (one), .warmup, .run and, with --profile, .profile.
mint_assertions() {
	local n=$1 prefix=$2 issuer=$3 started=$SECONDS phase count
	for phase in check warmup run profile; do
		case $phase in
		check) count=1 ;;
		warmup) count=$((assertions * warmup / duration)) ;;
		run) count=$assertions ;;
		profile) [ "$profile" = 1 ] && [ "$n" = 10 ] || continue; count=$((assertions * 8 / duration)) ;;
		esac
		# Five minutes, the longest Tessera accepts: minting and the runs fit well within.
		taskset -c 1 "$mint" mint "$work/client.key" "$work/client-ids-$n.txt" "$issuer" \
			"$((count > 0 ? count : 1))" 300 >"$prefix.$phase"
	done
	log "made the assertions in $((SECONDS - started)) s"
}

profile_tessera() {
	local pid=$1 url=$2 auth=$3 data="$out/perf.data"
	log "profiling tessera at N=10 (perf, 5 s under load)"
	wrk_load "$url" "$auth" profile 8 >/dev/null &
	local wrk_pid=$!
	pids+=("$wrk_pid")
	sleep 1
	# Hardware counters are often missing in VMs; cpu-clock always works.
	taskset -c 1 perf record -e cpu-clock -F 999 -g -p "$pid" -o "$data" -- sleep 5 2>"$work/perf.err" ||
		{ echo "perf record failed:" >&2; cat "$work/perf.err" >&2; }
	wait "$wrk_pid" || true
	perf report -i "$data" --no-children --sort symbol --stdio -g none 2>/dev/null |
		grep -E '^ +[0-9.]+%' | sed -E 's/ +- +- *$//; s/ +$//' | head -n 25 >"$out/perf-top.txt" || true
	echo "samples by object: $(perf report -i "$data" --no-children --sort dso --stdio -g none 2>/dev/null |
		grep -E '^ +[0-9.]+%' | awk '{ printf "%s%s %s", sep, $2, $1; sep = ", " }')" | tee -a "$results"
	echo "perf report --no-children --sort symbol (top 25 by self time):" | tee -a "$results"
	tee -a "$results" <"$out/perf-top.txt"
}

# --- the runs ----------------------------------------------------------------------------

echo "tessera token benchmark: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" | tee -a "$results"
echo "duration ${duration}s, warm-up ${warmup}s, ${connection_counts[*]} connections, keep-alive HTTP/1.1, server on core 0, wrk on core 1" | tee -a "$results"
echo "binary $tessera; client authentication: $auth_method$([ "$auth_method" = private_key_jwt ] &&
	echo " (one fresh EdDSA assertion per request, $assertions made per measured run)")" | tee -a "$results"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$results"
header

for n in $client_counts; do
	db="$work/tessera-$n.db"
	export TESSERA_DATABASE_URL="sqlite://$db"
	# Loading the registry grows with N: 30 s, and 20 s more per 100,000 clients; node's
	# static clients take 5 minutes, and 50 s more per 100,000 (a million loaded in 84 s,
	# 2.4 GiB, on a shared 2-core machine).
	start_wait=$((30 + n / 5000))
	node_wait=$((300 + n / 2000))
	created_at=$SECONDS
	log "N=$n: creating a plan and $n clients"
	# The signing key is made here rather than by the first start, which would load the
	# registry twice and so inflate the first run's peak RSS.
	"$tessera" keys rotate --activate-in 0 --alg "$alg" >/dev/null
	"$tessera" plan set bench --scopes "market-data-api news-api oms-api" >/dev/null
	if [ "$auth_method" = private_key_jwt ]; then
		"$mint" key "$work/client.key" >"$work/jwks.json"
		"$tessera" client create --plan bench --count "$n" --json --auth-method private_key_jwt \
			--jwks-file "$work/jwks.json" >"$work/clients-$n.jsonl"
		jq -r .client_id "$work/clients-$n.jsonl" >"$work/client-ids-$n.txt"
		auth="$work/assertions-$n"
		[ "$(wc -l <"$work/client-ids-$n.txt")" -eq "$n" ] || { echo "expected $n clients" >&2; exit 1; }
	else
		"$tessera" client create --plan bench --count "$n" --json >"$work/clients-$n.jsonl"
		auth="$work/auth-$n.txt"
		jq -r '"Basic " + ("\(.client_id):\(.client_secret)" | @base64)' "$work/clients-$n.jsonl" >"$auth"
		[ "$(wc -l <"$auth")" -eq "$n" ] || { echo "expected $n clients" >&2; exit 1; }
	fi
	unset TESSERA_DATABASE_URL
	log "N=$n: made the plan and clients in $((SECONDS - created_at)) s"

	for conns in "${connection_counts[@]}"; do
		modes=(default warn)
		serve_args=()
		if [ "$conns" != "$base_conns" ]; then
			# An overload row: the default log only.
			modes=(default)
		fi
		if [ "$conns" -gt 1000 ]; then
			# All of wrk's connections come from 127.0.0.1, over the default 1,000 per address.
			serve_args=(--max-connections-per-address 10000)
		fi
		for mode in "${modes[@]}"; do
			log "N=$n: tessera, log $mode, $conns connections"
			start_tessera "$db" "$mode" "${serve_args[@]+"${serve_args[@]}"}"
			if [ "$auth_method" = private_key_jwt ]; then
				mint_assertions "$n" "$auth" "${server_url%/connect/token}"
			fi
			check_token "$server_url" "$auth"
			tessera_claims=$token_claims
			run_load tessera "$n" "$mode" "$server_pid" "$server_url" "$auth"
			if [ "$mode" = default ] && [ "$conns" = "$base_conns" ] && [ "$profile" = 1 ] && [ "$n" = 10 ]; then
				profile_tessera "$server_pid" "$server_url" "$auth"
			fi
			stop_server
			if [ "$mode" = default ]; then
				echo "         audit lines on stderr (warm-up and measured run): $(grep -c token_issued "$work/tessera-$mode.err" || true)" | tee -a "$results"
			fi
		done
	done
	conns=$base_conns

	if [ "$with_floor" = 1 ]; then
		log "N=$n: the floor (one client)"
		head -n1 "$auth" >"$work/auth-floor.txt"
		start_floor "$work/auth-floor.txt"
		check_token "$server_url" "$work/auth-floor.txt"
		if [ "$token_claims" != "$tessera_claims" ]; then
			echo "the floor's tokens carry $token_claims, Tessera's $tessera_claims" >&2
			exit 1
		fi
		run_load floor "$n" - "$server_pid" "$server_url" "$work/auth-floor.txt"
		stop_server
	fi

	if [ "$with_node" = 1 ]; then
		log "N=$n: node-oidc-provider"
		if start_node "$work/clients-$n.jsonl" "$n"; then
			check_token "$server_url" "$auth"
			run_load node "$n" - "$server_pid" "$server_url" "$auth"
			stop_server
		else
			row node "$n" "$conns" - - - - - - - - "SKIPPED: node-oidc-provider $node_failure" | tee -a "$results"
		fi
	fi
done

if [ "$tls" = 1 ]; then
	n=${client_counts%% *}
	db="$work/tessera-$n.db"
	auth="$work/auth-$n.txt"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
		-addext "subjectAltName=IP:127.0.0.1" -keyout "$work/tls.key" -out "$work/tls.pem" 2>/dev/null
	export CURL_TLS="--cacert $work/tls.pem"
	log "N=$n: tessera over TLS, keep-alive and a new connection per request"
	start_tessera "$db" tls --tls-cert "$work/tls.pem" --tls-key "$work/tls.key"
	check_token "$server_url" "$auth"
	run_load tessera "$n" tls-ka "$server_pid" "$server_url" "$auth"
	BENCH_CLOSE=1 run_load tessera "$n" tls-new "$server_pid" "$server_url" "$auth"
	log "N=$n: tessera over TLS, HTTP/2 (h2load, one client)"
	printf 'grant_type=client_credentials&scope=market-data-api' >"$work/h2.body"
	h2() {
		taskset -c 1 h2load -D "$1" -c "$base_conns" -m 4 \
			-H "Authorization: $(head -n1 "$auth")" -H "Content-Type: application/x-www-form-urlencoded" \
			-d "$work/h2.body" "$server_url"
	}
	# Warm up apart, so that the server's CPU time below is the measured run's alone.
	[ "$warmup" -gt 0 ] && { h2 "$warmup" >/dev/null 2>&1 || true; }
	t0=$(cpu_ticks "$server_pid")
	h2 "$duration" >"$out/h2load-$n.txt" 2>&1 || true
	t1=$(cpu_ticks "$server_pid")
	awk -v n="$n" -v conns="$base_conns" -v ticks=$((t1 - t0)) -v hz="$clk_tck" -v secs="$duration" '
		/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) rate = $(i - 1) }
		/^status codes:/ { ok = $3; bad = $5 + $7 + $9 }
		/^requests:/ { done = $6; failed = $10; errored = $12 }
		/^time for request:/ { p50 = $6 }
		END {
			verdict = (failed + errored + bad == 0 && done > 0) ? "valid" : "INVALID"
			cpu = ticks / hz
			printf "%-8s %7s %5s %-7s %9.0f %8s %8s %9.4f %8.1f %7.0f%% %9s  %s (h2load: mean %s per request)\n",
				"tessera", n, conns, "tls-h2", rate, "-", "-", done ? cpu / done * 1000 : 0, done ? cpu / done * 1e6 : 0,
				cpu / secs * 100, "-", verdict, p50
		}' "$out/h2load-$n.txt" | tee -a "$results"
	grep -q ' valid' <(tail -n1 "$results") || invalid=1
	stop_server
	unset CURL_TLS
fi

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$results"

# A smoke run is too short and too cold for a ratio to mean anything.
# The ratios are of the first connection count's rows.
if [ "$smoke" = 0 ] && [ -s "$work/rates" ]; then
	awk -v conns="$base_conns" '
		$3 == conns { rate[$1 " " $2 " " $4] = $5 / ($6 / 1e6); ns[$2] = 1 }
		END {
			for (n in ns) {
				default_log = rate["tessera " n " default"]; warn = rate["tessera " n " warn"]
				node = rate["node " n " -"]; floor = rate["floor " n " -"]
				if (node > 0)
					printf "ratio tessera/node at N=%s: %.1fx (default log), %.1fx (RUST_LOG=warn)\n",
						n, default_log / node, warn / node
				if (floor > 0)
					printf "ratio tessera/floor at N=%s: %.2f (default log), %.2f (RUST_LOG=warn)\n",
						n, default_log / floor, warn / floor
			}
		}' "$work/rates" | sort -s -t= -k2,2n | tee -a "$results"
fi

if [ "$invalid" = 1 ]; then
	echo "INVALID: some run had non-2xx answers or socket errors" | tee -a "$results"
	exit 1
fi
echo "all runs valid; results in $results" >&2
