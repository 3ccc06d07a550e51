//! The manual is tested like code: the README and every page of `docs/`.
//!
//! - every TOML block parses and, laid over `deploy/fleetdp.toml` (a
//!   fragment's streams over the shipped stream, the files and variables it
//!   names made up), passes `fleetdp plan`;
//! - every shell command shown is run by a test (the README's real-cluster
//!   block by `readme_commands.rs`, the two front commands by the demo test
//!   and CI) or sits in a block marked `sh illustrative`;
//! - every relative link resolves, anchors included;
//! - the output schema's page names every field of the JSON Schemas, and
//!   its field tables name nothing else;
//! - every line of demo output the manual quotes (a `text demo-output`
//!   block) has the shape of a line the demo prints;
//! - Troubleshooting names every dead-letter, drop and Kafka-error reason
//!   and exit code, quotes every fatal error the running service can print
//!   (Kafka, pipeline, state, registry), and every message it quotes is
//!   still in the source.
//!
//! (The configuration and metrics references are checked against the code
//! by the library's own tests, which see the private tables.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The README and every Markdown page of `docs/`, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let mut out = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
    out.sort();
    out.into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

fn name(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// Fenced blocks: (info string, body).
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        match &mut open {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some((info.trim().to_string(), String::new()));
                }
            }
            Some((info, body)) => {
                if line.starts_with("```") {
                    out.push((std::mem::take(info), std::mem::take(body)));
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to hyphens; repeated headings get `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// Markdown links `[text](target)` outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans: a `[x](y)` inside one is not a link.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn the_anchor_rule_matches_githubs() {
    let a = anchors(
        "# A\n## `[kafka.security]`\n## Operator's playbook\n## 9. Layout\n```\n# not\n```\n## A\n",
    );
    for want in [
        "a",
        "kafkasecurity",
        "operators-playbook",
        "9-layout",
        "a-1",
    ] {
        assert!(a.contains(want), "{want}: {a:?}");
    }
    assert!(!a.contains("not"));
    assert_eq!(
        links("see [x](a.md#b) and `[y](c.md)` [z](https://e.org)"),
        ["a.md#b", "https://e.org"]
    );
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let pages = pages();
    let by_path: BTreeMap<PathBuf, BTreeSet<String>> = pages
        .iter()
        .map(|(p, t)| (p.canonicalize().unwrap(), anchors(t)))
        .collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (page, text) in &pages {
        for link in links(text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{}: {link} (no such file)", name(page)));
                continue;
            };
            if anchor.is_empty() {
                continue;
            }
            match by_path.get(&target) {
                Some(a) if a.contains(anchor) => {}
                Some(_) => broken.push(format!("{}: {link} (no such heading)", name(page))),
                None => broken.push(format!(
                    "{}: {link} (an anchor into a non-page)",
                    name(page)
                )),
            }
        }
    }
    assert!(checked >= 40, "found {checked} links");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The README is the front door, not the manual.
#[test]
fn the_readme_fits_on_a_screen_or_two() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(
        n <= 150,
        "README.md has {n} lines; the manual belongs in docs/"
    );
    assert!(
        readme.contains("](docs/README.md)"),
        "the README links the manual's index"
    );
}

/// The `fleetdp …` commands of the README's real-cluster block, which
/// `readme_commands.rs` runs against the broker.
fn commands_run_against_the_broker() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let at = readme
        .find("## Against a real cluster")
        .expect("the README's section");
    let (_, block) = blocks(&readme[at..]).into_iter().next().unwrap();
    block
        .lines()
        .filter(|l| l.starts_with("fleetdp "))
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .collect()
}

/// Commands shown that other tests run: (command, the test that runs it).
const RUN_ELSEWHERE: &[(&str, &str)] = &[
    (
        "cargo run --release -p fleetdp -- demo",
        "aggregator/tests/demo.rs",
    ),
    ("./tests/run.sh", ".ci/run"),
];

#[test]
fn every_command_shown_is_run_by_a_test_or_marked_illustrative() {
    let tested = commands_run_against_the_broker();
    assert!(tested.len() >= 7, "{tested:?}");
    for (_, by) in RUN_ELSEWHERE {
        assert!(root().join(by).exists(), "{by}");
    }
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("tests/run.sh"), ".ci/run runs the suite");
    let mut untested = Vec::new();
    let mut shown = 0;
    for (page, text) in pages() {
        for (info, body) in blocks(&text) {
            let mut words = info.split_whitespace();
            if !matches!(words.next(), Some("sh" | "bash" | "console" | "shell")) {
                continue;
            }
            if words.any(|w| w == "illustrative") {
                continue;
            }
            for line in body.lines() {
                if line.is_empty() || line.starts_with([' ', '#']) {
                    continue;
                }
                let command = line.split(" #").next().unwrap().trim();
                shown += 1;
                if !tested.contains(command) && !RUN_ELSEWHERE.iter().any(|(c, _)| *c == command) {
                    untested.push(format!("{}: {command}", name(&page)));
                }
            }
        }
    }
    assert!(shown >= 10, "found {shown} commands");
    assert!(
        untested.is_empty(),
        "commands no test runs (run them in a test, or mark the block `sh illustrative`):\n{}",
        untested.join("\n")
    );
}

/// `value` laid over `base`: tables merged key by key, anything else
/// replaced.
fn merge(base: &mut toml::Value, value: &toml::Value) {
    match (base, value) {
        (toml::Value::Table(b), toml::Value::Table(v)) => {
            for (k, x) in v {
                match b.get_mut(k) {
                    Some(y) if y.is_table() && x.is_table() => merge(y, x),
                    _ => {
                        b.insert(k.clone(), x.clone());
                    }
                }
            }
        }
        (b, v) => *b = v.clone(),
    }
}

/// A documented TOML block as a whole configuration: laid over the shipped
/// one, each of its streams over the shipped stream (so `# …` elisions
/// keep the shipped universe and windows), one stream per mapped input
/// path, budget shares split evenly where there are several.
fn whole_configuration(block: &toml::Value) -> toml::Value {
    let shipped: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("deploy/fleetdp.toml")).unwrap())
            .unwrap();
    let shipped_stream = shipped["stream"][0].clone();
    let mut config = shipped.clone();
    let mut fragment = block.clone();
    let streams = fragment
        .as_table_mut()
        .unwrap()
        .remove("stream")
        .map(|s| s.as_array().unwrap().clone())
        .unwrap_or_default();
    merge(&mut config, &fragment);
    let mut out: Vec<toml::Value> = Vec::new();
    for s in &streams {
        let mut merged = shipped_stream.clone();
        let t = merged.as_table_mut().unwrap();
        if s.get("window").is_some() {
            t.remove("window_size");
            t.remove("window_timeout");
        }
        if s.get("statistics").is_some() {
            for k in ["histogram_edges", "quantiles", "adaptive_quantiles"] {
                t.remove(k);
            }
        }
        merge(&mut merged, s);
        out.push(merged);
    }
    if out.is_empty() {
        out.push(shipped_stream.clone());
    }
    let mapped: Vec<String> = config
        .get("input")
        .and_then(|i| i.get("streams"))
        .and_then(|s| s.as_table())
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    for m in mapped {
        if !out.iter().any(|s| s["name"].as_str() == Some(&m)) {
            let mut s = shipped_stream.clone();
            s.as_table_mut().unwrap().insert("name".into(), m.into());
            out.push(s);
        }
    }
    let n = out.len();
    if n > 1 {
        for s in &mut out {
            s.as_table_mut().unwrap().insert(
                "budget_share".into(),
                toml::Value::Float(1.0 / n as f64 - 1e-9),
            );
        }
    }
    config
        .as_table_mut()
        .unwrap()
        .insert("stream".into(), toml::Value::Array(out));
    config
}

#[test]
fn every_toml_block_parses_and_plans() {
    let dir = std::env::temp_dir().join(format!("fleetdp-docs-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("secrets")).unwrap();
    // The files the blocks name, made up where they cannot be real.
    std::fs::write(dir.join("telemetry.pb"), ingest::example_descriptor_set()).unwrap();
    std::fs::write(dir.join("telemetry.avsc"), ingest::EXAMPLE_AVRO_SCHEMA).unwrap();
    let mut planned = 0;
    for (page, text) in pages() {
        for (info, body) in blocks(&text) {
            if info.split_whitespace().next() != Some("toml") {
                continue;
            }
            let block: toml::Value = toml::from_str(&body).unwrap_or_else(|e| {
                panic!("{}: a TOML block does not parse: {e}\n{body}", name(&page))
            });
            let mut text = toml::to_string(&whole_configuration(&block)).unwrap();
            let mut env = Vec::new();
            // Absolute paths become files in the scratch directory.
            for prefix in ["/etc/fleetdp/", "/run/secrets/"] {
                while let Some(i) = text.find(prefix) {
                    let end = i + text[i..].find(['"', '}']).unwrap();
                    let file = text[i + prefix.len()..end].to_string();
                    let made = dir.join("secrets").join(&file);
                    std::fs::write(&made, "-----BEGIN X-----\nAA==\n-----END X-----\n").unwrap();
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o600))
                        .unwrap();
                    text.replace_range(i..end, &made.display().to_string());
                }
            }
            // `${NAME}` variables get made-up values.
            let mut rest = text.as_str();
            while let Some(i) = rest.find("${") {
                let var: String = rest[i + 2..].chars().take_while(|c| *c != '}').collect();
                if !var.starts_with("file:") {
                    env.push((var.clone(), format!("made-up-{var}")));
                }
                rest = &rest[i + 2..];
            }
            let file = dir.join(format!("block-{planned}.toml"));
            std::fs::write(&file, &text).unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
                .current_dir(&dir)
                .args(["plan", "--config"])
                .arg(&file)
                .envs(env)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: a TOML block does not pass `fleetdp plan`:\n{body}\nas planned:\n{text}\n{}",
                name(&page),
                String::from_utf8_lossy(&out.stderr)
            );
            planned += 1;
        }
    }
    assert!(planned >= 12, "planned {planned} blocks");
    std::fs::remove_dir_all(&dir).ok();
}

/// `text` with string continuations joined (a message split over lines
/// with `\` reads as one).
fn joined(text: &str) -> String {
    let mut joined = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        match l.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                if let Some(next) = lines.peek_mut() {
                    *next = next.trim_start();
                }
            }
            None => {
                joined.push_str(l);
                joined.push('\n');
            }
        }
    }
    joined
}

/// The service's Rust sources, continuations [`joined`].
fn sources() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&joined(&std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut out = String::new();
    for d in ["aggregator/src", "aggregator/dp/src", "ingest/src"] {
        walk(&root().join(d), &mut out);
    }
    out
}

#[test]
fn troubleshooting_covers_every_reason_and_quotes_real_messages() {
    let page = std::fs::read_to_string(root().join("docs/troubleshooting.md")).unwrap();
    let src = sources();
    let row = |x: &str| page.contains(&format!("| `{x}` |"));
    let mut missing = Vec::new();
    for r in ingest::Reason::ALL {
        if !row(r.as_str()) {
            missing.push(format!("dead-letter reason {r}"));
        }
    }
    // Drop reasons: every `dropped("…")` counter the telemetry makes.
    let telemetry = std::fs::read_to_string(root().join("aggregator/src/telemetry.rs")).unwrap();
    let drops: Vec<&str> = telemetry
        .split("dropped(\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert!(drops.len() >= 7, "{drops:?}");
    // Kafka error kinds: the `ERROR_KINDS` table.
    let kafka = std::fs::read_to_string(root().join("aggregator/src/clients/kafka.rs")).unwrap();
    let at = kafka.find("ERROR_KINDS: [&str;").expect("the kinds table");
    let table = &kafka[at..at + kafka[at..].find("];").unwrap()];
    let kinds: Vec<&str> = table.split('"').skip(1).step_by(2).collect();
    assert!(kinds.len() >= 7, "{kinds:?}");
    for x in drops.iter().chain(&kinds).chain(&["0", "1", "2", "78"]) {
        if !row(x) {
            missing.push((*x).to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/troubleshooting.md: {missing:?}"
    );
    // Every quoted message (a `### "…"` heading) is printed by the source.
    let quoted: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("### \""))
        .map(|l| l.trim_end_matches('"'))
        .collect();
    assert!(quoted.len() >= 15, "{quoted:?}");
    let stale: Vec<&&str> = quoted.iter().filter(|q| !src.contains(**q)).collect();
    assert!(
        stale.is_empty(),
        "docs/troubleshooting.md quotes messages the source no longer prints: {stale:?}"
    );
}

/// The first string literal of every `bail!(…)`/`anyhow!(…)` in `text`
/// outside its unit tests, continuations joined.
fn error_literals(text: &str) -> Vec<String> {
    let code = text.split("\n#[cfg(test)]\nmod tests {").next().unwrap();
    let joined = joined(code);
    let mut out = Vec::new();
    for mac in ["bail!(", "anyhow!("] {
        for (at, _) in joined.match_indices(mac) {
            let rest = &joined[at + mac.len()..];
            let Some(open) = rest.find('"') else { continue };
            let body = &rest[open + 1..];
            let close = body.find('"').unwrap_or(body.len());
            let literal: String = body[..close]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            out.push(literal);
        }
    }
    out
}

/// Every fatal error the running service can print is indexed: some
/// `### "…"` heading of docs/troubleshooting.md quotes a part of it. The
/// service's Kafka, pipeline, state and registry modules; configuration
/// errors name their field and are the configuration reference's.
#[test]
fn troubleshooting_indexes_every_runtime_error() {
    let page = std::fs::read_to_string(root().join("docs/troubleshooting.md")).unwrap();
    let quoted: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("### \""))
        .map(|l| l.trim_end_matches('"'))
        .collect();
    let src = root().join("aggregator/src");
    let mut files = vec![src.join("clients/kafka.rs"), src.join("runtime/follow.rs")];
    for dir in ["runtime/pipeline", "state", "engine/registry"] {
        for e in std::fs::read_dir(src.join(dir)).unwrap() {
            files.push(e.unwrap().path());
        }
    }
    let mut seen = 0;
    let mut unindexed = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "rs"))
    {
        for literal in error_literals(&std::fs::read_to_string(f).unwrap()) {
            seen += 1;
            if !quoted.iter().any(|q| literal.contains(q)) {
                unindexed.push(format!("{}: {literal}", name(f)));
            }
        }
    }
    assert!(seen >= 15, "found {seen} messages");
    assert!(
        unindexed.is_empty(),
        "fatal errors docs/troubleshooting.md does not index (a `### \"…\"` heading quoting part of each):\n{}",
        unindexed.join("\n")
    );
}

/// `line` with runs of blanks as one space and every number as `#`
/// (`[  3.6s] n=7500 mean 20.01` → `[ #s] n=# mean #`).
fn shape(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        // A sign belongs to its number (a noisy mean may be negative),
        // unless it joins two words (`add-remove`, `SHA-256`).
        let sign = c == '-'
            && chars.peek().is_some_and(char::is_ascii_digit)
            && !out.ends_with(|p: char| p.is_alphanumeric() || p == '#');
        if c.is_ascii_digit() || sign {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.')
            {
                chars.next();
            }
            out.push('#');
        } else if c.is_whitespace() {
            while chars.peek().is_some_and(|d| d.is_whitespace()) {
                chars.next();
            }
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether the printed line has the quoted line's shape: `…` in the quote
/// stands for anything (the printed `  … 5s:` progress lines start with
/// one too, matched literally first).
fn has_shape(quoted: &str, printed: &str) -> bool {
    let (q, p) = (shape(quoted), shape(printed));
    if q == p {
        return true;
    }
    let parts: Vec<&str> = q.split('…').collect();
    let mut rest = p.as_str();
    for (i, part) in parts.iter().enumerate() {
        let part = part.trim();
        match rest.find(part) {
            Some(0) => rest = &rest[part.len()..],
            Some(at) if i > 0 => rest = &rest[at + part.len()..],
            _ => return false,
        }
    }
    rest.is_empty() || q.ends_with('…')
}

#[test]
fn the_shape_rule_compares_words_and_frees_numbers() {
    let printed = "[ 50.0s] cabin_temp_c  FLEET #21  [2/2 partitions] n=7500 mean 20.01 ± 0.28 °C";
    assert!(has_shape(
        "[  3.6s] cabin_temp_c FLEET #0 [2/2 partitions] n=750 mean 19.05 ± 2.76 °C",
        printed
    ));
    assert!(has_shape(
        "[ 1s] cabin_temp_c FLEET … mean 1 ± 1 °C",
        printed
    ));
    assert!(!has_shape(
        "[ 1s] cabin_temp_c FLEET #0 [2/2 partitions] n=750 mean 19.05 ± 2.76 V",
        printed
    ));
    assert!(
        !has_shape("cabin_temp_c FLEET", printed),
        "a quote starts where the line does"
    );
    assert!(has_shape(
        "  … 5s: 46235 messages",
        "  … 10s: 97837 messages"
    ));
    assert!(
        has_shape(
            "running mean over 22 windows: 20.02 ± 0.05 °C (1 std)",
            "running mean over 1 windows: -378.89 ± 181.33 °C (1 std)"
        ),
        "a negative number is a number"
    );
    assert!(
        !has_shape("SCRAM-SHA-256", "SCRAM-SHA256"),
        "a hyphen between words stays"
    );
}

/// The demo output the manual quotes is what the demo prints: run it
/// (10,000 devices for 15 s: the lines' shapes do not depend on the fleet's
/// size) and find each quoted line's shape among the printed lines.
#[test]
fn the_demo_output_the_manual_quotes_is_what_it_prints() {
    let mut quoted = Vec::new();
    for (page, text) in pages() {
        for (info, body) in blocks(&text) {
            if info.split_whitespace().any(|w| w == "demo-output") {
                quoted.extend(
                    body.lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(|l| (name(&page), l.to_string())),
                );
            }
        }
    }
    assert!(quoted.len() >= 5, "quoted demo lines: {quoted:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
        .args([
            "demo",
            "--duration",
            "15s",
            "--devices",
            "10000",
            "--listen",
            "",
        ])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let missing: Vec<String> = quoted
        .iter()
        .filter(|(_, q)| !printed.lines().any(|p| has_shape(q, p)))
        .map(|(page, q)| format!("{page}: {q}"))
        .collect();
    assert!(
        missing.is_empty(),
        "quoted demo lines the demo no longer prints:\n{}\n\nit printed:\n{printed}",
        missing.join("\n")
    );
}

/// Every property name in a JSON Schema, nested ones included.
fn schema_properties(s: &serde_json::Value, out: &mut BTreeSet<String>) {
    match s {
        serde_json::Value::Object(m) => {
            if let Some(serde_json::Value::Object(props)) = m.get("properties") {
                out.extend(props.keys().cloned());
            }
            m.values().for_each(|v| schema_properties(v, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| schema_properties(v, out)),
        _ => {}
    }
}

/// The `field | meaning` tables of a page, in order: each row's first
/// cell's backticked names (`statistics[]` as `statistics`).
fn field_tables(text: &str) -> Vec<Vec<String>> {
    let mut tables = Vec::new();
    let mut open: Option<Vec<String>> = None;
    for line in text.lines() {
        if line.starts_with("| field | meaning |") {
            open = Some(Vec::new());
        } else if let Some(rows) = &mut open {
            if !line.starts_with('|') {
                tables.push(open.take().unwrap());
            } else if !line.starts_with("|---") {
                let cell = line.split('|').nth(1).unwrap();
                rows.extend(
                    cell.split('`')
                        .skip(1)
                        .step_by(2)
                        .map(|n| n.trim_end_matches("[]").to_string()),
                );
            }
        }
    }
    tables.extend(open);
    tables
}

/// docs/output.md against the JSON Schemas consumers validate with: every
/// property of the window and fleet release schemas is named on the page,
/// and the page's two field tables (window release, then fleet release)
/// name only the schemas' top-level properties.
#[test]
fn the_output_page_matches_the_json_schemas() {
    let page = std::fs::read_to_string(root().join("docs/output.md")).unwrap();
    let named: BTreeSet<String> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|n| n.trim_end_matches("[]").to_string())
        .collect();
    let tables = field_tables(&page);
    assert_eq!(tables.len(), 2, "a window table and a fleet table");
    for (file, table) in ["window_release", "fleet_release"].iter().zip(&tables) {
        let path = root().join(format!("proto/schema/{file}.schema.json"));
        let schema: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut all = BTreeSet::new();
        schema_properties(&schema, &mut all);
        assert!(all.len() >= 20, "{file}: {all:?}");
        let unnamed: Vec<&String> = all.iter().filter(|p| !named.contains(*p)).collect();
        assert!(
            unnamed.is_empty(),
            "{file}: fields docs/output.md never names: {unnamed:?}"
        );
        let top: BTreeSet<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let stray: Vec<&String> = table.iter().filter(|f| !top.contains(*f)).collect();
        assert!(
            stray.is_empty(),
            "{file}: the table names fields the schema lacks: {stray:?}"
        );
        let untabled: Vec<&String> = top.iter().filter(|f| !table.contains(f)).collect();
        assert!(
            untabled.is_empty(),
            "{file}: fields without a row: {untabled:?}"
        );
    }
}

/// Every YAML block in the manual parses; a Collector's Kafka receiver or
/// exporter there names an encoding FleetDP reads or writes, as the TOML
/// beside it does.
#[test]
fn every_yaml_block_parses_and_its_kafka_encodings_are_fleetdps() {
    let mut collectors = 0;
    for (page, text) in pages() {
        for (info, body) in blocks(&text) {
            if !matches!(info.split_whitespace().next(), Some("yaml" | "yml")) {
                continue;
            }
            let y: serde_yaml::Value = serde_yaml::from_str(&body).unwrap_or_else(|e| {
                panic!("{}: a YAML block does not parse: {e}\n{body}", name(&page))
            });
            for side in ["receivers", "exporters"] {
                let Some(kafka) = y.get(side).and_then(|s| s.get("kafka")) else {
                    continue;
                };
                collectors += 1;
                let encoding = kafka["metrics"]["encoding"].as_str();
                assert!(
                    matches!(encoding, Some("otlp_proto" | "otlp_json")),
                    "{}: the Collector's kafka {side} encoding {encoding:?}",
                    name(&page)
                );
            }
        }
    }
    assert!(
        collectors >= 2,
        "the input and output pages show their Collectors"
    );
}
