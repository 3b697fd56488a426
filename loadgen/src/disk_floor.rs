//! `disk-floor`: what this machine's disk can do at best, so sync-flush runs
//! are read against it.
//!
//! Two measurements on one scratch file in the directory under test, with
//! plain blocking syscalls on an `O_DIRECT` descriptor (the broker's own
//! ring is not needed for one request at a time):
//!
//! 1. Sequential 1 MiB `pwrite`s for half the time (at most
//!    [`SEQUENTIAL_FILE_SIZE_MAX`]), then one `fdatasync`: MB/s.
//! 2. Sequential 4 KiB `pwrite` + `fdatasync`, one at a time, over the
//!    blocks written in step 1 (so no allocation or size change is in the
//!    measured path, as for a preallocated CommitLog segment), for the
//!    other half: p50/p99/max µs and operations per second.
//!
//! The scratch file is removed at the end, also on error.
//!
//! # Invariants
//!
//! - Buffers, lengths and offsets passed to the kernel are multiples of
//!   [`BLOCK_SIZE`] (`O_DIRECT` requires it; open(2), "O_DIRECT").
//! - At most one write is outstanding.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::hist::new_latency_histogram;
use crate::json::Json;
use crate::schedule::latency_us;

/// Alignment and size of the small write: one page / filesystem block.
pub const BLOCK_SIZE: usize = 4096;
/// Size of each sequential write.
pub const LARGE_WRITE_SIZE: usize = 1 << 20;
/// The most the sequential phase writes: bounds disk use.
pub const SEQUENTIAL_FILE_SIZE_MAX: u64 = 1 << 30;
/// The least the sequential phase writes, so the sync phase has room.
pub const SEQUENTIAL_FILE_SIZE_MIN: u64 = 16 << 20;
const _: () = assert!(LARGE_WRITE_SIZE.is_multiple_of(BLOCK_SIZE));
const _: () = assert!(SEQUENTIAL_FILE_SIZE_MIN.is_multiple_of(LARGE_WRITE_SIZE as u64));

const SCRATCH_FILE_NAME: &str = ".ringmq-disk-floor.tmp";

/// Errors of the disk-floor probe.
#[derive(Debug, thiserror::Error)]
pub enum DiskFloorError {
    /// A syscall failed.
    #[error("{operation} on {path}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The scratch file.
        path: PathBuf,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// The filesystem refused `O_DIRECT` (tmpfs does).
    #[error("{path}: the filesystem does not support O_DIRECT (EINVAL on open)")]
    DirectUnsupported {
        /// The scratch file.
        path: PathBuf,
    },
}

/// What the probe measured.
#[derive(Debug, Clone)]
pub struct DiskFloor {
    /// The directory measured.
    pub dir: PathBuf,
    /// 4 KiB write + fdatasync latencies, µs.
    pub sync_write_latency: Histogram<u64>,
    /// 4 KiB write + fdatasync operations per second.
    pub sync_writes_per_s: f64,
    /// Sequential 1 MiB O_DIRECT write throughput, 10^6 bytes per second.
    pub direct_write_mb_per_s: f64,
    /// Bytes written in the sequential phase.
    pub direct_write_bytes: u64,
}

impl DiskFloor {
    /// `key=value` lines, one per measurement.
    pub fn key_values(&self) -> Vec<(String, f64)> {
        let latency = &self.sync_write_latency;
        let at = |q: f64| {
            if latency.is_empty() {
                0.0
            } else {
                latency.value_at_quantile(q) as f64
            }
        };
        vec![
            ("fdatasync_4k_p50_us".into(), at(0.5)),
            ("fdatasync_4k_p99_us".into(), at(0.99)),
            ("fdatasync_4k_max_us".into(), latency.max() as f64),
            ("fdatasync_4k_count".into(), latency.len() as f64),
            ("fdatasync_4k_per_s".into(), self.sync_writes_per_s),
            (
                "direct_write_1m_mb_per_s".into(),
                self.direct_write_mb_per_s,
            ),
            (
                "direct_write_1m_bytes".into(),
                self.direct_write_bytes as f64,
            ),
        ]
    }

    /// The measurements as JSON members (plus the directory).
    pub fn to_json_members(&self) -> Vec<(String, Json)> {
        let mut members = vec![(
            "dir".to_string(),
            Json::from(self.dir.display().to_string()),
        )];
        members.extend(
            self.key_values()
                .into_iter()
                .map(|(k, v)| (k, Json::from(v))),
        );
        members
    }
}

/// A heap buffer aligned to [`BLOCK_SIZE`], as `O_DIRECT` needs.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        assert!(
            len > 0 && len.is_multiple_of(BLOCK_SIZE),
            "buffer length {len}"
        );
        let layout = std::alloc::Layout::from_size_align(len, BLOCK_SIZE)
            .expect("invariant: length and alignment are valid");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        let mut buf = Self { ptr, layout };
        // Non-zero content, so no layer can shortcut writing zeros.
        for (index, byte) in buf.as_mut_slice().iter_mut().enumerate() {
            *byte = (index % 251) as u8;
        }
        buf
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `layout.size()` initialised bytes we own.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this same layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// An `O_DIRECT` file descriptor, closed and unlinked on drop.
struct ScratchFile {
    fd: libc::c_int,
    path: PathBuf,
}

impl ScratchFile {
    fn create(dir: &Path) -> Result<Self, DiskFloorError> {
        let path = dir.join(SCRATCH_FILE_NAME);
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| DiskFloorError::Io {
            operation: "open",
            path: path.clone(),
            source: io::Error::from(io::ErrorKind::InvalidInput),
        })?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_DIRECT | libc::O_CLOEXEC;
        // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
        let fd = unsafe { libc::open(c_path.as_ptr(), flags, 0o600) };
        if fd < 0 {
            let source = io::Error::last_os_error();
            if source.raw_os_error() == Some(libc::EINVAL) {
                return Err(DiskFloorError::DirectUnsupported { path });
            }
            return Err(DiskFloorError::Io {
                operation: "open",
                path,
                source,
            });
        }
        Ok(Self { fd, path })
    }

    fn error(&self, operation: &'static str, source: io::Error) -> DiskFloorError {
        DiskFloorError::Io {
            operation,
            path: self.path.clone(),
            source,
        }
    }

    /// Writes all of `buf` at `offset`, continuing short writes and retrying
    /// `EINTR`.
    fn write_all_at(&self, buf: &mut AlignedBuf, offset: u64) -> Result<(), DiskFloorError> {
        assert!(
            offset.is_multiple_of(BLOCK_SIZE as u64),
            "offset {offset} unaligned"
        );
        let bytes = buf.as_mut_slice();
        let mut done = 0;
        while done < bytes.len() {
            let file_offset = libc::off_t::try_from(offset + done as u64)
                .map_err(|_| self.error("pwrite", io::Error::from(io::ErrorKind::InvalidInput)))?;
            // SAFETY: the pointer and length lie inside `bytes`, which lives
            // through this blocking call; the kernel reads nothing after it.
            let written = unsafe {
                libc::pwrite(
                    self.fd,
                    bytes[done..].as_ptr().cast(),
                    bytes.len() - done,
                    file_offset,
                )
            };
            if written < 0 {
                let source = io::Error::last_os_error();
                if source.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(self.error("pwrite", source));
            }
            if written == 0 {
                return Err(self.error("pwrite", io::Error::from(io::ErrorKind::WriteZero)));
            }
            // A short O_DIRECT write still ends on a block boundary for a
            // regular file on ext4/xfs; assert it so a surprise is loud.
            done += written as usize;
            assert!(
                done.is_multiple_of(BLOCK_SIZE) || done == bytes.len(),
                "short write to {done}"
            );
        }
        Ok(())
    }

    fn datasync(&self) -> Result<(), DiskFloorError> {
        loop {
            // SAFETY: fdatasync takes only a descriptor we own.
            if unsafe { libc::fdatasync(self.fd) } == 0 {
                return Ok(());
            }
            let source = io::Error::last_os_error();
            if source.kind() != io::ErrorKind::Interrupted {
                return Err(self.error("fdatasync", source));
            }
        }
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        // SAFETY: `fd` is ours and closed exactly once.
        unsafe { libc::close(self.fd) };
        let _ = fs::remove_file(&self.path);
    }
}

/// Runs both measurements in `dir` for about `duration` in total.
///
/// # Errors
///
/// [`DiskFloorError`] when the scratch file cannot be created or written.
pub fn measure(dir: &Path, duration: Duration) -> Result<DiskFloor, DiskFloorError> {
    let file = ScratchFile::create(dir)?;
    let half = duration / 2;

    let mut large = AlignedBuf::new(LARGE_WRITE_SIZE);
    let started = Instant::now();
    let mut written = 0_u64;
    while written < SEQUENTIAL_FILE_SIZE_MAX
        && (written < SEQUENTIAL_FILE_SIZE_MIN || started.elapsed() < half)
    {
        file.write_all_at(&mut large, written)?;
        written += LARGE_WRITE_SIZE as u64;
    }
    file.datasync()?;
    let seconds = started.elapsed().as_secs_f64();
    let direct_write_mb_per_s = written as f64 / 1e6 / seconds;

    let mut small = AlignedBuf::new(BLOCK_SIZE);
    let mut latency = new_latency_histogram();
    let origin = Instant::now();
    let now_ns = || u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut offset = 0_u64;
    while origin.elapsed() < half {
        let before = now_ns();
        file.write_all_at(&mut small, offset)?;
        file.datasync()?;
        latency.saturating_record(latency_us(before, now_ns()));
        offset = (offset + BLOCK_SIZE as u64) % written;
    }
    let sync_seconds = origin.elapsed().as_secs_f64();
    Ok(DiskFloor {
        dir: dir.to_path_buf(),
        sync_writes_per_s: latency.len() as f64 / sync_seconds,
        sync_write_latency: latency,
        direct_write_mb_per_s,
        direct_write_bytes: written,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_reports_positive_rates_and_removes_its_file() {
        let dir =
            std::env::temp_dir().join(format!("ringmq-disk-floor-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        match measure(&dir, Duration::from_millis(200)) {
            Ok(floor) => {
                assert!(floor.direct_write_mb_per_s > 0.0);
                assert!(floor.direct_write_bytes >= SEQUENTIAL_FILE_SIZE_MIN);
                assert!(!floor.sync_write_latency.is_empty());
                let keys: Vec<String> = floor.key_values().into_iter().map(|(k, _)| k).collect();
                assert!(keys.contains(&"fdatasync_4k_p99_us".to_string()));
            }
            Err(DiskFloorError::DirectUnsupported { path }) => {
                println!("skip: {} has no O_DIRECT", path.display());
            }
            Err(error) => panic!("{error}"),
        }
        assert!(!dir.join(SCRATCH_FILE_NAME).exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn aligned_buffer_is_block_aligned() {
        let mut buf = AlignedBuf::new(BLOCK_SIZE * 2);
        assert_eq!(buf.as_mut_slice().as_ptr() as usize % BLOCK_SIZE, 0);
        assert_eq!(buf.as_mut_slice().len(), BLOCK_SIZE * 2);
    }

    #[test]
    fn create_in_a_missing_directory_is_an_io_error() {
        let error = ScratchFile::create(Path::new("/nonexistent/ringmq"))
            .err()
            .unwrap();
        assert!(
            matches!(
                error,
                DiskFloorError::Io {
                    operation: "open",
                    ..
                }
            ),
            "{error}"
        );
    }
}
