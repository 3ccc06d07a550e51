//! The release key and a declared rotation: loading the key from its file
//! or environment variable, and `privacy.rotate_from`, the public id
//! ([`ReleaseKey::id`]) of the key it replaces. A lane whose state was
//! written under another key is resumed only when that key is the one
//! declared here (docs/operations.md, rotating the release key).

use super::{files, Config};
use crate::dp::rng::ReleaseKey;
use anyhow::{anyhow, bail, Context, Result};

impl Config {
    /// Load the release key; production refuses to run without one.
    pub fn release_key(&self) -> Result<ReleaseKey> {
        let p = &self.privacy;
        if let Some(var) = &p.key_env {
            let v =
                zeroize::Zeroizing::new(std::env::var(var).map_err(|_| {
                    anyhow!("privacy.key_env: environment variable {var} is not set")
                })?);
            // Out of the environment once read (child processes and later
            // reads no longer see it; /proc/PID/environ keeps the initial
            // block, so key_file is the safer choice).
            std::env::remove_var(var);
            return ReleaseKey::from_hex(&v).map_err(|e| anyhow!("privacy.key_env ({var}): {e}"));
        }
        if let Some(path) = &p.key_file {
            // Whoever reads the key can recompute the noise.
            files::check_private("privacy.key_file", path)?;
            // A key file is 64 hex digits and a newline; 4 KiB allows
            // comments' worth of slack and no more.
            let text = files::read_text("privacy.key_file", path, 4096).with_context(|| {
                format!(
                    "privacy.key_file: cannot read {} (create one with `fleetdp keygen --out {}`)",
                    path.display(),
                    path.display()
                )
            })?;
            let text = zeroize::Zeroizing::new(text);
            return ReleaseKey::from_hex(&text)
                .map_err(|e| anyhow!("privacy.key_file {}: {e}", path.display()));
        }
        bail!("privacy: no release key; set key_file or key_env (FleetDP refuses to release without a secret key)")
    }

    /// `privacy.rotate_from`, checked: the 16 hex digits `fleetdp keygen`
    /// (and the `starting` log line) print for a key, lower-cased.
    pub fn rotate_from(&self) -> Result<Option<String>> {
        let Some(id) = &self.privacy.rotate_from else {
            return Ok(None);
        };
        let id = id.trim().to_ascii_lowercase();
        if id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "privacy.rotate_from: must be a release key id, 16 hex digits (`fleetdp keygen` prints it; so does \
                 the `starting` line as release_key_id); got {} characters",
                id.chars().count()
            );
        }
        Ok(Some(id))
    }
}
