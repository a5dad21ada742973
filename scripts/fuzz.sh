#!/usr/bin/env bash
# Fuzzes every parser and decoder (the cargo-fuzz targets in fuzz/) for a
# bounded time each and fails on any crash, leak, timeout or out-of-memory.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 10 ($WEIR_FUZZ_SECONDS overrides it): 30
# targets at 2 at a time fuzz for ~2.5 minutes, which with the build from
# scratch (weir-daemon brings tokio and axum in) aims at ~10 minutes on 2
# cores. (15 s each with 21 targets before the network parsers were added.) Targets run $WEIR_FUZZ_JOBS at a time (default: the number of
# CPUs). Each starts from its committed seeds, fuzz/corpus/<target>/, and
# writes what it finds to a scratch corpus ($WEIR_FUZZ_WORK/<target>, a
# temporary directory unless set), so the committed seeds never change.
# Needs a nightly toolchain (`cargo +nightly`); installs cargo-fuzz if it is
# missing. A failing input is copied to fuzz/artifacts/<target>/ and the
# command that replays it is printed.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-${WEIR_FUZZ_SECONDS:-10}}"
shift $(( $# > 0 ? 1 : 0 ))
jobs="${WEIR_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
rss_mb="${WEIR_FUZZ_RSS_MB:-2048}"
unit_timeout="${WEIR_FUZZ_UNIT_TIMEOUT:-25}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: a nightly toolchain is needed (rustup toolchain install nightly)" >&2
  exit 2
fi
if ! command -v c++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: a C++ compiler is needed to build libFuzzer (apt-get install g++)" >&2
  exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

echo "== building fuzz targets"
cargo +nightly fuzz build
host="$(rustc +nightly -vV | sed -n 's/^host: //p')"
bin="fuzz/target/$host/release"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

if [ -n "${WEIR_FUZZ_WORK:-}" ]; then
  work="$WEIR_FUZZ_WORK"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/.logs"

# Runs one target; leaves "<execs> <exec/s> <corpus> <result> [<reproducer>]"
# in $work/.logs/<target>.result.
run_target() {
  local t="$1" log="$work/.logs/$1.log" corpus="$work/$1" art
  art="$(mktemp -d "$work/.logs/$1.artifacts.XXXX")"
  mkdir -p "$corpus" "fuzz/corpus/$t"
  local rc=0
  # The outer timeout only catches a fuzzer that stops reporting at all.
  timeout --kill-after=10 "$((secs * 2 + unit_timeout + 120))" \
    "$bin/$t" "$corpus" "fuzz/corpus/$t" \
    -max_total_time="$secs" -rss_limit_mb="$rss_mb" -timeout="$unit_timeout" \
    -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  local execs eps size result=ok repro=""
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  [ -n "$execs" ] || execs="$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')"
  eps="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  size="$(grep -o 'corp: [0-9]*' "$log" | tail -1 | sed 's/corp: //')"
  local found
  found="$(find "$art" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | head -1)"
  if [ -n "$found" ]; then
    result="$(basename "$found" | cut -d- -f1)"
    mkdir -p "fuzz/artifacts/$t"
    repro="fuzz/artifacts/$t/$(basename "$found")"
    cp "$found" "$repro"
  elif [ "$rc" -ne 0 ]; then
    result="failed(rc=$rc)"
  fi
  if [ "$result" != ok ]; then
    mkdir -p "fuzz/artifacts/$t"
    cp "$log" "fuzz/artifacts/$t/fuzz.log"
  fi
  echo "${execs:-0} ${eps:--} ${size:--} $result $repro" >"$work/.logs/$t.result"
  echo "   $t: $result"
}

echo "== fuzzing ${#targets[@]} targets, ${secs}s each, $jobs at a time"
for t in "${targets[@]}"; do
  if [ ! -x "$bin/$t" ]; then
    echo "fuzz: no target $t (see cargo +nightly fuzz list)" >&2
    exit 2
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_target "$t" &
done
wait

failed=0
printf '\n%-20s %14s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  read -r execs eps size result repro <"$work/.logs/$t.result"
  printf '%-20s %14s %10s %8s  %s\n' "$t" "$execs" "$eps" "$size" "$result"
  if [ "$result" != ok ]; then
    failed=1
    echo "   $t's report (full log: fuzz/artifacts/$t/fuzz.log):"
    # The panic message or sanitizer report, without stack frames.
    { grep -v '^#\|^INFO\|^\s*$\|^ *[0-9]*: \|^ *at \|^ *#[0-9]\|^0x\|^Base64\|^stat::' \
        "$work/.logs/$t.log" || true; } | head -20 | cut -c1-200 | sed 's/^/     /'
    if [ -n "$repro" ]; then
      echo "   reproducer: $repro"
      echo "   replay:     cargo +nightly fuzz run $t $repro"
    fi
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "== fuzzing FAILED"
  exit 1
fi
echo "== fuzzing passed"
