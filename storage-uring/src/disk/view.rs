//! [`FileView`]: the bytes of a whole file, read-only, without holding them
//! in the process's own memory: a shared mapping of the file
//! ([`super::uring::UringDisk`]), or a copy on the simulated disk.
//!
//! A mapping's pages are the page cache's: the kernel reads them on first
//! touch and may drop them again under memory pressure, as RocketMQ's
//! mapped files. A read of a page that is not cached blocks the thread on
//! the disk, so views serve only reads that tolerate that (an index query,
//! a pull from a cold part of a queue), never the append path.
//!
//! # Invariants
//! - A mapped view covers exactly `len` bytes of the file from offset 0 and
//!   is unmapped once, on drop. The file is never truncated below `len`
//!   while mapped (a read past its end would raise SIGBUS).

use std::ops::{Deref, Range};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

use super::DiskError;

/// A read-only view of a whole file (see the module doc).
pub struct FileView {
    inner: Inner,
}

enum Inner {
    Mapped {
        ptr: NonNull<u8>,
        len: usize,
        /// The byte ranges of the file that hold data, ascending, as
        /// `SEEK_DATA` / `SEEK_HOLE` said when it was mapped; `None` where
        /// the file system cannot say (everything counts as data then).
        data: Option<Vec<Range<usize>>>,
    },
    Owned(Box<[u8]>),
}

impl FileView {
    /// A view over bytes held in memory (the simulated disk, empty files).
    pub fn owned(bytes: Vec<u8>) -> Self {
        FileView {
            inner: Inner::Owned(bytes.into_boxed_slice()),
        }
    }

    /// Maps the file at `path` read-only and shared, with the kernel's
    /// default read-ahead. An empty file is an empty owned view (a mapping
    /// cannot be empty).
    ///
    /// # Errors
    /// The errno of open, fstat or mmap, naming the path.
    pub fn map(path: &Path) -> Result<Self, DiskError> {
        let io = |op: &'static str| {
            let source = std::io::Error::last_os_error();
            DiskError::Io {
                op,
                path: path.to_path_buf(),
                source,
            }
        };
        let mut c_path = path.as_os_str().as_bytes().to_vec();
        if c_path.contains(&0) {
            return Err(DiskError::Io {
                op: "open",
                path: path.to_path_buf(),
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        c_path.push(0);
        // SAFETY: `c_path` is NUL-terminated and lives across the call.
        let fd = unsafe { libc::open(c_path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io("open"));
        }
        let mapped = map_fd(fd).map_err(io);
        // SAFETY: `fd` is ours and closed once; the mapping keeps its own
        // reference to the file.
        unsafe { libc::close(fd) };
        mapped
    }

    /// Advises the kernel that the view is read at random places (an index
    /// file's hash chains): no read-ahead around each page touched. Nothing
    /// for a copy; a refused advice changes nothing else.
    pub fn advise_random(&self) {
        if let Inner::Mapped { ptr, len, .. } = self.inner {
            // SAFETY: `ptr..ptr + len` is this view's mapping; the advice
            // only tunes read-ahead.
            unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_RANDOM) };
        }
    }

    /// Whether the view is a mapping (not a copy).
    pub fn is_mapped(&self) -> bool {
        matches!(self.inner, Inner::Mapped { .. })
    }

    /// Bytes from the start of the file up to its first hole, when the
    /// view was mapped (`SEEK_HOLE`, at the file system's granularity;
    /// the whole length for a copy, or where the file system cannot say).
    /// A read of a hole through a shared mapping of a tmpfs file allocates
    /// a page, which on a full tmpfs raises SIGBUS instead of giving zeros:
    /// a scan that runs until it meets zeros stops here.
    pub fn leading_data_len(&self) -> usize {
        match &self.inner {
            Inner::Mapped { len, data, .. } => match data {
                Some(data) => data
                    .first()
                    .filter(|first| first.start == 0)
                    .map_or(0, |first| first.end),
                None => *len,
            },
            Inner::Owned(bytes) => bytes.len(),
        }
    }

    /// Whether the `len` bytes at `position` lie in data of the file, not
    /// in a hole (always for a copy, or where the file system cannot say):
    /// bytes in a hole read as zeros, and reading them through the mapping
    /// could raise SIGBUS on a full tmpfs (see
    /// [`FileView::leading_data_len`]), so a reader takes zeros without
    /// touching them. A range past the end is not data.
    pub fn holds_data(&self, position: usize, len: usize) -> bool {
        let end = position.saturating_add(len);
        match &self.inner {
            Inner::Mapped {
                data: Some(data), ..
            } => {
                let after = data.partition_point(|range| range.start <= position);
                after > 0 && end <= data[after - 1].end
            }
            Inner::Mapped { len: view_len, .. } => end <= *view_len,
            Inner::Owned(bytes) => end <= bytes.len(),
        }
    }
}

/// The data ranges of the file open as `fd`, `len` bytes long, by
/// `SEEK_DATA` and `SEEK_HOLE` (at most [`DATA_RANGES_MAX`] of them, the
/// rest of the file counted as data); `None` when the file system does not
/// answer them.
fn data_ranges(fd: libc::c_int, len: usize) -> Option<Vec<Range<usize>>> {
    let mut ranges = Vec::new();
    let mut position = 0usize;
    while position < len {
        if ranges.len() == DATA_RANGES_MAX {
            ranges.push(position..len);
            break;
        }
        let at = i64::try_from(position).ok()?;
        // SAFETY: lseek(2) on an open descriptor moves only its file offset.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data after `position`; anything else: no answer.
            let errno = std::io::Error::last_os_error().raw_os_error();
            return (errno == Some(libc::ENXIO)).then_some(ranges);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let (Ok(start), Ok(end)) = (usize::try_from(data), usize::try_from(hole)) else {
            return None;
        };
        let end = end.min(len);
        if start >= end {
            break;
        }
        ranges.push(start..end);
        position = end;
    }
    Some(ranges)
}

/// Most data ranges a mapped view keeps (an index file's scattered slot
/// pages make one each): 64 Ki ranges, 1 MiB.
const DATA_RANGES_MAX: usize = 64 * 1024;

/// Maps the whole file open as `fd`; the error's op name on failure (errno
/// left in `errno`).
fn map_fd(fd: libc::c_int) -> Result<FileView, &'static str> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `stat` is writable.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 {
        return Err("fstat");
    }
    let len = usize::try_from(stat.st_size).map_err(|_| "fstat")?;
    if len == 0 {
        return Ok(FileView::owned(Vec::new()));
    }
    // SAFETY: a new read-only shared mapping of `len` bytes of an open
    // file; nothing else refers to the address range it returns.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err("mmap");
    }
    let ptr = NonNull::new(ptr.cast::<u8>()).ok_or("mmap")?;
    Ok(FileView {
        inner: Inner::Mapped {
            ptr,
            len,
            data: data_ranges(fd, len),
        },
    })
}

impl Deref for FileView {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.inner {
            // SAFETY: the mapping is `len` readable bytes until drop, and
            // nothing in this process writes to it (PROT_READ).
            Inner::Mapped { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
            Inner::Owned(bytes) => bytes,
        }
    }
}

impl Drop for FileView {
    fn drop(&mut self) {
        if let Inner::Mapped { ptr, len, .. } = self.inner {
            // SAFETY: the mapping made in `map_fd`, unmapped only here.
            unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
        }
    }
}

impl std::fmt::Debug for FileView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileView")
            .field("mapped", &self.is_mapped())
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ringmq-view-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_mapped_view_reads_the_files_bytes_and_sees_later_writes() {
        let dir = temp_dir("map");
        let path = dir.join("f");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let view = FileView::map(&path).unwrap();
        assert!(view.is_mapped());
        view.advise_random();
        assert_eq!(&view[..], &bytes[..]);
        // A shared mapping shows what is written to the file afterwards
        // (the page cache is the same).
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_at(&[!bytes[5_000]], 5_000).unwrap();
        assert_eq!(view[5_000], !bytes[5_000]);
        assert_eq!(view[4_999], bytes[4_999]);
        drop(view);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_mapped_view_says_which_bytes_lie_in_holes() {
        let dir = temp_dir("holes");
        let path = dir.join("sparse");
        // Data in pages 0 and 3 of a 6-page file (a full index file's slot
        // pages that no key reached are such holes).
        use std::os::unix::fs::FileExt;
        let page = 64 * 1024;
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(6 * page as u64).unwrap();
        file.write_at(&[7; 100], 0).unwrap();
        file.write_at(&[9; 100], 3 * page as u64).unwrap();
        file.sync_all().unwrap();
        let view = FileView::map(&path).unwrap();
        assert!(view.holds_data(0, 100));
        assert!(view.holds_data(3 * page + 10, 8));
        assert!(!view.holds_data(6 * page - 8, 16), "past the end");
        // Where the file system reports holes (ext4, tmpfs, xfs), the pages
        // between are not data, and the leading data ends at the first.
        if view.leading_data_len() < view.len() {
            assert!(!view.holds_data(page, 8));
            assert!(
                !view.holds_data(3 * page - 4, 8),
                "a range that ends in data"
            );
            assert!(!view.holds_data(5 * page, 8));
            assert_eq!(view.leading_data_len() % 4096, 0);
            assert!(view.leading_data_len() <= page);
        }
        assert_eq!(view[3 * page + 10], 9);
        drop(view);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_file_is_an_empty_view_and_a_missing_one_an_error_naming_it() {
        let dir = temp_dir("empty");
        let path = dir.join("empty");
        std::fs::write(&path, b"").unwrap();
        let view = FileView::map(&path).unwrap();
        assert!(view.is_empty());
        assert!(!view.is_mapped());
        let missing = dir.join("missing");
        let error = FileView::map(&missing).unwrap_err().to_string();
        assert!(error.contains("missing"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
