//! RocketMQ's IndexFile (protocol reference 6.4): a hash index from message
//! keys (`topic#UNIQ_KEY`, `topic#key` for each space-separated `KEYS`) to
//! CommitLog offsets, one file per 20 million entries, named by creation time
//! `yyyyMMddHHmmssSSS`.
//!
//! ```text
//! header  [begin_timestamp i64][end_timestamp i64][begin_phy_offset i64]
//!         [end_phy_offset i64][hash_slot_count i32][index_count i32]    40 bytes
//! slots   5,000,000 x [entry number i32]  (0 = empty)    at 40 + slot * 4
//! entries 20,000,000 x [key_hash i32][phy_offset i64][time_diff_s i32]
//!         [prev_index i32]                                at 40 + 20,000,000 + n * 20
//! total   420,000,040 bytes; entry 0 is never used (index_count starts at 1)
//! ```
//!
//! Insertion: `slot = key_hash % slot_count`; the new entry, at `index_count`,
//! links to the slot's previous entry; the slot then points at the new entry.
//! Lookup walks the chain from the slot, newest first, keeping entries whose
//! hash matches and whose store time (`begin_timestamp + time_diff * 1000`)
//! is within the range.
//!
//! In memory a file is a sparse image ([`image::SparseImage`]): 4 KiB pages
//! allocated on first write, so an empty 420 MB file costs its page table
//! (about 800 KiB) and a full one about 420 MB of RAM. Once a file is full
//! and every page of it is written and fdatasynced, the image is dropped
//! and the file is read through a read-only mapping ([`FileView`], advised
//! for random access), whose
//! pages are the page cache's, as RocketMQ's mapped index files: a shard
//! keeps in its own memory only the file being filled (and a full one until
//! it is durable), not every file retention keeps. A query of a full file
//! whose pages are not cached reads them from disk on the shard's thread; a
//! full file is also mapped, not read, when the store opens. The image is written behind
//! through the disk (page cache, [`OpTag::IndexFile`]): dirty pages are
//! written in runs, then an fdatasync follows (at once, before any further
//! write); the `index_count` taken with those pages becomes the file's
//! durable count when the fdatasync completes, which the store's checkpoint
//! records for abnormal recovery ([`IndexFile::recover_to`]).
//!
//! The slots of the file being filled are not written behind: pages that
//! hold only slots stay dirty in memory until the file is full (it is then
//! no longer the one being filled) or the store shuts down. Abnormal
//! recovery rebuilds every slot of the file it keeps from its durable
//! entries anyway, so slot pages on disk serve only a clean restart and a
//! full file. Writing them behind cost much: keys hash to random slots, so
//! each key dirties a 4 KiB slot page of its own, and a flush period of
//! 200,000 keys rewrote nearly all 4,883 slot pages (20 MB) of a
//! RocketMQ-sized file beside 4 MB of new entries.
//!
//! # Invariants
//! - `1 <= index_count <= entry_count_max`; entries `1..index_count` are
//!   written, every slot value and `prev_index` is `< index_count`.
//! - At most one flush (its writes, or its fdatasync) per file is in flight,
//!   so two writes of the same page never race.
//! - The header in the image equals the header fields once a flush has
//!   started (it is copied into page 0 before the dirty pages are taken).

pub mod image;
mod service;

pub use service::{IndexDurablePoint, IndexQueryResult, IndexRecord, IndexService};

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::aligned::BLOCK_SIZE;
use crate::consume_queue::read_chunks;
use crate::disk::{
    Disk, DiskError, DiskOp, FileId, FileView, OpId, OpTag, OpenOptions, created_file_id,
};
use crate::error::StorageError;
use image::{PAGE_SIZE, SparseImage};

/// Bytes of the header.
pub const INDEX_HEADER_SIZE: usize = 40;
/// Slots per file (Java `maxHashSlotNum`).
pub const INDEX_HASH_SLOT_COUNT: usize = 5_000_000;
/// Entries per file (Java `maxIndexNum`); entry 0 is unused.
pub const INDEX_ENTRY_COUNT_MAX: usize = 20_000_000;
/// Bytes of one slot.
pub const INDEX_SLOT_SIZE: usize = 4;
/// Bytes of one entry.
pub const INDEX_ENTRY_SIZE: usize = 20;
/// Bytes of a file with RocketMQ's geometry.
pub const INDEX_FILE_SIZE: usize = INDEX_HEADER_SIZE
    + INDEX_HASH_SLOT_COUNT * INDEX_SLOT_SIZE
    + INDEX_ENTRY_COUNT_MAX * INDEX_ENTRY_SIZE;
/// Name of the index directory under the store root (per shard below it).
pub const INDEX_DIR_NAME: &str = "index";
/// Largest write a flush submits (consecutive dirty pages are coalesced up
/// to this).
pub const INDEX_FLUSH_WRITE_SIZE_MAX: usize = 1024 * 1024;
/// Most bytes one flush call copies and submits; a round with more dirty
/// pages (a full file's slots: 20 MB) goes on as its writes complete, so no
/// shard turn copies more than this.
pub const INDEX_FLUSH_CALL_BYTES_MAX: usize = 1024 * 1024;
/// Largest result of one query (Java `maxMsgsNumBatch`, 64).
pub const INDEX_QUERY_RESULT_MAX: usize = 64;
/// Pages of given-up images freed per flush, periodic or early (8 MiB,
/// about 0.1 ms of the shard's turn; a full file's image goes in some fifty
/// flushes).
pub const INDEX_RELEASE_PAGES_PER_FLUSH: usize = 2048;
/// Flush errors kept until taken (later ones are only counted).
pub const INDEX_ERRORS_KEPT_MAX: usize = 16;
/// Length of a file name (`yyyyMMddHHmmssSSS`).
pub const INDEX_FILE_NAME_LEN: usize = 17;

const LOCAL_SEQ_BITS: u32 = 32;

const _: () = assert!(INDEX_HEADER_SIZE == 4 * 8 + 2 * 4);
const _: () = assert!(INDEX_ENTRY_SIZE == 4 + 8 + 4 + 4);
const _: () = assert!(INDEX_FILE_SIZE == 420_000_040);
const _: () = assert!(INDEX_ENTRY_COUNT_MAX <= i32::MAX as usize);
const _: () = assert!(INDEX_FLUSH_WRITE_SIZE_MAX.is_multiple_of(PAGE_SIZE));
const _: () = assert!(INDEX_FLUSH_CALL_BYTES_MAX >= PAGE_SIZE);
const _: () = assert!(PAGE_SIZE == BLOCK_SIZE);

/// Slot and entry counts of a file: RocketMQ's, or smaller ones for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexGeometry {
    /// Number of hash slots.
    pub hash_slot_count: u32,
    /// Number of entries, including the unused entry 0.
    pub entry_count_max: u32,
}

impl IndexGeometry {
    /// RocketMQ's geometry: 5,000,000 slots, 20,000,000 entries.
    pub const ROCKETMQ: IndexGeometry = IndexGeometry {
        hash_slot_count: INDEX_HASH_SLOT_COUNT as u32,
        entry_count_max: INDEX_ENTRY_COUNT_MAX as u32,
    };

    /// Bytes of a file.
    pub fn file_size(&self) -> usize {
        self.entry_position(self.entry_count_max as usize)
    }

    /// Byte position of slot `slot`.
    pub fn slot_position(&self, slot: usize) -> usize {
        INDEX_HEADER_SIZE + slot * INDEX_SLOT_SIZE
    }

    /// Byte position of entry `n`.
    pub fn entry_position(&self, n: usize) -> usize {
        INDEX_HEADER_SIZE + self.hash_slot_count as usize * INDEX_SLOT_SIZE + n * INDEX_ENTRY_SIZE
    }

    fn check(&self) -> Result<(), StorageError> {
        if self.hash_slot_count == 0
            || self.entry_count_max < 2
            || self.entry_count_max > i32::MAX as u32
        {
            return Err(StorageError::InvalidArgument(format!(
                "index geometry {self:?}"
            )));
        }
        Ok(())
    }
}

/// The 40-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IndexHeader {
    /// Store timestamp of the first indexed message (ms).
    pub begin_timestamp: i64,
    /// Store timestamp of the last indexed message (ms).
    pub end_timestamp: i64,
    /// CommitLog offset of the first indexed message.
    pub begin_phy_offset: i64,
    /// CommitLog offset of the last indexed message.
    pub end_phy_offset: i64,
    /// Number of non-empty slots.
    pub hash_slot_count: i32,
    /// Next entry number; starts at 1.
    pub index_count: i32,
}

impl IndexHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; INDEX_HEADER_SIZE] {
        let mut out = [0u8; INDEX_HEADER_SIZE];
        out[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        out[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        out[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        out[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        out[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        out[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        out
    }

    /// Reads a header from the image (an `index_count` ≤ 0 reads as 1, as
    /// Java's `IndexHeader.load` does).
    fn read(image: &SparseImage) -> IndexHeader {
        IndexHeader {
            begin_timestamp: image.read_i64(0),
            end_timestamp: image.read_i64(8),
            begin_phy_offset: image.read_i64(16),
            end_phy_offset: image.read_i64(24),
            hash_slot_count: image.read_i32(32),
            index_count: image.read_i32(36).max(1),
        }
    }
}

/// Formats a ms timestamp (UTC) as `yyyyMMddHHmmssSSS`.
pub fn format_index_file_name(timestamp_ms: i64) -> String {
    let days = timestamp_ms.div_euclid(86_400_000);
    let ms_of_day = timestamp_ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (second, milli) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}{month:02}{day:02}{hour:02}{minute:02}{second:02}{milli:03}")
}

/// Parses a `yyyyMMddHHmmssSSS` name (UTC) back to a ms timestamp.
pub fn parse_index_file_name(name: &str) -> Option<i64> {
    if name.len() != INDEX_FILE_NAME_LEN || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |range: Range<usize>| name[range].parse::<i64>().ok();
    let (year, month, day) = (field(0..4)?, field(4..6)?, field(6..8)?);
    let (hour, minute, second, milli) = (
        field(8..10)?,
        field(10..12)?,
        field(12..14)?,
        field(14..17)?,
    );
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// The proleptic Gregorian calendar in 400-year eras of 146,097 days, with
// years starting on March 1st so the leap day ends the year.
const DAYS_PER_ERA: i64 = 146_097;
// Days from 0000-03-01 to 1970-01-01.
const EPOCH_SHIFT_DAYS: i64 = 719_468;

/// (year, month 1–12, day 1–31) of a day number (days since 1970-01-01).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + EPOCH_SHIFT_DAYS;
    let era = shifted.div_euclid(DAYS_PER_ERA);
    let day_of_era = shifted.rem_euclid(DAYS_PER_ERA);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Day number (days since 1970-01-01) of a civil date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * DAYS_PER_ERA + day_of_era - EPOCH_SHIFT_DAYS
}

#[derive(Debug, Default)]
struct Flush {
    /// Writes in flight: local sequence number → pages.
    writes: HashMap<u32, Range<usize>>,
    /// The fdatasync in flight, if any.
    sync: Option<u32>,
    /// The background create of the file in flight, if any.
    create: Option<u32>,
    /// Writes completed since the last successful fdatasync.
    needs_sync: bool,
    /// `index_count` when the round of writes in flight started.
    writing_count: i32,
    /// The round's pages not all taken yet: the next flush goes on with
    /// them before any fdatasync.
    round: Option<Round>,
    /// A write of the flush in flight failed or came up short (its pages
    /// are dirty again).
    writing_failed: bool,
    /// `index_count` whose entries are all written (not yet synced).
    written_count: i32,
    /// `written_count` when the fdatasync in flight was submitted.
    syncing_count: i32,
    /// `index_count` whose entries are all written and fdatasynced.
    durable_count: i32,
}

/// The pages a round of writes covers: dirty pages of `pages` outside
/// `held`, as they were when it started (and as they are when taken).
#[derive(Clone, Debug)]
struct Round {
    pages: Range<usize>,
    held: Range<usize>,
}

/// One index file in memory.
#[derive(Debug)]
pub struct IndexFile {
    name: String,
    created_ms: i64,
    geometry: IndexGeometry,
    header: IndexHeader,
    header_dirty: bool,
    /// The file's bytes while it is filled or not yet durable; empty once
    /// `view` holds them.
    image: SparseImage,
    /// A full, durable file's bytes on disk (see the module doc).
    view: Option<FileView>,
    /// Mapping this full file failed once (logged); it stays in memory.
    view_failed: bool,
    file: Option<FileId>,
    /// Distinguishes this file's operations within the service.
    serial: u32,
    next_local_seq: u32,
    flush: Flush,
}

impl IndexFile {
    /// An empty file created at `created_ms`, continuing after a file whose
    /// header ended at `prev_end` (Java copies the previous file's end
    /// offset and timestamp into the new header's begin and end).
    pub fn new(geometry: IndexGeometry, created_ms: i64, prev_end: Option<(i64, i64)>) -> Self {
        let mut header = IndexHeader {
            index_count: 1,
            ..IndexHeader::default()
        };
        if let Some((end_phy_offset, end_timestamp)) = prev_end {
            if end_phy_offset > 0 {
                header.begin_phy_offset = end_phy_offset;
                header.end_phy_offset = end_phy_offset;
            }
            if end_timestamp > 0 {
                header.begin_timestamp = end_timestamp;
                header.end_timestamp = end_timestamp;
            }
        }
        IndexFile {
            name: format_index_file_name(created_ms),
            created_ms,
            geometry,
            header,
            header_dirty: true,
            image: SparseImage::new(geometry.file_size()),
            view: None,
            view_failed: false,
            file: None,
            serial: 0,
            next_local_seq: 0,
            flush: Flush::default(),
        }
    }

    /// The file name (`yyyyMMddHHmmssSSS`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header as it stands in memory.
    pub fn header(&self) -> &IndexHeader {
        &self.header
    }

    /// Whether no more entry fits (`index_count` reached the maximum).
    pub fn is_full(&self) -> bool {
        self.header.index_count as u32 >= self.geometry.entry_count_max
    }

    /// Pages of the image held in memory (none once the file is read
    /// through a view).
    pub fn allocated_pages(&self) -> usize {
        self.image.allocated_pages()
    }

    /// Whether the file is read through a read-only view of it on disk.
    pub fn is_on_view(&self) -> bool {
        self.view.is_some()
    }

    /// `N` bytes at `position`, from the view or the image; bytes past the
    /// end of a view (a file shorter than its geometry) or in one of its
    /// holes (slot pages no key ever reached) read as zeros, as unwritten
    /// pages of an image do, without touching the mapping there (on a full
    /// tmpfs that would raise SIGBUS).
    fn read_bytes<const N: usize>(&self, position: usize) -> [u8; N] {
        let mut out = [0u8; N];
        match &self.view {
            Some(view) => {
                if view.holds_data(position, N) {
                    out.copy_from_slice(&view[position..position + N]);
                } else {
                    for (at, byte) in (position..position + N).zip(out.iter_mut()) {
                        if view.holds_data(at, 1) {
                            *byte = view[at];
                        }
                    }
                }
            }
            None => self.image.read(position, &mut out),
        }
        out
    }

    fn read_i32(&self, position: usize) -> i32 {
        i32::from_be_bytes(self.read_bytes(position))
    }

    fn read_i64(&self, position: usize) -> i64 {
        i64::from_be_bytes(self.read_bytes(position))
    }

    /// Whether the image can give way to a view: the file is full, and
    /// every page of it is written and fdatasynced.
    fn can_leave_memory(&self) -> bool {
        self.view.is_none()
            && !self.view_failed
            && self.is_full()
            && self.is_clean()
            && self.flush.durable_count == self.header.index_count
    }

    /// Maps the file and gives up the image, which is returned to be freed
    /// (see [`SparseImage::release_pages`]). The mapping's header must be
    /// the one written; otherwise, or if mapping fails, the image stays and
    /// the error is returned (and not tried again).
    fn leave_memory<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        dir: &Path,
    ) -> Result<SparseImage, StorageError> {
        let path = self.path(dir);
        let view = match disk.map_read_only(&path) {
            Ok(view) => view,
            Err(error) => {
                self.view_failed = true;
                return Err(error.into());
            }
        };
        if view.get(..INDEX_HEADER_SIZE) != Some(&self.header.encode()[..]) {
            self.view_failed = true;
            return Err(StorageError::Corrupt {
                path,
                file_offset: 0,
                reason: "the header on disk is not the one written and synced".to_string(),
            });
        }
        // Lookups follow hash chains to scattered entries.
        view.advise_random();
        self.view = Some(view);
        Ok(std::mem::replace(&mut self.image, SparseImage::new(0)))
    }

    /// Reads a file on a view back into an image (abnormal recovery cuts
    /// and rewrites it).
    fn back_into_memory(&mut self) {
        let Some(view) = self.view.take() else {
            return;
        };
        let mut image = SparseImage::new(self.geometry.file_size());
        let page_count = self.geometry.file_size().div_ceil(PAGE_SIZE);
        for (page, bytes) in view.chunks(PAGE_SIZE).take(page_count).enumerate() {
            image.load_page(page, bytes);
        }
        self.image = image;
    }

    /// Adds one key (Java `IndexFile.putKey`). Returns false, changing
    /// nothing, when the file is full.
    pub fn put_key(&mut self, key_hash: i32, phy_offset: u64, store_timestamp_ms: i64) -> bool {
        if self.is_full() {
            return false;
        }
        assert!(key_hash >= 0, "key hash {key_hash} is negative");
        let slot = key_hash as usize % self.geometry.hash_slot_count as usize;
        let slot_position = self.geometry.slot_position(slot);
        let index_count = self.header.index_count;
        let mut slot_value = self.image.read_i32(slot_position);
        if slot_value <= 0 || slot_value > index_count {
            slot_value = 0;
        }
        let time_diff_s = if self.header.begin_timestamp <= 0 {
            0
        } else {
            ((store_timestamp_ms - self.header.begin_timestamp) / 1000)
                .clamp(0, i64::from(i32::MAX)) as i32
        };
        let mut entry = [0u8; INDEX_ENTRY_SIZE];
        entry[0..4].copy_from_slice(&key_hash.to_be_bytes());
        entry[4..12].copy_from_slice(&(phy_offset as i64).to_be_bytes());
        entry[12..16].copy_from_slice(&time_diff_s.to_be_bytes());
        entry[16..20].copy_from_slice(&slot_value.to_be_bytes());
        self.image
            .write(self.geometry.entry_position(index_count as usize), &entry);
        self.image.write(slot_position, &index_count.to_be_bytes());
        if index_count <= 1 {
            self.header.begin_phy_offset = phy_offset as i64;
            self.header.begin_timestamp = store_timestamp_ms;
        }
        if slot_value == 0 {
            self.header.hash_slot_count += 1;
        }
        self.header.index_count += 1;
        self.header.end_phy_offset = phy_offset as i64;
        self.header.end_timestamp = store_timestamp_ms;
        self.header_dirty = true;
        true
    }

    /// Whether the file's time span overlaps `[begin_ms, end_ms]` (Java
    /// `IndexFile.isTimeMatched`).
    pub fn is_time_matched(&self, begin_ms: i64, end_ms: i64) -> bool {
        let (file_begin, file_end) = (self.header.begin_timestamp, self.header.end_timestamp);
        (begin_ms < file_begin && end_ms > file_end)
            || (begin_ms >= file_begin && begin_ms <= file_end)
            || (end_ms >= file_begin && end_ms <= file_end)
    }

    /// Appends to `out` the CommitLog offsets of entries with `key_hash`
    /// stored within `[begin_ms, end_ms]`, newest first, until `out` holds
    /// `max_num` (Java `IndexFile.selectPhyOffset`).
    pub fn select_phy_offsets(
        &self,
        out: &mut Vec<u64>,
        key_hash: i32,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) {
        let index_count = self.header.index_count;
        let slot = key_hash as usize % self.geometry.hash_slot_count as usize;
        let slot_value = self.read_i32(self.geometry.slot_position(slot));
        if slot_value <= 0 || slot_value > index_count || index_count <= 1 {
            return;
        }
        let mut next = slot_value;
        // Each step moves to an older entry, so the walk ends within
        // index_count steps even on a corrupt chain.
        for _ in 0..index_count {
            if out.len() >= max_num {
                break;
            }
            let position = self.geometry.entry_position(next as usize);
            let hash_read = self.read_i32(position);
            let phy_offset = self.read_i64(position + 4);
            let time_diff_s = self.read_i32(position + 12);
            let prev = self.read_i32(position + 16);
            if time_diff_s < 0 {
                break;
            }
            let time_read = self.header.begin_timestamp + i64::from(time_diff_s) * 1000;
            if hash_read == key_hash && time_read >= begin_ms && time_read <= end_ms {
                out.push(phy_offset as u64);
            }
            if prev <= 0 || prev > index_count || prev == next || time_read < begin_ms {
                break;
            }
            next = prev;
        }
    }

    fn path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.name)
    }

    fn is_idle(&self) -> bool {
        self.flush.writes.is_empty() && self.flush.sync.is_none() && self.flush.create.is_none()
    }

    /// Whether a round of writes has pages left to take.
    fn round_open(&self) -> bool {
        self.flush.round.is_some()
    }

    /// Bytes of entries put since the current or last round started.
    fn unwritten_entry_bytes(&self) -> usize {
        (self.header.index_count - self.flush.writing_count).max(0) as usize * INDEX_ENTRY_SIZE
    }

    fn is_clean(&self) -> bool {
        self.is_idle()
            && !self.header_dirty
            && self.image.dirty_count() == 0
            && !self.flush.needs_sync
    }

    fn op_id(&self, local_seq: u32) -> OpId {
        OpId::new(
            OpTag::IndexFile,
            (u64::from(self.serial) << LOCAL_SEQ_BITS) | u64::from(local_seq),
        )
    }

    fn take_local_seq(&mut self) -> u32 {
        let seq = self.next_local_seq;
        self.next_local_seq = self.next_local_seq.wrapping_add(1);
        seq
    }

    /// Pages that hold only hash slots (page 0, with the header, is not one
    /// of them).
    fn slot_only_pages(&self) -> Range<usize> {
        1..(self.geometry.entry_position(0) / PAGE_SIZE).max(1)
    }

    /// Starts or goes on with a round of writes, or, when a round's writes
    /// completed, submits the fdatasync that makes its `index_count`
    /// durable. A round covers the dirty pages when it starts (header first
    /// copied in) up to the page of the last entry, without the slot-only
    /// pages unless `slots` is set (see the module doc), and takes at most
    /// [`INDEX_FLUSH_CALL_BYTES_MAX`] per call. Nothing while operations of
    /// the file are in flight. Returns the operations submitted; stops
    /// early when the disk's queue is full.
    fn flush<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        dir: &Path,
        slots: bool,
    ) -> Result<usize, StorageError> {
        if !self.is_idle() {
            return Ok(0);
        }
        if self.flush.round.is_none() && self.header_dirty {
            self.image.write(0, &self.header.encode());
            self.header_dirty = false;
        }
        if self.image.dirty_count() == 0 && !self.flush.needs_sync {
            return Ok(0);
        }
        let Some(id) = self.file else {
            self.start_create(disk, dir)?;
            return Ok(0);
        };
        // Completed writes are synced before another round starts, so under
        // a steady stream of keys the entries still become durable (and
        // `durable_count` moves).
        if self.flush.needs_sync && self.flush.round.is_none() {
            let local_seq = self.take_local_seq();
            return match disk.submit(self.op_id(local_seq), DiskOp::Fdatasync { file: id }, false) {
                Ok(()) => {
                    self.flush.sync = Some(local_seq);
                    self.flush.syncing_count = self.flush.written_count;
                    Ok(1)
                }
                Err((DiskError::QueueFull { .. }, _)) => Ok(0),
                Err((error, _)) => Err(error.into()),
            };
        }
        let round = match self.flush.round.take() {
            Some(round) => round,
            None => {
                self.flush.writing_count = self.header.index_count;
                self.flush.writing_failed = false;
                if slots {
                    Round {
                        pages: 0..usize::MAX,
                        held: 0..0,
                    }
                } else {
                    let entries_end = self
                        .geometry
                        .entry_position(self.header.index_count as usize);
                    Round {
                        pages: 0..entries_end.div_ceil(PAGE_SIZE),
                        held: self.slot_only_pages(),
                    }
                }
            }
        };
        let (runs, more) = self.image.take_dirty_runs(
            round.pages.clone(),
            round.held.clone(),
            INDEX_FLUSH_WRITE_SIZE_MAX / PAGE_SIZE,
            INDEX_FLUSH_CALL_BYTES_MAX / PAGE_SIZE,
        );
        if more {
            self.flush.round = Some(round.clone());
        }
        if runs.is_empty() {
            return Ok(0);
        }
        let mut submitted = 0;
        let mut runs = runs.into_iter();
        while let Some(run) = runs.next() {
            let mut buf = disk.buffer(run.len() * PAGE_SIZE);
            let len = self.image.copy_pages(run.clone(), buf.as_full_mut_slice());
            buf.set_len(len);
            let local_seq = self.take_local_seq();
            let op = DiskOp::Write {
                file: id,
                file_offset: (run.start * PAGE_SIZE) as u64,
                buf,
                buf_range: 0..len,
            };
            match disk.submit(self.op_id(local_seq), op, false) {
                Ok(()) => {
                    self.flush.writes.insert(local_seq, run);
                    submitted += 1;
                }
                Err((error, op)) => {
                    if let DiskOp::Write { buf, .. } = op {
                        disk.recycle(buf);
                    }
                    self.image.mark_dirty_range(run);
                    for rest in runs.by_ref() {
                        self.image.mark_dirty_range(rest);
                    }
                    // The round goes on with them at the next flush.
                    self.flush.round = Some(round);
                    if matches!(error, DiskError::QueueFull { .. }) {
                        break;
                    }
                    return Err(error.into());
                }
            }
        }
        Ok(submitted)
    }

    /// Starts creating the file in the background: a sparse file of Java's
    /// size (an empty index file costs no disk space), fsynced with its
    /// directory off the shard's thread. Its pages stay dirty in the image
    /// until the create completes; nothing when the disk's queue is full
    /// (the next flush tries again).
    fn start_create<D: Disk + ?Sized>(
        &mut self,
        disk: &mut D,
        dir: &Path,
    ) -> Result<(), StorageError> {
        disk.create_dir_all(dir)?;
        let path = self.path(dir);
        let local_seq = self.take_local_seq();
        let options = OpenOptions::buffered_sparse(self.geometry.file_size() as u64);
        match disk.submit_create(self.op_id(local_seq), &path, options) {
            Ok(()) => {
                self.flush.create = Some(local_seq);
                Ok(())
            }
            Err(DiskError::QueueFull { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Handles a completion of this file; returns the error to report, if any.
    fn on_completion(
        &mut self,
        local_seq: u32,
        result: Result<usize, DiskError>,
    ) -> Option<StorageError> {
        if self.flush.create == Some(local_seq) {
            self.flush.create = None;
            return match result {
                Ok(value) => {
                    self.file = Some(created_file_id(value));
                    None
                }
                // The file may be there, empty; the next flush creates it
                // again (O_TRUNC).
                Err(error) => Some(error.into()),
            };
        }
        if self.flush.sync == Some(local_seq) {
            self.flush.sync = None;
            return match result {
                Ok(_) => {
                    // Writes completed after the sync was submitted keep
                    // `needs_sync`; they were not covered.
                    self.flush.needs_sync = self.flush.written_count > self.flush.syncing_count;
                    self.flush.durable_count =
                        self.flush.durable_count.max(self.flush.syncing_count);
                    None
                }
                Err(error) => Some(error.into()),
            };
        }
        let run = self.flush.writes.remove(&local_seq)?;
        let expected = ((run.end * PAGE_SIZE).min(self.image.size())) - run.start * PAGE_SIZE;
        let error = match result {
            Ok(n) if n == expected => {
                self.flush.needs_sync = true;
                None
            }
            Ok(n) => {
                tracing::debug!(written = n, expected, "short index file write");
                self.image.mark_dirty_range(run);
                self.flush.writing_failed = true;
                None
            }
            Err(error) => {
                self.image.mark_dirty_range(run);
                self.flush.writing_failed = true;
                Some(error.into())
            }
        };
        if self.flush.writes.is_empty() && self.flush.round.is_none() && !self.flush.writing_failed
        {
            self.flush.written_count = self.flush.written_count.max(self.flush.writing_count);
        }
        error
    }

    /// Loads a file: header, then the slots and written entries, keeping only
    /// non-zero pages; a full file is mapped instead (see the module doc).
    fn load<D: Disk + ?Sized>(
        disk: &mut D,
        dir: &Path,
        name: &str,
        created_ms: i64,
        geometry: IndexGeometry,
    ) -> Result<IndexFile, StorageError> {
        let path = dir.join(name);
        let id = disk.open(&path, OpenOptions::buffered(None))?;
        let size = disk.file_size(id)?;
        let mut image = SparseImage::new(geometry.file_size());
        let header_bytes = crate::consume_queue::read_blocking(
            disk,
            id,
            &path,
            INDEX_HEADER_SIZE,
            OpTag::IndexFile,
        )?;
        let mut header_image = SparseImage::new(INDEX_HEADER_SIZE);
        if header_bytes.len() == INDEX_HEADER_SIZE {
            header_image.write(0, &header_bytes);
        }
        let header = IndexHeader::read(&header_image);
        if header.index_count as u32 > geometry.entry_count_max || header.hash_slot_count < 0 {
            return Err(StorageError::Corrupt {
                path,
                file_offset: 32,
                reason: format!(
                    "header {header:?} does not fit {} slots and {} entries",
                    geometry.hash_slot_count, geometry.entry_count_max
                ),
            });
        }
        let mut file = IndexFile::new(geometry, created_ms, None);
        file.name = name.to_string();
        file.header = header;
        file.header_dirty = false;
        file.file = Some(id);
        // What a file holds when the store opens counts as durable: after a
        // clean stop it was synced, and after an abnormal one recovery
        // either cuts it back to its durable count (`recover_to`) or
        // rebuilds the index.
        file.flush.written_count = header.index_count;
        file.flush.durable_count = header.index_count;
        if file.is_full() {
            match file.leave_memory(disk, dir) {
                Ok(_) => return Ok(file),
                Err(error) => {
                    tracing::warn!(%error, "index file not mapped; it is read into memory");
                }
            }
        }
        let used = (geometry.entry_position(header.index_count as usize) as u64).min(size);
        let mut pending: Vec<u8> = Vec::with_capacity(PAGE_SIZE);
        let mut page = 0usize;
        // Chunks need not end on page boundaries (short reads): gather pages.
        read_chunks(
            disk,
            id,
            &path,
            0..used,
            OpTag::IndexFile,
            |_, mut bytes| {
                while !bytes.is_empty() {
                    let take = (PAGE_SIZE - pending.len()).min(bytes.len());
                    pending.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if pending.len() == PAGE_SIZE {
                        image.load_page(page, &pending);
                        pending.clear();
                        page += 1;
                    }
                }
            },
        )?;
        if !pending.is_empty() {
            image.load_page(page, &pending);
        }
        file.image = image;
        Ok(file)
    }

    /// The CommitLog offset of entry `n` (`1 <= n < index_count`).
    pub fn entry_phy_offset(&self, n: usize) -> u64 {
        self.read_i64(self.geometry.entry_position(n) + 4) as u64
    }

    /// `index_count` up to which every entry is written and fdatasynced.
    pub fn durable_count(&self) -> i32 {
        self.flush.durable_count
    }

    /// Abnormal recovery: keeps entries `1..count` (known durable), drops
    /// the rest, and rebuilds every hash slot and the header from the kept
    /// entries, since slot pages written after them may be torn or point at
    /// dropped entries. False, changing nothing, if the loaded file cannot
    /// hold those entries (a header with fewer, or a begin offset that is
    /// not the first entry's).
    pub fn recover_to(&mut self, count: i32) -> bool {
        let loaded = self.header.index_count;
        if count < 1 || count > loaded {
            return false;
        }
        self.back_into_memory();
        let read_entry = |image: &SparseImage, n: usize| {
            let position = self.geometry.entry_position(n);
            (
                image.read_i32(position),
                image.read_i64(position + 4),
                image.read_i32(position + 12),
            )
        };
        if count > 1 && read_entry(&self.image, 1).1 != self.header.begin_phy_offset {
            return false;
        }
        let slot_count = self.geometry.hash_slot_count as usize;
        let zero_page = [0u8; PAGE_SIZE];
        // Slots: zeroed, then each set to the newest kept entry of its hash.
        let slots_start = self.geometry.slot_position(0);
        let slots_end = self.geometry.slot_position(slot_count);
        let mut at = slots_start;
        while at < slots_end {
            let len = (slots_end - at).min(PAGE_SIZE - at % PAGE_SIZE);
            if self.image.is_allocated(at / PAGE_SIZE) {
                self.image.write(at, &zero_page[..len]);
            }
            at += len;
        }
        let mut used_slots = 0;
        for n in 1..count as usize {
            let (key_hash, _, _) = read_entry(&self.image, n);
            let slot = (key_hash.max(0) as usize) % slot_count;
            let position = self.geometry.slot_position(slot);
            if self.image.read_i32(position) == 0 {
                used_slots += 1;
            }
            self.image.write(position, &(n as i32).to_be_bytes());
        }
        // Entries past the durable ones are zeroed.
        let mut at = self.geometry.entry_position(count as usize);
        let end = self.geometry.entry_position(loaded as usize);
        while at < end {
            let len = (end - at).min(PAGE_SIZE - at % PAGE_SIZE);
            if self.image.is_allocated(at / PAGE_SIZE) {
                self.image.write(at, &zero_page[..len]);
            }
            at += len;
        }
        self.header.index_count = count;
        self.header.hash_slot_count = used_slots;
        if count > 1 {
            let (_, phy_offset, time_diff_s) = read_entry(&self.image, count as usize - 1);
            self.header.end_phy_offset = phy_offset;
            // Entry times are whole seconds after the begin: the end is set
            // to the last millisecond of the last entry's second, so queries
            // still find the file (a later end only costs a scan).
            self.header.end_timestamp =
                self.header.begin_timestamp + (i64::from(time_diff_s) + 1) * 1000 - 1;
        } else {
            self.header.end_phy_offset = self.header.begin_phy_offset;
            self.header.end_timestamp = self.header.begin_timestamp;
        }
        self.header_dirty = true;
        self.flush.written_count = count;
        self.flush.durable_count = count;
        true
    }

    fn close_and_remove<D: Disk + ?Sized>(
        self,
        disk: &mut D,
        dir: &Path,
    ) -> Result<(), StorageError> {
        assert!(
            self.is_idle(),
            "removing index file {} with a flush in flight",
            self.name
        );
        if let Some(id) = self.file {
            disk.close(id)?;
            disk.remove(&self.path(dir))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: IndexGeometry = IndexGeometry {
        hash_slot_count: 8,
        entry_count_max: 6,
    };

    #[test]
    fn rocketmq_geometry_places_slots_and_entries_as_java_does() {
        let g = IndexGeometry::ROCKETMQ;
        assert_eq!(g.file_size(), 420_000_040);
        assert_eq!(g.slot_position(0), 40);
        assert_eq!(g.slot_position(4_999_999), 40 + 4_999_999 * 4);
        assert_eq!(g.entry_position(0), 20_000_040);
        assert_eq!(g.entry_position(1), 20_000_060);
        assert_eq!(SMALL.file_size(), 40 + 8 * 4 + 6 * 20);
    }

    #[test]
    fn header_fields_sit_at_their_byte_positions() {
        let header = IndexHeader {
            begin_timestamp: 0x0101_0101_0101_0101,
            end_timestamp: 0x0202_0202_0202_0202,
            begin_phy_offset: 0x0303_0303_0303_0303,
            end_phy_offset: 0x0404_0404_0404_0404,
            hash_slot_count: 0x0505_0505,
            index_count: 0x0606_0606,
        };
        let bytes = header.encode();
        for (range, value) in [
            (0..8, 1u8),
            (8..16, 2),
            (16..24, 3),
            (24..32, 4),
            (32..36, 5),
            (36..40, 6),
        ] {
            assert!(
                bytes[range.clone()].iter().all(|b| *b == value),
                "{range:?}"
            );
        }
        let mut image = SparseImage::new(INDEX_HEADER_SIZE);
        image.write(0, &bytes);
        assert_eq!(IndexHeader::read(&image), header);
    }

    #[test]
    fn header_index_count_of_zero_reads_as_one() {
        let image = SparseImage::new(INDEX_HEADER_SIZE);
        assert_eq!(IndexHeader::read(&image).index_count, 1);
    }

    #[test]
    fn put_key_writes_entry_at_index_count_and_points_the_slot_at_it() {
        let mut file = IndexFile::new(SMALL, 0, None);
        assert!(file.put_key(11, 5000, 1_000_000));
        let entry_at = SMALL.entry_position(1);
        assert_eq!(file.image.read_i32(entry_at), 11, "key hash");
        assert_eq!(file.image.read_i64(entry_at + 4), 5000, "phy offset");
        assert_eq!(
            file.image.read_i32(entry_at + 12),
            0,
            "time diff of the first entry"
        );
        assert_eq!(file.image.read_i32(entry_at + 16), 0, "prev index");
        assert_eq!(file.image.read_i32(SMALL.slot_position(11 % 8)), 1);
        let h = *file.header();
        assert_eq!((h.index_count, h.hash_slot_count), (2, 1));
        assert_eq!((h.begin_phy_offset, h.end_phy_offset), (5000, 5000));
        assert_eq!((h.begin_timestamp, h.end_timestamp), (1_000_000, 1_000_000));
    }

    #[test]
    fn colliding_slots_chain_newest_first_and_lookup_filters_by_hash() {
        let mut file = IndexFile::new(SMALL, 0, None);
        // 3 and 11 share slot 3; 4 has its own.
        assert!(file.put_key(3, 100, 1_000));
        assert!(file.put_key(11, 200, 2_000));
        assert!(file.put_key(4, 300, 3_000));
        assert!(file.put_key(3, 400, 4_000));
        assert_eq!(
            file.image.read_i32(SMALL.entry_position(2) + 16),
            1,
            "entry 2 links to 1"
        );
        assert_eq!(
            file.image.read_i32(SMALL.entry_position(4) + 16),
            2,
            "entry 4 links to 2"
        );
        assert_eq!(file.image.read_i32(SMALL.slot_position(3)), 4);
        assert_eq!(file.header().hash_slot_count, 2);
        let mut out = Vec::new();
        file.select_phy_offsets(&mut out, 3, 10, 0, i64::MAX);
        assert_eq!(out, vec![400, 100]);
        out.clear();
        file.select_phy_offsets(&mut out, 11, 10, 0, i64::MAX);
        assert_eq!(out, vec![200]);
        out.clear();
        file.select_phy_offsets(&mut out, 5, 10, 0, i64::MAX);
        assert!(out.is_empty());
    }

    #[test]
    fn time_diff_is_whole_seconds_since_begin_clamped_at_zero() {
        let mut file = IndexFile::new(SMALL, 0, None);
        assert!(file.put_key(1, 10, 10_000));
        assert!(file.put_key(1, 20, 12_999));
        assert!(file.put_key(1, 30, 5_000));
        assert_eq!(file.image.read_i32(SMALL.entry_position(2) + 12), 2);
        assert_eq!(
            file.image.read_i32(SMALL.entry_position(3) + 12),
            0,
            "older than begin"
        );
    }

    #[test]
    fn lookup_keeps_entries_in_the_time_range_and_stops_at_max_num() {
        let mut file = IndexFile::new(SMALL, 0, None);
        for (i, ts) in [10_000, 20_000, 30_000, 40_000, 50_000].iter().enumerate() {
            assert!(file.put_key(7, i as u64, *ts));
        }
        let select = |max: usize, begin: i64, end: i64| {
            let mut out = Vec::new();
            file.select_phy_offsets(&mut out, 7, max, begin, end);
            out
        };
        assert_eq!(select(10, 20_000, 40_000), vec![3, 2, 1]);
        assert_eq!(select(2, 0, i64::MAX), vec![4, 3]);
        assert_eq!(select(10, 45_000, 46_000), Vec::<u64>::new());
        assert_eq!(select(10, 50_000, 50_000), vec![4]);
    }

    #[test]
    fn a_file_is_full_one_entry_before_entry_count_max() {
        let mut file = IndexFile::new(SMALL, 0, None);
        for i in 0..5 {
            assert!(file.put_key(i, u64::from(i as u32), 1), "entry {i}");
        }
        assert!(file.is_full());
        assert!(!file.put_key(1, 99, 1));
        assert_eq!(file.header().index_count, 6);
    }

    #[test]
    fn a_new_file_begins_where_the_previous_one_ended() {
        let file = IndexFile::new(SMALL, 0, Some((777, 888)));
        let h = file.header();
        assert_eq!(
            (
                h.begin_phy_offset,
                h.end_phy_offset,
                h.begin_timestamp,
                h.end_timestamp
            ),
            (777, 777, 888, 888)
        );
        assert_eq!(h.index_count, 1);
    }

    #[test]
    fn is_time_matched_follows_java() {
        let mut file = IndexFile::new(SMALL, 0, None);
        file.put_key(1, 1, 100);
        file.put_key(1, 2, 200);
        assert!(file.is_time_matched(50, 250), "covers");
        assert!(file.is_time_matched(150, 300), "begins inside");
        assert!(file.is_time_matched(0, 100), "ends inside");
        assert!(!file.is_time_matched(0, 99));
        assert!(!file.is_time_matched(201, 300));
    }

    #[test]
    fn file_names_are_utc_civil_time_with_milliseconds() {
        let cases = [
            (0, "19700101000000000"),
            (1_704_110_400_123, "20240101120000123"),
            (1_709_251_199_999, "20240229235959999"),
            (951_782_400_000, "20000229000000000"),
            (4_107_546_123_004, "21000301010203004"),
            (-1, "19691231235959999"),
        ];
        for (ms, name) in cases {
            assert_eq!(format_index_file_name(ms), name, "{ms}");
            assert_eq!(parse_index_file_name(name), Some(ms), "{name}");
        }
    }

    #[test]
    fn file_name_round_trips_over_many_days() {
        let mut ms = -86_400_000 * 800;
        while ms < 4_200_000_000_000 {
            assert_eq!(
                parse_index_file_name(&format_index_file_name(ms)),
                Some(ms),
                "{ms}"
            );
            ms += 86_400_000 * 37 + 3_723_456;
        }
    }

    #[test]
    fn parse_rejects_names_that_are_not_dates() {
        for name in [
            "2024010112000012",
            "2024013112000012x",
            "20241301120000123",
            "20230229120000123",
            "20240101240000123",
        ] {
            assert_eq!(parse_index_file_name(name), None, "{name}");
        }
    }

    #[test]
    fn recover_to_keeps_the_durable_entries_and_rebuilds_their_slots() {
        let mut file = IndexFile::new(SMALL, 1_000, None);
        // Hashes 1 and 9 share slot 1 of 8.
        for (hash, phy) in [(1, 10), (9, 20), (2, 30), (1, 40), (9, 50)] {
            assert!(file.put_key(hash, phy, 2_000 + phy as i64));
        }
        assert_eq!(file.header().index_count, 6);
        assert!(!file.recover_to(7), "more entries than the file holds");
        assert!(file.recover_to(4));
        let select = |file: &IndexFile, hash| {
            let mut out = Vec::new();
            file.select_phy_offsets(&mut out, hash, 10, 0, i64::MAX);
            out
        };
        assert_eq!(select(&file, 1), vec![10]);
        assert_eq!(select(&file, 9), vec![20]);
        assert_eq!(select(&file, 2), vec![30]);
        assert_eq!(file.header().index_count, 4);
        assert_eq!(file.header().end_phy_offset, 30);
        assert_eq!(file.header().hash_slot_count, 2);
        assert!(file.header().end_timestamp >= 2_030);
        assert_eq!(file.durable_count(), 4);
        // New keys continue after the kept ones.
        assert!(file.put_key(1, 60, 2_060));
        assert_eq!(select(&file, 1), vec![60, 10]);
    }
}
