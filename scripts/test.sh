#!/usr/bin/env bash
# The test command (README, .ci/run). Installs what the tests need, then runs
# every check and test. As root it installs the real peer programs with
# apt-get; the interop tests create their own network namespaces (root).
#
# When everything the interop tests need is here (root, network namespaces,
# every package), the tests run as CI runs them (CI=1): a missing program
# then fails its test instead of skipping it. Otherwise a test whose
# prerequisite is missing skips, and every skip is listed at the end (the
# test harness prints "ok" for a test that returned early).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(python3-libtorrent transmission-daemon transmission-cli aria2 opentracker
      lrzsz amule-daemon amule-utils rtorrent mktorrent iproute2 time fonts-dejavu-core
      chromium bsdutils g++ qbittorrent-nox)
have_all=no
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
  have_all=yes
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || have_all=no; done
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "== installing nodejs npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends nodejs npm >/dev/null
  fi
else
  echo "== not root: real peer programs are not installed; interop tests need them (and root for namespaces)"
fi
# The RPC tests drive weir daemon's server with real clients: the
# transmission-rpc library (PyPI) and the web page in Chromium through
# playwright-core (npm, pinned by crates/weir-daemon/webtest/package-lock.json).
if ! python3 -c "import transmission_rpc" 2>/dev/null; then
  echo "== installing transmission-rpc (PyPI)"
  python3 -m pip install -q transmission-rpc || python3 -m pip install -q --break-system-packages transmission-rpc
fi
if [ ! -d crates/weir-daemon/webtest/node_modules/playwright-core ] && command -v npm >/dev/null; then
  echo "== installing playwright-core (npm ci)"
  (cd crates/weir-daemon/webtest && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent)
fi

if [ -z "${CI:-}" ] && [ "$have_all" = yes ]; then
  probe="weir-testsh-probe-$$"
  if ip netns add "$probe" 2>/dev/null; then
    ip netns del "$probe"
    echo "== root, namespaces and every package: running as CI does (CI=1: nothing may skip)"
    export CI=1
  else
    echo "== cannot create a network namespace here: interop tests will skip"
  fi
fi

# Every skip is appended here (weir_lab::ci::record_skip) and listed at the end.
skip_log="$(mktemp -t weir-skips.XXXXXX)"
export WEIR_SKIP_LOG="$skip_log"
skips() {
  local rc=$?
  if [ -s "$skip_log" ]; then
    echo "== $(sort -u "$skip_log" | wc -l) test(s) SKIPPED, not run (they printed ok):"
    sort -u "$skip_log" | sed 's/^/   /'
    echo "   (as root with the packages installed they run; CI=1 makes a skip a failure)"
  else
    echo "== no test skipped"
  fi
  rm -f "$skip_log"
  exit "$rc"
}
trap skips EXIT

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
