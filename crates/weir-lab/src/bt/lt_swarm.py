#!/usr/bin/python3
"""weir-lab swarm adapter for libtorrent-rasterbar 2.0 (Debian python3-libtorrent).

A member of a swarm that stays in it until stopped (SIGTERM), with every
discovery and port-mapping feature off (DHT, LSD, UPnP, NAT-PMP, PEX, uTP),
listening and dialling only on the given address; peers come from the
torrent's tracker. Written to a temp dir and run by weir_lab::bt::swarm.

  seed:  touches --ready once the existing data is checked and seeding;
         once --dial-file exists, dials every ip:port line in it (again
         every 2 s while that address is not connected).
  leech: touches --done when the torrent finishes, then keeps seeding.
Both print `STATS <unix time> <payload down> <payload up> <progress>` every
0.5 s and once more when stopped, then exit 0; the seeder then prints
`UPLOADED <ip> <blocks> <repeats>` per peer: blocks it sent that peer, and
how many of them it had already sent to anyone (block_uploaded alerts).
Rate caps (--ul-limit, bytes/s) also apply to loopback peers: every address
is mapped to the global peer class.
"""
import argparse
import os
import signal
import sys
import time

import libtorrent as lt

from lt_common import addr, cap_local_peers_too, lockdown, touch

ap = argparse.ArgumentParser()
ap.add_argument('mode', choices=['seed', 'leech'])
ap.add_argument('--torrent', required=True)
ap.add_argument('--dir', required=True)
ap.add_argument('--ip', required=True)
ap.add_argument('--port', type=int, required=True)
ap.add_argument('--preset', choices=['default', 'hps'], default='default')
ap.add_argument('--ul-limit', type=int, default=0)
ap.add_argument('--dial-file')
ap.add_argument('--ready')
ap.add_argument('--done')
ap.add_argument('--timeout', type=float, default=600.0)
a = ap.parse_args()

stopping = False


def on_term(_sig, _frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)


cat = lt.alert.category_t
settings = lockdown(a.ip, a.port, a.preset,
                    alert_mask=cat.status_notification | cat.error_notification
                    | (cat.upload_notification if a.mode == 'seed' else 0),
                    alert_queue_size=1 << 20,
                    upload_rate_limit=a.ul_limit)
# flags 0: no default extensions, so no ut_pex / ut_metadata / smart_ban.
ses = lt.session(settings, 0)
if a.ul_limit:
    cap_local_peers_too(ses)

atp = lt.add_torrent_params()
atp.ti = lt.torrent_info(a.torrent)
atp.save_path = a.dir
atp.flags |= (lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd
              | lt.torrent_flags.disable_pex)
h = ses.add_torrent(atp)


def stats():
    st = h.status()
    print(f'STATS {time.time():.3f} {st.total_payload_download} '
          f'{st.total_payload_upload} {st.progress:.6f}', flush=True)
    return st


# Seeder: blocks sent, per peer IP, and how many were sent before to anyone.
sent_blocks = set()
uploaded = {}


def drain():
    """Handles the queued alerts; whether the torrent finished."""
    finished = False
    for al in ses.pop_alerts():
        if isinstance(al, lt.torrent_finished_alert):
            finished = True
        elif isinstance(al, lt.block_uploaded_alert):
            key = (al.piece_index, al.block_index)
            ip = al.ip[0] if isinstance(al.ip, tuple) else str(al.ip)
            u = uploaded.setdefault(ip, [0, 0])
            u[0] += 1
            if key in sent_blocks:
                u[1] += 1
            else:
                sent_blocks.add(key)
        elif isinstance(al, (lt.torrent_error_alert, lt.file_error_alert)):
            print('error:', al.message(), file=sys.stderr, flush=True)
    return finished


deadline = time.time() + a.timeout
ready = False
done = False
dial = None
last_dial = 0.0
last_stats = 0.0
while not stopping:
    ses.wait_for_alert(100)
    done = drain() or done
    now = time.time()
    st = h.status()
    if a.mode == 'seed':
        if not ready and st.is_seeding:
            ready = True
            print(f'seeding {st.name} on {a.ip}:{a.port}', flush=True)
            touch(a.ready)
        if (not ready and st.state == lt.torrent_status.downloading
                and st.progress < 1.0):
            print(f'seed data incomplete or wrong: progress {st.progress:.4f}',
                  file=sys.stderr, flush=True)
            sys.exit(1)
        if ready and dial is None and a.dial_file and os.path.exists(a.dial_file):
            with open(a.dial_file) as f:
                dial = [addr(l) for l in f if l.strip()]
        if dial and now - last_dial > 2.0:
            last_dial = now
            connected = {p.ip[0] for p in h.get_peer_info()}
            for d in dial:
                if d[0] not in connected:
                    h.connect_peer(d)
    elif not done and st.is_seeding:
        done = True
    if a.mode == 'leech' and done and a.done and not os.path.exists(a.done):
        touch(a.done)
        print(f'finished {st.name}', flush=True)
    if now - last_stats >= 0.5:
        last_stats = now
        stats()
    if now > deadline:
        print('timeout', file=sys.stderr, flush=True)
        sys.exit(3)
drain()
stats()
for ip, (blocks, repeats) in sorted(uploaded.items()):
    print(f'UPLOADED {ip} {blocks} {repeats}', flush=True)
ses.pause()
