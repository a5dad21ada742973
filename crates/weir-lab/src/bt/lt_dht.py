#!/usr/bin/python3
"""weir-lab: libtorrent (python3-libtorrent 2.0) with its DHT on, for magnet
tests and benches on 127.0.0.x. Written to a temp dir and run by
weir_lab::bt::dht.

  node  IP PORT                          a DHT node only
  seed  IP PORT DIR TORRENT BOOT         seeds TORRENT (seed mode, no check)
  leech IP PORT DIR MAGNET BOOT [force]  fetches MAGNET (metadata over BEP 9)

BOOT is the DHT node to start from (HOST:PORT). The seeder forces a DHT
announce every second (so a node holds it soon); a leecher does only with
`force`, otherwise it looks up as libtorrent does by itself. LSD, UPnP,
NAT-PMP, uTP, the IP notifier and the public DHT routers are off;
dht_restrict_routing_ips / dht_restrict_search_ips are off so 127.0.0.x
nodes count. Prints, each as it happens: READY (session up, torrent added),
ANNOUNCE hash ip port (an announce the node stored), METADATA, FIRST (first
piece verified), FINISHED. A leecher then tears its session down and prints
FLUSHED before it exits 0: libtorrent 2.0 posts torrent_finished once every
piece's hash passed, which it may compute from blocks still in its store
buffer, so the file on disk is whole only after the disk threads are done
(seen in CI: a file read at FINISHED differed at byte 180224).
"""
import sys
import time

import libtorrent as lt

from lt_common import lockdown

mode, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
cat = lt.alert.category_t
settings = lockdown(
    ip, port,
    enable_dht=True,
    dht_restrict_routing_ips=False, dht_restrict_search_ips=False,
    alert_mask=cat.dht_notification | cat.status_notification
    | cat.error_notification | cat.piece_progress_notification,
)
ses = lt.session(settings)
handle = None
force = mode == 'seed'
if mode in ('seed', 'leech'):
    d, what, boot = sys.argv[4], sys.argv[5], sys.argv[6]
    force = force or (len(sys.argv) > 7 and sys.argv[7] == 'force')
    h, pt = boot.rsplit(':', 1)
    ses.add_dht_node((h, int(pt)))
    if mode == 'seed':
        atp = lt.add_torrent_params()
        atp.ti = lt.torrent_info(what)
        atp.flags |= lt.torrent_flags.seed_mode
    else:
        atp = lt.parse_magnet_uri(what)
    atp.save_path = d
    handle = ses.add_torrent(atp)
print('READY', flush=True)
first = False
last = 0.0
finished = False
while True:
    ses.wait_for_alert(5)
    for a in ses.pop_alerts():
        if isinstance(a, lt.dht_announce_alert):
            print('ANNOUNCE', str(a.info_hash), a.ip, a.port, flush=True)
        elif isinstance(a, lt.metadata_received_alert):
            print('METADATA', flush=True)
        elif isinstance(a, lt.piece_finished_alert) and not first and mode == 'leech':
            first = True
            print('FIRST', flush=True)
        elif isinstance(a, lt.torrent_finished_alert):
            print('FINISHED', flush=True)
            finished = mode == 'leech'
    if finished:
        break
    if force and time.time() - last > 1:
        handle.force_dht_announce()
        last = time.time()
# Only a leecher gets here. The session's destructor aborts it and joins
# its disk threads, which finish every queued write first.
del handle
del ses
print('FLUSHED', flush=True)
