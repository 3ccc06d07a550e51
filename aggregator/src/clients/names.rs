//! librdkafka's property names as librdkafka itself knows them: which
//! spellings are aliases of one property (`sasl.mechanism` of
//! `sasl.mechanisms`, `bootstrap.servers` of `metadata.broker.list`,
//! `linger.ms` of `queue.buffering.max.ms`, …).
//!
//! rdkafka's `ClientConfig` keeps properties in a hash map and hands them
//! to librdkafka in that map's (random) order, so two spellings of one
//! property leave a client with whichever came last: one client of a
//! service could authenticate with one mechanism and the next with
//! another. FleetDP therefore writes every property under its canonical
//! name (the configuration's keys are rewritten at validation, FleetDP's
//! own settings are spelled canonically, and a test checks both), so a
//! later setting of a property always replaces an earlier one.
//!
//! The table is read once from librdkafka's own property listing
//! (`rd_kafka_conf_properties_show`), so it is the linked librdkafka's,
//! never a copy that could fall behind it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// librdkafka's property names: the real ones and each alias's target.
struct Table {
    real: BTreeSet<String>,
    alias: BTreeMap<String, String>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| parse(&listing()))
}

/// The property that `name` sets: `name` itself when librdkafka has a
/// property of that name (a global property wins over a topic alias of
/// the same name, as in librdkafka), else the property it is an alias of;
/// an unknown name is returned as it is (librdkafka refuses it later,
/// naming it).
pub(crate) fn canonical(name: &str) -> &str {
    let t = table();
    if t.real.contains(name) {
        return name;
    }
    t.alias.get(name).map(String::as_str).unwrap_or(name)
}

/// librdkafka's property listing (the Markdown table CONFIGURATION.md is
/// made of).
fn listing() -> String {
    let mut buf: *mut libc::c_char = std::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: open_memstream is given pointers to two locals that outlive
    // the stream (it is closed below, before they are read); a null
    // stream is checked.
    let fp = unsafe { libc::open_memstream(&mut buf, &mut len) };
    if fp.is_null() {
        return String::new();
    }
    // SAFETY: fp is an open stream; librdkafka only writes to it.
    unsafe { rdkafka::bindings::rd_kafka_conf_properties_show(fp) };
    // SAFETY: fp is open and closed once; closing sets buf and len to the
    // written bytes.
    unsafe { libc::fclose(fp) };
    if buf.is_null() {
        return String::new();
    }
    // SAFETY: after fclose, buf points to len initialised bytes that
    // open_memstream allocated; they are copied before buf is freed.
    let text = unsafe {
        let bytes = std::slice::from_raw_parts(buf as *const u8, len);
        String::from_utf8_lossy(bytes).into_owned()
    };
    // SAFETY: buf was allocated by open_memstream (malloc) and is not used
    // after this.
    unsafe { libc::free(buf as *mut libc::c_void) };
    text
}

/// The table's rows: `name | C/P | range | default | importance | text`,
/// an alias's text starting "Alias for `target`".
fn parse(listing: &str) -> Table {
    let (mut real, mut alias) = (BTreeSet::new(), BTreeMap::new());
    for line in listing.lines() {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        if cols.len() < 6 {
            continue;
        }
        let name = cols[0];
        let is_name = !name.is_empty()
            && name != "Property"
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !is_name {
            continue;
        }
        let text = cols[5..].join("|");
        match text
            .split_once("Alias for `")
            .and_then(|(_, rest)| rest.split_once('`'))
        {
            Some((target, _)) => {
                alias.insert(name.to_string(), target.to_string());
            }
            None => {
                real.insert(name.to_string());
            }
        }
    }
    Table { real, alias }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `name` is an alias rather than a property of its own.
    fn is_alias(name: &str) -> bool {
        canonical(name) != name
    }

    /// How many properties and aliases the linked librdkafka lists.
    fn counts() -> (usize, usize) {
        let t = table();
        (t.real.len(), t.alias.len())
    }

    #[test]
    fn librdkafka_s_own_listing_names_its_aliases() {
        let (real, aliases) = counts();
        assert!(
            real > 150 && aliases >= 10,
            "{real} properties, {aliases} aliases"
        );
        for (alias, target) in [
            ("sasl.mechanism", "sasl.mechanisms"),
            ("bootstrap.servers", "metadata.broker.list"),
            ("linger.ms", "queue.buffering.max.ms"),
            ("acks", "request.required.acks"),
            ("retries", "message.send.max.retries"),
            ("delivery.timeout.ms", "message.timeout.ms"),
            ("compression.type", "compression.codec"),
            (
                "sasl.oauthbearer.client.credentials.client.secret",
                "sasl.oauthbearer.client.secret",
            ),
        ] {
            assert_eq!(canonical(alias), target, "{alias}");
            assert!(is_alias(alias));
            assert_eq!(canonical(target), target);
        }
        // A global property of the same name as a topic alias is itself.
        assert_eq!(canonical("enable.auto.commit"), "enable.auto.commit");
        assert_eq!(canonical("no.such.property"), "no.such.property");
    }

    /// Every property FleetDP sets on a client itself (`.set("name", …)`
    /// anywhere in the crate, test code included) is spelled as librdkafka
    /// names it, so a raw property of the same meaning (rewritten to the
    /// same name at validation) is replaced by the role's setting or
    /// replaces it, never raced in hash order.
    #[test]
    fn fleetdp_s_own_settings_are_spelled_canonically() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let mut files = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let (mut seen, mut wrong) = (0, Vec::new());
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (i, _) in text.match_indices(".set(") {
                // `.set("name", …)`, the name maybe on the next line.
                let Some(rest) = text[i + 5..].trim_start().strip_prefix('"') else {
                    continue;
                };
                let Some(end) = rest.find('"') else { continue };
                let name = &rest[..end];
                // Topic configs (cleanup.policy) are not client properties.
                if !name.contains('.')
                    && !["acks", "retries", "partitioner", "debug"].contains(&name)
                {
                    continue;
                }
                seen += 1;
                if is_alias(name) {
                    wrong.push(format!(
                        "{}: {name} (librdkafka's {})",
                        f.display(),
                        canonical(name)
                    ));
                }
            }
        }
        assert!(seen >= 20, "found {seen} settings");
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// The table is what librdkafka does: an alias's value is what the
    /// client reads back under the target's name.
    #[test]
    fn an_alias_sets_its_target() {
        for (alias, value) in [
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("linger.ms", "17"),
            ("retries", "7"),
            ("max.in.flight", "3"),
            ("bootstrap.servers", "127.0.0.1:1"),
        ] {
            let mut c = rdkafka::ClientConfig::new();
            c.set(alias, value);
            let n = c.create_native_config().unwrap();
            assert_eq!(n.get(canonical(alias)).unwrap(), value, "{alias}");
        }
    }
}
