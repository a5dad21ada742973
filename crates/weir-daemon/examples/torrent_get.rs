//! Times `torrent-get` of N synthetic transfers (transmission-remote -l's
//! fields) on the server with the fake backend, end to end over loopback,
//! and the parts: the backend's snapshot and the JSON answer alone.
//! `cargo run --profile ci -p weir-daemon --features fake --example torrent_get -- 1000`

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use weir_daemon::backend::{Backend, Detail, Selection, TransferQuery};
use weir_daemon::client::RpcClient;
use weir_daemon::fake::FakeBackend;
use weir_daemon::{RpcConfig, RpcServer};

const FIELDS: [&str; 14] = [
    "error",
    "errorString",
    "eta",
    "id",
    "isFinished",
    "leftUntilDone",
    "name",
    "peersGettingFromUs",
    "peersSendingToUs",
    "rateDownload",
    "rateUpload",
    "sizeWhenDone",
    "status",
    "uploadRatio",
];

fn med(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map_or(Ok(1000), |s| s.parse())?;
    let backend = Arc::new(FakeBackend::new("/nonexistent"));
    backend.insert_synthetic(n);
    let mut snap = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let l = backend
            .transfers(TransferQuery {
                select: Selection::All,
                detail: Detail::default(),
                row_key: None,
            })
            .await?;
        snap.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(l.transfers.len(), n);
    }
    let server = RpcServer::bind(RpcConfig::new("127.0.0.1:0".parse()?), backend).await?;
    let h = server.spawn();
    let c = RpcClient::new(h.addr());
    c.call("session-get", json!({})).await?;
    let id = c.session_id().unwrap();
    let body = Bytes::from(serde_json::to_vec(
        &json!({"method": "torrent-get", "arguments": {"fields": FIELDS}}),
    )?);
    let mut e2e = Vec::new();
    let mut size = 0;
    for _ in 0..30 {
        let t = Instant::now();
        let r = c.post(body.clone(), Some(&id)).await?;
        e2e.push(t.elapsed().as_secs_f64() * 1e3);
        size = r.body.len();
    }
    println!(
        "{n} transfers: torrent-get {:.2} ms end to end (median of 30), backend snapshot {:.2} ms, answer {} KiB",
        med(e2e),
        med(snap),
        size / 1024
    );
    h.stop().await?;
    Ok(())
}
