//! weir-daemon RPC request parsing (`weir_daemon::answer`): any body, in
//! the classic form (`method`/`arguments`/`tag`) and JSON-RPC 2.0
//! (`jsonrpc`/`method`/`params`/`id`, batches), with the 6.0 form served or
//! not, over an in-memory backend that touches no file and no network.
//!
//! Every answer is JSON of the request's form: a classic answer is an
//! object with a `result` string and an `arguments` object and echoes an
//! integer `tag`; a JSON-RPC answer has `"jsonrpc": "2.0"`, exactly one of
//! `result` and `error` (with an integer `code`), and the request's `id`; a
//! notification (a 2.0 object without `id`) gets no answer at all; a batch
//! gets an array with at most one answer per element (or none).
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use weir_daemon::Backend;
use weir_daemon::backend::{
    Action, AddOutcome, AddRequest, AddedTransfer, BackendError, FreeSpace, RowCache, Selection,
    SessionChange, SessionSettings, SessionStats, TransferChange, TransferHash, TransferList,
    TransferQuery, TransferView,
};

struct Mem {
    views: Vec<Arc<TransferView>>,
    /// One row cache per view, shared by every request (the views never
    /// change), so answers are also written from cached rows.
    rows: Vec<Arc<RowCache>>,
}

impl Backend for Mem {
    async fn session(&self) -> Result<SessionSettings, BackendError> {
        Ok(SessionSettings::default())
    }
    async fn set_session(&self, _: SessionChange) -> Result<(), BackendError> {
        Ok(())
    }
    async fn stats(&self) -> Result<SessionStats, BackendError> {
        Ok(SessionStats::default())
    }
    async fn transfers(&self, q: TransferQuery) -> Result<TransferList, BackendError> {
        let picked: Vec<usize> = (0..self.views.len())
            .filter(|&k| q.select.matches(self.views[k].id, &self.views[k].hash))
            .collect();
        Ok(TransferList {
            transfers: picked.iter().map(|&k| self.views[k].clone()).collect(),
            rows: picked.iter().map(|&k| Some(self.rows[k].clone())).collect(),
            // Rows already cached for the request's key are handed over as
            // written, as the engine backend does.
            written: picked
                .iter()
                .map(|&k| q.row_key.as_deref().and_then(|key| self.rows[k].get(key)))
                .collect(),
            removed: if q.select == Selection::RecentlyActive {
                vec![9]
            } else {
                Vec::new()
            },
        })
    }
    async fn add(&self, _: AddRequest) -> Result<AddOutcome, BackendError> {
        Ok(AddOutcome::Added(AddedTransfer {
            id: 3,
            hash: TransferHash::Bt([3; 20]),
            name: "new".into(),
        }))
    }
    async fn change(&self, _: Selection, _: TransferChange) -> Result<(), BackendError> {
        Ok(())
    }
    async fn act(&self, _: Selection, _: Action) -> Result<(), BackendError> {
        Ok(())
    }
    async fn remove(&self, _: Selection, _: bool) -> Result<(), BackendError> {
        Ok(())
    }
    async fn set_location(&self, _: Selection, _: PathBuf, _: bool) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("not here"))
    }
    async fn free_space(&self, _: PathBuf) -> Result<FreeSpace, BackendError> {
        Ok(FreeSpace {
            free: 1 << 30,
            total: 1 << 40,
        })
    }
    async fn port_is_open(&self) -> Result<bool, BackendError> {
        Ok(true)
    }
    async fn close(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

fn backend() -> &'static Mem {
    static B: OnceLock<Mem> = OnceLock::new();
    B.get_or_init(|| Mem {
        views: vec![
            Arc::new(TransferView::new(1, TransferHash::Bt([1; 20]), "one")),
            Arc::new(TransferView::new(
                2,
                TransferHash::Ed2k([2; 16]),
                "two \u{e9}\"\\",
            )),
        ],
        rows: vec![Arc::default(), Arc::default()],
    })
}

/// Runs a future that never waits (the backend answers at once).
fn run<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("the RPC layer waited on an in-memory backend");
}

fn check_jsonrpc(req: Option<&Value>, ans: &Value) {
    let o = ans.as_object().expect("a JSON-RPC answer is an object");
    assert_eq!(o.get("jsonrpc"), Some(&Value::from("2.0")), "{ans}");
    assert!(
        o.contains_key("result") != o.contains_key("error"),
        "result xor error: {ans}"
    );
    if let Some(e) = o.get("error") {
        assert!(e["code"].is_i64(), "{ans}");
        assert!(e["message"].is_string(), "{ans}");
    }
    let id = o.get("id").expect("an answer carries an id");
    if let Some(rid) = req.and_then(|r| r.get("id")) {
        if rid.is_string() || rid.is_number() {
            // An answer to a valid id carries it (or null when the request
            // was refused before its id was read).
            assert!(id == rid || id.is_null(), "id {rid} answered as {id}");
        }
    }
}

fn check_classic(req: Option<&Value>, ans: &Value) {
    let o = ans.as_object().expect("a classic answer is an object");
    assert!(o.get("result").is_some_and(Value::is_string), "{ans}");
    assert!(o.get("arguments").is_some_and(Value::is_object), "{ans}");
    assert!(!o.contains_key("jsonrpc"), "{ans}");
    if let Some(tag) = req
        .and_then(|r| r.get("tag"))
        .filter(|t| t.is_i64() || t.is_u64())
    {
        if req.is_some_and(Value::is_object) {
            assert_eq!(o.get("tag"), Some(tag), "tag not echoed: {ans}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let json_rpc = flags & 1 != 0;
    let reply = run(weir_daemon::answer(backend(), body, json_rpc, "sid"));
    let req: Option<Value> = serde_json::from_slice(body).ok();
    let is_v2 = |v: &Value| v.get("jsonrpc") == Some(&Value::from("2.0"));
    let Some(reply) = reply else {
        // Only notifications (or batches of them) go unanswered.
        assert!(json_rpc, "no answer without the 6.0 form");
        match &req {
            Some(Value::Object(m)) => {
                assert!(is_v2(&req.clone().unwrap()) && !m.contains_key("id"))
            }
            Some(Value::Array(items)) => assert!(
                items.iter().all(|i| is_v2(i) && i.get("id").is_none()),
                "a batch with a request went unanswered"
            ),
            _ => panic!("no answer to {req:?}"),
        }
        return;
    };
    let ans: Value = serde_json::from_slice(&reply).unwrap_or_else(|e| {
        panic!(
            "answer is not JSON ({e}): {}",
            String::from_utf8_lossy(&reply)
        )
    });
    match (&req, json_rpc) {
        (Some(Value::Array(items)), true) => {
            let Value::Array(answers) = &ans else {
                // An empty batch is one error.
                assert!(items.is_empty(), "a batch answered with {ans}");
                check_jsonrpc(None, &ans);
                return;
            };
            assert!(!answers.is_empty() && answers.len() <= items.len());
            let wanted = items
                .iter()
                .filter(|i| !(is_v2(i) && i.get("id").is_none()))
                .count();
            assert_eq!(
                answers.len(),
                wanted,
                "answers for notifications, or requests unanswered"
            );
            for a in answers {
                check_jsonrpc(None, a);
            }
        }
        (Some(r @ Value::Object(m)), true) if m.contains_key("jsonrpc") => {
            check_jsonrpc(Some(r), &ans);
            if is_v2(r) {
                assert!(m.contains_key("id"), "a notification was answered: {ans}");
            }
        }
        (Some(r), _) => check_classic(Some(r), &ans),
        (None, true) if body.windows(9).any(|w| w == b"\"jsonrpc\"") => {
            check_jsonrpc(None, &ans);
            assert_eq!(ans["error"]["code"], Value::from(-32700), "{ans}");
        }
        (None, _) => check_classic(None, &ans),
    }
});
