#!/usr/bin/python3
"""libtorrent (python3-libtorrent) speaking only uTP, for weir-utp's
wire-compatibility test. Run inside a network namespace holding only lo.

  lt_utp.py seed  TORRENT DIR IP PORT FLAG          touches FLAG when seeding
  lt_utp.py leech TORRENT DIR IP PORT FLAG PEER     dials PEER (ip:port) over
                                                     uTP, touches FLAG when done

TCP is off both ways, uTP on; DHT, LSD, UPnP, NAT-PMP, PEX and encryption
off (plaintext handshakes only).
"""
import sys
import time

import libtorrent as lt

mode, torrent, data_dir, ip, port, flag = sys.argv[1:7]
peer = sys.argv[7] if len(sys.argv) > 7 else None

settings = lt.default_settings()
settings.update({
    'listen_interfaces': f'{ip}:{port}',
    'outgoing_interfaces': ip,
    'enable_dht': False,
    'dht_bootstrap_nodes': '',
    'enable_lsd': False,
    'enable_upnp': False,
    'enable_natpmp': False,
    'enable_incoming_tcp': False,
    'enable_outgoing_tcp': False,
    'enable_incoming_utp': True,
    'enable_outgoing_utp': True,
    'enable_ip_notifier': False,
    'allow_multiple_connections_per_ip': True,
    'in_enc_policy': lt.enc_policy.disabled,
    'out_enc_policy': lt.enc_policy.disabled,
    'alert_mask': (lt.alert.category_t.status_notification
                   | lt.alert.category_t.error_notification
                   | lt.alert.category_t.peer_notification),
})
ses = lt.session(settings, 0)  # flags 0: no ut_pex / ut_metadata / smart_ban

atp = lt.add_torrent_params()
atp.ti = lt.torrent_info(torrent)
atp.save_path = data_dir
atp.flags |= (lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd
              | lt.torrent_flags.disable_pex)
h = ses.add_torrent(atp)


def addr(s):
    host, p = s.rsplit(':', 1)
    return host, int(p)


def drain():
    done = False
    for al in ses.pop_alerts():
        if isinstance(al, lt.torrent_finished_alert):
            done = True
        elif isinstance(al, (lt.peer_error_alert, lt.peer_disconnected_alert,
                             lt.torrent_error_alert, lt.peer_connect_alert,
                             lt.incoming_connection_alert)):
            print('alert:', al.message(), file=sys.stderr, flush=True)
    return done


deadline = time.time() + 120
if mode == 'seed':
    ready = False
    while time.time() < deadline:
        ses.wait_for_alert(100)
        drain()
        st = h.status()
        if not ready and st.is_seeding:
            ready = True
            print(f'seeding {st.name} on {ip}:{port}', flush=True)
            with open(flag, 'w'):
                pass
    sys.exit(3)
else:
    h.connect_peer(addr(peer))
    last = time.time()
    while time.time() < deadline:
        ses.wait_for_alert(50)
        finished = drain()
        st = h.status()
        if finished or st.is_seeding:
            print(f'finished {st.name}', flush=True)
            with open(flag, 'w'):
                pass
            sys.exit(0)
        if time.time() - last > 2.0:
            last = time.time()
            print(f'{st.progress * 100:5.1f}% peers={st.num_peers}', flush=True)
            if st.num_peers == 0:
                h.connect_peer(addr(peer))
    print('timeout', file=sys.stderr, flush=True)
    sys.exit(3)
