#!/usr/bin/env bash
# Refreshes crates/weir/link-order.txt: the functions a daemon runs, which
# crates/weir/build.rs asks the linker to place together (see there why).
# Builds the release binary, runs `weir daemon` under callgrind on loopback
# (in a network namespace holding only `lo` when run as root) while
# scripts/link-order-workload.py drives it over RPC, lists the functions that
# ran, and relinks. Run it after changes to the daemon's paths; a stale list
# only loses the layout for the functions that changed.
#   --check   only report how many listed functions the current binary has
set -euo pipefail
cd "$(dirname "$0")/.."
ORDER=crates/weir/link-order.txt
BIN=target/release/weir

listed() { python3 - "$BIN" "$ORDER" <<'PY'
import subprocess, sys
names = {l.split()[-1] for l in subprocess.run(["nm", sys.argv[1]], capture_output=True,
         text=True, check=True).stdout.splitlines() if l.strip()}
order = [l.strip() for l in open(sys.argv[2]) if l.strip()]
print(f"{sum(n in names for n in order)} of {len(order)} listed functions are in {sys.argv[1]}")
PY
}

if [ "${1:-}" = "--check" ]; then listed; exit 0; fi
if [ "${1:-}" != "--in-namespace" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    exec unshare -n "$0" --in-namespace
fi
[ "${1:-}" = "--in-namespace" ] && ip link set lo up
command -v valgrind >/dev/null || { echo "link-order: needs valgrind" >&2; exit 1; }
cargo build --release --bin weir
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/dl" "$WORK/state"
PORT=${PORT:-19391}
valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no \
    --dump-instr=no --dump-line=no --callgrind-out-file="$WORK/cg.out" \
    "$BIN" --allow 127.0.0.0/8 daemon --rpc "127.0.0.1:$PORT" --listen 127.0.0.1:0 \
    --download-dir "$WORK/dl" --state "$WORK/state" --no-dht --no-trackers \
    >"$WORK/log" 2>&1 &
PID=$!
for _ in $(seq 600); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$PORT)).close()" \
        2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/log" >&2; exit 1; }
    sleep 0.2
done
python3 scripts/link-order-workload.py "$PORT" 300
kill -TERM "$PID"
wait "$PID" || true
python3 - "$WORK/cg.out" "$BIN" "$ORDER" <<'PY'
import re, subprocess, sys
cg, binary, out = sys.argv[1:4]
obj, seen, order = None, set(), []
for line in open(cg):
    if line.startswith("ob="):
        obj = line[3:].strip()
    elif line.startswith("fn=") and obj and obj.endswith("/weir"):
        name = re.sub(r"'\d+$", "", line[3:].strip())
        if name not in seen:
            seen.add(name)
            order.append(name)
sizes = {}
for l in subprocess.run(["nm", "-S", binary], capture_output=True, text=True,
                        check=True).stdout.splitlines():
    p = l.split()
    if len(p) == 4 and p[2] in "tTwW":
        sizes[p[3]] = int(p[1], 16)
keep = [n for n in order if n in sizes]
open(out, "w").write("\n".join(keep) + "\n")
print(f"link-order: {len(keep)} functions, {sum(sizes[n] for n in keep) / 1048576:.2f} MiB of code")
PY
cargo build --release --bin weir
listed
