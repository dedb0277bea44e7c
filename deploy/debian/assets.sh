#!/usr/bin/env bash
# The files the Debian package ships beside the binary, written by the binary itself so
# that they describe exactly that binary: the manual pages (`tessera man`, clap_mangen;
# gzipped as Debian policy wants) and the shell completions (`tessera completions`).
# Usage: deploy/debian/assets.sh [BINARY]   (default target/release/tessera)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/tessera}
out=target/assets
rm -rf "$out"
mkdir -p "$out/man" "$out/completions"
"$bin" man "$out/man" >/dev/null
gzip -9n "$out"/man/*.1
"$bin" completions bash >"$out/completions/tessera.bash"
"$bin" completions zsh >"$out/completions/_tessera"
"$bin" completions fish >"$out/completions/tessera.fish"
