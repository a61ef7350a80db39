//! The server's routes answer programs and the server's own pages, never a web page of another
//! site (docs/reference/rest.md#browsers).
//!
//! A server on loopback without keys answers every request that reaches it, and a browser can
//! be made to send such requests by any web site its user opens:
//!
//! - a page of another origin may send "simple" requests (a `GET`, or a `POST` whose body is
//!   declared `text/plain`) without asking the server first, and so write through the API even
//!   when it cannot read the answer;
//! - through DNS rebinding, a name the attacker controls starts resolving to `127.0.0.1`, and
//!   the page's requests become same-origin to the browser: it reads the answers too. Those
//!   requests carry the attacker's name in `Host`.
//!
//! So [`refuse_cross_site`] refuses with 403, before anything else runs, a request a browser
//! sends for a page of another origin (`mnemon_host::is_cross_origin`; a plain navigation to a
//! page, which cannot read or change anything, passes), and one whose `Host` is not a name of
//! the server ([`HostCheck`]: on loopback, the loopback names). Programs send no `Origin`, so
//! they are not affected; keys do not replace this check for a server running without them.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::RestError;

/// Which `Host` values the server's routes accept.
#[derive(Debug, Clone)]
pub(crate) enum HostCheck {
    /// `localhost`, `127.0.0.1` and `[::1]`, any port: a server on loopback, whose clients
    /// reach it by those names, and a rebound name never is one of them.
    Loopback,
    /// Any: a server on another address is reached by names it cannot know; keys (or the
    /// proxy of `--insecure`) protect it.
    Any,
    /// These names (with their port when given).
    Only(Arc<[String]>),
}

impl HostCheck {
    /// The check for [`crate::ServerConfig::allowed_hosts`].
    pub(crate) fn of(allowed: Option<Vec<String>>) -> HostCheck {
        match allowed {
            None => HostCheck::Loopback,
            Some(hosts) if hosts.is_empty() => HostCheck::Any,
            Some(hosts) => HostCheck::Only(hosts.into()),
        }
    }

    /// Whether a request to `uri` with `headers` names this server. A request that names no
    /// host at all (an HTTP/1.0 health check) is accepted: browsers always send `Host`.
    fn accepts(&self, uri: &Uri, headers: &HeaderMap) -> bool {
        if matches!(self, HostCheck::Any) {
            return true;
        }
        if headers.get(header::HOST).is_none() && uri.authority().is_none() {
            return true;
        }
        let Some(authority) = request_authority(uri, headers) else {
            return false;
        };
        let host = bare_host(authority.host());
        // An address rather than a name cannot be rebound (DNS rebinding needs a name), so
        // the server's own addresses pass: any loopback address on loopback (127.0.0.2 and an
        // IPv4-mapped ::ffff:127.0.0.1 as well), and on another address any but the
        // unspecified one (a health check or a scraper naming the pod's address).
        let address = host
            .parse::<std::net::IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical());
        match self {
            HostCheck::Any => true,
            HostCheck::Loopback => {
                mnemon_host::is_loopback_name(host) || address.is_some_and(|ip| ip.is_loopback())
            }
            HostCheck::Only(_) if address.is_some_and(|ip| !ip.is_unspecified()) => true,
            HostCheck::Only(names) => names.iter().any(|name| {
                let Ok(allowed) = Authority::try_from(name.trim()) else {
                    return false;
                };
                bare_host(allowed.host()).eq_ignore_ascii_case(host)
                    && allowed
                        .port_u16()
                        .is_none_or(|port| authority.port_u16() == Some(port))
            }),
        }
    }
}

/// Checks one name of [`crate::ServerConfig::allowed_hosts`] (`--allowed-host`): a host name
/// or address with an optional port, as clients put it in `Host`, read the way requests are
/// compared with it; returns it trimmed. A value it could not read (a port out of range, an
/// unclosed `[`, a scheme or path, a wildcard) would otherwise never match, and refuse every
/// request silently.
pub fn check_allowed_host(text: &str) -> Result<String, String> {
    let name = text.trim();
    let refused = || {
        format!(
            "{text:?} is not a host name: give the name (and port) clients use, such as \
             mnemon.example.com or mnemon.example.com:8443, without a scheme or a path \
             (wildcards are not supported: list each name)"
        )
    };
    if name.is_empty()
        || name.contains(|c: char| c.is_whitespace() || matches!(c, '/' | '@' | '?' | '#' | '*'))
    {
        return Err(refused());
    }
    let authority = Authority::try_from(name).map_err(|_| refused())?;
    // Anything after the host must be a port that fits in 16 bits (the parse leaves one that
    // does not unread, and such a name would never match).
    let after_host = name.len() != authority.host().len();
    if authority.host().is_empty() || after_host && authority.port_u16().is_none() {
        return Err(refused());
    }
    Ok(name.to_owned())
}

/// The authority a request names: its `Host` header (HTTP/1.1), or the URI's (HTTP/2).
fn request_authority(uri: &Uri, headers: &HeaderMap) -> Option<Authority> {
    match headers.get(header::HOST) {
        Some(host) => Authority::try_from(host.as_bytes()).ok(),
        None => uri.authority().cloned(),
    }
}

/// A host without the brackets of an IPv6 literal.
fn bare_host(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Whether a browser sent this request for a page of another origin, other than a plain
/// navigation (`GET`/`HEAD` of a page, `Sec-Fetch-Mode: navigate`): following a link shows
/// the user the answer and changes nothing, so a link to the inspector keeps working.
fn cross_site(method: &Method, headers: &HeaderMap) -> bool {
    let navigation = (method == Method::GET || method == Method::HEAD)
        && headers
            .get("sec-fetch-mode")
            .is_some_and(|mode| mode == "navigate");
    mnemon_host::is_cross_origin(headers) && !navigation
}

/// Refuses a request of a web page of another origin, or naming another host, with 403
/// (`cross_origin`, `host_not_allowed`) before any other layer or the route runs.
pub(crate) async fn refuse_cross_site(
    State(hosts): State<HostCheck>,
    request: Request,
    next: Next,
) -> Response {
    if !hosts.accepts(request.uri(), request.headers()) {
        tracing::debug!(uri = %request.uri().path(), "refused a request naming another host");
        return RestError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            "the request's Host is not a name of this server: a server on loopback answers \
             only localhost, 127.0.0.1 and [::1] (a browser page reaching it under another \
             name is a DNS-rebinding attack); see docs/reference/rest.md#browsers",
        )
        .into_response();
    }
    if cross_site(request.method(), request.headers()) {
        tracing::debug!(uri = %request.uri().path(), "refused a cross-origin browser request");
        return RestError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "requests from web pages of other origins are refused: call the API from a \
             program, or from a page this server serves; see docs/reference/rest.md#browsers",
        )
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn accepts(check: &HostCheck, host: &'static str) -> bool {
        check.accepts(&Uri::from_static("/v1/assets"), &headers(&[("host", host)]))
    }

    #[test]
    fn a_loopback_server_answers_only_loopback_names() {
        let check = HostCheck::of(None);
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:8080",
        ] {
            assert!(accepts(&check, host), "{host}");
        }
        // Any loopback address, as the server may be bound to one.
        for host in ["127.0.0.2:8080", "[::ffff:127.0.0.1]:8080"] {
            assert!(accepts(&check, host), "{host}");
        }
        for host in [
            "evil.example:8080",
            "127.0.0.1.nip.io:8080",
            "0.0.0.0:8080",
            "10.0.0.5:8080",
        ] {
            assert!(!accepts(&check, host), "{host}");
        }
        // No Host at all (nor an authority in the URI): no browser's, so not refused; a Host
        // that is not a name at all is.
        assert!(check.accepts(&Uri::from_static("/v1"), &HeaderMap::new()));
        assert!(!accepts(&check, "bad host"));
        // HTTP/2 names the authority in the URI.
        assert!(check.accepts(
            &Uri::from_static("http://127.0.0.1:8080/v1"),
            &HeaderMap::new()
        ));
    }

    #[test]
    fn allowed_host_values_are_checked_as_requests_are_read() {
        for good in [
            "mnemon.example.com",
            "api.example:8443",
            "[::1]:8080",
            " 10.0.0.5 ",
        ] {
            assert!(check_allowed_host(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "example.com:99999",
            "[::1",
            "*",
            "*.example.com",
            "https://example.com",
            "example.com/path",
            "user@example.com",
        ] {
            assert!(check_allowed_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn listed_names_match_with_their_port_when_given() {
        let check = HostCheck::of(Some(vec![
            "mnemon.internal".to_owned(),
            "api.example:8443".to_owned(),
        ]));
        assert!(accepts(&check, "mnemon.internal:1234"));
        assert!(accepts(&check, "api.example:8443"));
        assert!(!accepts(&check, "api.example:8080"));
        assert!(!accepts(&check, "localhost:8080"));
        // An address is no name to rebind: a probe or scraper naming the pod's address
        // passes, the unspecified address does not.
        assert!(accepts(&check, "10.1.2.3:8080"));
        assert!(accepts(&check, "[fd00::5]:8080"));
        assert!(!accepts(&check, "0.0.0.0:8080"));
        assert!(accepts(&HostCheck::of(Some(Vec::new())), "anything:1"));
    }

    #[test]
    fn only_a_plain_navigation_passes_from_another_site() {
        let from_elsewhere = |mode: &'static str| {
            headers(&[
                ("host", "127.0.0.1:8080"),
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", mode),
            ])
        };
        assert!(!cross_site(&Method::GET, &from_elsewhere("navigate")));
        // A form posted from another site navigates too, and writes.
        assert!(cross_site(&Method::POST, &from_elsewhere("navigate")));
        assert!(cross_site(&Method::GET, &from_elsewhere("cors")));
        assert!(cross_site(&Method::POST, &from_elsewhere("no-cors")));
        let same = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(!cross_site(&Method::POST, &same));
        assert!(!cross_site(&Method::POST, &headers(&[("host", "x")])));
    }
}
