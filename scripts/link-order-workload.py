#!/usr/bin/env python3
"""What a daemon does most, over Transmission RPC, for scripts/link-order.sh:
adds N torrents (metainfo), lists them as transmission-remote -l and -i do,
stops and starts them, reads the session, removes one. Talks to 127.0.0.1 only."""
import base64, hashlib, json, socket, sys

PORT = int(sys.argv[1])
N = int(sys.argv[2]) if len(sys.argv) > 2 else 300


def benc(x):
    if isinstance(x, int):
        return b"i%de" % x
    if isinstance(x, str):
        x = x.encode()
    if isinstance(x, bytes):
        return b"%d:%s" % (len(x), x)
    if isinstance(x, dict):
        return b"d" + b"".join(benc(k) + benc(x[k]) for k in sorted(x)) + b"e"
    return b"l" + b"".join(benc(i) for i in x) + b"e"


SID = ""


def call(method, **arguments):
    global SID
    for _ in range(2):
        body = json.dumps({"method": method, "arguments": arguments, "tag": 1}).encode()
        s = socket.create_connection(("127.0.0.1", PORT))
        s.sendall(b"POST /transmission/rpc HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"X-Transmission-Session-Id: %s\r\nContent-Length: %d\r\n"
                  b"Connection: close\r\n\r\n%s" % (SID.encode(), len(body), body))
        out = b""
        while True:
            d = s.recv(1 << 20)
            if not d:
                break
            out += d
        s.close()
        head, _, rest = out.partition(b"\r\n\r\n")
        if b" 409 " in head.split(b"\r\n")[0]:
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"x-transmission-session-id:"):
                    SID = line.split(b":", 1)[1].strip().decode()
            continue
        reply = json.loads(rest)
        if reply.get("result") != "success":
            sys.exit(f"{method}: {reply.get('result')}")
        return reply["arguments"]
    sys.exit(f"{method}: no session id")


LIST = ["id", "name", "status", "error", "errorString", "eta", "isFinished", "leftUntilDone",
        "peersGettingFromUs", "peersSendingToUs", "rateDownload", "rateUpload",
        "sizeWhenDone", "uploadRatio"]
INFO = ["activityDate", "addedDate", "comment", "creator", "dateCreated", "downloadDir",
        "downloadedEver", "hashString", "haveValid", "id", "isPrivate", "name", "percentDone",
        "pieceCount", "pieceSize", "status", "totalSize", "uploadedEver", "files", "fileStats",
        "peers", "trackerStats", "labels", "priorities", "wanted"]

call("session-get")
for i in range(N):
    t = {"info": {"name": "t%05d.bin" % i, "length": 65536, "piece length": 32768,
                  "pieces": hashlib.sha1(b"%d" % i).digest() * 2}}
    call("torrent-add", metainfo=base64.b64encode(benc(t)).decode(), paused=(i % 10 == 0))
for _ in range(5):
    assert len(call("torrent-get", fields=LIST)["torrents"]) == N
call("torrent-get", ids=[1], fields=INFO)
call("torrent-stop", ids=[2, 3])
call("torrent-start", ids=[2, 3])
call("torrent-set", ids=[4], labels=["x"])
call("session-stats")
call("torrent-remove", ids=[5], **{"delete-local-data": True})
print("workload done")
