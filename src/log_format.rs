//! The shape of a log line, text or JSON: timestamp, level, target, message and fields, one
//! event a line. It exists for speed: tracing-subscriber's own formatter sent every value
//! through `core::fmt` and cost a request about 13,000 instructions, a sixth of the whole
//! request (callgrind, see benches/load). Strings are written here directly and integers with
//! `itoa`; only the timestamp (`clock`'s) and values logged with `%` or `?` still go through
//! `core::fmt`. Where lines go is `log`'s.
//! Invariant: every event is exactly one line: text values that could break a line or be
//! mistaken for another field are quoted, and JSON strings are escaped.

use std::cell::RefCell;
use std::fmt::{self, Write};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::clock::{self, Precision};

/// Formats events as `TIMESTAMP LEVEL target: message key=value ...` or one JSON object.
#[derive(Clone, Copy, Debug)]
pub struct LineFormat {
    pub json: bool,
}

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let format = |out: &mut String| {
            write_line(
                out,
                self.json,
                SystemTime::now(),
                metadata.level(),
                metadata.target(),
                |visitor| event.record(visitor),
            )
        };
        // The line is built in a `String` of our own, where each small write is an inlined
        // push, and handed over in one piece: through `Writer`, every write is a dynamic call
        // (callgrind: the request line went from about 3,800 instructions to 2,900).
        LINE.with(|line| match line.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                format(&mut line)?;
                let written = writer.write_str(&line);
                // One huge event (a long error chain) should not keep its buffer per thread.
                if line.capacity() > MAX_KEPT_LINE_BYTES {
                    *line = String::new();
                }
                written
            }
            // A field's own formatting logged an event: give that one a buffer of its own.
            Err(_) => {
                let mut line = String::new();
                format(&mut line)?;
                writer.write_str(&line)
            }
        })
    }
}

/// A line buffer larger than this is let go after its line rather than kept for the next.
const MAX_KEPT_LINE_BYTES: usize = 16 * 1024;

thread_local! {
    static LINE: RefCell<String> = RefCell::new(String::with_capacity(512));
}

/// Writes one line; `record` feeds the event's fields to the visitor it is given.
fn write_line<W: Write>(
    mut out: W,
    json: bool,
    now: SystemTime,
    level: &Level,
    target: &str,
    record: impl FnOnce(&mut dyn Visit),
) -> fmt::Result {
    let stamp = clock::rfc3339(now, Precision::Micros);
    if json {
        out.write_str("{\"timestamp\":\"")?;
        write!(out, "{stamp}")?;
        out.write_str("\",\"level\":\"")?;
        out.write_str(level.as_str())?;
        out.write_char('"')?;
        let mut fields = Fields {
            out: &mut out,
            json,
            result: Ok(()),
        };
        record(&mut fields);
        fields.result?;
        out.write_str(",\"target\":")?;
        write_json_str(&mut out, target)?;
        out.write_str("}\n")
    } else {
        write!(out, "{stamp}")?;
        // Right-aligned to five, as INFO and WARN sit under ERROR.
        out.write_str(match *level {
            Level::ERROR => " ERROR ",
            Level::WARN => "  WARN ",
            Level::INFO => "  INFO ",
            Level::DEBUG => " DEBUG ",
            Level::TRACE => " TRACE ",
        })?;
        out.write_str(target)?;
        out.write_char(':')?;
        let mut fields = Fields {
            out: &mut out,
            json,
            result: Ok(()),
        };
        record(&mut fields);
        fields.result?;
        out.write_char('\n')
    }
}

/// The event's fields: in text, ` key=value` pairs after the bare message; in JSON,
/// `,"key":value` members, the message under `"message"`.
struct Fields<'a, W> {
    out: &'a mut W,
    json: bool,
    result: fmt::Result,
}

impl<W: Write> Fields<'_, W> {
    fn field(&mut self, field: &Field, value: impl FnOnce(&mut W, bool) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = (|| {
            if self.json {
                self.out.write_char(',')?;
                write_json_str(self.out, field.name())?;
                self.out.write_char(':')?;
            } else {
                self.out.write_char(' ')?;
                if field.name() != "message" {
                    self.out.write_str(field.name())?;
                    self.out.write_char('=')?;
                }
            }
            value(self.out, self.json)
        })();
    }
}

impl<W: Write> Visit for Fields<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, |out, json| {
            if json {
                return write_json_str(out, value);
            }
            // A path or label comes from a client: quote anything that could end the line or
            // pass for a second field. Bytes, not chars: any non-ASCII is quoted too, and the
            // common all-ASCII value costs a byte compare each.
            if value.is_empty() || value.bytes().any(|b| b <= b' ' || b == b'"' || b >= 0x7f) {
                write!(out, "{value:?}")
            } else {
                out.write_str(value)
            }
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, |out, _| {
            out.write_str(itoa::Buffer::new().format(value))
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field, |out, _| {
            out.write_str(itoa::Buffer::new().format(value))
        });
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field, |out, _| {
            out.write_str(if value { "true" } else { "false" })
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field, |out, json| {
            if !json {
                return write!(out, "{value:?}");
            }
            out.write_char('"')?;
            write!(JsonEscaped(&mut *out), "{value:?}")?;
            out.write_char('"')
        });
    }
}

fn write_json_str(out: &mut impl Write, value: &str) -> fmt::Result {
    out.write_char('"')?;
    JsonEscaped(&mut *out).write_str(value)?;
    out.write_char('"')
}

/// Escapes what passes through it for the inside of a JSON string (RFC 8259 section 7).
struct JsonEscaped<'a, W>(&'a mut W);

impl<W: Write> Write for JsonEscaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut plain = 0;
        for (i, byte) in s.bytes().enumerate() {
            let escape = match byte {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0..=0x1f => "",
                _ => continue,
            };
            self.0.write_str(&s[plain..i])?;
            if escape.is_empty() {
                write!(self.0, "\\u{byte:04x}")?;
            } else {
                self.0.write_str(escape)?;
            }
            plain = i + 1;
        }
        self.0.write_str(&s[plain..])
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, UNIX_EPOCH};

    use proptest::prelude::*;

    use super::*;

    /// The line `LineFormat` writes for the event `emit` logs.
    fn line(json: bool, emit: impl FnOnce()) -> String {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&out);
        let subscriber = tracing_subscriber::fmt()
            .event_format(LineFormat { json })
            .with_writer(move || Captured(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = out.lock().expect("lock").clone();
        String::from_utf8(bytes).expect("UTF-8")
    }

    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn request(path: &str) -> impl FnOnce() + '_ {
        move || {
            tracing::info!(
                method = "GET",
                status = 200u16,
                path,
                delta = -7i64,
                ok = true,
                "request"
            )
        }
    }

    /// The line without its timestamp (`timestamps_are_rfc_3339_utc_with_microseconds`).
    fn untimed(line: &str) -> &str {
        &line[27..]
    }

    #[test]
    fn a_text_line_has_time_level_target_message_and_fields() {
        let text = line(false, request("/v1/pets"));
        assert_eq!(
            untimed(&text),
            "  INFO petstore::log_format::tests: request method=GET status=200 path=/v1/pets \
             delta=-7 ok=true\n"
        );
    }

    #[test]
    fn a_text_value_that_could_break_the_line_is_quoted() {
        let text = line(false, request("/a b\nINFO forged=1"));
        assert!(text.contains(r#"path="/a b\nINFO forged=1""#), "{text}");
        assert_eq!(text.matches('\n').count(), 1);
    }

    #[test]
    fn a_json_line_is_one_object_with_typed_fields() {
        let text = line(true, request("/v1/\"pets\"\u{1}"));
        assert!(text.ends_with("}\n") && text.matches('\n').count() == 1);
        let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            value,
            serde_json::json!({
                "timestamp": value["timestamp"],
                "level": "INFO",
                "message": "request",
                "method": "GET",
                "status": 200,
                "path": "/v1/\"pets\"\u{1}",
                "delta": -7,
                "ok": true,
                "target": "petstore::log_format::tests",
            })
        );
    }

    #[test]
    fn timestamps_are_rfc_3339_utc_with_microseconds() {
        let at = UNIX_EPOCH + Duration::from_micros(1_795_345_876_000_042);
        let mut text = String::new();
        write_line(&mut text, false, at, &Level::INFO, "t", |_| {}).expect("String");
        assert_eq!(text, "2026-11-22T11:11:16.000042Z  INFO t:\n");
        let mut json = String::new();
        write_line(&mut json, true, UNIX_EPOCH, &Level::WARN, "t", |_| {}).expect("String");
        assert_eq!(
            json,
            "{\"timestamp\":\"1970-01-01T00:00:00.000000Z\",\"level\":\"WARN\",\"target\":\"t\"}\n"
        );
    }

    proptest! {
        #[test]
        fn any_string_stays_on_one_line_and_json_round_trips(path in any::<String>()) {
            let text = line(false, request(&path));
            prop_assert_eq!(text.matches('\n').count(), 1);
            let json = line(true, request(&path));
            let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
            prop_assert_eq!(value["path"].as_str(), Some(path.as_str()));
        }

        #[test]
        fn integers_match_the_standard_formatting(n in any::<u64>(), i in any::<i64>()) {
            let text = line(false, || tracing::info!(n, i, "integers"));
            prop_assert_eq!(
                untimed(&text),
                format!("  INFO petstore::log_format::tests: integers n={n} i={i}\n")
            );
        }
    }
}
