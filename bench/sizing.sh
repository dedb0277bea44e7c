#!/usr/bin/env bash
# The figures of the sizing guide (docs/sizing.md, issue 24 item 7): what one instance costs and
# how many a load needs, measured on PostgreSQL and Redis as a fleet runs them.
#
#   bench/sizing.sh [--clients N] [--duration S] [--bin PATH]
#
# On a scratch PostgreSQL database (tessera_sizing, dropped and made afresh; the server at
# $SIZING_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432) and a throwaway
# redis-server of its own (port $SIZING_REDIS_PORT, default 16379, nothing saved), so that
# Redis's statistics count this run alone:
#
#  1. start-up: a plan and N clients (default 100,000); the time from `serve` to its first
#     200 from /readyz, with N clients and with none;
#  2. memory: resident memory (VmRSS) after start with N clients and with none, and the
#     difference per client;
#  3. tokens per second on one core: one instance on core 0, wrk on core 1, keep-alive
#     HTTP/1.1, Basic authentication spread over the N clients, for --duration seconds, first
#     on a plan without a rate limit, then on a plan with a rate limit (1,000,000/sec, never
#     reached) counted in Redis. Server CPU time per token comes from /proc/PID/stat;
#  4. Redis per token: calls and microseconds from Redis's INFO commandstats, before and
#     after the limited run, divided by its tokens;
#  5. PostgreSQL per instance: three idle instances, connections held (pg_stat_activity) and
#     transactions per second (pg_stat_database.xact_commit over 10 s) per instance;
#  6. three instances at once: all three on core 0 behind wrk on core 1 (one wrk per
#     instance, a third of the connections each), total tokens per second beside item 3's
#     figure, which says capacity is per core, not per instance.
#
# Every process it starts is stopped on exit, and the scratch database dropped. Loopback only.

set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
invoked_from=$PWD
cd "$root"

clients=100000
duration=10
bin=
while [ $# -gt 0 ]; do
	case "$1" in
	--clients) clients=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	*) echo "unknown argument: $1" >&2; exit 2 ;;
	esac
done

pg_base=${SIZING_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
redis_port=${SIZING_REDIS_PORT:-16379}
redis_url=redis://127.0.0.1:$redis_port
db_name=tessera_sizing
db_url="$pg_base/$db_name"

log() { echo "== $*" >&2; }

for tool in wrk jq curl taskset psql redis-cli redis-server; do
	command -v "$tool" >/dev/null || { echo "needs $tool (bench/run.sh installs wrk and jq)" >&2; exit 2; }
done

if [ -n "$bin" ]; then
	tessera=$(cd "$invoked_from" && realpath "$bin")
else
	log "building tessera (release)"
	cargo build --release --bin tessera --quiet
	tessera="$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)/release/tessera"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-sizing.XXXXXX")
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	psql "$pg_base/postgres" -qc "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Pinned to core 1 with the load generator, as a Redis of its own machine would be.
taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
	--daemonize no --logfile "$work/redis.log" &
pids+=($!)
for _ in $(seq 1 500); do
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	sleep 0.01
done

fresh_database() {
	psql "$pg_base/postgres" -qc "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null
	psql "$pg_base/postgres" -qc "CREATE DATABASE $db_name" >/dev/null
}

export TESSERA_MASTER_KEY
TESSERA_MASTER_KEY=$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
export TESSERA_DATABASE_URL=$db_url
issuer=http://127.0.0.1:1/sizing

# start NAME CORE [SERVE ARGS...]: starts an instance, waits for /readyz; sets url_NAME,
# pid_NAME and ready_ms_NAME.
start() {
	local name=$1 core=$2
	shift 2
	local started
	started=$(date +%s%N)
	taskset -c "$core" "$tessera" serve --listen 127.0.0.1:0 --issuer "$issuer" "$@" \
		>"$work/$name.out" 2>"$work/$name.err" &
	local pid=$!
	pids+=("$pid")
	local base=
	for _ in $(seq 1 6000); do
		base=$(sed -n 's/^tessera listening on //p' "$work/$name.out" | head -n1)
		if [ -n "$base" ] && curl -fsS "$base/readyz" >/dev/null 2>&1; then
			break
		fi
		kill -0 "$pid" 2>/dev/null || { cat "$work/$name.err" >&2; exit 1; }
		sleep 0.01
	done
	local ready
	ready=$(( ($(date +%s%N) - started) / 1000000 ))
	printf -v "url_$name" '%s' "$base"
	printf -v "pid_$name" '%s' "$pid"
	printf -v "ready_ms_$name" '%s' "$ready"
}

stop() {
	local pid=$1
	kill "$pid" 2>/dev/null || true
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# load URL AUTHFILE CONNS SECONDS CORE: one wrk run; prints "requests non2xx".
load() {
	local raw
	raw=$(BENCH_AUTH_FILE=$2 taskset -c "$5" wrk -t1 -c"$3" -d"$4s" --timeout 5s \
		-s bench/token.lua "$1/connect/token")
	echo "$raw" | sed -n 's/^RESULT .*requests=\([0-9]*\).*non2xx=\([0-9]*\).*/\1 \2/p'
}

echo "tessera sizing: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "binary $tessera ($("$tessera" --version)), commit $(git rev-parse --short HEAD)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- 1 and 2: start-up and memory, with none and with N clients ----------------------------
fresh_database
"$tessera" keys rotate --activate-in 0 >/dev/null
start empty 0
rss_empty=$(rss_kib "$pid_empty")
echo "no clients: ready in ${ready_ms_empty} ms, RSS $((rss_empty / 1024)) MiB"
stop "$pid_empty"

log "creating $clients clients"
created=$SECONDS
"$tessera" plan set open --scopes "market-data-api news-api oms-api" >/dev/null
"$tessera" plan set limited --scopes "market-data-api news-api oms-api" --token-rate 1000000/sec >/dev/null
half=$((clients / 2))
"$tessera" client create --plan open --count "$half" --json >"$work/open.jsonl"
"$tessera" client create --plan limited --count "$((clients - half))" --json >"$work/limited.jsonl"
echo "created $clients clients in $((SECONDS - created)) s (two client create --count runs)"
for plan in open limited; do
	jq -r '"Basic " + ("\(.client_id):\(.client_secret)" | @base64)' "$work/$plan.jsonl" >"$work/$plan.auth"
done

start full 0
rss_full=$(rss_kib "$pid_full")
echo "$clients clients: ready in ${ready_ms_full} ms, RSS $((rss_full / 1024)) MiB"
echo "per client: $(( (rss_full - rss_empty) * 1024 / clients )) bytes; start-up per 100,000 clients: $(( (ready_ms_full - ready_ms_empty) * 100000 / clients )) ms beyond the empty start"
stop "$pid_full"

# --- 3 and 4: one core, without and with Redis-backed limits ------------------------------
tick=$(getconf CLK_TCK)
# Redis's per-command counters, "name calls usec" a line. Commands that a script runs are
# counted under their own names as well as inside EVALSHA's time, so the round trips are the
# commands a client sent (EVALSHA, EVAL, PING ...) and the time is theirs alone.
redis_stats() {
	redis-cli -u "$redis_url" info commandstats |
		awk -F'[:,=]' '/^cmdstat_/ && !/^cmdstat_info/ { sub("cmdstat_", "", $1); print $1, $3, $5 }'
}
one_core() {
	local label=$1 auth=$2
	shift 2
	start core 0 "$@"
	load "$url_core" "$auth" 32 3 1 >/dev/null
	local cpu0 cpu1 r0 r1 result
	cpu0=$(cpu_ticks "$pid_core")
	r0=$(redis_stats)
	result=$(load "$url_core" "$auth" 32 "$duration" 1)
	r1=$(redis_stats)
	cpu1=$(cpu_ticks "$pid_core")
	local requests=${result% *} bad=${result#* }
	[ "$bad" = 0 ] || echo "  ($label: $bad answers were not 2xx: INVALID)"
	local cpu_us=$(( (cpu1 - cpu0) * 1000000 / tick ))
	# CPU time per token is what sizing rests on: unlike tokens/s, other work on the core
	# does not shrink it much, and its inverse is what one fully used core issues.
	echo "$label: $((requests / duration)) tokens/s measured; server CPU $(awk -v c="$cpu_us" -v n="$requests" 'BEGIN { printf "%.1f", c / n }') us per token, so $(( requests * 1000000 / cpu_us )) tokens/s per fully used core"
	# Per token: each command's calls, and the round trips and Redis time of the top-level ones.
	awk -v n="$requests" '
		NR == FNR { calls[$1] = $2; usec[$1] = $3; next }
		{ dc = $2 - calls[$1]; du = $3 - usec[$1]
		  if (dc <= 0) next
		  per = per sprintf(" %s %.2f", $1, dc / n)
		  if ($1 == "evalsha" || $1 == "eval" || $1 == "ping" || $1 == "script") { trips += dc; time += du } }
		END { printf "  Redis per token: %.2f round trips, %.1f us of Redis time; commands per token:%s\n", trips / n, time / n, (per == "" ? " none" : per) }
	' <(echo "$r0") <(echo "$r1")
	stop "$pid_core"
}
one_core "plan without rate limit, no Redis" "$work/open.auth"
one_core "plan with a rate limit counted in Redis" "$work/limited.auth" \
	--redis-url "$redis_url"

# --- 5: PostgreSQL per idle instance -------------------------------------------------------
for name in a b c; do
	start "$name" 0
done
pg() { psql "$pg_base/postgres" -tAc "$1"; }
x0=$(pg "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$db_name'")
sleep 10
x1=$(pg "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$db_name'")
conns=$(pg "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db_name'")
echo "three idle instances: $conns PostgreSQL connections in all, $(( (x1 - x0) / 30 )) transactions/s per instance"

# --- 6: the three at once -------------------------------------------------------------------
log "three instances on core 0, wrk on core 1"
loads=()
for name in a b c; do
	var="url_$name"
	load "${!var}" "$work/open.auth" 11 "$duration" 1 >"$work/three-$name.txt" &
	loads+=($!)
done
wait "${loads[@]}"
total=0
for name in a b c; do
	r=$(cut -d' ' -f1 "$work/three-$name.txt")
	total=$((total + r))
done
echo "three instances on one core: $((total / duration)) tokens/s in all"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
