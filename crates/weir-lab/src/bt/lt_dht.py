"""weir-lab: libtorrent-rasterbar (python3-libtorrent) on the DHT only.

  node  IP PORT [BOOT...]              a DHT node
  seed  IP PORT DIR TORRENT [BOOT...]  seeds TORRENT's data in DIR
  leech IP PORT DIR MAGNET [BOOT...]   fetches a magnet link into DIR

BOOT is HOST:PORT of a DHT node to start from. No bootstrap routers, LSD,
UPnP, NAT-PMP, IP notifier or uTP; routing and search restrictions are off
so that nodes on 127.0.0.x find each other. Seeder and leecher force a DHT
announce every second. Prints READY, then INFOHASH <hex> (seed, leech), every
announce this node stores (ANNOUNCE <hash> <ip> <port>), METADATA,
FIRSTBYTE and FINISHED, each with nothing after it but the words shown.
"""
import sys, time
import libtorrent as lt

mode, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
settings = {
    'listen_interfaces': f'{ip}:{port}', 'outgoing_interfaces': ip,
    'enable_dht': True, 'dht_bootstrap_nodes': '',
    'dht_restrict_routing_ips': False, 'dht_restrict_search_ips': False,
    'enable_lsd': False, 'enable_upnp': False, 'enable_natpmp': False,
    'enable_ip_notifier': False, 'enable_incoming_utp': False, 'enable_outgoing_utp': False,
    'alert_mask': lt.alert.category_t.dht_notification | lt.alert.category_t.status_notification
        | lt.alert.category_t.error_notification,
}
ses = lt.session(settings)
rest = sys.argv[4:]
handle = None
if mode in ('seed', 'leech'):
    d, what, rest = rest[0], rest[1], rest[2:]
    if mode == 'seed':
        atp = lt.add_torrent_params()
        atp.ti = lt.torrent_info(what)
        atp.flags |= lt.torrent_flags.seed_mode
    else:
        atp = lt.parse_magnet_uri(what)
    atp.save_path = d
    handle = ses.add_torrent(atp)
for boot in rest:
    h, pt = boot.rsplit(':', 1)
    ses.add_dht_node((h, int(pt)))
print('READY', flush=True)
if handle is not None:
    print('INFOHASH', str(handle.info_hash()), flush=True)
last = 0.0
first = False
while True:
    for a in ses.pop_alerts():
        if isinstance(a, lt.dht_announce_alert):
            print('ANNOUNCE', str(a.info_hash), a.ip, a.port, flush=True)
        elif isinstance(a, lt.metadata_received_alert):
            print('METADATA', flush=True)
        elif isinstance(a, lt.torrent_finished_alert):
            print('FINISHED', flush=True)
    if handle is not None and mode == 'leech' and not first:
        if handle.status().total_wanted_done > 0:
            print('FIRSTBYTE', flush=True)
            first = True
    if handle is not None and time.time() - last > 1:
        handle.force_dht_announce()
        last = time.time()
    time.sleep(0.02)
