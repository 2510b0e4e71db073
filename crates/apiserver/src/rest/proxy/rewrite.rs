//! What a proxy changes on the way through, as upstream's
//! `UpgradeAwareHandler` with its wrapping `proxy.Transport` does
//! (`apimachinery/pkg/util/proxy`): the path asked for (upstream's
//! `getRequestOptions` subpath and `JoinPreservingTrailingSlash`), the
//! headers that stay behind (hop-by-hop ones, the client's credentials and
//! impersonation, the backend's CORS headers), the `X-Forwarded-Uri` the
//! backend is told, and the links of the backend's answer — its
//! `Location` and the URL attributes of an HTML page — pointed back
//! through the proxy.

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Percent-decodes `text` (a `%` not followed by two hex digits stays).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path escaped as Go's `URL.EscapedPath` escapes one: everything but
/// letters, digits, `-_.~` and `$&+,/:;=@` as `%XX`.
pub fn escape_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's `path.Clean`: one slash between elements, no `.`, each `..`
/// taking the element before it (never above the root).
pub fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let rooted = path.starts_with('/');
    let mut kept: Vec<&str> = Vec::new();
    for element in path.split('/') {
        match element {
            "" | "." => {}
            ".." => match kept.last() {
                Some(&last) if last != ".." => {
                    kept.pop();
                }
                _ if rooted => {}
                _ => kept.push(".."),
            },
            element => kept.push(element),
        }
    }
    let joined = kept.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's `path.Join` of two elements: the non-empty ones joined and
/// cleaned, `""` when both are empty.
pub fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => String::new(),
        (true, false) => clean(b),
        (false, true) => clean(a),
        (false, false) => clean(&format!("{a}/{b}")),
    }
}

/// Upstream's `JoinPreservingTrailingSlash`: [`join`], keeping a
/// trailing slash of the last non-empty element.
pub fn join_preserving_trailing_slash(a: &str, b: &str) -> String {
    let mut joined = join(a, b);
    let last = if b.is_empty() { a } else { b };
    if last.ends_with('/') && !joined.ends_with('/') {
        joined.push('/');
    }
    joined
}

/// The path a proxy request asks the backend for (upstream's subpath
/// option): what follows the first `skip` segments of the request's
/// (decoded) path — those up to and including `proxy` — with a leading
/// slash, and a trailing one when the request's path has one.
pub fn subpath(path: &str, skip: usize) -> String {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut tail = segments.get(skip..).unwrap_or_default().join("/");
    if !tail.is_empty() && !tail.starts_with('/') {
        tail.insert(0, '/');
    }
    if path.ends_with('/') && !tail.ends_with('/') {
        tail.push('/');
    }
    tail
}

/// Go's `ReverseProxy` hop-by-hop headers.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The headers `Connection` names, lowercased.
fn connection_tokens(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Whether a header of the client's request is passed to the backend:
/// not hop-by-hop (nor named by `Connection`), not `Host` (the proxy sets
/// it), not the client's credentials or impersonation (upstream's
/// authentication and impersonation filters take those off the request).
fn passed_on(name: &HeaderName, named: &[String]) -> bool {
    let name = name.as_str();
    !(HOP_BY_HOP.contains(&name)
        || named.iter().any(|n| n == name)
        || name == "host"
        || name == "authorization"
        || name.starts_with("impersonate-"))
}

/// The client's headers as the backend gets them.
pub fn request_headers(client: &HeaderMap) -> HeaderMap {
    let named = connection_tokens(client);
    let mut headers = HeaderMap::with_capacity(client.len());
    for (name, value) in client {
        if passed_on(name, &named) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// The CORS headers upstream's `corsRemovingTransport` takes off.
const CORS: &[&str] = &[
    "access-control-allow-credentials",
    "access-control-allow-headers",
    "access-control-allow-methods",
    "access-control-allow-origin",
];

/// The backend's headers as the client gets them: less the hop-by-hop
/// ones and the backend's CORS headers.
pub fn response_headers(headers: &mut HeaderMap) {
    for name in connection_tokens(headers) {
        headers.remove(name.as_str());
    }
    for name in HOP_BY_HOP.iter().chain(CORS) {
        headers.remove(*name);
    }
}

/// Whether a response is an HTML page (its media type, parameters
/// aside, is `text/html`).
pub fn is_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim())
        == Some("text/html")
}

/// Points links of a backend's answer back through the proxy (upstream's
/// `proxy.Transport.rewriteURL`).
#[derive(Debug, Clone)]
pub struct Rewriter {
    /// The backend's host as its location URL has it.
    pub backend_host: String,
    /// The `Host` the client asked the API server for.
    pub request_host: String,
    /// The API server's path up to the proxied path
    /// (`/api/v1/namespaces/ns/pods/p/proxy`).
    pub prepend: String,
}

impl Rewriter {
    /// The proxy's own prefix of a request path: the client's (decoded)
    /// path less the location's path at its end (upstream's
    /// `PathPrepend`).
    pub fn prepend_of(client_path: &str, location_path: &str) -> String {
        let mut suffix = location_path.to_string();
        if client_path.ends_with('/') && !suffix.ends_with('/') {
            suffix.push('/');
        }
        client_path
            .strip_suffix(suffix.as_str())
            .unwrap_or(client_path)
            .to_string()
    }

    /// `X-Forwarded-Uri`: the proxy's prefix joined with the backend's
    /// (escaped) path, its trailing slash kept.
    pub fn forwarded_uri(&self, escaped_path: &str) -> String {
        let mut uri = join(&self.prepend, escaped_path);
        if escaped_path.ends_with('/') && !uri.ends_with('/') {
            uri.push('/');
        }
        uri
    }

    /// A link of the backend's answer, pointed through the proxy when it
    /// is an absolute path, or a URL of the backend's host or of the host
    /// the client asked; any other link is left as it is. The error is
    /// why `raw` is no URL.
    pub fn url(&self, raw: &str) -> Result<String, String> {
        let link = Link::parse(raw)?;
        let different_host = !link.host.is_empty()
            && link.host != self.backend_host
            && link.host != self.request_host;
        if link.opaque || different_host || !link.path.starts_with('/') {
            return Ok(raw.to_string());
        }
        // The API server's own scheme and host are not known to it (as
        // upstream's, whose request URL has none): a link to the host the
        // client asked keeps its scheme and host, any other loses them.
        let keep_authority = !link.host.is_empty() && link.host == self.request_host;
        let prefix = escape_path(&self.prepend);
        let path = if link.path.starts_with(prefix.as_str()) {
            link.path.to_string()
        } else {
            let mut joined = join(&prefix, link.path);
            if link.path.ends_with('/') && !joined.ends_with('/') {
                joined.push('/');
            }
            joined
        };
        let mut out = String::with_capacity(raw.len() + prefix.len());
        if keep_authority {
            if let Some(scheme) = link.scheme {
                out.push_str(scheme);
                out.push(':');
            }
            out.push_str("//");
            out.push_str(link.authority);
        }
        out.push_str(&path);
        if let Some(query) = link.query {
            out.push('?');
            out.push_str(query);
        }
        if let Some(fragment) = link.fragment {
            out.push('#');
            out.push_str(fragment);
        }
        Ok(out)
    }

    /// `Location`, rewritten; the error as upstream words it.
    pub fn location(&self, value: &HeaderValue) -> Result<HeaderValue, String> {
        let raw = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let rewritten = self
            .url(&raw)
            .map_err(|e| format!("error trying to parse Location header: {e}"))?;
        HeaderValue::from_str(&rewritten)
            .map_err(|e| format!("error trying to parse Location header: {e}"))
    }

    /// An HTML page with the URL attributes upstream rewrites
    /// (`atomsToAttrs`: `a href`, `img src`, `form action`, …) pointed
    /// through the proxy; everything else is left byte for byte.
    pub fn html(&self, page: &[u8]) -> Vec<u8> {
        rewrite_html(page, |value| {
            self.url(value).ok().filter(|rewritten| rewritten != value)
        })
    }
}

/// A URL split as Go's `url.Parse` splits one, its parts as written.
#[derive(Debug, Default, PartialEq, Eq)]
struct Link<'a> {
    scheme: Option<&'a str>,
    /// `userinfo@host:port`.
    authority: &'a str,
    /// The host and port, without user information.
    host: &'a str,
    /// A scheme followed by no slash (`mailto:…`).
    opaque: bool,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Link<'a> {
    fn parse(raw: &'a str) -> Result<Link<'a>, String> {
        if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(format!(
                "parse {raw:?}: net/url: invalid control character in URL"
            ));
        }
        let bytes = raw.as_bytes();
        if let Some(at) = bytes.iter().position(|b| *b == b'%')
            && !is_escape(&bytes[at..])
        {
            let bad: String = raw[at..].chars().take(3).collect();
            return Err(format!("parse {raw:?}: invalid URL escape {bad:?}"));
        }
        let mut link = Link::default();
        let (rest, fragment) = match raw.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (raw, None),
        };
        link.fragment = fragment;
        let mut rest = rest;
        if let Some(colon) = rest.find(':') {
            let scheme = &rest[..colon];
            let valid = scheme
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic())
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
            if valid {
                link.scheme = Some(scheme);
                rest = &rest[colon + 1..];
            } else if colon == 0 {
                return Err(format!("parse {raw:?}: missing protocol scheme"));
            }
        }
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        link.query = query;
        if link.scheme.is_some() && !rest.starts_with('/') {
            link.opaque = true;
            return Ok(link);
        }
        let authority_follows =
            rest.starts_with("//") && (link.scheme.is_some() || !rest.starts_with("///"));
        if authority_follows {
            let after = &rest[2..];
            let end = after.find('/').unwrap_or(after.len());
            link.authority = &after[..end];
            link.host = link.authority.rsplit('@').next().unwrap_or_default();
            link.path = &after[end..];
        } else {
            link.path = rest;
        }
        Ok(link)
    }
}

/// Whether every `%` of `text` (which starts with one) begins `%XX`.
fn is_escape(text: &[u8]) -> bool {
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%' {
            let ok = text
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
            if !ok {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// Upstream's `atomsToAttrs`: which attributes of which elements hold
/// URLs.
const URL_ATTRIBUTES: &[(&str, &[&str])] = &[
    ("a", &["href"]),
    ("applet", &["codebase"]),
    ("area", &["href"]),
    ("audio", &["src"]),
    ("base", &["href"]),
    ("blockquote", &["cite"]),
    ("body", &["background"]),
    ("button", &["formaction"]),
    ("command", &["icon"]),
    ("del", &["cite"]),
    ("embed", &["src"]),
    ("form", &["action"]),
    ("frame", &["longdesc", "src"]),
    ("head", &["profile"]),
    ("html", &["manifest"]),
    ("iframe", &["longdesc", "src"]),
    ("img", &["longdesc", "src", "usemap"]),
    ("input", &["src", "usemap", "formaction"]),
    ("ins", &["cite"]),
    ("link", &["href"]),
    ("object", &["classid", "codebase", "data", "usemap"]),
    ("q", &["cite"]),
    ("script", &["src"]),
    ("source", &["src"]),
    ("video", &["poster", "src"]),
];

/// Elements whose content is text, not markup, up to their end tag.
const RAW_TEXT: &[&str] = &[
    "iframe",
    "noembed",
    "noframes",
    "noscript",
    "plaintext",
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
];

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

fn find(bytes: &[u8], from: usize, wanted: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(wanted.len())
        .position(|w| w.eq_ignore_ascii_case(wanted))
        .map(|at| from + at)
}

/// The text of an attribute value, its character references read (the
/// common named ones and numeric ones).
fn unescape(value: &str) -> String {
    if !value.contains('&') {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest.find(';').filter(|s| *s <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// An attribute value written as Go's `html.EscapeString` writes one.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    out
}

/// `page` with each URL attribute of [`URL_ATTRIBUTES`] that `rewrite`
/// changes replaced (double-quoted); comments, declarations, end tags and
/// raw-text content are passed over.
fn rewrite_html(page: &[u8], rewrite: impl Fn(&str) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::with_capacity(page.len() + page.len() / 8);
    let mut copied = 0;
    let mut i = 0;
    let len = page.len();
    while let Some(lt) = page[i..].iter().position(|b| *b == b'<').map(|p| i + p) {
        let rest = &page[lt..];
        if rest.starts_with(b"<!--") {
            i = find(page, lt + 4, b"-->").map_or(len, |end| end + 3);
            continue;
        }
        if rest.starts_with(b"<!") || rest.starts_with(b"<?") || rest.starts_with(b"</") {
            i = page[lt..]
                .iter()
                .position(|b| *b == b'>')
                .map_or(len, |end| lt + end + 1);
            continue;
        }
        if !rest.get(1).is_some_and(u8::is_ascii_alphabetic) {
            i = lt + 1;
            continue;
        }
        let mut j = lt + 1;
        while j < len && !is_space(page[j]) && page[j] != b'/' && page[j] != b'>' {
            j += 1;
        }
        let element = String::from_utf8_lossy(&page[lt + 1..j]).to_ascii_lowercase();
        let attributes = URL_ATTRIBUTES
            .iter()
            .find(|(e, _)| *e == element)
            .map(|(_, a)| *a)
            .unwrap_or_default();
        // The attributes, up to the tag's end.
        loop {
            while j < len && (is_space(page[j]) || page[j] == b'/') {
                j += 1;
            }
            if j >= len {
                break;
            }
            if page[j] == b'>' {
                j += 1;
                break;
            }
            let name_start = j;
            j += 1;
            while j < len && !is_space(page[j]) && !b"/>=".contains(&page[j]) {
                j += 1;
            }
            let name = String::from_utf8_lossy(&page[name_start..j]).to_ascii_lowercase();
            let mut k = j;
            while k < len && is_space(page[k]) {
                k += 1;
            }
            if k >= len || page[k] != b'=' {
                continue;
            }
            k += 1;
            while k < len && is_space(page[k]) {
                k += 1;
            }
            // The value's span, quotes included, and its text.
            let (span_start, value_start, value_end, span_end);
            if k < len && (page[k] == b'"' || page[k] == b'\'') {
                let quote = page[k];
                span_start = k;
                value_start = k + 1;
                value_end = page[value_start..]
                    .iter()
                    .position(|b| *b == quote)
                    .map_or(len, |p| value_start + p);
                span_end = (value_end + 1).min(len);
            } else {
                span_start = k;
                value_start = k;
                let mut end = k;
                while end < len && !is_space(page[end]) && page[end] != b'>' {
                    end += 1;
                }
                value_end = end;
                span_end = end;
            }
            j = span_end;
            if !attributes.contains(&name.as_str()) {
                continue;
            }
            let Ok(value) = std::str::from_utf8(&page[value_start..value_end]) else {
                continue;
            };
            if let Some(rewritten) = rewrite(&unescape(value)) {
                out.extend_from_slice(&page[copied..span_start]);
                out.push(b'"');
                out.extend_from_slice(escape(&rewritten).as_bytes());
                out.push(b'"');
                copied = span_end;
            }
        }
        i = j;
        if RAW_TEXT.contains(&element.as_str()) {
            let end_tag = format!("</{element}");
            i = find(page, i, end_tag.as_bytes()).unwrap_or(len);
        }
    }
    out.extend_from_slice(&page[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewriter() -> Rewriter {
        Rewriter {
            backend_host: "10.0.0.7:8080".into(),
            request_host: "apiserver:6443".into(),
            prepend: "/api/v1/namespaces/ns/pods/p/proxy".into(),
        }
    }

    #[test]
    fn paths_join_and_clean_as_gos() {
        assert_eq!(clean("/a//b/./c/../d/"), "/a/b/d");
        assert_eq!(clean("/../a"), "/a");
        assert_eq!(clean("a/../../b"), "../b");
        assert_eq!(clean(""), ".");
        assert_eq!(join("", ""), "");
        assert_eq!(join("/p", "x/y"), "/p/x/y");
        assert_eq!(join_preserving_trailing_slash("", "/a/b/"), "/a/b/");
        assert_eq!(join_preserving_trailing_slash("", "/a/../b"), "/b");
        assert_eq!(join_preserving_trailing_slash("", "/"), "/");
        assert_eq!(join_preserving_trailing_slash("", ""), "");
    }

    #[test]
    fn the_proxied_path_is_what_follows_proxy() {
        let base = "/api/v1/namespaces/ns/pods/p/proxy";
        assert_eq!(subpath(base, 7), "");
        assert_eq!(subpath(&format!("{base}/"), 7), "/");
        assert_eq!(subpath(&format!("{base}/a/b"), 7), "/a/b");
        assert_eq!(subpath(&format!("{base}/a/b/"), 7), "/a/b/");
        assert_eq!(subpath("/api/v1/nodes/n/proxy/pods", 5), "/pods");
        assert_eq!(escape_path("/a b/c?d/é"), "/a%20b/c%3Fd/%C3%A9");
        assert_eq!(escape_path("/x:y@z;w=1,2+$&"), "/x:y@z;w=1,2+$&");
        assert_eq!(percent_decode("/a%20b/%zz%2"), "/a b/%zz%2");
    }

    #[test]
    fn credentials_and_hop_by_hop_headers_stay_behind() {
        let mut client = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer secret"),
            ("impersonate-user", "admin"),
            ("impersonate-extra-scopes", "x"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
            ("host", "apiserver:6443"),
            ("accept", "text/html"),
            ("content-length", "3"),
            ("x-custom", "kept"),
        ] {
            client.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let passed = request_headers(&client);
        let mut names: Vec<&str> = passed.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept", "content-length", "x-custom"]);

        let mut backend = HeaderMap::new();
        for (name, value) in [
            ("connection", "close"),
            ("access-control-allow-origin", "*"),
            ("access-control-allow-credentials", "true"),
            ("access-control-expose-headers", "x"),
            ("content-type", "text/html; charset=utf-8"),
            ("transfer-encoding", "chunked"),
        ] {
            backend.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        response_headers(&mut backend);
        let mut names: Vec<&str> = backend.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["access-control-expose-headers", "content-type"]);
        assert!(is_html(&backend));
    }

    #[test]
    fn the_proxys_prefix_is_the_client_path_less_the_backends() {
        let client = "/api/v1/namespaces/ns/pods/p/proxy/a/b/";
        assert_eq!(
            Rewriter::prepend_of(client, "/a/b/"),
            "/api/v1/namespaces/ns/pods/p/proxy"
        );
        assert_eq!(
            Rewriter::prepend_of("/api/v1/nodes/n/proxy/x", "/x"),
            "/api/v1/nodes/n/proxy"
        );
        let r = rewriter();
        assert_eq!(
            r.forwarded_uri("/a/b/"),
            "/api/v1/namespaces/ns/pods/p/proxy/a/b/"
        );
    }

    #[test]
    fn links_to_the_backend_point_through_the_proxy() {
        let r = rewriter();
        let url = |raw: &str| r.url(raw).expect("a URL");
        assert_eq!(
            url("/login?next=%2F#top"),
            "/api/v1/namespaces/ns/pods/p/proxy/login?next=%2F#top"
        );
        assert_eq!(
            url("http://10.0.0.7:8080/static/"),
            "/api/v1/namespaces/ns/pods/p/proxy/static/"
        );
        assert_eq!(
            url("https://apiserver:6443/x"),
            "https://apiserver:6443/api/v1/namespaces/ns/pods/p/proxy/x"
        );
        assert_eq!(
            url("/api/v1/namespaces/ns/pods/p/proxy/already"),
            "/api/v1/namespaces/ns/pods/p/proxy/already"
        );
        for kept in [
            "https://example.com/x",
            "relative/path",
            "mailto:someone@example.com",
            "#frag",
            "?q=1",
            "",
        ] {
            assert_eq!(url(kept), kept);
        }
        assert!(
            r.url("/bad%zz")
                .expect_err("bad escape")
                .contains("invalid URL escape \"%zz\"")
        );
        assert_eq!(
            r.location(&HeaderValue::from_static("/next"))
                .expect("location"),
            "/api/v1/namespaces/ns/pods/p/proxy/next"
        );
    }

    #[test]
    fn url_attributes_of_a_page_are_rewritten_and_nothing_else() {
        let r = rewriter();
        let page = concat!(
            "<!DOCTYPE html><html><head><link rel=stylesheet href=/s.css>",
            "<script src='/app.js'>if (a<b) { x = '<a href=\"/no\">'; }</script></head>",
            "<!-- <a href=\"/comment\"> -->",
            "<body><A HREF=\"/docs?a=1&amp;b=2\">docs</A> <a href=\"other.html\">o</a>",
            "<img alt=\"/not-a-url\" src=\"http://10.0.0.7:8080/i.png\"/>",
            "<a href=\"https://example.com/\">e</a><form action=\"/post\" method=post></form>",
            "<p data-src=\"/x\">5 < 6</p></body></html>"
        );
        let rewritten = String::from_utf8(r.html(page.as_bytes())).expect("utf-8");
        let p = "/api/v1/namespaces/ns/pods/p/proxy";
        let expected = format!(
            concat!(
                "<!DOCTYPE html><html><head><link rel=stylesheet href=\"{p}/s.css\">",
                "<script src=\"{p}/app.js\">if (a<b) {{ x = '<a href=\"/no\">'; }}</script></head>",
                "<!-- <a href=\"/comment\"> -->",
                "<body><A HREF=\"{p}/docs?a=1&amp;b=2\">docs</A> <a href=\"other.html\">o</a>",
                "<img alt=\"/not-a-url\" src=\"{p}/i.png\"/>",
                "<a href=\"https://example.com/\">e</a><form action=\"{p}/post\" method=post></form>",
                "<p data-src=\"/x\">5 < 6</p></body></html>"
            ),
            p = p
        );
        assert_eq!(rewritten, expected);
        assert_eq!(unescape("a&amp;b&#39;c&#x41;&bogus;&"), "a&b'cA&bogus;&");
        assert_eq!(escape("a&b\"c'<>"), "a&amp;b&#34;c&#39;&lt;&gt;");
    }
}
