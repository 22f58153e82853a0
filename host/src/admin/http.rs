//! The sliver of HTTP/1.1 the admin API speaks: one request per connection, bodies only with
//! `Content-Length`, heads of printable ASCII with CRLF line ends. Anything else is refused
//! rather than guessed at, which keeps the parser small enough to trust.

/// Longest accepted request head (request line and headers).
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Longest accepted request body.
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// Offset just past the `\r\n\r\n` that ends a message head, if `buf` holds one.
pub(crate) fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i.saturating_add(4))
}

/// A parsed message head: the start line and the headers, names lowercased.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) start_line: String,
    headers: Vec<(String, String)>,
}

impl Head {
    /// Parses `head`, which ends with the blank line. Errors say what is malformed.
    pub(crate) fn parse(head: &[u8]) -> Result<Self, String> {
        let text = head
            .strip_suffix(b"\r\n\r\n")
            .ok_or("head does not end with an empty line")?;
        if let Some(b) = text
            .iter()
            .find(|&&b| !(b == b'\r' || b == b'\n' || b == b'\t' || (b' '..=b'~').contains(&b)))
        {
            return Err(format!("byte 0x{b:02x} is not allowed in a message head"));
        }
        let text = std::str::from_utf8(text).map_err(|e| e.to_string())?;
        if text.split("\r\n").any(|line| line.contains(['\r', '\n'])) {
            return Err("line ends must be CRLF".into());
        }
        let mut lines = text.split("\r\n");
        let start_line = lines.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("header line without a colon: {:.64}", line))?;
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(token) {
                return Err(format!("invalid header name {:?}", truncate(name)));
            }
            headers.push((
                name.to_ascii_lowercase(),
                value.trim_matches([' ', '\t']).to_string(),
            ));
        }
        Ok(Self {
            start_line,
            headers,
        })
    }

    /// Method and path (query stripped) of a request: `METHOD /path HTTP/1.x`, with `Host`
    /// required for HTTP/1.1.
    pub(crate) fn request_line(&self) -> Result<(&str, &str), String> {
        let mut parts = self.start_line.split(' ');
        let (Some(method), Some(target), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "malformed request line {:?}",
                truncate(&self.start_line)
            ));
        };
        if method.is_empty()
            || !method.bytes().all(|b| b.is_ascii_uppercase())
            || !target.starts_with('/')
            || !matches!(version, "HTTP/1.1" | "HTTP/1.0")
        {
            return Err(format!(
                "malformed request line {:?}",
                truncate(&self.start_line)
            ));
        }
        if version == "HTTP/1.1" && self.get("host").is_none() {
            return Err("missing Host header".into());
        }
        Ok((method, target.split('?').next().unwrap_or_default()))
    }

    /// Every value of header `name` (lowercase).
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of header `name` (lowercase).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `Content-Length`, if given once as plain digits; `u64::MAX` if it overflows.
    pub(crate) fn content_length(&self) -> Result<Option<u64>, String> {
        let mut values = self.all("content-length");
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err("more than one Content-Length header".into());
        }
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("invalid Content-Length {:?}", truncate(value)));
        }
        Ok(Some(value.parse().unwrap_or(u64::MAX)))
    }
}

/// Splits a complete response into status code and body (cut to `Content-Length` if given).
pub(crate) fn parse_response(bytes: &[u8]) -> Result<(u16, &[u8]), String> {
    let end = head_end(bytes).ok_or("response ended before its head was complete")?;
    let (head, body) = bytes.split_at_checked(end).ok_or("bad head offset")?;
    let head = Head::parse(head)?;
    let mut parts = head.start_line.splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(format!("bad status line {:?}", truncate(&head.start_line)));
    };
    let status = code
        .parse()
        .ok()
        .filter(|c| version.starts_with("HTTP/1.") && (100..600).contains(c))
        .ok_or_else(|| format!("bad status line {:?}", truncate(&head.start_line)))?;
    let body = match head.content_length()? {
        Some(len) => body
            .get(..usize::try_from(len).unwrap_or(usize::MAX))
            .ok_or_else(|| format!("body shorter than its Content-Length {len}"))?,
        None => body,
    };
    Ok((status, body))
}

/// A response, always sent with `Content-Length` and `Connection: close`.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    content_type: &'static str,
    extra_header: Option<(&'static str, &'static str)>,
    body: Vec<u8>,
}

impl Response {
    /// A response with the given body.
    pub(crate) fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Self {
        Self {
            status,
            content_type,
            extra_header: None,
            body,
        }
    }

    /// A JSON response.
    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Self {
        Self::new(status, "application/json", value.to_string().into_bytes())
    }

    /// An error response, `{"error": message}`.
    pub(crate) fn error(status: u16, message: impl Into<String>) -> Self {
        Self::json(status, &serde_json::json!({ "error": message.into() }))
    }

    /// Adds one header (e.g. `Allow`).
    pub(crate) fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.extra_header = Some((name, value));
        self
    }

    /// The response on the wire.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        if let Some((name, value)) = self.extra_header {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// At most 64 characters of `s`, for error messages quoting client input.
pub(crate) fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_parsed_strictly() {
        let head = Head::parse(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n").unwrap();
        assert_eq!(head.get("host"), Some("a"));
        assert_eq!(head.content_length(), Ok(Some(5)));
        for bad in [
            &b"GET / HTTP/1.1\r\nHost a\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
            b"GET / HTTP/1.1\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: \xff\r\n\r\n",
        ] {
            assert!(Head::parse(bad).is_err(), "{bad:?}");
        }
        let two = Head::parse(b"P / HTTP/1.1\r\nContent-Length: 1\r\nContent-length: 1\r\n\r\n");
        assert!(two.unwrap().content_length().is_err());
        let (status, body) =
            parse_response(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}xx").unwrap();
        assert_eq!((status, body), (404, &b"{}"[..]));
    }
}
