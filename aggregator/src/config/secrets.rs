//! Secrets in the configuration: any string value may hold `${NAME}` (the
//! environment variable `NAME`) or `${file:/path}` (the file's contents,
//! one trailing newline dropped) — the shapes Vector and Kafka Connect
//! users know — so a SASL password or a key passphrase need not sit in the
//! TOML (a ConfigMap in the shipped manifests). `$${` is a literal `${`.
//!
//! Expanded once, after the TOML is parsed (never inside its syntax: a
//! value cannot inject settings). Errors name the field and the variable or
//! file, never a value. A secret file follows the release key's rules: a
//! regular file of at most [`MAX_SECRET_BYTES`], not readable by group or
//! others. Every expanded value is remembered ([`Expanded`]) so the
//! effective-configuration log line can blank it wherever it appears.

use super::files;
use anyhow::{anyhow, bail, Context as _, Result};
use std::path::Path;
use zeroize::Zeroizing;

/// Largest secret file.
pub const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// The values that were expanded (to redact them where a configuration is
/// shown).
#[derive(Default, Clone)]
pub struct Expanded(Vec<Zeroizing<String>>);

impl Expanded {
    /// `text` with every expanded value replaced by `<secret>`.
    pub fn redact(&self, text: &str) -> String {
        redact_with(&self.0, text)
    }
}

/// `text` with each of `values` blanked ([`forms`]).
fn redact_with(values: &[Zeroizing<String>], text: &str) -> String {
    replace_forms(&forms(values), text)
}

/// Each value as it is and as it reads escaped (inside a JSON string or a
/// `Debug` string), longest first so one value inside another leaves no
/// part of the longer.
fn forms(values: &[Zeroizing<String>]) -> Vec<Zeroizing<String>> {
    let mut forms: Vec<Zeroizing<String>> = Vec::new();
    for v in values.iter().filter(|s| !s.is_empty()) {
        let json = Zeroizing::new(serde_json::to_string(v.as_str()).unwrap_or_default());
        let debug = Zeroizing::new(format!("{:?}", v.as_str()));
        for f in [
            v.as_str(),
            &json[1..json.len() - 1],
            &debug[1..debug.len() - 1],
        ] {
            if !f.is_empty() && !forms.iter().any(|x| x.as_str() == f) {
                forms.push(Zeroizing::new(f.to_string()));
            }
        }
    }
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms
}

fn replace_forms(forms: &[Zeroizing<String>], text: &str) -> String {
    let mut out = text.to_string();
    for f in forms {
        if out.contains(f.as_str()) {
            out = out.replace(f.as_str(), "<secret>");
        }
    }
    out
}

/// Every value expanded in this process, and its [`forms`] (made once
/// here, not per log line), for [`redact_logged`].
static REMEMBERED: std::sync::RwLock<(Secrets, Secrets)> =
    std::sync::RwLock::new((Vec::new(), Vec::new()));

/// Secret strings, wiped when dropped.
type Secrets = Vec<Zeroizing<String>>;

/// Remember `seen`'s values so every log line of this process blanks them
/// (a `${…}` in `brokers`, a topic or the group id appeared verbatim in
/// the `starting` line).
pub(crate) fn remember(seen: &Expanded) {
    if seen.0.is_empty() {
        return;
    }
    let mut all = REMEMBERED.write().unwrap_or_else(|e| e.into_inner());
    let (values, all_forms) = &mut *all;
    for v in &seen.0 {
        if !values.iter().any(|a| a.as_str() == v.as_str()) {
            values.push(v.clone());
        }
    }
    *all_forms = forms(values);
}

/// `text` with every value any configuration of this process expanded
/// from `${…}` blanked: what the log writer and the fatal line show.
pub fn redact_logged(text: &str) -> String {
    let all = REMEMBERED.read().unwrap_or_else(|e| e.into_inner());
    replace_forms(&all.1, text)
}

impl std::fmt::Debug for Expanded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expanded({} values)", self.0.len())
    }
}

/// Expand every string of `value` in place (`field`: its dotted path).
pub(crate) fn expand(value: &mut toml::Value, field: &str, seen: &mut Expanded) -> Result<()> {
    match value {
        toml::Value::String(s) if s.contains("${") => {
            *s = expand_str(s, field, seen)?;
        }
        toml::Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                expand(v, &format!("{field}[{i}]"), seen)?;
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                let path = if field.is_empty() {
                    k.clone()
                } else {
                    format!("{field}.{k}")
                };
                expand(v, &path, seen)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn expand_str(s: &str, field: &str, seen: &mut Expanded) -> Result<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
            continue;
        }
        let Some(after) = rest.strip_prefix("${") else {
            out.push('$');
            rest = &rest[1..];
            continue;
        };
        let end = after.find('}').ok_or_else(|| {
            anyhow!("{field}: `${{` without a closing `}}` (write `$${{` for a literal `${{`)")
        })?;
        let name = &after[..end];
        let value = match name.strip_prefix("file:") {
            Some(path) => read_secret_file(field, Path::new(path))?,
            None => from_env(field, name)?,
        };
        if value.contains('\0') {
            bail!("{field}: `${{{name}}}` holds a NUL byte, which no setting can carry");
        }
        out.push_str(&value);
        seen.0.push(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn from_env(field: &str, name: &str) -> Result<Zeroizing<String>> {
    let valid = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if !valid {
        bail!("{field}: `${{{name}}}` is neither an environment variable name ([A-Za-z_][A-Za-z0-9_]*) nor `${{file:/path}}`");
    }
    match std::env::var(name) {
        Ok(v) => Ok(Zeroizing::new(v)),
        Err(std::env::VarError::NotPresent) => {
            bail!("{field}: environment variable {name} is not set")
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            bail!("{field}: environment variable {name} is not UTF-8")
        }
    }
}

fn read_secret_file(field: &str, path: &Path) -> Result<Zeroizing<String>> {
    if !path.is_absolute() {
        bail!(
            "{field}: `${{file:{}}}` needs an absolute path",
            path.display()
        );
    }
    files::check_private(field, path)?;
    let mut text = Zeroizing::new(
        files::read_text(field, path, MAX_SECRET_BYTES)
            .with_context(|| format!("{field}: cannot read the secret file"))?,
    );
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_one(s: &str) -> Result<String> {
        let mut v = toml::Value::String(s.into());
        expand(&mut v, "kafka.security.password", &mut Expanded::default())?;
        Ok(v.as_str().unwrap().to_string())
    }

    fn secret_file(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("fleetdp-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn variables_and_files_are_expanded() {
        std::env::set_var("FLEETDP_TEST_SECRET_A", "s3cr3t");
        assert_eq!(expand_one("${FLEETDP_TEST_SECRET_A}").unwrap(), "s3cr3t");
        assert_eq!(
            expand_one("u:${FLEETDP_TEST_SECRET_A}:$${literal}:$5").unwrap(),
            "u:s3cr3t:${literal}:$5"
        );
        let f = secret_file("ok", "from-file\n", 0o600);
        assert_eq!(
            expand_one(&format!("${{file:{}}}", f.display())).unwrap(),
            "from-file"
        );
    }

    #[test]
    fn unset_unreadable_open_or_malformed_references_name_the_field() {
        std::env::remove_var("FLEETDP_TEST_SECRET_UNSET");
        let cases = [
            (
                "${FLEETDP_TEST_SECRET_UNSET}".to_string(),
                "environment variable FLEETDP_TEST_SECRET_UNSET is not set",
            ),
            ("${file:/nonexistent/secret}".into(), "/nonexistent/secret"),
            ("${file:relative}".into(), "absolute path"),
            ("${oops".into(), "without a closing"),
            ("${1BAD}".into(), "neither an environment variable"),
            (
                format!("${{file:{}}}", secret_file("open", "x", 0o640).display()),
                "mode 0640",
            ),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", expand_one(&text).unwrap_err());
            assert!(e.contains("kafka.security.password"), "{e}");
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    /// Issue: a password file holding a NUL byte was reported as
    /// "the client configuration was refused", naming no field.
    #[test]
    fn a_nul_byte_names_the_field() {
        let f = secret_file("nul", "pass\0word\n", 0o600);
        let e = format!(
            "{:#}",
            expand_one(&format!("${{file:{}}}", f.display())).unwrap_err()
        );
        assert!(
            e.starts_with("kafka.security.password:") && e.contains("NUL byte"),
            "{e}"
        );
    }

    /// Escaped forms are blanked too (a JSON log line escapes a quote or a
    /// backslash in a value).
    #[test]
    fn escaped_forms_are_redacted() {
        let values = vec![Zeroizing::new("pa\"ss\\w".to_string())];
        let json = serde_json::json!({"brokers": "x pa\"ss\\w y"}).to_string();
        let shown = redact_with(&values, &json);
        assert!(!shown.contains("ss"), "{shown}");
        assert_eq!(redact_with(&values, "a pa\"ss\\w b"), "a <secret> b");
    }

    #[test]
    fn expanded_values_are_redacted() {
        std::env::set_var("FLEETDP_TEST_SECRET_B", "hunter2");
        let mut v: toml::Value = toml::from_str(
            "[kafka]\nbrokers = \"b:9092\"\n[kafka.security]\npassword = \"${FLEETDP_TEST_SECRET_B}\"",
        )
        .unwrap();
        let mut seen = Expanded::default();
        expand(&mut v, "", &mut seen).unwrap();
        assert_eq!(v["kafka"]["security"]["password"].as_str(), Some("hunter2"));
        let shown = seen.redact(&format!("{v:?}"));
        assert!(
            !shown.contains("hunter2") && shown.contains("<secret>"),
            "{shown}"
        );
    }
}
