//! The dashboard of docs/design.md §14 (the cryo seed's hub): one page embedded in the binary and
//! served at `GET /` with its script, style sheet and icon.
//!
//! Owns the page's bytes and the headers they go out with: a strict Content-Security-Policy
//! (`default-src 'self'`, so the page can load nothing from another host and run no inline
//! script), `no-referrer` (a `/?token=` link must not leak through a Referer) and `no-store`
//! (a new binary's page is never mixed with an old cached script). The page talks to the same
//! `/api` routes as every other client, with the token in a header; it must not get a route of
//! its own. No token is needed to load it: it holds nothing secret.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// docs/design.md §14: nothing but this origin; no inline script or style, no frames, no plugins.
pub(super) const CSP: &str = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

/// The page's files, `(path, content type, bytes)`. Their sum is the page weight the
/// dashboard bench reports (docs/design.md §14: < 40 KB; issue 13: < 60 KB).
pub(super) const FILES: [(&str, &str, &str); 4] = [
    ("/", "text/html; charset=utf-8", include_str!("dashboard/index.html")),
    ("/app.js", "text/javascript; charset=utf-8", include_str!("dashboard/app.js")),
    ("/app.css", "text/css; charset=utf-8", include_str!("dashboard/app.css")),
    ("/favicon.svg", "image/svg+xml", include_str!("dashboard/favicon.svg")),
];

fn file(path: &str) -> Response {
    let Some((_, kind, body)) = FILES.iter().find(|(p, _, _)| *p == path) else {
        return super::http::ApiError::not_found("no such route").into_response();
    };
    (
        [
            (header::CONTENT_TYPE, *kind),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        *body,
    )
        .into_response()
}

/// `GET /`: the page (no token: the page asks for it).
pub(super) async fn index() -> Response {
    file("/")
}

/// `GET /app.js`.
pub(super) async fn script() -> Response {
    file("/app.js")
}

/// `GET /app.css`.
pub(super) async fn style() -> Response {
    file("/app.css")
}

/// `GET /favicon.svg` (and `/favicon.ico`, which browsers ask for on their own).
pub(super) async fn icon() -> Response {
    file("/favicon.svg")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/design.md §14 "no external request": no file names another host. The SVG namespace is
    /// an identifier the browser never fetches.
    #[test]
    fn no_file_names_another_host() {
        for (path, _, body) in FILES {
            let body = body.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
            for needle in ["http://", "https://", "ws://", "wss://", "src=\"//", "href=\"//", "url(//", "url(\"//", "@import"] {
                assert!(!body.contains(needle), "{path} contains `{needle}`");
            }
        }
    }

    /// The page loads its script and style from this server only, by the paths served here.
    #[test]
    fn the_page_refers_to_the_served_paths() {
        let page = FILES[0].2;
        for path in ["/app.js", "/app.css", "/favicon.svg"] {
            assert!(FILES.iter().any(|(p, _, _)| *p == path));
            assert!(page.contains(&format!("\"{path}\"")), "index.html does not load {path}");
        }
        assert!(!page.contains("<style") && !page.contains(" style="), "inline style in index.html");
        let handler = page.match_indices(" on").any(|(i, _)| {
            let rest = &page[i + 3..];
            let name = rest.bytes().take_while(u8::is_ascii_lowercase).count();
            name > 0 && rest.as_bytes().get(name) == Some(&b'=')
        });
        assert!(!handler, "an inline event handler (on…=) in index.html");
        assert!(!page.contains("<script>"), "an inline script in index.html");
    }
}
