#!/usr/bin/python3
"""qBittorrent (qbittorrent-nox) as a lab client: seed or leech one torrent.

Writes a profile whose settings keep every packet on the addresses it is
given (DHT, LSD, PeX, UPnP/NAT-PMP, the GeoIP database download, host name
lookups, search and added trackers off; bound to --ip), starts
qbittorrent-nox on it, checks through its Web API that the settings took
(exit 3 when one did not: nothing is added then), adds the torrent, dials
the --peer addresses (Web API addPeers), and touches --ready (seed: the
data checked and seeding) or --done (leech: every piece verified). It keeps
seeding until it is stopped (SIGTERM stops qbittorrent-nox too).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument('role', choices=['seed', 'leech'])
ap.add_argument('--torrent', required=True)
ap.add_argument('--dir', required=True)
ap.add_argument('--ip', required=True)
ap.add_argument('--port', type=int, required=True)
ap.add_argument('--webui', type=int, required=True, help='Web API port on 127.0.0.1')
ap.add_argument('--profile', required=True)
ap.add_argument('--ready')
ap.add_argument('--done')
ap.add_argument('--peer', action='append', default=[])
ap.add_argument('--timeout', type=float, default=600)
ap.add_argument('--encryption', choices=['prefer', 'require', 'off'], default='prefer',
                help="qBittorrent's Allow / Require / Disable encryption")
ap.add_argument('--protocol', choices=['both', 'tcp', 'utp'], default='tcp',
                help='peer transports, both ways (TCP only unless a test asks)')
args = ap.parse_args()

ENCRYPTION = {'prefer': 0, 'require': 1, 'off': 2}[args.encryption]
PROTOCOL = {'both': ('Both', 0), 'tcp': ('TCP', 1), 'utp': ('UTP', 2)}[args.protocol]

conf_dir = os.path.join(args.profile, 'qBittorrent', 'config')
os.makedirs(conf_dir, exist_ok=True)
with open(os.path.join(conf_dir, 'qBittorrent.conf'), 'w') as f:
    f.write(f"""[LegalNotice]
Accepted=true

[BitTorrent]
Session\\DHTEnabled=false
Session\\LSDEnabled=false
Session\\PeXEnabled=false
Session\\AddTrackersEnabled=false
Session\\AnonymousModeEnabled=false
Session\\Encryption={ENCRYPTION}
Session\\BTProtocol={PROTOCOL[0]}
Session\\Port={args.port}
Session\\UseRandomPort=false
Session\\Interface=lo
Session\\InterfaceName=lo
Session\\InterfaceAddress={args.ip}
Session\\DefaultSavePath={args.dir}
Session\\TempPathEnabled=false
Session\\QueueingSystemEnabled=false
Session\\Preallocation=false
Session\\GlobalMaxRatio=-1
Session\\IgnoreLimitsOnLAN=true
Session\\ReannounceWhenAddressChanged=false
TrackerEnabled=false

[Network]
PortForwardingEnabled=false

[Preferences]
Connection\\ResolvePeerCountries=false
Connection\\ResolvePeerHostNames=false
Connection\\UPnP=false
DynDNS\\Enabled=false
Search\\SearchEnabled=false
General\\Locale=en
WebUI\\Enabled=true
WebUI\\Address=127.0.0.1
WebUI\\Port={args.webui}
WebUI\\UseUPnP=false
WebUI\\LocalHostAuth=false
WebUI\\CSRFProtection=false
WebUI\\ClickjackingProtection=false
WebUI\\HostHeaderValidation=false

[RSS]
AutoDownloader\\EnableProcessing=false
Session\\EnableProcessing=false
""")

env = dict(os.environ, HOME=args.profile, XDG_CONFIG_HOME=args.profile,
           XDG_DATA_HOME=args.profile, XDG_CACHE_HOME=args.profile)
qbt = subprocess.Popen(['qbittorrent-nox', f'--profile={args.profile}',
                        f'--webui-port={args.webui}'], env=env)


def stop(*_):
    if qbt.poll() is None:
        qbt.terminate()
        try:
            qbt.wait(10)
        except subprocess.TimeoutExpired:
            qbt.kill()
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)

BASE = f'http://127.0.0.1:{args.webui}/api/v2/'
# Nothing here goes through a proxy.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(path, data=None, content_type=None):
    req = urllib.request.Request(BASE + path, data=data)
    if content_type:
        req.add_header('Content-Type', content_type)
    with opener.open(req, timeout=10) as r:
        return r.read()


def fail(msg, code=1):
    print(f'qbt_adapter: {msg}', file=sys.stderr, flush=True)
    if qbt.poll() is None:
        qbt.terminate()
        qbt.wait(10)
    sys.exit(code)


deadline = time.monotonic() + args.timeout
up_by = time.monotonic() + 30
while True:
    if qbt.poll() is not None:
        fail(f'qbittorrent-nox exited with {qbt.returncode}')
    try:
        version = call('app/version').decode()
        break
    except (urllib.error.URLError, ConnectionError, OSError):
        if time.monotonic() > up_by:
            fail('the Web API did not come up in 30 s')
        time.sleep(0.05)

prefs = json.loads(call('app/preferences'))
want = {
    'dht': False, 'lsd': False, 'pex': False, 'upnp': False,
    'add_trackers_enabled': False, 'resolve_peer_countries': False,
    'encryption': ENCRYPTION, 'bittorrent_protocol': PROTOCOL[1],
    'listen_port': args.port, 'current_interface_address': args.ip,
}
wrong = {k: prefs.get(k) for k, v in want.items() if prefs.get(k) != v}
if wrong:
    fail(f'settings did not take: {wrong} (wanted {want})', 3)
print(f'qbt_adapter: qBittorrent {version}, {args.role}, encryption {args.encryption}, '
      f'{args.protocol}, on {args.ip}:{args.port}', flush=True)

boundary = '----weirlab' + os.urandom(8).hex()
with open(args.torrent, 'rb') as f:
    tdata = f.read()
parts = []
for name, value in [('savepath', args.dir), ('paused', 'false'), ('skip_checking', 'false'),
                    ('autoTMM', 'false')]:
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                 f'{value}\r\n'.encode())
parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="torrents"; '
             f'filename="t.torrent"\r\nContent-Type: application/x-bittorrent\r\n\r\n'.encode()
             + tdata + b'\r\n')
parts.append(f'--{boundary}--\r\n'.encode())
answer = call('torrents/add', b''.join(parts), f'multipart/form-data; boundary={boundary}')
if answer.strip() != b'Ok.':
    fail(f'torrents/add said {answer!r}')

info_hash = None
while info_hash is None:
    listed = json.loads(call('torrents/info'))
    if listed:
        info_hash = listed[0]['hash']
    elif time.monotonic() > deadline:
        fail('the torrent was never listed')
    else:
        time.sleep(0.05)

dialled = 0.0
flag = args.ready if args.role == 'seed' else args.done
SEEDING = {'uploading', 'stalledUP', 'queuedUP', 'forcedUP'}
while True:
    if qbt.poll() is not None:
        fail(f'qbittorrent-nox exited with {qbt.returncode}')
    t = json.loads(call('torrents/info?' + urllib.parse.urlencode({'hashes': info_hash})))[0]
    if t['state'] in ('error', 'missingFiles'):
        fail(f'torrent state {t["state"]}')
    if t['progress'] >= 1.0 and (args.role == 'leech' or t['state'] in SEEDING):
        break
    # Dial (again while nothing is connected: a peer may come up late).
    if args.peer and time.monotonic() - dialled > 2 and t.get('num_seeds', 0) + t.get('num_leechs', 0) == 0:
        call('torrents/addPeers', urllib.parse.urlencode(
            {'hashes': info_hash, 'peers': '|'.join(args.peer)}).encode(),
            'application/x-www-form-urlencoded')
        dialled = time.monotonic()
    if time.monotonic() > deadline:
        fail(f'not done in {args.timeout} s: progress {t["progress"]:.4f}, state {t["state"]}')
    time.sleep(0.02)

if flag:
    open(flag, 'w').close()
print(f'qbt_adapter: {"seeding" if args.role == "seed" else "done"}', flush=True)
# Keep serving until stopped.
while qbt.poll() is None:
    time.sleep(0.5)
fail(f'qbittorrent-nox exited with {qbt.returncode}')
