//! The web page, built into the binary: plain HTML, CSS and JavaScript that
//! talk to the same RPC (no CDN, no external fonts, no build step).

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const APP_CSS: &str = include_str!("../web/app.css");

/// Policy for the page: everything from this origin only.
const CSP: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Answers a request for the page or one of its files.
pub(crate) fn route(method: &Method, path: &str) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed\n").into_response();
    }
    match path {
        "/" | "/index.html" | "/transmission/web" | "/transmission/web/" => {
            asset("text/html; charset=UTF-8", INDEX)
        }
        "/app.js" | "/transmission/web/app.js" => asset("text/javascript; charset=UTF-8", APP_JS),
        "/app.css" | "/transmission/web/app.css" => asset("text/css; charset=UTF-8", APP_CSS),
        _ => (StatusCode::NOT_FOUND, "404: Not Found\n").into_response(),
    }
}
