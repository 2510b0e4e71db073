//! SPDY/3 name/value header blocks and their compression: [`Headers`], the
//! block layout (32-bit count, then 32-bit length-prefixed names and
//! values, a name's several values joined by NUL), and the zlib contexts
//! with the SPDY/3 dictionary — one [`Compressor`] for everything a
//! connection sends and one [`Decompressor`] for everything it receives,
//! each block ending on a sync flush, as moby/spdystream's framer does.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The largest decompressed header block accepted (Kubernetes' blocks are a
/// few dozen bytes); a larger one is a protocol error, never an allocation.
pub const MAX_BLOCK: usize = 1 << 20;

/// A block's problem: the session answers with GOAWAY and ends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("decompressing a header block: {0}")]
    Inflate(String),
    #[error("compressing a header block: {0}")]
    Deflate(String),
    #[error("decompressing a header block: more than {MAX_BLOCK} bytes")]
    TooLarge,
    #[error("decoding a header block: {0}")]
    Malformed(&'static str),
}

/// A stream's headers: ordered (name, value) pairs, names lowercase (SPDY/3
/// requires it on the wire; [`Headers::get`] ignores case anyway).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    pub fn new() -> Headers {
        Headers(Vec::new())
    }

    /// The first value of `name`.
    pub fn get<'a>(&'a self, name: &str) -> Option<&'a str> {
        self.get_all(name).next()
    }

    /// Every value of `name`, in order.
    pub fn get_all<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = &'a str> + use<'a, 'n> {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Sets `name` to `value`, replacing its values.
    pub fn insert(&mut self, name: &str, value: impl Into<String>) {
        self.0.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.append(name, value);
    }

    /// Adds a value of `name`.
    pub fn append(&mut self, name: &str, value: impl Into<String>) {
        self.0.push((name.to_ascii_lowercase(), value.into()));
    }

    /// Builder form of [`Headers::insert`].
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Headers {
        self.insert(name, value);
        self
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N: AsRef<str>, V: Into<String>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Headers {
        let mut h = Headers::new();
        for (n, v) in iter {
            h.append(n.as_ref(), v);
        }
        h
    }
}

/// Serializes a block (uncompressed). A name's values become one entry,
/// joined by NUL: spdystream rejects a block naming a header twice.
pub fn encode_block(headers: &Headers) -> Vec<u8> {
    let mut names: Vec<&str> = Vec::new();
    for (n, _) in headers.iter() {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(names.len() as u32).to_be_bytes());
    for name in names {
        let value = headers
            .0
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join("\0");
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// Parses a block (uncompressed). Names are lowercased and a repeated name
/// appended to (spdystream refuses both; accepting them costs nothing).
pub fn decode_block(block: &[u8]) -> Result<Headers, HeaderError> {
    let mut rest = block;
    let mut take = |n: usize| -> Result<&[u8], HeaderError> {
        if rest.len() < n {
            return Err(HeaderError::Malformed("truncated"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let u32_at = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let count = u32_at(take(4)?);
    let mut headers = Headers::new();
    for _ in 0..count {
        let len = u32_at(take(4)?);
        let name = std::str::from_utf8(take(len)?)
            .map_err(|_| HeaderError::Malformed("a name is not UTF-8"))?;
        if name.is_empty() {
            return Err(HeaderError::Malformed("an empty name"));
        }
        let len = u32_at(take(4)?);
        let value = std::str::from_utf8(take(len)?)
            .map_err(|_| HeaderError::Malformed("a value is not UTF-8"))?;
        for v in value.split('\0') {
            headers.append(name, v);
        }
    }
    if !rest.is_empty() {
        return Err(HeaderError::Malformed("bytes after the last header"));
    }
    Ok(headers)
}

/// The compression context of one connection's sending direction.
pub struct Compressor(Compress);

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor")
            .field("total_in", &self.0.total_in())
            .finish()
    }
}

impl Compressor {
    pub fn new() -> Result<Compressor, HeaderError> {
        // spdystream uses zlib.BestCompression; blocks are tiny.
        let mut c = Compress::new(Compression::best(), true);
        c.set_dictionary(DICTIONARY)
            .map_err(|e| HeaderError::Deflate(e.to_string()))?;
        Ok(Compressor(c))
    }

    /// Compresses one block, ending it with a sync flush.
    pub fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, HeaderError> {
        let input = encode_block(headers);
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        let mut pos = 0;
        loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(64));
            }
            let before = self.0.total_in();
            self.0
                .compress_vec(&input[pos..], &mut out, FlushCompress::Sync)
                .map_err(|e| HeaderError::Deflate(e.to_string()))?;
            pos += (self.0.total_in() - before) as usize;
            // Done once all input is in and deflate stopped short of the
            // space it had (nothing left pending).
            if pos == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The decompression context of one connection's receiving direction.
pub struct Decompressor(Decompress);

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("total_in", &self.0.total_in())
            .finish()
    }
}

impl Default for Decompressor {
    fn default() -> Decompressor {
        Decompressor::new()
    }
}

impl Decompressor {
    pub fn new() -> Decompressor {
        Decompressor(Decompress::new(true))
    }

    /// Decompresses one block (all of `input`) and parses it.
    pub fn decompress(&mut self, input: &[u8]) -> Result<Headers, HeaderError> {
        decode_block(&self.inflate(input)?)
    }

    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, HeaderError> {
        let mut out = Vec::with_capacity((input.len() * 4).clamp(64, MAX_BLOCK));
        let mut pos = 0;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_BLOCK {
                    return Err(HeaderError::TooLarge);
                }
                out.reserve(out.capacity().min(MAX_BLOCK - out.len()));
            }
            let (before_in, before_out) = (self.0.total_in(), out.len());
            let res = self
                .0
                .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            pos += (self.0.total_in() - before_in) as usize;
            match res {
                Ok(Status::StreamEnd) => {
                    // A zlib stream never ends on a SPDY connection.
                    return Err(HeaderError::Inflate("the zlib stream ended".into()));
                }
                Ok(_) => {
                    if pos == input.len() && out.len() < out.capacity() {
                        return Ok(out);
                    }
                    if out.len() < out.capacity() && out.len() == before_out && pos < input.len() {
                        // Neither consumed nor produced with room to spare.
                        if self.0.total_in() == before_in {
                            return Err(HeaderError::Inflate("no progress".into()));
                        }
                    }
                }
                Err(e) => {
                    if e.needs_dictionary().is_some() {
                        self.0
                            .set_dictionary(DICTIONARY)
                            .map_err(|e| HeaderError::Inflate(e.to_string()))?;
                    } else {
                        return Err(HeaderError::Inflate(e.to_string()));
                    }
                }
            }
        }
    }
}

/// The SPDY/3 header dictionary (draft 3, §2.6.10.1): 65 length-prefixed
/// words, then a run of status codes, reasons, dates and common values.
pub const DICTIONARY: &[u8] = &DICT;

const DICT_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

const DICT_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information",
    "204 No Content",
    "301 Moved Permanently",
    "400 Bad Request",
    "401 Unauthorized",
    "403 Forbidden",
    "404 Not Found",
    "500 Internal Server Error",
    "501 Not Implemented",
    "503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec",
    " 00:00:00",
    " Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,",
    "text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch",
    "charset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

const DICT_LEN: usize = {
    let mut n = DICT_TAIL.len();
    let mut i = 0;
    while i < DICT_WORDS.len() {
        n += 4 + DICT_WORDS[i].len();
        i += 1;
    }
    n
};

const DICT: [u8; DICT_LEN] = {
    let mut out = [0u8; DICT_LEN];
    let mut at = 0;
    let mut i = 0;
    while i < DICT_WORDS.len() {
        let w = DICT_WORDS[i].as_bytes();
        let len = (w.len() as u32).to_be_bytes();
        let mut j = 0;
        while j < 4 {
            out[at] = len[j];
            at += 1;
            j += 1;
        }
        let mut j = 0;
        while j < w.len() {
            out[at] = w[j];
            at += 1;
            j += 1;
        }
        i += 1;
    }
    let t = DICT_TAIL.as_bytes();
    let mut j = 0;
    while j < t.len() {
        out[at] = t[j];
        at += 1;
        j += 1;
    }
    out
};
