#!/usr/bin/env bash
# Builds the Debian package and checks it, as CI does (docs/packaging.md):
#   1. the locked release build with profile-guided optimization (bench/pgo.sh: an
#      instrumented build, trained on a real server's token load and its other paths, then
#      `cargo build --release --locked -p tessera` with that profile), copied stripped to
#      target/release/tessera, where cargo deb takes it from. It issues tokens about 10 to
#      20% faster than the plain build (BENCHMARKS.md, issue 31). Needs llvm-profdata (Debian's
#      llvm-19), wrk, jq and curl; `--no-pgo` builds the plain release instead;
#   2. the manual pages and completions, written by that binary (assets.sh);
#   3. `cargo deb --no-build` (pinned cargo-deb, installed by .ci/run when missing);
#   4. its contents and control data (`dpkg-deb -c`, `dpkg-deb -I`): every file in place,
#      /etc/tessera/tessera.toml a conffile;
#   5. the packaged binary against the packaged configuration (`tessera config check`),
#      and `systemd-analyze verify` on the packaged unit where systemd-analyze exists.
# Prints each step's time. Output: target/debian/tessera_VERSION-1_ARCH.deb.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() {
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "package: $name took $((SECONDS - started)) s" >&2
}

if [ "${1:-}" = --no-pgo ]; then
  step "release build" cargo build --release --locked -p tessera
else
  step "release build with PGO" bash bench/pgo.sh --out target/release/tessera
fi
step "manual pages and completions" bash deploy/debian/assets.sh target/release/tessera
rm -f target/debian/tessera_*.deb
step "cargo deb" cargo deb --no-build --locked >/dev/null
deb=$(ls target/debian/tessera_*.deb)
echo "package: $deb ($(du -h "$deb" | cut -f1))" >&2

contents=$(dpkg-deb -c "$deb")
for path in ./usr/bin/tessera ./etc/tessera/tessera.toml \
  ./usr/share/man/man1/tessera.1.gz ./usr/share/man/man1/tessera-serve.1.gz \
  ./usr/share/bash-completion/completions/tessera \
  ./usr/share/zsh/vendor-completions/_tessera \
  ./usr/share/fish/vendor_completions.d/tessera.fish; do
  if ! grep -q " $path\$" <<<"$contents"; then
    echo "package: $path is missing from $deb:" >&2
    echo "$contents" >&2
    exit 1
  fi
done
unit=$(grep -oE '\./(usr/)?lib/systemd/system/tessera\.service$' <<<"$contents") || {
  echo "package: no systemd unit in $deb" >&2
  exit 1
}
info=$(dpkg-deb -I "$deb")
for wanted in "Package: tessera" "Depends:.*adduser" "conffiles" "postinst"; do
  if ! grep -qE "$wanted" <<<"$info"; then
    echo "package: '$wanted' not in the control data of $deb:" >&2
    echo "$info" >&2
    exit 1
  fi
done
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -e "$deb" "$root/DEBIAN"
if ! grep -qx /etc/tessera/tessera.toml "$root/DEBIAN/conffiles"; then
  echo "package: /etc/tessera/tessera.toml is not a conffile" >&2
  exit 1
fi
dpkg-deb -x "$deb" "$root"
"$root/usr/bin/tessera" --version
"$root/usr/bin/tessera" config check --config "$root/etc/tessera/tessera.toml" >/dev/null
echo "package: the packaged binary accepts the packaged configuration" >&2
if command -v systemd-analyze >/dev/null; then
  # Verified with ExecStart pointing at the extracted binary (the package is not installed
  # here); man pages are checked in the listing above.
  sed "s|/usr/bin/tessera|$root/usr/bin/tessera|g" "$root/$unit" >"$root/tessera.service"
  systemd-analyze verify --man=no "$root/tessera.service"
  echo "package: systemd-analyze verify: the unit is sound" >&2
else
  echo "package: SKIPPED systemd-analyze verify: no systemd-analyze here" >&2
fi
