#!/usr/bin/python3
"""weir-lab adapter for libtorrent-rasterbar 2.0 (Debian python3-libtorrent).

Seeds or downloads one torrent with every discovery and port-mapping feature
off (DHT, LSD, UPnP, NAT-PMP, PEX, uTP), listening and dialling only on the
given address. Written to a temp dir and run by weir_lab::bt.

  seed:  touches --ready once the existing data is checked and seeding;
         with --dial, keeps dialling that leecher while no peer is connected.
  leech: dials each --peer (again every 2 s while none is connected),
         touches --done when the torrent finishes, then exits 0.
Rate caps (--dl-limit/--ul-limit, bytes/s) also apply to loopback/LAN peers:
every address is mapped to the global peer class, which libtorrent's
default peer-class filter exempts ("local" class).
"""
import argparse
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
ap.add_argument('--peer', action='append', default=[])
ap.add_argument('--dial')
ap.add_argument('--dl-limit', type=int, default=0)
ap.add_argument('--ul-limit', type=int, default=0)
ap.add_argument('--ready')
ap.add_argument('--done')
ap.add_argument('--timeout', type=float, default=600.0)
ap.add_argument('--ut-metadata', action='store_true', help='load the BEP 9 extension (serve metadata)')
ap.add_argument('--ut-pex', action='store_true', help='load the BEP 11 extension (peer exchange)')
ap.add_argument('--magnet', help='leech: start from this magnet link instead of --torrent (implies --ut-metadata)')
ap.add_argument('--forced-enc', action='store_true', help='MSE/PE with RC4 only, both ways (no plaintext peer)')
ap.add_argument('--utp-only', action='store_true', help='uTP only, both ways (TCP off)')
a = ap.parse_args()


settings = lockdown(a.ip, a.port, a.preset,
                    alert_mask=lt.alert.category_t.status_notification
                    | lt.alert.category_t.error_notification,
                    download_rate_limit=a.dl_limit,
                    upload_rate_limit=a.ul_limit)
if a.forced_enc:
    settings.update({
        'out_enc_policy': int(lt.enc_policy.forced),
        'in_enc_policy': int(lt.enc_policy.forced),
        'allowed_enc_level': int(lt.enc_level.rc4),
    })
if a.utp_only:
    settings.update({
        'enable_incoming_tcp': False,
        'enable_outgoing_tcp': False,
        'enable_incoming_utp': True,
        'enable_outgoing_utp': True,
    })
# flags 0: no default extensions, so no ut_pex / ut_metadata / smart_ban.
ses = lt.session(settings, 0)
if a.ut_metadata or a.magnet:
    ses.add_extension('ut_metadata')
if a.ut_pex:
    ses.add_extension('ut_pex')
if a.dl_limit or a.ul_limit:
    cap_local_peers_too(ses)

if a.magnet:
    # Metadata from the peers (BEP 9): --torrent only names the run.
    atp = lt.parse_magnet_uri(a.magnet)
else:
    atp = lt.add_torrent_params()
    atp.ti = lt.torrent_info(a.torrent)
atp.save_path = a.dir
atp.flags |= lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd
if not a.ut_pex:
    atp.flags |= lt.torrent_flags.disable_pex
h = ses.add_torrent(atp)


def drain_alerts():
    finished = False
    for al in ses.pop_alerts():
        if isinstance(al, lt.torrent_finished_alert):
            finished = True
        elif isinstance(al, (lt.torrent_error_alert, lt.file_error_alert)):
            print('error:', al.message(), file=sys.stderr, flush=True)
    return finished


if a.mode == 'seed':
    ready = False
    last_dial = 0.0
    while True:
        ses.wait_for_alert(200)
        drain_alerts()
        st = h.status()
        if not ready and st.is_seeding:
            ready = True
            print(f'seeding {st.name} on {a.ip}:{a.port}', flush=True)
            touch(a.ready)
        if (not ready and st.state == lt.torrent_status.downloading
                and st.progress < 1.0):
            print(f'seed data incomplete or wrong: progress {st.progress:.4f}',
                  file=sys.stderr, flush=True)
            sys.exit(1)
        if ready and a.dial and st.num_peers == 0 and time.time() - last_dial > 1.0:
            last_dial = time.time()
            h.connect_peer(addr(a.dial))
else:
    deadline = time.time() + a.timeout
    for p in a.peer:
        h.connect_peer(addr(p))
    last = time.time()
    while True:
        ses.wait_for_alert(50)
        finished = drain_alerts()
        st = h.status()
        if finished or st.is_seeding:
            touch(a.done)
            print(f'finished {st.name}', flush=True)
            break
        now = time.time()
        if now - last > 2.0:
            last = now
            print(f'{st.progress * 100:5.1f}% {st.download_rate / 1e6:.1f} MB/s '
                  f'peers={st.num_peers}', flush=True)
            if st.num_peers == 0:
                for p in a.peer:
                    h.connect_peer(addr(p))
        if now > deadline:
            print('timeout', file=sys.stderr, flush=True)
            sys.exit(3)
    ses.pause()
