#!/bin/bash
# MSE/PE measurements (until `weir bench transports` has its MSE half):
# weir<->weir plaintext (both --encryption off) vs encrypted (seeder
# require, leecher prefer), then weir and a libtorrent leecher in turn from
# an encryption-only libtorrent seeder (forced rc4, hps preset); 1 GiB,
# everything in a netns holding only lo. B=DIR holds seed/big.bin and
# big.torrent (use tmpfs); W=weir binary; RUNS=N. Stops only its own PIDs.
set -u
B=${B:-/tmp/msebench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${W:-$ROOT/target/release/weir}
LT=$ROOT/crates/weir-lab/src/bt/lt_adapter.py
NS=msebench$$
ip netns add $NS && ip netns exec $NS ip link set lo up
trap 'ip netns del $NS' EXIT
X="ip netns exec $NS"
T=$B/big.torrent
leech_weir() { # $1 = leecher encryption, $2 = peer
  rm -rf $B/out; mkdir -p $B/out
  /usr/bin/time -f "%e %U %S" -o $B/time.txt $X $W --allow 127.0.0.0/8 get $T -o $B/out --listen 127.0.0.2:6882 --no-trackers -q --peer $2 --encryption $1 >/dev/null 2>$B/get.err
  rc=$?; cmp -s $B/out/big.bin $B/seed/big.bin && same=identical || same=DIFFERS
  echo "$(cat $B/time.txt) rc=$rc $same"
}
leech_lt() {
  rm -rf $B/out; mkdir -p $B/out
  /usr/bin/time -f "%e %U %S" -o $B/time.txt $X /usr/bin/python3 $LT leech --torrent $T --dir $B/out --ip 127.0.0.2 --port 6882 --peer $1 --done $B/done.flag --forced-enc >/dev/null 2>$B/lt.err
  rc=$?; cmp -s $B/out/big.bin $B/seed/big.bin && same=identical || same=DIFFERS
  echo "$(cat $B/time.txt) rc=$rc $same"
}
RUNS=${RUNS:-3}
for pol in off require; do
  $X $W --allow 127.0.0.0/8 seed $T $B/seed --listen 127.0.0.1:6881 --no-trackers -q --encryption $pol >/dev/null 2>$B/seed.err &
  sp=$!
  for i in $(seq 50); do $X bash -c 'echo > /dev/tcp/127.0.0.1/6881' 2>/dev/null && break; sleep 0.2; done
  lp=$([ $pol = off ] && echo off || echo prefer)
  for r in $(seq $RUNS); do echo "weir($lp) <- weir seed($pol) run $r: $(leech_weir $lp 127.0.0.1:6881)"; done
  kill $sp; wait $sp 2>/dev/null
done
rm -f $B/ready.flag
$X /usr/bin/python3 $LT seed --torrent $T --dir $B/seed --ip 127.0.0.1 --port 6881 --ready $B/ready.flag --forced-enc --preset hps >/dev/null 2>$B/ltseed.err &
lsp=$!
for i in $(seq 600); do [ -e $B/ready.flag ] && break; sleep 0.2; done
for r in $(seq $RUNS); do
  echo "weir(prefer) <- libtorrent seed(forced rc4) run $r: $(leech_weir prefer 127.0.0.1:6881)"
  echo "libtorrent(forced rc4) <- libtorrent seed(forced rc4) run $r: $(leech_lt 127.0.0.1:6881)"
done
kill $lsp; wait $lsp 2>/dev/null
