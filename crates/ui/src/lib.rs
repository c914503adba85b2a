//! Caravan's web UI, served by every agent at `/ui/` (`/` redirects there, as Nomad's).
//!
//! No JavaScript build step: each page is HTML rendered here (maud) from the agent's own `/v1`
//! API, read through the agent's router with the caller's token, so a page shows exactly what
//! that token may read. The browser loads one shell (`/ui/...`: layout, CSS, a small script);
//! the script fetches the page's fragment (`/ui/_/...`) with `X-Nomad-Token` from session
//! storage, swaps it in, and asks again with the answer's `X-Nomad-Index` as a blocking query,
//! so pages update live without polling.
//!
//! **Invariant:** never touches cluster state and never decides what a caller may see: every
//! read is an API request with the caller's own token.

mod api;
mod pages;
mod view;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

pub use api::Api;

/// The UI's routes, reading through `api` (the agent's `/v1` router). Merge them into the
/// router the agent serves; they need no ACL layer of their own.
pub fn routes(api: Router) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui/", get(|| async { Redirect::temporary("/ui/jobs") }))
        .route("/ui/assets/app.css", get(css))
        .route("/ui/assets/app.js", get(js))
        .route("/ui/assets/favicon.svg", get(favicon))
        .route("/favicon.ico", get(favicon))
        .route("/ui/_/{*rest}", get(fragment))
        .route("/ui/{*rest}", get(shell))
        .with_state(Api::new(api))
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("../assets/app.css"))
}

async fn js() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("../assets/app.js"),
    )
}

async fn favicon() -> Response {
    asset("image/svg+xml", include_str!("../assets/favicon.svg"))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Every page's first load: the layout with an empty view the script fills.
async fn shell() -> Response {
    html(StatusCode::OK, view::shell().into_string(), None, "Caravan")
}

/// One page's content, for the caller's token. The path is split before its segments are
/// decoded, so an id holding `/` (a periodic or dispatched job's) stays one segment.
async fn fragment(
    State(api): State<Api>,
    uri: axum::http::Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let token = api::token_of(&headers);
    let query: Vec<(String, String)> = query
        .as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let rest = uri.path().strip_prefix("/ui/_").unwrap_or_default();
    let page = match api::segments(rest) {
        Some(segments) => pages::render(&api, &token, &segments, &query).await,
        None => pages::not_found(rest),
    };
    html(
        page.status,
        page.body.into_string(),
        page.index,
        &page.title,
    )
}

fn html(status: StatusCode, body: String, index: Option<u64>, title: &str) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The page may not be framed by another site, nor run scripts from elsewhere.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    if let Some(i) = index {
        if let Ok(v) = HeaderValue::from_str(&i.to_string()) {
            h.insert("x-nomad-index", v);
        }
    }
    let title: String = title
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .collect();
    if let Ok(v) = HeaderValue::from_str(&title) {
        h.insert("x-caravan-title", v);
    }
    resp
}
