//! One ConsumeQueue file in memory: its image, its place on disk, and the
//! write-behind bookkeeping (see the parent module for the invariants).

use std::path::Path;
use std::time::Duration;

use super::image::CqImage;
use super::{CQ_ENTRY_SIZE, CQ_LOAD_READ_SIZE, CqEntry, LOAD_POLL_ROUNDS_MAX};
use crate::disk::{Disk, DiskOp, FileId, OpId, OpTag, Wait};
use crate::error::StorageError;

#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) local_seq: u32,
    /// Write: the end of the image bytes it carries (written once it
    /// completes) and the end of the written range (zeros past the image).
    pub(super) write: Option<(usize, usize)>,
    /// Fdatasync: `written_len` at submission.
    pub(super) sync_upto: usize,
    /// The background create of the file (completes with its `FileId`).
    pub(super) create: bool,
    pub(super) generation: u64,
}

#[derive(Debug)]
pub(super) struct CqFile {
    /// Queue offset of the first entry.
    pub(super) base: u64,
    pub(super) image: CqImage,
    pub(super) file: Option<FileId>,
    pub(super) written_len: usize,
    pub(super) synced_len: usize,
    pub(super) stale_end: usize,
    pub(super) in_flight: Option<InFlight>,
    /// A write completed and is not yet fdatasynced: the next write waits
    /// for the sync, so no power loss can keep a later write while losing
    /// part of an earlier one.
    pub(super) sync_before_write: bool,
    /// Bumped whenever the image shrinks, so an older write's completion no
    /// longer marks anything clean.
    pub(super) generation: u64,
    /// Mapping this full file failed once (logged); it stays in memory.
    pub(super) view_failed: bool,
}

impl CqFile {
    pub(super) fn new(base: u64) -> Self {
        CqFile {
            base,
            image: CqImage::default(),
            file: None,
            written_len: 0,
            synced_len: 0,
            stale_end: 0,
            in_flight: None,
            sync_before_write: false,
            generation: 0,
            view_failed: false,
        }
    }

    pub(super) fn entry_count(&self) -> usize {
        self.image.len() / CQ_ENTRY_SIZE
    }

    pub(super) fn entry(&self, index: usize) -> CqEntry {
        CqEntry::decode(self.image.entry(index))
    }

    pub(super) fn push(&mut self, entry: &CqEntry, file_entry_count: usize) {
        let count = self.entry_count();
        assert!(
            count < file_entry_count,
            "push into a full CQ file ({count} entries)"
        );
        self.image
            .push(&entry.encode(), file_entry_count * CQ_ENTRY_SIZE);
    }

    pub(super) fn dirty_end(&self) -> usize {
        self.image.len().max(self.stale_end)
    }

    pub(super) fn truncate_entries(&mut self, count: usize) {
        let len = count * CQ_ENTRY_SIZE;
        if len >= self.image.len() {
            return;
        }
        self.stale_end = self.stale_end.max(self.image.len());
        self.image.truncate(len);
        self.written_len = self.written_len.min(len);
        self.synced_len = self.synced_len.min(len);
        self.generation += 1;
    }

    pub(super) fn name(&self) -> String {
        format!("{:020}", self.base * CQ_ENTRY_SIZE as u64)
    }
}

/// The load rule: Java's (`offset >= 0 && size > 0`), plus two checks a
/// torn page can fail: fillers only before the first real entry, and real
/// entries never pointing below the end of the previous one.
pub(super) fn accept_loaded(entry: &CqEntry, prev_end: &mut Option<u64>) -> bool {
    if !entry.is_valid() {
        return false;
    }
    if entry.is_filler() {
        return prev_end.is_none();
    }
    if prev_end.is_some_and(|end| entry.commit_log_offset < end) {
        return false;
    }
    *prev_end = Some(entry.end_offset());
    true
}

pub(super) fn parse_file_name(name: &str, file_size: usize) -> Option<u64> {
    if name.len() != 20 || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let offset: u64 = name.parse().ok()?;
    offset.is_multiple_of(file_size as u64).then_some(offset)
}

/// Reads `len` bytes from the start of `file` into memory; see
/// [`read_chunks`].
pub(crate) fn read_blocking<D: Disk + ?Sized>(
    disk: &mut D,
    file: FileId,
    path: &Path,
    len: usize,
    tag: OpTag,
) -> Result<Vec<u8>, StorageError> {
    let mut out = Vec::with_capacity(len);
    read_chunks(disk, file, path, 0..len as u64, tag, |_, bytes| {
        out.extend_from_slice(bytes)
    })?;
    Ok(out)
}

/// Reads `range` of `file` (short reads continued, end of file ends early)
/// by submitting one read at a time and polling until it completes, handing
/// each chunk to `sink(file_offset, bytes)`. For startup only. Returns the
/// bytes read.
///
/// # Errors
/// The read's error, or a timeout after [`LOAD_POLL_ROUNDS_MAX`] seconds.
///
/// # Panics
/// If other operations are in flight on the disk: their completions would be
/// swallowed.
pub(crate) fn read_chunks<D: Disk + ?Sized>(
    disk: &mut D,
    file: FileId,
    path: &Path,
    range: std::ops::Range<u64>,
    tag: OpTag,
    mut sink: impl FnMut(u64, &[u8]),
) -> Result<u64, StorageError> {
    let in_flight = disk.in_flight();
    assert!(
        in_flight == 0,
        "startup read with {in_flight} operations in flight"
    );
    let mut position = range.start;
    let mut buf = disk.buffer(CQ_LOAD_READ_SIZE);
    let mut completions = Vec::with_capacity(1);
    while position < range.end {
        let want = ((range.end - position) as usize).min(buf.capacity());
        let op = DiskOp::Read {
            file,
            file_offset: position,
            buf,
            len: want,
        };
        if let Err((error, _)) = disk.submit(OpId::new(tag, position), op, false) {
            return Err(error.into());
        }
        let mut rounds = 0;
        while completions.is_empty() {
            disk.poll(
                &mut completions,
                1,
                Wait::AtLeastOne(Duration::from_secs(1)),
            )?;
            rounds += 1;
            if completions.is_empty() && rounds >= LOAD_POLL_ROUNDS_MAX {
                return Err(StorageError::Io {
                    op: "read",
                    path: path.to_path_buf(),
                    source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                });
            }
        }
        let completion = completions.pop().expect("one completion");
        buf = completion.buf.expect("a read gives its buffer back");
        let n = completion.result?;
        sink(position, &buf.as_full_slice()[..n]);
        position += n as u64;
        if n == 0 {
            break;
        }
    }
    disk.recycle(buf);
    Ok(position - range.start)
}
