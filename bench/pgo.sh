#!/usr/bin/env bash
# Builds Tessera with profile-guided optimization (PGO), and with --bolt then lays out the
# result with LLVM BOLT, both trained on a real server (BENCHMARKS.md, issue 31).
#
#   bench/pgo.sh [--bolt] [--floor] [--seconds S] [--out PATH]
#
# 1. an instrumented release build (`-Cprofile-generate`), in its own target directory;
# 2. the training: bench/one-client.sh's database and configuration, `serve`, then S seconds
#    (default 20) of token requests with wrk, and once each the other paths a production
#    server answers: a wrong secret, a scope outside the plan, an unknown client, discovery,
#    the key set, introspection, revocation, health, readiness and metrics;
# 3. the profile merged (`llvm-profdata merge`) and the release build again with
#    `-Cprofile-use`;
# 4. with --bolt: that build keeps its relocations (`--emit-relocs`) and symbols, is
#    instrumented by `llvm-bolt -instrument`, trained as in 2, and rewritten by `llvm-bolt`
#    with the blocks and functions reordered by the profile, then stripped.
#
# --floor: build the floor (bench/floor) the same way instead, trained with the same token
# load alone (it answers nothing else), for a ratio between two builds made alike; the
# scratch client is made with target/release/tessera (built when missing).
#
# The binary is copied to PATH (default target/pgo/tessera, or target/pgo/floor). Needs llvm-profdata (and with
# --bolt llvm-bolt) whose profile format rustc's LLVM reads: Debian's llvm-19 and bolt-19
# packages work with rustc 1.95 (LLVM 22); set LLVM_BIN to another LLVM's bin directory.
# Needs wrk, jq and curl. Takes about 12 minutes on 2 cores, 20 with --bolt.
set -euo pipefail
cd "$(dirname "$0")/.."

bolt=false
floor=false
seconds=20
out=""
while [ $# -gt 0 ]; do
	case $1 in
	--bolt) bolt=true ;;
	--floor) floor=true ;;
	--seconds) seconds=$2; shift ;;
	--out) out=$2; shift ;;
	*) echo "usage: bench/pgo.sh [--bolt] [--floor] [--seconds S] [--out PATH]" >&2; exit 2 ;;
	esac
	shift
done
# What is built: the package and binary, and the prefix of its target directories.
if $floor; then
	build=(-p tessera-bench-floor --bin floor)
	name=floor
	dirs=pgo-floor
else
	build=(-p tessera)
	name=tessera
	dirs=pgo
fi
out=${out:-target/pgo/$name}

llvm_bin=${LLVM_BIN:-$(ls -d /usr/lib/llvm-*/bin 2>/dev/null | sort -V | tail -n1)}
profdata="$llvm_bin/llvm-profdata"
[ -x "$profdata" ] || { echo "bench/pgo.sh: no llvm-profdata in '$llvm_bin' (set LLVM_BIN)" >&2; exit 1; }
if $bolt; then
	[ -x "$llvm_bin/llvm-bolt" ] || { echo "bench/pgo.sh: no llvm-bolt in '$llvm_bin'" >&2; exit 1; }
fi
for tool in wrk jq curl; do
	command -v "$tool" >/dev/null || { echo "bench/pgo.sh needs $tool" >&2; exit 1; }
done

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
# A fixed place, so that the flags (which name it) stay the same and a second run reuses
# the instrumented build of the first (the optimized one is built again: rustc lists the
# profile among its inputs, and the profile is new).
profiles="$target/$dirs-profiles"
rm -rf "$profiles"
mkdir -p "$profiles"

# started NAME PID [READY]: the URL server PID prints ("NAME listening on URL") in
# $work/stdout, once printed and, with READY, once the server answers 200 at that path.
started() {
	local name=$1 pid=$2 ready=${3:-} url=""
	for _ in $(seq 1 300); do
		url=$(sed -n "s/^$name listening on //p" "$work/stdout" | head -n1)
		if [ -n "$url" ] && { [ -z "$ready" ] ||
			[ "$(curl -s -o /dev/null -w '%{http_code}' "$url$ready")" = 200 ]; }; then
			echo "$url"
			return
		fi
		kill -0 "$pid" 2>/dev/null || { cat "$work/stderr" >&2; return 1; }
		sleep 0.1
	done
	echo "bench/pgo.sh: $name did not start" >&2
	return 1
}

# load URL: the token load, for the seconds asked.
load() {
	wrk -t1 -c32 -d"${seconds}s" -s "$work/token.lua" "$1/connect/token" >"$work/wrk"
	grep -E 'Requests/sec' "$work/wrk" >&2
}

# train BIN: the load and the other paths against `BIN serve`, stopped by SIGTERM (an
# instrumented binary writes its profile as it exits).
train() {
	if $floor; then
		train_floor "$1"
		return
	fi
	local bin=$1
	(
		# shellcheck source=bench/one-client.sh
		source bench/one-client.sh
		"$bin" serve --config "$work/tessera.toml" >"$work/stdout" 2>"$work/stderr" &
		server_pid=$!
		url=$(started tessera "$server_pid" /readyz)
		load "$url"
		form() { curl -s -o /dev/null -u "$1" -d "$2" "$url$3"; }
		token=$(curl -s -u "$id:$secret" -d grant_type=client_credentials -d scope=news-api \
			"$url/connect/token" | jq -r .access_token)
		form "$id:wrong" "grant_type=client_credentials&scope=news-api" /connect/token
		form "$id:$secret" "grant_type=client_credentials&scope=oms-api" /connect/token
		form "$id:$secret" "grant_type=password" /connect/token
		form "tc_unknown:x" "grant_type=client_credentials" /connect/token
		form "$id:$secret" "token=$token" /connect/introspect
		form "$id:$secret" "token=$token" /connect/revocation
		for path in /.well-known/openid-configuration /.well-known/oauth-authorization-server \
			/.well-known/jwks.json /healthz /readyz /metrics; do
			curl -s -o /dev/null "$url$path"
		done
		kill -TERM "$server_pid"
		wait "$server_pid" || true
		server_pid=""
	)
}

# train_floor FLOOR: the token load alone against the floor, which answers nothing else.
train_floor() {
	local server=$1 bin=target/release/tessera
	[ -x "$bin" ] || cargo build --release --locked --bin tessera
	(
		# shellcheck source=bench/one-client.sh
		source bench/one-client.sh
		FLOOR_EXIT_ON_SIGTERM=1 "$server" 127.0.0.1:0 "$id" "$secret" >"$work/stdout" 2>"$work/stderr" &
		server_pid=$!
		url=$(started floor "$server_pid")
		load "$url"
		kill -TERM "$server_pid"
		wait "$server_pid" || true
		server_pid=""
	)
}

# Both builds keep their symbols (BOLT needs them): the profile names functions by their
# mangled symbols, whose hashes change with the profile's settings, strip included, so the
# two builds must agree on every one. The copy is stripped at the end.
export CARGO_PROFILE_RELEASE_STRIP=false
echo "== pgo: the instrumented build" >&2
CARGO_TARGET_DIR="$target/$dirs-generate" RUSTFLAGS="-Cprofile-generate=$profiles/raw" \
	cargo build --release --locked "${build[@]}"
echo "== pgo: the training" >&2
LLVM_PROFILE_FILE="$profiles/raw/%p-%m.profraw" train "$target/$dirs-generate/release/$name"
"$profdata" merge -o "$profiles/merged.profdata" "$profiles/raw"

flags="-Cprofile-use=$profiles/merged.profdata"
if $bolt; then
	flags="$flags -Clink-arg=-Wl,--emit-relocs"
fi
echo "== pgo: the optimized build" >&2
CARGO_TARGET_DIR="$target/$dirs-use" RUSTFLAGS="$flags" cargo build --release --locked "${build[@]}"
built="$target/$dirs-use/release/$name"
mkdir -p "$(dirname "$out")"

if $bolt; then
	echo "== pgo: BOLT's instrumentation and training" >&2
	"$llvm_bin/llvm-bolt" "$built" -instrument -o "$profiles/$name.instrumented" \
		--instrumentation-file="$profiles/bolt.fdata" --instrumentation-file-append-pid=false
	train "$profiles/$name.instrumented"
	"$llvm_bin/llvm-bolt" "$built" -o "$profiles/$name.bolt" -data="$profiles/bolt.fdata" \
		-reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions \
		-split-all-cold -icf=1 -use-gnu-stack -dyno-stats
	built="$profiles/$name.bolt"
fi
cp "$built" "$out"
strip "$out"
echo "bench/pgo.sh: $out" >&2
