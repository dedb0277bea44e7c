#!/usr/bin/env bash
# What a token costs beside its user-space instructions (issue 31 item 1): the server's CPU
# time, context switches and system calls per token, Tessera against the floor, over
# keep-alive connections. bench/instructions.sh counts user-space instructions only; this
# script counts what the kernel does for each server.
#
#   bench/kernel.sh [--seconds S] [--connections C] [--bin PATH]
#
# The server's environment passes through: `RUST_LOG=warn bench/kernel.sh` measures Tessera
# without its audit lines.
#
# Each server runs on core 0 (taskset), wrk on core 1 with C connections (default 32) for S
# seconds (default 10), as bench/run.sh measures it, twice:
#
# 1. under `perf stat -e task-clock,context-switches,cpu-migrations,page-faults` attached to
#    the server for the run: CPU time and context switches per token, and the CPU time split
#    into user and kernel from /proc/PID/stat;
# 2. under `strace -c -f` attached to the server: system calls per token by name. strace
#    slows each call down a lot, so this run's tokens/s says nothing; its counts per token do.
#
# Tessera runs on a fresh SQLite database with one plan and one client and its background
# work an hour apart (as in bench/instructions.sh), with the default log. Needs perf
# (Debian's linux-perf: software events work where hardware counters are not supported),
# strace, wrk, jq, curl and taskset.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=10
connections=32
bin=""
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=$2; shift 2 ;;
	--connections) connections=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
for tool in perf strace wrk jq curl taskset; do
	command -v "$tool" >/dev/null || { echo "bench/kernel.sh needs $tool" >&2; exit 1; }
done

target_dir=${CARGO_TARGET_DIR:-target}
if [ -z "$bin" ]; then
	cargo build --release --bin tessera --quiet
	bin="$target_dir/release/tessera"
fi
cargo build --release -p tessera-bench-floor --bin floor --quiet
floor="$target_dir/release/floor"

# The scratch directory, the database, the client, the configuration and the wrk script.
# shellcheck source=bench/one-client.sh
source bench/one-client.sh

# start NAME: starts the server on core 0, sets server_pid and url.
start() {
	local name=$1 out="$work/$1"
	case $name in
	tessera) taskset -c 0 "$bin" serve --config "$work/tessera.toml" >"$out.stdout" 2>"$out.stderr" & ;;
	floor) taskset -c 0 "$floor" 127.0.0.1:0 "$id" "$secret" >"$out.stdout" 2>"$out.stderr" & ;;
	esac
	server_pid=$!
	url=""
	for _ in $(seq 1 300); do
		url=$(sed -n "s/^$name listening on //p" "$out.stdout" | head -n1)
		[ -n "$url" ] && [ "$name" = floor ] && break
		[ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")" = 200 ] && break
		kill -0 "$server_pid" 2>/dev/null || { cat "$out.stderr" >&2; exit 1; }
		sleep 0.1
	done
	[ -n "$url" ] || { echo "$name did not start" >&2; exit 1; }
	# Warm up: the first connections, the first keys and buffers.
	taskset -c 1 wrk -t1 -c"$connections" -d2s -s "$work/token.lua" "$url/connect/token" >/dev/null
}

# ticks PID: the user and system clock ticks of a process, all its threads.
ticks() {
	local stat
	stat=$(cat "/proc/$1/stat")
	stat=${stat##*) }
	awk '{ print $12, $13 }' <<<"$stat"
}

stop() {
	kill -TERM "$server_pid"
	wait "$server_pid" 2>/dev/null || true
	server_pid=""
}

# load: wrk for the run's seconds; prints the requests it completed (all must be 2xx).
load() {
	local report
	report=$(taskset -c 1 wrk -t1 -c"$connections" -d"${seconds}s" -s "$work/token.lua" "$url/connect/token")
	if grep -q "Non-2xx" <<<"$report"; then
		echo "non-2xx answers: $report" >&2
		exit 1
	fi
	awk '/requests in/ { print $1 }' <<<"$report"
}

echo "kernel cost per token: $(date -u +%Y-%m-%dT%H:%M:%SZ), $connections connections, ${seconds}s per run, binary $bin"
for name in tessera floor; do
	start "$name"
	perf stat -x, -e task-clock,context-switches,cpu-migrations,page-faults -p "$server_pid" \
		-o "$work/$name.perf" -- sleep "$((seconds + 1))" &
	perf_pid=$!
	sleep 0.5
	before=$(ticks "$server_pid")
	tokens=$(load)
	after=$(ticks "$server_pid")
	wait "$perf_pid"
	awk -v b="$before" -v a="$after" -v n="$tokens" -v hz="$(getconf CLK_TCK)" -v name="$name" 'BEGIN {
		split(b, x, " "); split(a, y, " ")
		printf "%-8s %6.2f us user, %6.2f us system per token (/proc)\n", name,
			(y[1] - x[1]) / hz * 1e6 / n, (y[2] - x[2]) / hz * 1e6 / n
	}'
	awk -F, -v n="$tokens" -v name="$name" -v s="$seconds" '
		$3 == "task-clock" { cpu = $1 }
		$3 == "context-switches" { cs = $1 }
		$3 == "cpu-migrations" { mig = $1 }
		$3 == "page-faults" { pf = $1 }
		END {
			printf "%-8s %9d tokens/s, %6.2f us CPU per token, %.3f context switches per token, %.4f migrations, %.4f page faults\n",
				name, n / s, cpu * 1000 / n, cs / n, mig / n, pf / n
		}' "$work/$name.perf"
	strace -c -f -q -o "$work/$name.strace" -p "$server_pid" &
	strace_pid=$!
	sleep 0.5
	tokens=$(load)
	kill -INT "$strace_pid"
	wait "$strace_pid" 2>/dev/null || true
	stop
	awk -v n="$tokens" -v name="$name" '
		# Columns: % time, seconds, usecs/call, calls, [errors,] syscall.
		$NF == "total" { total = $4; next }
		$1 ~ /^[0-9.]+$/ && NF >= 5 { calls[$NF] = $4 }
		END {
			printf "%-8s %6.2f system calls per token:", name, total / n
			for (c in calls) if (calls[c] / n >= 0.01) printf " %s %.2f", c, calls[c] / n
			printf "\n"
		}' "$work/$name.strace"
done
