//! Reading the files a configuration names (the configuration itself,
//! schemas, descriptor sets, the release key): regular files only, size
//! checked before and bounded while reading, opened without blocking. A
//! FIFO would otherwise hang `plan` and `run` waiting for a writer, and
//! `/dev/zero` would be read until memory runs out.

use anyhow::{anyhow, bail, Result};
use std::io::Read;
use std::path::Path;

/// Largest configuration file.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The bytes of regular file `path`, at most `max` of them; errors name
/// `field` and the file.
pub(crate) fn read_bounded(field: &str, path: &Path, max: u64) -> Result<Vec<u8>> {
    let shown = path.display();
    let regular = |m: &std::fs::Metadata| -> Result<()> {
        if !m.is_file() {
            bail!(
                "{field}: {shown} is not a regular file ({}); point it at a file",
                kind(m)
            );
        }
        if m.len() > max {
            bail!("{field}: {shown} is {} bytes; at most {max}", m.len());
        }
        Ok(())
    };
    // Checked before opening: opening a FIFO for reading waits for a writer.
    regular(&std::fs::metadata(path).map_err(|e| anyhow!("{field}: {shown}: {e}"))?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Swapped for a FIFO since: the open returns at once.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options
        .open(path)
        .map_err(|e| anyhow!("{field}: {shown}: {e}"))?;
    // And checked again on what was opened.
    let m = file
        .metadata()
        .map_err(|e| anyhow!("{field}: {shown}: {e}"))?;
    regular(&m)?;
    // Sized once (a key read into a growing buffer leaves copies behind).
    let mut bytes = Vec::with_capacity(m.len().min(max) as usize + 1);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow!("{field}: {shown}: {e}"))?;
    if bytes.len() as u64 > max {
        bail!("{field}: {shown} grew past {max} bytes while being read");
    }
    Ok(bytes)
}

/// Refuse a secret file that others may read, or that its group may read
/// (the release key's rule, applied to every secret file) — except a file
/// the process does not own but was handed: owned by root, not group-
/// writable, its group one of the process's own, the process not root.
/// That is a Kubernetes Secret volume with `fsGroup` (files root-owned,
/// group-readable by the pod's group, mode `0440`): only root and the
/// pod's own group can read it, as only root and the owner can read a
/// `0600` file.
pub(crate) fn check_private(field: &str, path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if let Ok(m) = std::fs::metadata(path) {
            let mode = m.permissions().mode() & 0o777;
            let handed = m.uid() == 0 && mode & 0o020 == 0 && !am_root() && in_my_groups(m.gid());
            if mode & 0o007 != 0 || (mode & 0o070 != 0 && !handed) {
                bail!(
                    "{field}: {} has mode {mode:04o}, which lets group or others read a secret; \
                     run `chmod 600 {}` (a root-owned file readable by the process's own group, \
                     as a Kubernetes Secret volume with fsGroup, is accepted)",
                    path.display(),
                    path.display()
                );
            }
        }
    }
    Ok(())
}

#[cfg(unix)]
fn am_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `gid` is the process's effective group or a supplementary one.
#[cfg(unix)]
fn in_my_groups(gid: u32) -> bool {
    // SAFETY: getegid cannot fail; getgroups writes at most `groups.len()`
    // entries into the buffer it is given and returns how many.
    unsafe {
        if libc::getegid() == gid {
            return true;
        }
        let mut groups = vec![0 as libc::gid_t; 256];
        let n = libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr());
        n > 0 && groups[..n as usize].contains(&gid)
    }
}

/// [`read_bounded`] as UTF-8 text.
pub(crate) fn read_text(field: &str, path: &Path, max: u64) -> Result<String> {
    String::from_utf8(read_bounded(field, path, max)?)
        .map_err(|e| anyhow!("{field}: {} is not UTF-8 text ({e})", path.display()))
}

fn kind(m: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if m.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("fleetdp-files-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_regular_file_within_the_bound_is_read() {
        let p = dir().join("ok.txt");
        std::fs::write(&p, "hello").unwrap();
        assert_eq!(read_text("f", &p, 5).unwrap(), "hello");
        let e = read_text("input.avro_schema", &p, 4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("input.avro_schema") && e.contains("at most 4"),
            "{e}"
        );
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_at_once() {
        let start = Instant::now();
        for (p, what) in [
            (std::path::PathBuf::from("/dev/zero"), "character device"),
            (dir(), "directory"),
        ] {
            let e = read_bounded("input.avro_schema", &p, 1 << 20)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a regular file") && e.contains(what), "{e}");
        }
        #[cfg(unix)]
        {
            let fifo = dir().join("fifo");
            let _ = std::fs::remove_file(&fifo);
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            // SAFETY: mkfifo(2) reads a valid NUL-terminated path and nothing else.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let e = read_bounded("input.protobuf_descriptor_set", &fifo, 1 << 20)
                .unwrap_err()
                .to_string();
            assert!(e.contains("FIFO"), "{e}");
        }
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
