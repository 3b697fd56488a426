//! The broker process harness shared by the integration tests: a temporary
//! store root, and `ringmq broker` started on it with kernel-chosen ports,
//! stopped with SIGTERM or SIGKILL. Each test file keeps its own protocol
//! client and adds `connect` to [`Broker`].

#![allow(
    dead_code,
    reason = "each test file uses the part of the harness it needs"
)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A temporary store root, removed when dropped.
pub struct StoreDir(PathBuf);

impl std::ops::Deref for StoreDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An empty store root named after `label` and this process.
pub fn fresh_store(label: &str) -> StoreDir {
    let dir = std::env::temp_dir().join(format!(
        "ringmq-broker-{label}-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    StoreDir(dir)
}

/// A running broker; killed when dropped.
pub struct Broker {
    child: Child,
    /// The broker's listening port.
    pub port: u16,
}

/// Starts `ringmq broker` on `store` (kernel-chosen broker and name server
/// ports, 16 MiB segments) with `extra` options after the defaults, and
/// waits for its boot line; None (the test skips) when io_uring is
/// unavailable here.
pub fn start_broker(store: &Path, extra: &[String]) -> Option<Broker> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .arg("broker")
        .arg(format!("--storePathRootDir={}", store.display()))
        .arg("--listenPort=0")
        .arg("--namesrvListenPort=0")
        .arg("--brokerIP1=127.0.0.1")
        .arg("--mapedFileSizeCommitLog=16777216")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    if line.is_empty() {
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let _ = child.wait();
        if stderr.contains("io_uring") && stderr.contains("navailable") {
            eprintln!("SKIPPED: io_uring is unavailable: {stderr}");
            return None;
        }
        panic!("the broker did not boot: {stderr}");
    }
    assert!(
        line.contains("boot success. serializeType=JSON and name server is 127.0.0.1:"),
        "boot line {line:?}"
    );
    let address = line
        .split(", ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("boot line {line:?}"));
    let port = address.rsplit(':').next().unwrap().parse().unwrap();
    Some(Broker { child, port })
}

impl Broker {
    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap()
    }

    /// SIGKILL: no shutdown work at all.
    pub fn kill_nine(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
