//! `fleetdp run` in a child process on a test's topics: a fresh release
//! key, the status page on a free port, its log kept in a file. Dropped, it
//! is killed and its files removed.

use super::{config_text, free_port, http_get, unique, wait_until, Broker, Topics};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

pub struct Service {
    child: Child,
    dir: PathBuf,
    /// The status page's port.
    pub port: u16,
}

impl Service {
    /// Start `fleetdp run` with the `[privacy]` lines `privacy`, extra
    /// `[http]` lines `http` and the `[[stream]]` tables `streams`.
    pub fn start(broker: &Broker, t: &Topics, privacy: &str, http: &str, streams: &str) -> Service {
        let key = fleetdp::dp::rng::ReleaseKey::ephemeral().to_hex();
        Self::start_with(broker, t, [privacy, http, streams], "", &key)
    }

    /// The same with extra `[kafka]` lines `kafka` and the release key
    /// `key` (hex), for a restart under the same key. `parts` are the
    /// `[privacy]` lines, the `[http]` lines and the `[[stream]]` tables.
    pub fn start_with(
        broker: &Broker,
        t: &Topics,
        parts: [&str; 3],
        kafka: &str,
        key: &str,
    ) -> Service {
        Self::start_env(broker, t, parts, (kafka, key), (&[], &[]))
    }

    /// [`Service::start_with`] (`kafka` lines and `key`) with extra
    /// environment variables and extra arguments of `run`.
    pub fn start_env(
        broker: &Broker,
        t: &Topics,
        parts: [&str; 3],
        (kafka, key): (&str, &str),
        (env, args): (&[(&str, &str)], &[&str]),
    ) -> Service {
        let [privacy, http, streams] = parts;
        let port = free_port();
        let text = config_text(
            broker,
            t,
            &format!("{privacy}\nkey_env = \"FLEETDP_CHILD_KEY\""),
            &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n{http}"),
            streams,
        )
        .replacen("[kafka]\n", &format!("[kafka]\n{kafka}\n"), 1);
        let dir = std::env::temp_dir().join(unique("fleetdp-child"));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("fleetdp.toml");
        std::fs::write(&cfg, text).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fleetdp"))
            .args(["run", "--config"])
            .arg(&cfg)
            .args(args)
            .env("FLEETDP_CHILD_KEY", key)
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stderr(std::fs::File::create(dir.join("run.log")).unwrap())
            .spawn()
            .unwrap();
        Service { child, dir, port }
    }

    /// `path` on the status page: its HTTP status and body.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&format!("http://127.0.0.1:{}{path}", self.port))
    }

    /// Whether `/readyz` answers 200 within `timeout`.
    pub async fn ready_within(&self, timeout: Duration) -> bool {
        wait_until(timeout, || matches!(self.get("/readyz"), Some((200, _)))).await
    }

    /// How it exited, if it does within `timeout`.
    pub async fn exited_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut status = None;
        wait_until(timeout, || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        })
        .await;
        status
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("run.log")).unwrap_or_default()
    }

    /// Send `signal` and wait for the exit: how it exited and its log.
    pub fn stop(mut self, signal: libc::c_int) -> (ExitStatus, String) {
        // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
        let status = self.child.wait().unwrap();
        (status, self.log())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
