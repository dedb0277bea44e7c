//! The process's log on stderr, written by one background thread so that a request never
//! waits on a write system call.
//!
//! Two paths feed one queue:
//!
//! - Audit events (target `tessera::audit`, one per token: `audit.rs`) skip the generic
//!   formatter and its dispatch. The request's thread writes each straight into a reused
//!   buffer, in the very shape `tracing_subscriber::fmt` gives every other line, text or
//!   JSON (`Line`).
//! - Every other event is formatted by `tracing_subscriber::fmt` where it happens and handed
//!   over as bytes.
//!
//! One queue of bytes keeps every line in the order it was logged (so a client's audit trail stays in
//! order). It is lossless: a full queue makes the logging thread wait for the writer rather
//! than drop a line. The writer wakes once per batch, not once per line: a line into an
//! empty queue wakes it, and it lingers [`LINGER`] before draining, so that the lines logged
//! meanwhile go out with it in one write, and on one core a token costs no thread switch.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

use crate::telemetry::{Telemetry, LOG_TARGET, TARGET as TRACE_TARGET};

/// The target of the audit trail.
pub const AUDIT_TARGET: &str = "tessera::audit";

/// How long the writer waits, once woken, for more lines to join the batch: the most a line
/// waits before it is written, and under load the period of the writer's wake-ups.
pub const LINGER: Duration = Duration::from_millis(2);

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `tracing_subscriber::fmt`'s default, one line per event; `ansi`: with its colours.
    Text {
        /// Colours, as on a terminal.
        ansi: bool,
    },
    /// One JSON object per line, as `tracing_subscriber::fmt().json()` writes them.
    Json,
}

/// Installs the global subscriber: events filtered by `RUST_LOG` (default `default_filter`),
/// written to `out` in `format` by a background thread; with `telemetry`, spans exported
/// too (`telemetry.rs`), and every line logged inside a request carrying its trace id.
/// Without it every span is disabled at its callsite. Keep the guard: dropping it writes
/// what is queued, exports the last spans and stops the thread.
pub fn init(
    format: Format,
    default_filter: &str,
    out: impl std::io::Write + Send + 'static,
    telemetry: Option<Telemetry>,
) -> Guard {
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let traced = telemetry.is_some();
    if traced {
        // Whatever RUST_LOG says of other targets, the request spans are recorded.
        for target in [TRACE_TARGET, LOG_TARGET] {
            if let Ok(directive) = format!("{target}=info").parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    // No span of any crate unless traced, and then only ours: a disabled callsite costs a
    // cached load and a branch.
    let spans = tracing_subscriber::filter::filter_fn(move |meta| {
        !meta.is_span()
            || (traced && (meta.target() == TRACE_TARGET || meta.target() == LOG_TARGET))
    });
    let (sink, mut guard) = Sink::spawn(format, out);
    // The log sees, of the spans, only the one that holds a request's trace id.
    let not_audit = tracing_subscriber::filter::filter_fn(|meta| {
        if meta.is_span() {
            meta.target() == LOG_TARGET
        } else {
            meta.target() != AUDIT_TARGET
        }
    });
    let only_audit = tracing_subscriber::filter::filter_fn(|meta| {
        meta.target() == AUDIT_TARGET || (meta.is_span() && meta.target() == LOG_TARGET)
    });
    let audit = AuditLayer {
        sink: sink.clone(),
        traced,
    }
    .with_filter(only_audit);
    let exporting = telemetry.as_ref().map(Telemetry::layer);
    let registry = tracing_subscriber::registry()
        .with(spans)
        .with(filter)
        .with(exporting)
        .with(audit);
    match format {
        Format::Text { ansi } => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(sink)
                    .with_filter(not_audit),
            )
            .init(),
        Format::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(sink)
                    .with_filter(not_audit),
            )
            .init(),
    }
    guard.telemetry = telemetry;
    guard
}

/// An audit line, written as it is logged: the request's thread formats the event's fields
/// straight into a reused buffer, and the writer only writes bytes out. There is no copy of
/// the fields, no second formatting pass and no allocation per line (BENCHMARKS.md, issue 31).
struct Line<'a> {
    out: &'a mut String,
    format: Format,
    /// Whether no field has been written yet.
    first: bool,
}

/// How a value was recorded, which decides how each format writes it (`Debug` output of
/// another value: `Line::record_debug`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A string: quoted and escaped.
    Str,
    /// A number or a boolean: as it is in both.
    Plain,
}

impl<'a> Line<'a> {
    /// Writes the line's start to `out`: what comes before its fields, in the very shape
    /// `tracing_subscriber::fmt` gives every other line, text or JSON.
    fn start(
        out: &'a mut String,
        format: Format,
        at: SystemTime,
        level: Level,
        target: &str,
    ) -> Self {
        match format {
            Format::Text { ansi } => {
                if ansi {
                    out.push_str("\x1b[2m");
                }
                timestamp(at, out);
                if ansi {
                    out.push_str("\x1b[0m");
                }
                out.push(' ');
                let (style, name) = match level {
                    Level::TRACE => ("35", "TRACE"),
                    Level::DEBUG => ("34", "DEBUG"),
                    Level::INFO => ("32", " INFO"),
                    Level::WARN => ("33", " WARN"),
                    Level::ERROR => ("31", "ERROR"),
                };
                paint(out, ansi, style, name);
                out.push(' ');
                paint(out, ansi, "2", target);
                paint(out, ansi, "2", ":");
                out.push(' ');
            }
            Format::Json => {
                out.push_str("{\"timestamp\":\"");
                timestamp(at, out);
                out.push_str("\",\"level\":");
                json_string(level.as_str(), out);
                out.push_str(",\"fields\":{");
            }
        }
        Self {
            out,
            format,
            first: true,
        }
    }

    /// Writes field `name`'s name and what comes before its value.
    fn name(&mut self, name: &str) {
        let first = std::mem::replace(&mut self.first, false);
        match self.format {
            Format::Text { ansi } => {
                if !first {
                    self.out.push(' ');
                }
                paint(self.out, ansi, "3", name);
                paint(self.out, ansi, "2", "=");
            }
            Format::Json => {
                if !first {
                    self.out.push(',');
                }
                json_string(name, self.out);
                self.out.push(':');
            }
        }
    }

    /// Writes field `name` with its `value`.
    fn field(&mut self, name: &str, kind: Kind, value: &str) {
        self.name(name);
        match (self.format, kind) {
            (Format::Text { .. }, Kind::Str) => debug_string(value, self.out),
            (Format::Json, Kind::Str) => json_string(value, self.out),
            (_, Kind::Plain) => self.out.push_str(value),
        }
    }

    /// Writes the line's end, after its last field.
    fn finish(self, target: &str) {
        match self.format {
            Format::Text { .. } => self.out.push('\n'),
            Format::Json => {
                self.out.push_str("},\"target\":");
                json_string(target, self.out);
                self.out.push_str("}\n");
            }
        }
    }
}

/// `text` in `style` when `ansi`, else as it is.
fn paint(out: &mut String, ansi: bool, style: &str, text: &str) {
    if ansi {
        out.push_str("\x1b[");
        out.push_str(style);
        out.push('m');
        out.push_str(text);
        out.push_str("\x1b[0m");
    } else {
        out.push_str(text);
    }
}

impl Visit for Line<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field.name(), Kind::Str, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.name(field.name());
        match self.format {
            Format::Text { .. } => {
                let _ = write!(self.out, "{value:?}");
            }
            Format::Json => {
                // Written in place, and escaped afterwards in the rare case it needs it.
                self.out.push('"');
                let start = self.out.len();
                let _ = write!(self.out, "{value:?}");
                if !plain(&self.out[start..]) {
                    let raw = self.out.split_off(start);
                    self.out.pop();
                    json_string(&raw, self.out);
                } else {
                    self.out.push('"');
                }
            }
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field.name(), Kind::Plain, itoa::Buffer::new().format(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field.name(), Kind::Plain, itoa::Buffer::new().format(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(
            field.name(),
            Kind::Plain,
            if value { "true" } else { "false" },
        );
    }
}

/// Whether `value` is printable ASCII without a quote or backslash: then both formats write
/// it between quotes as it is (the common case: ids, scopes, addresses).
fn plain(value: &str) -> bool {
    // Folded with `&` and no early exit, which the compiler does many bytes at a time.
    value.bytes().fold(true, |plain, b| {
        plain & (0x20..0x7f).contains(&b) & (b != b'"') & (b != b'\\')
    })
}

/// A string as `{:?}` writes it, as the generic formatter does.
fn debug_string(value: &str, out: &mut String) {
    if plain(value) {
        out.push('"');
        out.push_str(value);
        out.push('"');
    } else {
        let _ = write!(out, "{value:?}");
    }
}

/// A JSON string, escaped as RFC 8259 section 7 requires (as `serde_json` writes it).
fn json_string(value: &str, out: &mut String) {
    out.push('"');
    if plain(value) {
        out.push_str(value);
    } else {
        for c in value.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if c < ' ' => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
    }
    out.push('"');
}

/// `at` as RFC 3339 UTC with microseconds (`2026-11-26T11:26:50.123456Z`), as
/// `tracing_subscriber::fmt` writes it.
fn timestamp(at: SystemTime, out: &mut String) {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    // The date and time to the second change once a second: written once, then copied.
    SECOND.with(|second| {
        let (written, text) = &mut *second.borrow_mut();
        if *written != Some(secs) {
            text.clear();
            date_time(secs, text);
            *written = Some(secs);
        }
        out.push_str(text);
    });
    out.push('.');
    padded(u64::from(since.subsec_micros()), 6, out);
    out.push('Z');
}

thread_local! {
    /// The second [`timestamp`] last wrote on this thread, and its text.
    static SECOND: std::cell::RefCell<(Option<u64>, String)> =
        const { std::cell::RefCell::new((None, String::new())) };
}

/// `secs` after the Unix epoch as RFC 3339's date and time to the second, UTC
/// (`2026-11-26T11:26:50`).
fn date_time(secs: u64, out: &mut String) {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let in_day = secs % 86_400;
    let (year, month, day) = tessera_proto::clock::civil(days);
    // Digit by digit rather than through `format!`, whose padding machinery cost each
    // audit line about 1,500 instructions (BENCHMARKS.md, issue 31).
    let (year, month, day) = (
        year.unsigned_abs(),
        month.unsigned_abs(),
        day.unsigned_abs(),
    );
    for (separator, value, width) in [
        ("", year, 4),
        ("-", month, 2),
        ("-", day, 2),
        ("T", in_day / 3600, 2),
        (":", in_day / 60 % 60, 2),
        (":", in_day % 60, 2),
    ] {
        out.push_str(separator);
        padded(value, width, out);
    }
}

/// `value` in decimal, padded with zeros to `width` digits (`{value:0width$}`).
fn padded(value: u64, width: usize, out: &mut String) {
    let mut digits = [b'0'; 20];
    let mut start = digits.len();
    let mut rest = value;
    while rest > 0 {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let start = start.min(digits.len() - width);
    out.extend(digits[start..].iter().map(|&b| char::from(b)));
}

/// Bytes the queue holds before a logging thread waits for the writer (about 4,000 audit
/// lines, two hundred times what the writer takes in one [`LINGER`] at 10,000 tokens a second).
const CAPACITY: usize = 1 << 20;

/// The queue between the logging threads and the writer.
struct Shared {
    state: Mutex<State>,
    /// The writer waits here for a first line.
    wake: Condvar,
    /// Logging threads wait here for room.
    drained: Condvar,
    format: Format,
}

struct State {
    /// Whole lines, one after another, in the order they were logged.
    lines: Vec<u8>,
    /// Whether the writer waits for a line (and so needs waking).
    idle: bool,
    /// Whether the writer has stopped: lines are then written by whoever logs them.
    closed: bool,
}

/// The handle the subscriber writes through.
#[derive(Clone)]
pub struct Sink {
    shared: Arc<Shared>,
    /// Where lines go once the writer has stopped.
    late: Arc<Mutex<Box<dyn std::io::Write + Send>>>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("format", &self.shared.format)
            .finish()
    }
}

/// Stops the writer when dropped, after it has written every queued line (and exported the
/// last spans, when traced).
#[derive(Debug)]
pub struct Guard {
    sink: Sink,
    writer: Option<std::thread::JoinHandle<()>>,
    telemetry: Option<Telemetry>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(telemetry) = self.telemetry.take() {
            telemetry.shutdown();
        }
        {
            let mut state = lock(&self.sink.shared.state);
            state.closed = true;
        }
        self.sink.shared.wake.notify_one();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `out` behind a lock, for the writer thread and for lines after it stopped.
type Out = Arc<Mutex<Box<dyn std::io::Write + Send>>>;

impl Sink {
    /// Starts the writer thread, writing to `out` (buffered, flushed after each batch).
    pub fn spawn(format: Format, out: impl std::io::Write + Send + 'static) -> (Self, Guard) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                lines: Vec::new(),
                idle: false,
                closed: false,
            }),
            wake: Condvar::new(),
            drained: Condvar::new(),
            format,
        });
        let out: Out = Arc::new(Mutex::new(Box::new(std::io::BufWriter::with_capacity(
            64 * 1024,
            out,
        ))));
        let sink = Self {
            shared: shared.clone(),
            late: out.clone(),
        };
        let writer = std::thread::Builder::new()
            .name("tessera-log".into())
            .spawn(move || write_forever(&shared, &out))
            .ok();
        if writer.is_none() {
            lock(&sink.shared.state).closed = true;
        }
        let guard = Guard {
            sink: sink.clone(),
            writer,
            telemetry: None,
        };
        (sink, guard)
    }

    /// Queues `line`, one or more whole lines.
    fn push(&self, line: &[u8]) {
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        while state.lines.len() >= CAPACITY && !state.closed {
            // The writer is busy or lingering (a full queue is never one it waits on).
            state = shared
                .drained
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.closed {
            drop(state);
            let mut out = lock(&self.late);
            let _ = out.write_all(line);
            let _ = out.flush();
            return;
        }
        state.lines.extend_from_slice(line);
        if state.idle {
            state.idle = false;
            drop(state);
            shared.wake.notify_one();
        }
    }
}

/// The writer thread: waits for a line, lingers, writes the batch, until closed and empty.
fn write_forever(shared: &Shared, out: &Out) {
    let mut batch = Vec::new();
    loop {
        {
            let mut state = lock(&shared.state);
            while state.lines.is_empty() && !state.closed {
                state.idle = true;
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            if state.lines.is_empty() {
                return;
            }
            if !state.closed {
                // Let the lines logged in the next moment join this write.
                drop(state);
                std::thread::sleep(LINGER);
                state = lock(&shared.state);
            }
            // The two buffers trade places: each keeps its capacity, batch after batch.
            std::mem::swap(&mut batch, &mut state.lines);
        }
        shared.drained.notify_all();
        let mut out = lock(out);
        // A failed write (stderr closed) loses nothing the process could still save.
        let _ = out.write_all(&batch);
        let _ = out.flush();
        batch.clear();
    }
}

/// What `tracing_subscriber::fmt` writes through: each formatted event is queued as it is.
#[derive(Debug)]
pub struct LineWriter<'a>(&'a Sink);

impl std::io::Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter(self)
    }
}

/// Writes audit events to the writer's queue as lines, with the trace id of the request
/// they happen in when traced.
struct AuditLayer {
    sink: Sink,
    /// Whether spans are recorded: otherwise no event is in a span, and none is looked for.
    traced: bool,
}

thread_local! {
    /// The audit line being written on this thread, its capacity kept from line to line.
    static AUDIT_LINE: std::cell::RefCell<String> = std::cell::RefCell::new(String::with_capacity(512));
}

/// A request's trace id, kept in its log span's extensions (`telemetry.rs`).
struct TraceId(String);

impl Visit for TraceId {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "trace_id" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl<S> Layer<S> for AuditLayer
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut trace_id = TraceId(String::new());
        attrs.record(&mut trace_id);
        if let Some(span) = ctx.span(id) {
            if !trace_id.0.is_empty() {
                span.extensions_mut().insert(trace_id);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let write = |line: &mut String| {
            let meta = event.metadata();
            let format = self.sink.shared.format;
            let mut fields = Line::start(
                line,
                format,
                SystemTime::now(),
                *meta.level(),
                meta.target(),
            );
            event.record(&mut fields);
            if self.traced {
                if let Some(scope) = ctx.event_scope(event) {
                    for span in scope {
                        if let Some(TraceId(id)) = span.extensions().get::<TraceId>() {
                            fields.field("trace_id", Kind::Str, id);
                            break;
                        }
                    }
                }
            }
            fields.finish(meta.target());
        };
        let written = AUDIT_LINE.try_with(|cell| {
            // Borrowed already only if writing a field logged an audit event itself.
            let Ok(mut line) = cell.try_borrow_mut() else {
                return false;
            };
            line.clear();
            write(&mut line);
            self.sink.push(line.as_bytes());
            true
        });
        if written != Ok(true) {
            let mut line = String::new();
            write(&mut line);
            self.sink.push(line.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer tests read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(lock(&self.0).clone()).unwrap()
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Self;
        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    fn audit_event(n: u64) {
        let source: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        tracing::info!(
            target: "tessera::audit",
            event = "token_issued",
            client_id = "tcl_0123",
            scope = "news-api \"quoted\"\n\u{1b}[31m",
            n,
            ok = true,
            missing = None::<&str>,
            source = tracing::field::display(source),
            // Recorded through `Debug`, and in need of escaping in both formats.
            shown = tracing::field::display("tab\there \"q\" \\"),
        );
    }

    /// The line the generic formatter writes for one audit event, and the record's.
    fn both(format: Format) -> (String, String) {
        let generic = Captured::default();
        let subscriber = tracing_subscriber::registry();
        let dispatch = match format {
            Format::Text { ansi } => tracing::Dispatch::new(
                subscriber.with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(ansi)
                        .with_writer(generic.clone()),
                ),
            ),
            Format::Json => tracing::Dispatch::new(
                subscriber.with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_writer(generic.clone()),
                ),
            ),
        };
        tracing::dispatcher::with_default(&dispatch, || audit_event(42));
        let ours = Captured::default();
        let (sink, guard) = Sink::spawn(format, ours.clone());
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(AuditLayer {
            sink,
            traced: false,
        }));
        tracing::dispatcher::with_default(&dispatch, || audit_event(42));
        drop(guard);
        (generic.text(), ours.text())
    }

    /// Everything after the timestamp, which differs between the two writes.
    fn after_timestamp(line: &str, format: Format) -> &str {
        match format {
            Format::Json => &line[line.find("\",\"level\"").unwrap()..],
            Format::Text { .. } => &line[line.find('Z').unwrap()..],
        }
    }

    #[test]
    fn an_audit_record_is_written_as_the_generic_formatter_writes_it() {
        for format in [
            Format::Text { ansi: false },
            Format::Text { ansi: true },
            Format::Json,
        ] {
            let (generic, ours) = both(format);
            assert_eq!(
                after_timestamp(&ours, format),
                after_timestamp(&generic, format),
                "{format:?}"
            );
            assert_eq!(ours.lines().count(), 1);
        }
    }

    #[test]
    fn timestamps_are_rfc_3339_utc_with_microseconds() {
        let at = |secs: u64, micros: u64| {
            let mut out = String::new();
            timestamp(
                SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros),
                &mut out,
            );
            out
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        // 2024 is a leap year; 2100 is not.
        assert_eq!(at(1_709_164_800, 5), "2024-02-29T00:00:00.000005Z");
        assert_eq!(at(1_795_692_410, 123_456), "2026-11-26T11:26:50.123456Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000000Z");
        assert_eq!(at(253_402_300_800, 0), "10000-01-01T00:00:00.000000Z");
        // The same second again, and an earlier one: each written from its own second.
        assert_eq!(at(253_402_300_800, 42), "10000-01-01T00:00:00.000042Z");
        assert_eq!(at(1_795_692_410, 1), "2026-11-26T11:26:50.000001Z");
        for value in [0, 1, 9, 10, 99, 100, 999_999, 1_000_000, u64::MAX] {
            for width in [2, 4, 6] {
                let mut out = String::new();
                padded(value, width, &mut out);
                assert_eq!(out, format!("{value:0width$}"));
            }
        }
    }

    /// Many threads logging at once into a queue far smaller than what they log: every
    /// line is written, and each thread's lines in the order it logged them.
    #[test]
    fn no_line_is_lost_and_each_threads_lines_stay_in_order() {
        let out = Captured::default();
        let (sink, guard) = Sink::spawn(Format::Json, out.clone());
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::registry()
                .with(
                    AuditLayer {
                        sink: sink.clone(),
                        traced: false,
                    }
                    .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                        m.target() == AUDIT_TARGET
                    })),
                )
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_writer(sink)
                        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                            m.target() != AUDIT_TARGET
                        })),
                ),
        );
        // Lines of more than 64 bytes: each thread alone logs three times what the queue holds.
        let per_thread = 3 * CAPACITY as u64 / 64;
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let dispatch = dispatch.clone();
                scope.spawn(move || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        for n in 0..per_thread {
                            if n % 2 == 0 {
                                tracing::info!(target: "tessera::audit", thread, n);
                            } else {
                                tracing::info!(thread, n, "other");
                            }
                        }
                    });
                });
            }
        });
        drop(guard);
        let mut next = [0u64; 4];
        let text = out.text();
        for line in text.lines() {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            let thread = event["fields"]["thread"].as_u64().unwrap() as usize;
            assert_eq!(event["fields"]["n"], next[thread], "{line}");
            next[thread] += 1;
        }
        assert_eq!(next, [per_thread; 4]);
    }

    /// What is logged after the writer stopped is written at once, not queued and lost.
    #[test]
    fn lines_after_the_guard_is_dropped_are_still_written() {
        let out = Captured::default();
        let (sink, guard) = Sink::spawn(Format::Text { ansi: false }, out.clone());
        drop(guard);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(AuditLayer {
            sink,
            traced: false,
        }));
        tracing::dispatcher::with_default(&dispatch, || audit_event(1));
        assert!(
            out.text().contains("event=\"token_issued\""),
            "{}",
            out.text()
        );
    }
}
