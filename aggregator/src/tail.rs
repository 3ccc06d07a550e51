//! `fleetdp tail`: print the output topic's releases as they land (as the
//! demo prints them, or one JSON document per line), for operators and for
//! anyone checking what consumers receive: fleet-wide releases and each
//! partition's (`--fleet`: fleet-wide only). Reads with its own consumer
//! group-less assignment: it never commits, so it never moves anyone's
//! offsets.

use crate::config::Validated;
use crate::kafka::{client_config, partition_count, Quiet};
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
    let units = crate::show::units(v);
    let c = crate::kafka::reader_config(&client_config(&k.brokers, &k.properties), "fleetdp-tail");
    let consumer: BaseConsumer<Quiet> = c
        .create_with_context(Quiet)
        .context("creating the tail consumer")?;
    let topic = &k.output_topic;
    let parts = partition_count(&consumer, topic, Duration::from_secs(10))
        .with_context(|| format!("reading kafka.output_topic {topic:?}"))?;
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
        let released_at = match &r {
            OutputRecord::Window(w) => w.released_at_ms,
            OutputRecord::Fleet(f) => f.released_at_ms,
        };
        let at = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + Duration::from_millis(released_at.max(0) as u64),
        );
        let at = format!("[{at}]");
        match (opts.format, &r) {
            (TailFormat::Json, OutputRecord::Window(w)) => serde_json::to_writer(&mut *out, w)?,
            (TailFormat::Json, OutputRecord::Fleet(f)) => serde_json::to_writer(&mut *out, f)?,
            (TailFormat::Table, OutputRecord::Window(w)) => {
                write!(out, "{}", crate::show::release(&at, w, None, &units))?
            }
            (TailFormat::Table, OutputRecord::Fleet(f)) => {
                write!(out, "{}", crate::show::fleet(&at, f, None, &units))?
            }
        }
        writeln!(out)?;
        out.flush()?;
        printed += 1;
        last = Instant::now();
    }
    Ok(printed)
}
