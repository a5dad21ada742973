"""Drives a real `weir daemon` with the transmission-rpc library (PyPI) and
checks what it reads: one torrent added by metainfo, one by magnet (its
metadata comes from a libtorrent seeder), both downloaded.
Arguments: HOST PORT DOWNLOADS TORRENT NAME SIZE MAGNET MAGNET_HASH MAGNET_NAME
MAGNET_SIZE. Prints one line per step and OK at the end; a failed check
raises."""
import os
import sys
import time

from transmission_rpc import Client
from transmission_rpc.error import TransmissionError

(host, port, downloads, torrent, name, size, magnet, mhash, mname, msize) = sys.argv[1:11]
size, msize = int(size), int(msize)
c = Client(host=host, port=int(port), timeout=20)


def wait(what, cond, limit=40.0):
    end = time.monotonic() + limit
    while True:
        ts = {t.id: t for t in c.get_torrents(arguments=FIELDS)}
        if cond(ts):
            return ts
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {limit} s: "
                                 + repr({i: (t.name, t.status, t.percent_done) for i, t in ts.items()}))
        time.sleep(0.2)


FIELDS = ["id", "name", "hashString", "status", "totalSize", "percentDone", "labels",
          "metadataPercentComplete", "downloadDir", "haveValid", "isFinished"]

s = c.get_session()
assert s.version.startswith("4.0.6 (weir "), s.version
assert s.rpc_version == 17, s.rpc_version
assert s.download_dir == downloads, (s.download_dir, downloads)
print("session", s.version, s.rpc_version, s.download_dir)

with open(torrent, "rb") as f:
    t = c.add_torrent(f, labels=["movies"])
assert t.name == name, t.name
print("added metainfo", t.id, t.name)

# Added paused: listed at once under the link's name, no metadata yet.
m = c.add_torrent(magnet, paused=True)
assert m.name == mname, m.name
assert m.hashString == mhash, m.hashString
mg = c.get_torrent(m.id, arguments=FIELDS)
assert mg.total_size == 0, mg.total_size
assert mg.metadata_percent_complete == 0, mg.metadata_percent_complete
assert mg.status == "stopped", mg.status
print("added magnet", m.id, m.name, "metadata pending")

c.start_torrent(m.id)
ts = wait("both complete", lambda ts: len(ts) == 2
          and all(x.percent_done == 1 for x in ts.values()))
assert ts[t.id].labels == ["movies"], ts[t.id].labels
assert ts[m.id].name == mname and ts[m.id].total_size == msize, (ts[m.id].name, ts[m.id].total_size)
assert ts[m.id].metadata_percent_complete == 1
assert ts[t.id].total_size == size and ts[t.id].have_valid == size
assert all(x.download_dir == downloads for x in ts.values())
print("get_torrents: both complete")

c.stop_torrent(t.id)
wait("stopped", lambda ts: ts[t.id].status == "stopped", 10)
c.start_torrent(t.id)
wait("seeding", lambda ts: ts[t.id].status == "seeding", 10)
print("stop/start ok")

c.change_torrent(t.id, download_limit=123, download_limited=True, upload_limit=45,
                 upload_limited=True, labels=["tv", "hd"], seed_ratio_limit=1.5, seed_ratio_mode=1)
ch = c.get_torrent(t.id, arguments=["id", "downloadLimit", "downloadLimited", "uploadLimit",
                                    "uploadLimited", "labels", "seedRatioLimit", "seedRatioMode"])
assert ch.download_limit == 123 and ch.download_limited, (ch.download_limit, ch.download_limited)
assert ch.upload_limit == 45 and ch.upload_limited, (ch.upload_limit, ch.upload_limited)
assert ch.labels == ["tv", "hd"], ch.labels
assert abs(ch.seed_ratio_limit - 1.5) < 1e-9, ch.seed_ratio_limit
assert ch.seed_ratio_mode == 1, ch.seed_ratio_mode
# File selection: the one file unwanted, then wanted again, read back.
c.change_torrent(t.id, files_unwanted=[0])
w = c.get_torrent(t.id, arguments=["id", "wanted"])
assert [bool(x) for x in w.fields["wanted"]] == [False], w.fields["wanted"]
c.change_torrent(t.id, files_wanted=[0])
w = c.get_torrent(t.id, arguments=["id", "wanted"])
assert [bool(x) for x in w.fields["wanted"]] == [True], w.fields["wanted"]
try:
    c.change_torrent(t.id, files_unwanted=[5])
    raise AssertionError("files_unwanted past the last file accepted")
except TransmissionError as e:
    assert "5" in str(e), str(e)
# File priorities: set, read back, set back; an index past the last is
# refused naming it.
c.change_torrent(t.id, priority_high=[0])
p = c.get_torrent(t.id, arguments=["id", "priorities"])
assert list(p.fields["priorities"]) == [1], p.fields["priorities"]
c.change_torrent(t.id, priority_normal=[0])
p = c.get_torrent(t.id, arguments=["id", "priorities"])
assert list(p.fields["priorities"]) == [0], p.fields["priorities"]
try:
    c.change_torrent(t.id, priority_low=[5])
    raise AssertionError("priority_low past the last file accepted")
except TransmissionError as e:
    assert "5" in str(e), str(e)
print("change_torrent ok")

data = os.path.join(downloads, name)
assert os.path.exists(data)
c.remove_torrent(t.id, delete_data=True)
assert not os.path.exists(data), "data still on disk"
left = c.get_torrents(arguments=["id"])
assert [x.id for x in left] == [m.id], left
print("remove with data ok")
print("OK")
