"""Shared by weir-lab's libtorrent adapters (python3-libtorrent 2.0):
settings that keep a lab peer to its own 127.0.0.x address with every
discovery, port-mapping and phone-home feature off, and the small helpers
every adapter needs. Written next to each adapter by weir_lab::bt, which
imports it from the script's own directory.
"""
import libtorrent as lt


def lockdown(ip, port, preset='default', **extra):
    """Settings: `preset` ('default' or 'hps', high_performance_seed) with
    DHT, LSD, UPnP, NAT-PMP, uTP and the IP notifier off, listening and
    dialling only on ip:port; `extra` overrides (e.g. enable_dht=True)."""
    s = lt.high_performance_seed() if preset == 'hps' else lt.default_settings()
    s.update({
        'listen_interfaces': f'{ip}:{port}',
        'outgoing_interfaces': ip,
        'enable_dht': False,
        'dht_bootstrap_nodes': '',
        'enable_lsd': False,
        'enable_upnp': False,
        'enable_natpmp': False,
        'enable_incoming_utp': False,
        'enable_outgoing_utp': False,
        'enable_ip_notifier': False,
        'announce_to_all_tiers': False,
        'allow_multiple_connections_per_ip': True,
    })
    s.update(extra)
    return s


def cap_local_peers_too(ses):
    """Puts every address in the global peer class, so rate caps apply to
    loopback and LAN peers too (libtorrent's default filter exempts them)."""
    pcf = lt.ip_filter()
    glob = 1 << lt.session.global_peer_class_id
    pcf.add_rule('0.0.0.0', '255.255.255.255', glob)
    pcf.add_rule('::', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', glob)
    ses.set_peer_class_filter(pcf)


def addr(s):
    """`host:port` or `[v6]:port` as libtorrent's (host, port)."""
    host, port = s.strip().rsplit(':', 1)
    return host.strip('[]'), int(port)


def touch(path):
    """Creates `path` (empty) when given."""
    if path:
        with open(path, 'w'):
            pass
