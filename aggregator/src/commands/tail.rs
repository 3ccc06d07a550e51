//! `fleetdp tail`: print the output topic's releases as they land (as the
//! demo prints them, or one JSON document per line), for operators and for
//! anyone checking what consumers receive: fleet-wide releases and each
//! partition's (`--fleet`: fleet-wide only). Reads with its own consumer
//! group-less assignment: it never commits, so it never moves anyone's
//! offsets. Anyone who can write to the topic can write anything: a record
//! is shown only when it decodes as a release *and* carries the key FleetDP
//! gives that release (others are skipped, said on stderr), and every
//! control character a record brings (ESC, BEL, CR, C1 codes) is written as
//! a `\u00XX` escape, so nothing read can drive the terminal.

use crate::clients::kafka::{self, client_config, partition_count, Quiet};
use crate::commands::show;
use crate::config::Validated;
use crate::state::OutputRecord;
use anyhow::{Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::io::Write;
use std::time::{Duration, Instant};

/// How `fleetdp tail` prints a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailFormat {
    /// As the demo: one line per window, a second for running totals.
    Table,
    /// One `WindowRelease` JSON document per line.
    Json,
}

/// What to print.
#[derive(Debug, Clone)]
pub struct TailOptions {
    pub format: TailFormat,
    /// From the oldest release kept (else only releases from now on).
    pub from_beginning: bool,
    /// Stop after this many releases.
    pub max: Option<u64>,
    /// Stop after this long without a release.
    pub idle: Option<Duration>,
    /// Only fleet-wide releases.
    pub fleet_only: bool,
}

/// Print releases to `out` until `max` or `idle` is reached (or forever).
pub fn run(v: &Validated, opts: &TailOptions, out: &mut impl Write) -> Result<u64> {
    let k = &v.config.kafka;
    let units = show::units(v);
    let c = kafka::reader_config(&client_config(&k.brokers, &k.properties), "fleetdp-tail");
    let consumer: BaseConsumer<Quiet> = c
        .create_with_context(Quiet("tail"))
        .context("creating the tail consumer")?;
    let topic = &k.output_topic;
    let parts = partition_count(&consumer, topic, Duration::from_secs(10))
        .map_err(|e| kafka::explain_startup("kafka.output_topic", topic, &k.brokers, e))?;
    let mut tpl = TopicPartitionList::new();
    let start = if opts.from_beginning {
        Offset::Beginning
    } else {
        Offset::End
    };
    for p in 0..parts as i32 {
        tpl.add_partition_offset(topic, p, start)?;
    }
    consumer.assign(&tpl)?;
    let (mut printed, mut last) = (0u64, Instant::now());
    while opts.max.is_none_or(|m| printed < m) {
        if opts.idle.is_some_and(|i| last.elapsed() >= i) {
            break;
        }
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let msg = msg.with_context(|| format!("reading {topic}"))?;
        if opts.fleet_only && !crate::state::is_fleet(&msg) {
            continue;
        }
        let r = match crate::state::decode_output(&msg) {
            None => continue,
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                eprintln!(
                    "{topic}/{}@{}: not a release ({e}); skipped",
                    msg.partition(),
                    msg.offset()
                );
                continue;
            }
        };
        if !is_ours(&msg, &r) {
            eprintln!(
                "{topic}/{}@{}: decodes, but its key {} is not the one FleetDP gives that release; skipped",
                msg.partition(),
                msg.offset(),
                printable(&String::from_utf8_lossy(msg.key().unwrap_or_default()), false)
            );
            continue;
        }
        let text = line(opts.format, &r, &units)?;
        writeln!(
            out,
            "{}",
            printable(&text, opts.format == TailFormat::Table)
        )?;
        out.flush()?;
        printed += 1;
        last = Instant::now();
    }
    Ok(printed)
}

/// A release as `tail` prints it: a table row, or one JSON document.
fn line(
    format: TailFormat,
    r: &OutputRecord,
    units: &std::collections::BTreeMap<String, String>,
) -> Result<String> {
    let released_at = match r {
        OutputRecord::Window(w) => w.released_at_ms,
        OutputRecord::Fleet(f) => f.released_at_ms,
    };
    let at = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis(released_at.max(0) as u64),
    );
    let at = format!("[{at}]");
    Ok(match (format, r) {
        (TailFormat::Json, OutputRecord::Window(w)) => serde_json::to_string(w)?,
        (TailFormat::Json, OutputRecord::Fleet(f)) => serde_json::to_string(f)?,
        (TailFormat::Table, OutputRecord::Window(w)) => show::release(&at, w, None, units),
        (TailFormat::Table, OutputRecord::Fleet(f)) => show::fleet(&at, f, None, units),
    })
}

/// Whether `msg` is the record FleetDP writes for `r`: its key is the
/// release's own (`stream/partition/seq`, `stream/fleet/seq`). A foreign
/// record that happens to decode (JSON fills what it lacks with defaults)
/// has another key, or none.
fn is_ours<M: Message>(msg: &M, r: &OutputRecord) -> bool {
    let want = match r {
        OutputRecord::Window(w) if !w.stream.is_empty() => {
            proto::window_record_key(&w.stream, w.partition, w.window_seq)
        }
        OutputRecord::Fleet(f) if !f.stream.is_empty() => {
            proto::fleet_record_key(&f.stream, f.window_seq)
        }
        _ => return false,
    };
    msg.key() == Some(want.as_bytes())
}

/// `text` safe for a terminal: every control character (C0, DEL, C1) as
/// `\u00XX` — in JSON, a valid escape of the same character — except, in
/// `lines` text, the newlines that separate its lines.
pub(crate) fn printable(text: &str, lines: bool) -> std::borrow::Cow<'_, str> {
    let control = |c: char| c.is_control() && !(lines && c == '\n');
    if !text.chars().any(control) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if control(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_json_stays_json() {
        let hostile = "temp\u{1b}[31m red\u{7}\u{1b}[2J\r\u{9b}2J\u{7f}";
        let t = printable(hostile, true);
        assert!(!t.chars().any(|c| c.is_control()), "{t:?}");
        assert_eq!(
            t,
            "temp\\u001b[31m red\\u0007\\u001b[2J\\u000d\\u009b2J\\u007f"
        );
        // Newlines between a table's lines stay; in JSON mode none is raw.
        assert_eq!(printable("a\nb", true), "a\nb");
        assert_eq!(printable("a\nb", false), "a\\u000ab");
        // Escaped JSON parses back to the same value.
        let json = serde_json::to_string(&serde_json::json!({ "s": hostile })).unwrap();
        let safe = printable(&json, false);
        assert!(!safe.chars().any(|c| c.is_control()));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["s"], hostile);
    }
}
