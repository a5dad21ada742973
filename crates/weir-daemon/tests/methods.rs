//! Methods no real client test covers: adding by URL (fetched by the
//! backend under its network policy), set-location with a move, queue moves,
//! free-space, port-test, session-close, torrent-get detail fields.

use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_daemon::client::{ClientError, RpcClient};
use weir_daemon::fake::FakeBackend;
use weir_daemon::{RpcConfig, RpcServer, ServerHandle};

fn torrent(name: &str, len: u64) -> Vec<u8> {
    let mut t = format!(
        "d8:announce30:http://127.0.0.1:6969/announce4:infod6:lengthi{len}e4:name{}:{name}12:piece lengthi16384e6:pieces20:",
        name.len()
    )
    .into_bytes();
    t.extend_from_slice(&[7u8; 20]);
    t.extend_from_slice(b"ee");
    t
}

async fn start(dir: &std::path::Path) -> (ServerHandle, Arc<FakeBackend>, RpcClient) {
    let backend = Arc::new(FakeBackend::new(dir).with_files());
    let server = RpcServer::bind(
        RpcConfig::new("127.0.0.1:0".parse().unwrap()),
        backend.clone(),
    )
    .await
    .unwrap();
    let h = server.spawn();
    let c = RpcClient::new(h.addr());
    (h, backend, c)
}

/// Serves `body` once over HTTP on 127.0.0.1; its URL.
async fn serve_once(body: Vec<u8>) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = s.read(&mut buf).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&body).await.unwrap();
    });
    format!("http://{addr}/x.torrent")
}

#[tokio::test]
async fn add_by_url_under_the_policy() {
    let dir = weir_lab::TempDir::new("rpc-url").unwrap();
    let (h, b, c) = start(dir.path()).await;
    let url = serve_once(torrent("fetched.bin", 10_000)).await;
    let r = c
        .call("torrent-add", json!({"filename": url}))
        .await
        .unwrap();
    assert_eq!(r["torrent-added"]["name"], "fetched.bin");
    assert_eq!(b.len(), 1);
    // An address outside the policy is refused before any packet is sent.
    let e = c
        .call(
            "torrent-add",
            json!({"filename": "http://192.0.2.1/x.torrent"}),
        )
        .await
        .unwrap_err();
    let ClientError::Rpc(msg) = e else {
        panic!("{e}")
    };
    assert!(
        msg.starts_with("http error: http://192.0.2.1/x.torrent"),
        "{msg}"
    );
    assert!(
        msg.contains("refused") || msg.contains("denied") || msg.contains("policy"),
        "{msg}"
    );
    let e = c
        .call(
            "torrent-add",
            json!({"filename": "https://127.0.0.1:1/x.torrent"}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, ClientError::Rpc(ref m) if m.contains("only http://")),
        "{e}"
    );
    assert_eq!(b.len(), 1);
    h.stop().await.unwrap();
}

#[tokio::test]
async fn location_queue_space_port_and_close() {
    let dir = weir_lab::TempDir::new("rpc-methods").unwrap();
    let (h, b, c) = start(dir.path()).await;
    for (i, name) in ["a.bin", "b.bin", "c.bin"].iter().enumerate() {
        let b64 = base64_of(&torrent(name, 1000 + i as u64));
        c.call("torrent-add", json!({"metainfo": b64, "paused": true}))
            .await
            .unwrap();
    }
    let moved = dir.path().join("moved");
    c.call(
        "torrent-set-location",
        json!({"ids": [1], "location": moved, "move": true}),
    )
    .await
    .unwrap();
    assert!(moved.join("a.bin").exists() && !dir.path().join("a.bin").exists());
    let e = c
        .call(
            "torrent-set-location",
            json!({"ids": [1], "location": "rel"}),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Rpc(ref m) if m.starts_with("path is not absolute")));

    c.call("queue-move-bottom", json!({"ids": [1]}))
        .await
        .unwrap();
    c.call("queue-move-up", json!({"ids": [3]})).await.unwrap();
    let v = c
        .call(
            "torrent-get",
            json!({"fields": ["id", "queuePosition", "downloadDir"]}),
        )
        .await
        .unwrap();
    let pos: Vec<(u64, u64)> = v["torrents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_u64().unwrap(),
                t["queuePosition"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(pos, vec![(1, 2), (2, 1), (3, 0)]);
    assert_eq!(v["torrents"][0]["downloadDir"], moved.to_str().unwrap());

    let v = c
        .call(
            "torrent-get",
            json!({"ids": [2], "fields": ["files", "fileStats", "priorities", "wanted", "trackers",
                "trackerStats", "pieces", "pieceCount", "peersFrom", "magnetLink", "fileCount"]}),
        )
        .await
        .unwrap();
    let t = &v["torrents"][0];
    assert_eq!(t["files"][0]["name"], "b.bin");
    assert_eq!(t["files"][0]["length"], 1001);
    assert_eq!(t["wanted"], json!([1]));
    assert_eq!(t["priorities"], json!([0]));
    assert_eq!(t["fileStats"][0]["wanted"], true);
    assert_eq!(
        t["trackers"][0]["announce"],
        "http://127.0.0.1:6969/announce"
    );
    assert_eq!(t["trackerStats"][0]["host"], "http://127.0.0.1:6969");
    assert_eq!(t["trackerStats"][0]["seederCount"], -1);
    assert_eq!(t["pieces"], "AA==", "one piece, not yet had");
    assert_eq!(t["fileCount"], 1);
    assert!(
        t["magnetLink"]
            .as_str()
            .unwrap()
            .starts_with("magnet:?xt=urn:btih:")
    );

    let v = c
        .call("free-space", json!({"path": dir.path()}))
        .await
        .unwrap();
    assert!(v["size-bytes"].as_u64().unwrap() > 0);
    assert!(v["total_size"].as_u64().unwrap() >= v["size-bytes"].as_u64().unwrap());
    let v = c.call("port-test", json!({})).await.unwrap();
    assert_eq!(v["port-is-open"], false);
    b.set_port_open(true);
    let v = c
        .call("port-test", json!({"ipProtocol": "ipv4"}))
        .await
        .unwrap();
    assert_eq!(v, json!({"port-is-open": true, "ipProtocol": "ipv4"}));

    assert!(!b.is_closed());
    c.call("session-close", json!({})).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), b.wait_closed())
        .await
        .unwrap();
    h.stop().await.unwrap();
}

fn base64_of(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}
