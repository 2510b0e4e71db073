//! Reading a container's CRI log file as upstream's kubelet does
//! (`pkg/kubelet/kuberuntime/logs`): each line is `<RFC3339Nano time>
//! <stdout|stderr> <P|F> <content>`; a `P` (partial) line continues in
//! the next. `tailLines` counts the file's lines (a partial one too)
//! back from its end, `sinceTime`/`sinceSeconds` skip lines older than
//! the time, `timestamps` prefixes each line (not the continuation of a
//! partial one) with its time in fixed-width RFC3339Nano, `limitBytes`
//! cuts the output after so many bytes. `follow` keeps reading as the
//! runtime writes, across a rotation (a new file at the same path), until
//! the container stops or the client goes away.
//!
//! [`Writer`] and [`tail_start`] are pure; [`copy`] does the file IO, on
//! a blocking thread.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rudder_api::podlogs::LogOptions;

/// What to read, in the runtime's terms (upstream's `LogOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Start this many lines back from the end.
    pub tail: Option<u64>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<u64>,
    /// Skip lines older than this.
    pub since: Option<Timestamp>,
    pub follow: bool,
    pub timestamps: bool,
}

impl ReadOptions {
    /// Upstream's `NewLogOptions`: `sinceSeconds` back from `now`, and
    /// `sinceTime` when it is later.
    pub fn new(api: &LogOptions, now: Timestamp) -> Self {
        let mut since = api
            .since_seconds
            .and_then(|s| now.checked_sub(SignedDuration::from_secs(s)).ok());
        if let Some(time) = api.since_time
            && since.is_none_or(|s| time > s)
        {
            since = Some(time);
        }
        ReadOptions {
            tail: api.tail_lines.and_then(|t| u64::try_from(t).ok()),
            limit_bytes: api.limit_bytes.and_then(|b| u64::try_from(b).ok()),
            since,
            follow: api.follow,
            timestamps: api.timestamps,
        }
    }
}

/// One line of a CRI log file.
#[derive(Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub time: Timestamp,
    /// The time as the runtime wrote it (its own offset is kept).
    pub time_text: &'a str,
    pub stderr: bool,
    pub partial: bool,
    /// The content; a full line's ends with its newline.
    pub content: &'a [u8],
}

/// Parses one line of the file (with its newline, if it has one).
pub fn parse(line: &[u8]) -> Option<Line<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time_text = std::str::from_utf8(parts.next()?).ok()?;
    let time = time_text.parse::<Timestamp>().ok()?;
    let stderr = match parts.next()? {
        b"stdout" => false,
        b"stderr" => true,
        _ => return None,
    };
    let tag = parts.next()?;
    let partial = tag.split(|b| *b == b':').next() == Some(b"P");
    let mut content = parts.next()?;
    if partial && content.last() == Some(&b'\n') {
        content = &content[..content.len() - 1];
    }
    Some(Line {
        time,
        time_text,
        stderr,
        partial,
        content,
    })
}

/// A time as upstream's kubelet prints it: RFC3339 with nine fraction
/// digits (`2006-01-02T15:04:05.000000000Z07:00`), in the offset it was
/// written in.
pub fn fixed_width(text: &str, time: Timestamp) -> String {
    // "YYYY-MM-DDTHH:MM:SS" then an optional fraction, then the zone.
    if let (Some(clock), Some(rest)) = (text.get(..19), text.get(19..)) {
        let (digits, zone) = match rest.strip_prefix('.') {
            Some(after) => {
                let end = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(end)
            }
            None => ("", rest),
        };
        if matches!(zone, "Z" | "z") || zone.len() == 6 {
            let mut fraction: String = digits.chars().take(9).collect();
            while fraction.len() < 9 {
                fraction.push('0');
            }
            let zone = if zone == "z" { "Z" } else { zone };
            return format!("{clock}.{fraction}{zone}");
        }
    }
    format!(
        "{}.{:09}Z",
        time.strftime("%Y-%m-%dT%H:%M:%S"),
        time.subsec_nanosecond()
    )
}

/// Whether to go on reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    More,
    Done,
}

/// Turns the file's lines into what the client gets (upstream's
/// `logWriter` and the loop around it).
#[derive(Debug)]
pub struct Writer {
    since: Option<Timestamp>,
    timestamps: bool,
    remain: Option<u64>,
    /// Lines still to read when tailing without following.
    lines_left: Option<u64>,
    /// The last line written ended a line: the next one gets a prefix.
    new_line: bool,
}

impl Writer {
    pub fn new(options: &ReadOptions) -> Self {
        Writer {
            since: options.since,
            timestamps: options.timestamps,
            remain: options.limit_bytes,
            lines_left: options.tail.filter(|_| !options.follow),
            new_line: true,
        }
    }

    /// Whether nothing more is to be written.
    pub fn done(&self) -> bool {
        self.lines_left == Some(0) || self.remain == Some(0)
    }

    /// Writes one line of the file to `out`. A line that does not parse
    /// is skipped, as upstream does.
    pub fn line(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Flow {
        if self.done() {
            return Flow::Done;
        }
        let Some(line) = parse(raw) else {
            return Flow::More;
        };
        if self.since.is_none_or(|since| line.time >= since) {
            let start = out.len();
            if self.timestamps && self.new_line {
                out.extend_from_slice(fixed_width(line.time_text, line.time).as_bytes());
                out.push(b' ');
            }
            out.extend_from_slice(line.content);
            if let Some(remain) = self.remain.as_mut() {
                let written = (out.len() - start) as u64;
                if written >= *remain {
                    out.truncate(start + *remain as usize);
                    *remain = 0;
                    return Flow::Done;
                }
                *remain -= written;
            }
        }
        if let Some(left) = self.lines_left.as_mut() {
            *left = left.saturating_sub(1);
        }
        self.new_line = line.content.last().is_none_or(|b| *b == b'\n');
        if self.done() { Flow::Done } else { Flow::More }
    }
}

/// Where the last `lines` lines of `file` start (upstream's
/// `FindTailLineStartIndex`: an unfinished last line is not counted).
pub fn tail_start<R: Read + Seek>(file: &mut R, lines: u64) -> io::Result<u64> {
    const BLOCK: u64 = 1024;
    let size = file.seek(SeekFrom::End(0))?;
    let mut count = 0u64;
    let mut left = size;
    let mut block = Vec::new();
    let mut right = size;
    while right > 0 && count <= lines {
        left = right.saturating_sub(BLOCK);
        block = vec![0; (right - left) as usize];
        file.seek(SeekFrom::Start(left))?;
        file.read_exact(&mut block)?;
        count += block.iter().filter(|b| **b == b'\n').count() as u64;
        right = left;
    }
    let mut view = &block[..];
    while count > lines {
        let Some(at) = view.iter().position(|b| *b == b'\n') else {
            break;
        };
        view = &view[at + 1..];
        left += at as u64 + 1;
        count -= 1;
    }
    Ok(left)
}

/// Where the output goes.
pub trait Sink {
    /// Sends a chunk; false when the client has gone away.
    fn send(&mut self, chunk: Vec<u8>) -> bool;
    /// Whether the client has gone away.
    fn closed(&self) -> bool;
}

/// Output is sent in chunks of about this size (and at every pause).
const CHUNK: usize = 32 * 1024;
/// How often a followed file is looked at for more.
pub const POLL: Duration = Duration::from_millis(200);
/// How often a followed container is asked whether it still runs.
const RUNNING_CHECK: Duration = Duration::from_secs(1);

/// Copies the log at `path` (opened as `file`) to `sink` as `options`
/// say. Following, it stops once `running` says the container stopped
/// and what it wrote is read, or when the client goes away.
pub fn copy(
    path: &Path,
    mut file: File,
    options: &ReadOptions,
    sink: &mut dyn Sink,
    running: &mut dyn FnMut() -> bool,
) -> io::Result<()> {
    if let Some(lines) = options.tail {
        let start = tail_start(&mut file, lines)?;
        file.seek(SeekFrom::Start(start))?;
    }
    let mut reader = BufReader::new(file);
    let mut writer = Writer::new(options);
    let (mut out, mut line) = (Vec::new(), Vec::new());
    let mut stopping = false;
    let mut checked: Option<Instant> = None;
    loop {
        reader.read_until(b'\n', &mut line)?;
        if line.last() == Some(&b'\n') {
            let flow = writer.line(&line, &mut out);
            line.clear();
            if flow == Flow::Done {
                break;
            }
            if out.len() >= CHUNK && !sink.send(std::mem::take(&mut out)) {
                return Ok(());
            }
            continue;
        }
        // The end of what is written so far; `line` holds an unfinished
        // last line, if any.
        if !options.follow {
            if !line.is_empty() {
                writer.line(&line, &mut out);
            }
            break;
        }
        if !out.is_empty() && !sink.send(std::mem::take(&mut out)) {
            return Ok(());
        }
        if stopping {
            return Ok(());
        }
        if let Some(new) = reopened(path, reader.get_ref()) {
            // Rotated: the old file is read to its end; go on in the new.
            reader = BufReader::new(new);
            line.clear();
            continue;
        }
        if checked.is_none_or(|at| at.elapsed() >= RUNNING_CHECK) {
            checked = Some(Instant::now());
            if !running() {
                // Read what it wrote last, then stop.
                stopping = true;
                continue;
            }
        }
        if sink.closed() {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
    if !out.is_empty() {
        sink.send(out);
    }
    Ok(())
}

/// The file now at `path` when it is not the one open (the log was
/// rotated and the runtime reopened it).
fn reopened(path: &Path, open: &File) -> Option<File> {
    let now = std::fs::metadata(path).ok()?;
    let current = open.metadata().ok()?;
    if (now.dev(), now.ino()) == (current.dev(), current.ino()) {
        return None;
    }
    File::open(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};

    const LOG: &str = "2026-01-01T00:00:01.5Z stdout F one\n\
2026-01-01T00:00:02.000000001Z stderr F two\n\
2026-01-01T00:00:03Z stdout P thr\n\
2026-01-01T00:00:03.1Z stdout F ee\n\
2026-01-01T00:00:04+01:00 stdout F four\n";

    fn read(options: ReadOptions) -> String {
        let mut file = Cursor::new(LOG.as_bytes());
        let start = options
            .tail
            .map(|t| tail_start(&mut file, t).expect("tail"))
            .unwrap_or(0);
        let mut writer = Writer::new(&options);
        let mut out = Vec::new();
        for line in LOG[start as usize..].split_inclusive('\n') {
            if writer.line(line.as_bytes(), &mut out) == Flow::Done {
                break;
            }
        }
        String::from_utf8(out).expect("utf-8")
    }

    fn time(text: &str) -> Timestamp {
        text.parse().expect("time")
    }

    #[test]
    fn lines_are_parsed_and_partial_lines_joined() {
        let line = parse(b"2026-01-01T00:00:03Z stdout P thr\n").expect("parsed");
        assert!(line.partial && !line.stderr);
        assert_eq!(line.content, b"thr");
        assert_eq!(parse(b"2026-01-01T00:00:03Z stdin F x\n"), None);
        assert_eq!(parse(b"garbage\n"), None);
        assert_eq!(read(ReadOptions::default()), "one\ntwo\nthree\nfour\n");
    }

    #[test]
    fn timestamps_are_fixed_width_in_their_own_offset_once_per_line() {
        assert_eq!(
            read(ReadOptions {
                timestamps: true,
                ..Default::default()
            }),
            "2026-01-01T00:00:01.500000000Z one\n\
2026-01-01T00:00:02.000000001Z two\n\
2026-01-01T00:00:03.000000000Z three\n\
2026-01-01T00:00:04.000000000+01:00 four\n"
        );
    }

    #[test]
    fn tail_counts_the_files_lines_from_its_end() {
        let tail = |n| {
            read(ReadOptions {
                tail: Some(n),
                ..Default::default()
            })
        };
        assert_eq!(tail(1), "four\n");
        // The partial line is a line of the file: two lines are "ee" and four.
        assert_eq!(tail(2), "ee\nfour\n");
        assert_eq!(tail(0), "");
        assert_eq!(tail(100), "one\ntwo\nthree\nfour\n");
        let mut unfinished = Cursor::new(b"a\nb\nc".to_vec());
        assert_eq!(tail_start(&mut unfinished, 1).expect("tail"), 2);
        let long: String = (0..3000).map(|i| format!("{i}\n")).collect();
        let mut long_file = Cursor::new(long.as_bytes().to_vec());
        let start = tail_start(&mut long_file, 2000).expect("tail") as usize;
        assert!(long[start..].starts_with("1000\n"));
    }

    #[test]
    fn since_skips_older_lines_and_limit_cuts_bytes() {
        assert_eq!(
            read(ReadOptions {
                since: Some(time("2026-01-01T00:00:02Z")),
                ..Default::default()
            }),
            // 04+01:00 is 03:00 UTC the day before.
            "two\nthree\n"
        );
        assert_eq!(
            read(ReadOptions {
                limit_bytes: Some(6),
                ..Default::default()
            }),
            "one\ntw"
        );
        assert_eq!(
            read(ReadOptions {
                limit_bytes: Some(4),
                ..Default::default()
            }),
            "one\n"
        );
        let api = LogOptions {
            since_seconds: Some(10),
            since_time: Some(time("2026-01-01T00:00:55Z")),
            ..Default::default()
        };
        assert_eq!(
            ReadOptions::new(&api, time("2026-01-01T00:01:00Z")).since,
            Some(time("2026-01-01T00:00:55Z"))
        );
        let api = LogOptions {
            since_seconds: Some(10),
            ..Default::default()
        };
        assert_eq!(
            ReadOptions::new(&api, time("2026-01-01T00:01:00Z")).since,
            Some(time("2026-01-01T00:00:50Z"))
        );
    }

    struct Collect {
        chunks: Vec<u8>,
        sent: usize,
    }

    impl Sink for Collect {
        fn send(&mut self, chunk: Vec<u8>) -> bool {
            self.chunks.extend(chunk);
            self.sent += 1;
            true
        }
        fn closed(&self) -> bool {
            false
        }
    }

    #[test]
    fn following_reads_new_lines_across_a_rotation_until_the_container_stops() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2026-01-01T00:00:01Z stdout F first\n").expect("write");
        let writer_path = path.clone();
        let writing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&writer_path)
                .expect("open");
            f.write_all(b"2026-01-01T00:00:02Z stdout F second\n2026-01-01T00:00:03Z stdout F ha")
                .expect("append");
            std::thread::sleep(Duration::from_millis(300));
            f.write_all(b"lf\n").expect("finish the line");
            // Rotation: renamed, then a new file at the same path.
            std::fs::rename(&writer_path, writer_path.with_extension("log.1")).expect("rotate");
            std::fs::write(
                &writer_path,
                "2026-01-01T00:00:04Z stdout F after rotation\n",
            )
            .expect("reopen");
        });
        let started = Instant::now();
        let mut running = || started.elapsed() < Duration::from_millis(2500);
        let mut sink = Collect {
            chunks: Vec::new(),
            sent: 0,
        };
        let options = ReadOptions {
            follow: true,
            tail: Some(1),
            ..Default::default()
        };
        let file = File::open(&path).expect("open");
        copy(&path, file, &options, &mut sink, &mut running).expect("copy");
        writing.join().expect("writer");
        assert_eq!(
            String::from_utf8(sink.chunks).expect("utf-8"),
            "first\nsecond\nhalf\nafter rotation\n"
        );
        assert!(sink.sent >= 2, "sent as it came: {}", sink.sent);
    }
}
