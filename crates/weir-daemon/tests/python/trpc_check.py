"""Drives the server with the transmission-rpc library (PyPI) and checks
what it reads. Arguments: HOST PORT TORRENT INFO_HASH NAME DATA_PATH.
Prints one line per step and OK at the end; any failed check raises."""
import base64
import os
import sys

from transmission_rpc import Client

host, port, torrent, info_hash, name, data_path = sys.argv[1:7]
c = Client(host=host, port=int(port), timeout=20)

s = c.get_session()
assert s.version.startswith("4.0.6 (weir "), s.version
assert s.rpc_version == 17, s.rpc_version
print("session", s.version, s.rpc_version, s.download_dir)

with open(torrent, "rb") as f:
    t = c.add_torrent(f, labels=["movies"])
assert t.name == name, t.name
assert t.hashString == info_hash, t.hashString
print("added metainfo", t.id, t.name)

# The same content again: torrent-duplicate, the same id.
with open(torrent, "rb") as f:
    again = c.add_torrent(base64.b64encode(f.read()).decode())
assert again.id == t.id, (again.id, t.id)

magnet = "magnet:?xt=urn:btih:" + "ab" * 20 + "&dn=from%20python"
m = c.add_torrent(magnet, paused=True)
assert m.name == "from python", m.name
print("added magnet", m.id, m.name)

ts = c.get_torrents(arguments=["id", "name", "hashString", "status", "totalSize", "labels"])
by_id = {x.id: x for x in ts}
assert set(by_id) == {t.id, m.id}, by_id
assert by_id[t.id].labels == ["movies"], by_id[t.id].labels
assert by_id[m.id].total_size == 0
assert by_id[m.id].status == "stopped", by_id[m.id].status
print("get_torrents", len(ts))

full = c.get_torrent(t.id)
assert full.download_dir == os.path.dirname(data_path), full.download_dir
assert full.total_size == os.path.getsize(data_path), full.total_size
assert [f.name for f in full.get_files()] == [name]

c.stop_torrent(t.id)
assert c.get_torrent(t.id).status == "stopped"
c.start_torrent(t.id)
assert c.get_torrent(t.id).status == "downloading", c.get_torrent(t.id).status
print("stop/start ok")

c.change_torrent(t.id, download_limit=123, download_limited=True, labels=["tv", "hd"],
                 seed_ratio_limit=1.5, seed_ratio_mode=1)
ch = c.get_torrent(t.id, arguments=["id", "downloadLimit", "downloadLimited", "labels",
                                    "seedRatioLimit", "seedRatioMode"])
assert ch.download_limit == 123 and ch.download_limited, (ch.download_limit, ch.download_limited)
assert ch.labels == ["tv", "hd"], ch.labels
assert abs(ch.seed_ratio_limit - 1.5) < 1e-9, ch.seed_ratio_limit
print("change_torrent ok")

assert os.path.exists(data_path)
c.remove_torrent(t.id, delete_data=True)
assert not os.path.exists(data_path), "data still on disk"
left = c.get_torrents(arguments=["id"])
assert [x.id for x in left] == [m.id], left
print("remove with data ok")
print("OK")
