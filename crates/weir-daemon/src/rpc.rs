//! The two request forms and their envelopes.
//!
//! - Classic (Transmission up to 4.0, still read by 4.1):
//!   `{"method": "torrent-get", "arguments": {...}, "tag": 5}` answered with
//!   `{"arguments": {...}, "result": "success", "tag": 5}`; a failure is any
//!   other `result` string, HTTP status 200.
//! - JSON-RPC 2.0 (RPC 6.0, Transmission 4.1): `{"jsonrpc": "2.0", "method":
//!   "torrent_get", "params": {...}, "id": 5}` answered with `result` or an
//!   `error` object `{code, message, data: {error_string}}`; a request
//!   without `id` is a notification (no answer); an array is a batch.
//!
//! The form is chosen per request by the presence of `"jsonrpc"`. Method
//! names are accepted in both spellings in both forms (as 4.1 does).

use serde_json::{Map, Value, json};

use crate::backend::{Backend, BackendError};
use crate::methods;
use crate::torrents::TorrentsWriter;

/// Which form a request used (and its answer uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `{method, arguments, tag}`, camelCase/kebab-case keys.
    Classic,
    /// JSON-RPC 2.0 with snake_case keys (RPC 6.0).
    JsonRpc,
}

/// The versions a form reports in `session-get`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Versions {
    pub(crate) version: &'static str,
    pub(crate) rpc_version: i64,
    pub(crate) rpc_version_minimum: i64,
    pub(crate) rpc_version_semver: &'static str,
}

/// The `version` string: Transmission's release first (clients parse a
/// number out of it: Sonarr needs >= 2.40, Radarr >= 3.0 for labels).
pub(crate) const CLASSIC_VERSION: &str = concat!("4.0.6 (weir ", env!("CARGO_PKG_VERSION"), ")");
/// The `version` string of the 6.0 form (Transmission 4.1).
pub(crate) const JSONRPC_VERSION: &str = concat!("4.1.0 (weir ", env!("CARGO_PKG_VERSION"), ")");

impl Form {
    pub(crate) fn versions(self) -> Versions {
        match self {
            // Transmission 4.0.6.
            Form::Classic => Versions {
                version: CLASSIC_VERSION,
                rpc_version: 17,
                rpc_version_minimum: 14,
                rpc_version_semver: "5.3.0",
            },
            // Transmission 4.1.
            Form::JsonRpc => Versions {
                version: JSONRPC_VERSION,
                rpc_version: 18,
                rpc_version_minimum: 14,
                rpc_version_semver: "6.0.0",
            },
        }
    }

    /// Picks the key spelling of this form.
    pub(crate) fn key(self, classic: &'static str, snake: &'static str) -> &'static str {
        match self {
            Form::Classic => classic,
            Form::JsonRpc => snake,
        }
    }
}

/// What went wrong, as both forms can say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The body is not JSON.
    ParseError,
    /// Not a request object (or a batch element without `jsonrpc`).
    InvalidRequest,
    /// No such method.
    MethodNotFound,
    /// An argument is missing or of the wrong type.
    InvalidParams,
    /// The backend failed unexpectedly.
    Internal,
    /// A path argument is relative.
    PathNotAbsolute,
    /// A file-system call failed.
    SystemError,
    /// A file index is out of range.
    FileIndexOutOfRange,
    /// Fetching a URL failed, or something weir does not do.
    HttpError,
    /// The torrent or link is not valid.
    CorruptTorrent,
}

impl ErrorKind {
    /// The JSON-RPC error code (Transmission 4.1's numbering).
    pub fn code(self) -> i64 {
        match self {
            ErrorKind::ParseError => -32700,
            ErrorKind::InvalidRequest => -32600,
            ErrorKind::MethodNotFound => -32601,
            ErrorKind::InvalidParams => -32602,
            ErrorKind::Internal => -32603,
            ErrorKind::PathNotAbsolute => 3,
            ErrorKind::SystemError => 5,
            ErrorKind::FileIndexOutOfRange => 6,
            ErrorKind::HttpError => 7,
            ErrorKind::CorruptTorrent => 8,
        }
    }

    /// The JSON-RPC error `message`.
    pub fn message(self) -> &'static str {
        match self {
            ErrorKind::ParseError => "Parse error",
            ErrorKind::InvalidRequest => "Invalid Request",
            ErrorKind::MethodNotFound => "Method not found",
            ErrorKind::InvalidParams => "Invalid params",
            ErrorKind::Internal => "Internal error",
            ErrorKind::PathNotAbsolute => "path is not absolute",
            ErrorKind::SystemError => "system error",
            ErrorKind::FileIndexOutOfRange => "file index out of range",
            ErrorKind::HttpError => "HTTP error from backend service",
            ErrorKind::CorruptTorrent => "invalid or corrupt torrent file",
        }
    }
}

/// A failed call: its kind and the text a person reads (the classic
/// `result` string, the JSON-RPC `data.error_string`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// The kind.
    pub kind: ErrorKind,
    /// The text.
    pub message: String,
}

impl RpcError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RpcError {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(ErrorKind::InvalidParams, message)
    }
}

impl From<BackendError> for RpcError {
    fn from(e: BackendError) -> Self {
        let kind = match &e {
            BackendError::InvalidTorrent(_) => ErrorKind::CorruptTorrent,
            BackendError::Fetch(_) => ErrorKind::HttpError,
            BackendError::PathNotAbsolute(_) => ErrorKind::PathNotAbsolute,
            BackendError::FileIndexOutOfRange(_) => ErrorKind::FileIndexOutOfRange,
            BackendError::Io { .. } => ErrorKind::SystemError,
            BackendError::Unsupported(_) => ErrorKind::HttpError,
            BackendError::Invalid(_) => ErrorKind::InvalidParams,
            BackendError::Unavailable => ErrorKind::Internal,
        };
        RpcError::new(kind, e.to_string())
    }
}

/// A successful call's `arguments` / `result`.
pub(crate) enum Payload {
    /// A small object.
    Map(Map<String, Value>),
    /// A `torrent-get` answer, streamed.
    Torrents(TorrentsRequest),
}

/// What a `torrent-get` needs to stream its answer once the envelope is
/// known.
pub(crate) struct TorrentsRequest {
    pub(crate) list: crate::backend::TransferList,
    pub(crate) fields: crate::fields::FieldList,
    pub(crate) table: bool,
    pub(crate) with_removed: bool,
}

/// A complete HTTP answer body.
pub(crate) enum Reply {
    /// JSON bytes.
    Bytes(Vec<u8>),
    /// A streamed `torrent-get`.
    Stream(Box<TorrentsWriter>),
    /// Nothing (JSON-RPC notifications only): HTTP 204.
    Empty,
}

/// Options of the RPC layer.
#[derive(Clone, Debug)]
pub(crate) struct RpcOptions {
    /// Serve the JSON-RPC 2.0 form (RPC 6.0); without it a request with
    /// `jsonrpc` is treated as Transmission 4.0 would (classic, and its
    /// snake_case method is not found).
    pub(crate) json_rpc: bool,
    /// The `X-Transmission-Session-Id` (reported by `session-get`).
    pub(crate) session_id: std::sync::Arc<str>,
}

/// Answers one request body as the server does once the HTTP layer has
/// let it through (session id, auth, Host check, body size): the JSON it
/// sends back, or `None` where it answers HTTP 204 (JSON-RPC
/// notifications). `json_rpc` serves the 6.0 form as
/// [`crate::RpcConfig`]'s option does. The entry point for fuzzing the
/// request parsing of both forms.
pub async fn answer<B: Backend>(
    backend: &B,
    body: &[u8],
    json_rpc: bool,
    session_id: &str,
) -> Option<Vec<u8>> {
    let opts = RpcOptions {
        json_rpc,
        session_id: session_id.into(),
    };
    match handle(backend, body, &opts).await {
        Reply::Bytes(b) => Some(b),
        Reply::Stream(w) => Some(w.into_bytes()),
        Reply::Empty => None,
    }
}

/// Answers one HTTP body.
pub(crate) async fn handle<B: Backend>(backend: &B, body: &[u8], opts: &RpcOptions) -> Reply {
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    let value = match parsed {
        Ok(v) => v,
        Err(e) => {
            let looks_jsonrpc = opts.json_rpc && memchr_jsonrpc(body);
            return if looks_jsonrpc {
                Reply::Bytes(jsonrpc_error(
                    &Value::Null,
                    &RpcError::new(ErrorKind::ParseError, e.to_string()),
                ))
            } else if body.iter().all(u8::is_ascii_whitespace) {
                Reply::Bytes(classic_error(None, "no method name"))
            } else {
                Reply::Bytes(classic_error(
                    None,
                    &format!("no method name (the request is not valid JSON: {e})"),
                ))
            };
        }
    };
    match value {
        Value::Array(items) if opts.json_rpc => {
            if items.is_empty() {
                return Reply::Bytes(jsonrpc_error(
                    &Value::Null,
                    &RpcError::new(ErrorKind::InvalidRequest, "empty batch"),
                ));
            }
            let mut out = Vec::from(&b"["[..]);
            let mut any = false;
            for item in items {
                let reply = match item {
                    Value::Object(map) if map.get("jsonrpc") == Some(&json!("2.0")) => {
                        call(backend, map, Form::JsonRpc, opts).await
                    }
                    _ => Reply::Bytes(jsonrpc_error(
                        &Value::Null,
                        &RpcError::new(ErrorKind::InvalidRequest, "JSON-RPC version is not 2.0"),
                    )),
                };
                let bytes = match reply {
                    Reply::Bytes(b) => b,
                    Reply::Stream(w) => w.into_bytes(),
                    Reply::Empty => continue,
                };
                if any {
                    out.push(b',');
                }
                any = true;
                out.extend_from_slice(&bytes);
            }
            if !any {
                return Reply::Empty;
            }
            out.push(b']');
            Reply::Bytes(out)
        }
        Value::Object(map) => {
            let form = match map.get("jsonrpc") {
                Some(Value::String(v)) if v == "2.0" && opts.json_rpc => Form::JsonRpc,
                Some(_) if opts.json_rpc => {
                    return Reply::Bytes(jsonrpc_error(
                        &Value::Null,
                        &RpcError::new(ErrorKind::InvalidRequest, "JSON-RPC version is not 2.0"),
                    ));
                }
                _ => Form::Classic,
            };
            call(backend, map, form, opts).await
        }
        _ => Reply::Bytes(classic_error(
            None,
            "no method name (the request must be a JSON object)",
        )),
    }
}

fn memchr_jsonrpc(body: &[u8]) -> bool {
    body.windows(9).any(|w| w == b"\"jsonrpc\"")
}

async fn call<B: Backend>(
    backend: &B,
    map: Map<String, Value>,
    form: Form,
    opts: &RpcOptions,
) -> Reply {
    let (id, args_key) = match form {
        Form::Classic => (
            map.get("tag").filter(|t| t.is_i64() || t.is_u64()).cloned(),
            "arguments",
        ),
        Form::JsonRpc => {
            let id = map.get("id").cloned();
            if let Some(id) = &id {
                if !(id.is_string() || id.is_number() || id.is_null()) {
                    return Reply::Bytes(jsonrpc_error(
                        &Value::Null,
                        &RpcError::new(
                            ErrorKind::InvalidRequest,
                            "id type must be String, Number, or Null",
                        ),
                    ));
                }
            }
            (id, "params")
        }
    };
    let empty = Map::new();
    let args = match map.get(args_key) {
        Some(Value::Object(a)) => Ok(a),
        None | Some(Value::Null) => Ok(&empty),
        Some(_) => Err(RpcError::invalid_params(format!(
            "'{args_key}' must be an object"
        ))),
    };
    let result = match (args, map.get("method")) {
        (Err(e), _) => Err(e),
        (Ok(args), Some(Value::String(m))) => match methods::Method::parse(m, opts.json_rpc) {
            Some(method) => methods::run(backend, method, args, form, &opts.session_id).await,
            None => Err(RpcError::new(
                ErrorKind::MethodNotFound,
                "method name not recognized",
            )),
        },
        (Ok(_), _) => Err(RpcError::new(ErrorKind::MethodNotFound, "no method name")),
    };
    // A notification is never answered, whatever went wrong with it
    // (JSON-RPC 2.0, section 4.1).
    if form == Form::JsonRpc && id.is_none() {
        return Reply::Empty;
    }
    finish(form, id.as_ref(), result)
}

fn finish(form: Form, id: Option<&Value>, result: Result<Payload, RpcError>) -> Reply {
    match (form, result) {
        (Form::Classic, Ok(Payload::Map(args))) => {
            let mut top = Map::new();
            top.insert("arguments".into(), Value::Object(args));
            top.insert("result".into(), json!("success"));
            if let Some(tag) = id {
                top.insert("tag".into(), tag.clone());
            }
            Reply::Bytes(serde_json::to_vec(&Value::Object(top)).unwrap_or_default())
        }
        (Form::Classic, Ok(Payload::Torrents(t))) => {
            let mut tail = Vec::from(&b",\"result\":\"success\""[..]);
            if let Some(tag) = id {
                tail.extend_from_slice(b",\"tag\":");
                tail.extend_from_slice(tag.to_string().as_bytes());
            }
            tail.push(b'}');
            Reply::Stream(Box::new(TorrentsWriter::new(
                t.list,
                t.fields,
                form,
                t.table,
                t.with_removed,
                b"{\"arguments\":".to_vec(),
                tail,
            )))
        }
        (Form::Classic, Err(e)) => Reply::Bytes(classic_error(id, &e.message)),
        (Form::JsonRpc, Ok(Payload::Map(args))) => Reply::Bytes(
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "result": args, "id": id}))
                .unwrap_or_default(),
        ),
        (Form::JsonRpc, Ok(Payload::Torrents(t))) => {
            let mut tail = Vec::from(&b",\"id\":"[..]);
            tail.extend_from_slice(id.unwrap_or(&Value::Null).to_string().as_bytes());
            tail.push(b'}');
            Reply::Stream(Box::new(TorrentsWriter::new(
                t.list,
                t.fields,
                form,
                t.table,
                t.with_removed,
                b"{\"jsonrpc\":\"2.0\",\"result\":".to_vec(),
                tail,
            )))
        }
        (Form::JsonRpc, Err(e)) => Reply::Bytes(jsonrpc_error(id.unwrap_or(&Value::Null), &e)),
    }
}

fn classic_error(tag: Option<&Value>, message: &str) -> Vec<u8> {
    let mut top = Map::new();
    top.insert("arguments".into(), json!({}));
    top.insert("result".into(), json!(message));
    if let Some(tag) = tag {
        top.insert("tag".into(), tag.clone());
    }
    serde_json::to_vec(&Value::Object(top)).unwrap_or_default()
}

fn jsonrpc_error(id: &Value, e: &RpcError) -> Vec<u8> {
    let mut error = json!({"code": e.kind.code(), "message": e.kind.message()});
    if !e.message.is_empty() {
        error["data"] = json!({"error_string": e.message});
    }
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "error": error, "id": id})).unwrap_or_default()
}
