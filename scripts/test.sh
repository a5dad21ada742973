#!/usr/bin/env bash
# The test command (README, .ci/run). Installs what the tests need, then runs
# every check and test. As root it installs the real peer programs with
# apt-get; the interop tests create their own network namespaces (root).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(python3-libtorrent transmission-daemon transmission-cli aria2 opentracker
      lrzsz amule-daemon amule-utils rtorrent mktorrent iproute2 time fonts-dejavu-core
      g++)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
else
  echo "== not root: real peer programs are not installed; interop tests need them (and root for namespaces)"
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== layer check (no tokio below weir-runtime)"
bash .ci/check-layers
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace --profile ci --no-fail-fast -- --test-threads="${WEIR_TEST_THREADS:-2}"
echo "== fuzz"; ./scripts/fuzz.sh
echo "== all tests passed"
