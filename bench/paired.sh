#!/usr/bin/env bash
# Tokens/s of one or more Tessera binaries against the floor, in short runs taken in turn, for
# a machine whose speed drifts from one minute to the next (a shared host): every server is
# started once, all on core 0, and wrk (core 1) loads one at a time for S seconds, the
# servers in turn, P times. Each turn's ratio to the floor compares runs seconds apart,
# and the median of the P ratios is printed for each binary.
#
#   bench/paired.sh [--pairs P] [--seconds S] [--connections C] [--floor PATH] BIN...
#
# Defaults: 10 turns of 3 s at 32 connections, one client, the default log (on stderr, to a
# file). The set-up is bench/one-client.sh's: one SQLite database that every Tessera
# shares, its background work an hour apart. --floor: against this floor binary (say
# `bench/pgo.sh --floor`'s) instead of this tree's release build. Needs wrk, jq, curl and
# taskset.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=10
seconds=3
connections=32
bins=()
floor=""
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) pairs=$2; shift ;;
	--seconds) seconds=$2; shift ;;
	--connections) connections=$2; shift ;;
	--floor) floor=$(realpath "$2"); shift ;;
	-*) echo "usage: bench/paired.sh [--pairs P] [--seconds S] [--connections C] [--floor PATH] BIN..." >&2; exit 2 ;;
	*) bins+=("$(realpath "$1")") ;;
	esac
	shift
done
[ ${#bins[@]} -gt 0 ] || { echo "bench/paired.sh: name at least one tessera binary" >&2; exit 2; }
for tool in wrk jq curl taskset; do
	command -v "$tool" >/dev/null || { echo "bench/paired.sh needs $tool" >&2; exit 1; }
done

if [ -z "$floor" ]; then
	target_dir=${CARGO_TARGET_DIR:-target}
	cargo build --release -p tessera-bench-floor --bin floor --quiet
	floor=$(realpath "$target_dir/release/floor")
fi

bin=${bins[0]}
# shellcheck source=bench/one-client.sh
source bench/one-client.sh
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT

# start NAME COMMAND...: starts a server on core 0 and adds its URL to urls once it answers.
names=()
urls=()
start() {
	local name=$1 out="$work/$1" url=""
	shift
	taskset -c 0 "$@" >"$out.stdout" 2>"$out.stderr" &
	pids+=($!)
	for _ in $(seq 1 300); do
		url=$(sed -n 's/^[a-z]* listening on //p' "$out.stdout" | head -n1)
		[ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' -u "$id:$secret" \
			-d grant_type=client_credentials "$url/connect/token")" = 200 ] && break
		sleep 0.1
	done
	[ -n "$url" ] || { echo "$name did not start" >&2; cat "$out.stderr" >&2; exit 1; }
	names+=("$name")
	urls+=("$url")
}

start floor "$floor" 127.0.0.1:0 "$id" "$secret"
for i in "${!bins[@]}"; do
	start "tessera$((i + 1))" "${bins[$i]}" serve --config "$work/tessera.toml"
done

# load URL SECONDS: the tokens/s wrk reaches (every answer must be 2xx).
load() {
	local report
	report=$(taskset -c 1 wrk -t1 -c"$connections" -d"${2}s" -s "$work/token.lua" "$1/connect/token")
	if grep -q 'Non-2xx' <<<"$report"; then
		echo "bench/paired.sh: answers other than 2xx:" >&2
		echo "$report" >&2
		exit 1
	fi
	awk '/^Requests\/sec:/ { printf "%d", $2 }' <<<"$report"
}

for url in "${urls[@]}"; do load "$url" 2 >/dev/null; done

echo "paired tokens/s: $(date -u +%Y-%m-%dT%H:%M:%SZ), $pairs turns of ${seconds}s, $connections connections, server on core 0, wrk on core 1"
echo "floor = $floor"
for i in "${!bins[@]}"; do echo "tessera$((i + 1)) = ${bins[$i]}"; done
declare -A ratios
for turn in $(seq 1 "$pairs"); do
	line="turn $turn:"
	declare -A rate=()
	# The order turns with the turn, so that no server always runs first.
	count=${#urls[@]}
	for k in $(seq 0 $((count - 1))); do
		j=$(((k + turn) % count))
		rate[$j]=$(load "${urls[$j]}" "$seconds")
	done
	for j in $(seq 0 $((count - 1))); do line="$line ${names[$j]} ${rate[$j]}"; done
	for j in $(seq 1 $((count - 1))); do
		ratios[$j]="${ratios[$j]:-} $(awk -v t="${rate[$j]}" -v f="${rate[0]}" 'BEGIN { printf "%.3f", t / f }')"
	done
	echo "$line"
done
for j in $(seq 1 $((${#urls[@]} - 1))); do
	# shellcheck disable=SC2086
	printf '%s/floor: median %s of %s\n' "${names[$j]}" \
		"$(printf '%s\n' ${ratios[$j]} | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')" \
		"$(echo ${ratios[$j]})"
done
