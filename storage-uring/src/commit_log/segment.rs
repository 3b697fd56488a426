//! CommitLog segment files: naming, listing, opening and creating ahead of
//! need.
//!
//! A segment is `<root>/commitlog/<shard>/<20-digit offset>`, named by the
//! shard-local CommitLog offset of its first byte (RocketMQ's naming, 6.2),
//! preallocated and zero-filled to the configured segment size.
//!
//! # Invariants
//! - Segment bases are multiples of the segment size and strictly increase
//!   in `segments`, without gaps.
//! - Every segment in the set is open and exactly `segment_size` bytes long.
//! - A segment joins the set only once its creation (open, fallocate, fsync
//!   of the file and of the directory, or the rename of a spare and the
//!   fsync of the directory) is complete; so only the newest file can be a
//!   creation cut short by a crash, and it holds no data of this life (a
//!   renamed spare holds records of its earlier one, rejected by their
//!   PHYSICALOFFSET).
//! - Spares (`<20-digit old base>.spare`) are not segments: full-size files
//!   retention retired, kept to be renamed into a later segment.

use std::path::{Path, PathBuf};

use crate::disk::{Disk, FileId, OpenOptions, remove_files};
use crate::error::StorageError;

/// Digits in a segment file name (RocketMQ: 20, zero-padded).
pub const SEGMENT_NAME_DIGITS: usize = 20;

/// The file name of the segment starting at shard-local offset `base`.
pub fn segment_file_name(base: u64) -> String {
    format!("{base:0width$}", width = SEGMENT_NAME_DIGITS)
}

/// The base offset named by a segment file name, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    if name.len() != SEGMENT_NAME_DIGITS || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Suffix of a spare: a segment file retention retired, kept (full size,
/// its extents written) to be renamed into a later segment instead of
/// creating one.
pub const SPARE_SUFFIX: &str = ".spare";

/// The file name of the spare made from the segment that started at `base`.
pub fn spare_file_name(base: u64) -> String {
    format!("{}{SPARE_SUFFIX}", segment_file_name(base))
}

/// The old base named by a spare's file name, if it is one.
pub fn parse_spare_file_name(name: &str) -> Option<u64> {
    parse_segment_file_name(name.strip_suffix(SPARE_SUFFIX)?)
}

/// Suffix of a retired segment being shrunk in steps before its unlink
/// (see [`super::CommitLogConfig::remove_step_bytes`]); a crash can leave
/// one behind, of any length, which the next open removes.
pub const REMOVING_SUFFIX: &str = ".removing";

/// The file name of the segment that started at `base` while it is shrunk
/// for removal.
pub fn removing_file_name(base: u64) -> String {
    format!("{}{REMOVING_SUFFIX}", segment_file_name(base))
}

/// The old base named by a file being removed, if it is one.
pub fn parse_removing_file_name(name: &str) -> Option<u64> {
    parse_segment_file_name(name.strip_suffix(REMOVING_SUFFIX)?)
}

/// One open segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Shard-local offset of its first byte.
    pub base: u64,
    /// The open file.
    pub file: FileId,
    /// Its path.
    pub path: PathBuf,
}

/// The segments of one shard's CommitLog, oldest first.
#[derive(Debug)]
pub struct SegmentSet {
    dir: PathBuf,
    segment_size: u64,
    segments: Vec<Segment>,
}

impl SegmentSet {
    /// Opens every segment in `dir` (creating `dir` if needed).
    ///
    /// # Errors
    /// Disk errors; [`StorageError::Corrupt`] when a segment has the wrong
    /// size or the bases have a gap.
    pub fn open(disk: &mut impl Disk, dir: &Path, segment_size: u64) -> Result<Self, StorageError> {
        disk.create_dir_all(dir)?;
        let mut bases: Vec<u64> = disk
            .list_dir(dir)?
            .iter()
            .filter_map(|name| parse_segment_file_name(name))
            .collect();
        bases.sort_unstable();
        // A crash during a background creation (open, then fallocate) can
        // leave the newest file empty: it never held data, since a segment
        // is used only once its creation is complete.
        if let Some(&newest) = bases.last() {
            let path = dir.join(segment_file_name(newest));
            let file = disk.open(&path, OpenOptions::read_only())?;
            let size = disk.file_size(file)?;
            disk.close(file)?;
            if size == 0 {
                tracing::warn!(path = %path.display(), "removing an empty segment left by an interrupted creation");
                disk.remove(&path)?;
                disk.sync_dir(dir)?;
                bases.pop();
            }
        }
        let mut set = SegmentSet {
            dir: dir.to_path_buf(),
            segment_size,
            segments: Vec::new(),
        };
        for base in bases {
            let path = dir.join(segment_file_name(base));
            if !base.is_multiple_of(segment_size) {
                return Err(StorageError::Corrupt {
                    path,
                    file_offset: 0,
                    reason: format!("segment base {base} is not a multiple of {segment_size}"),
                });
            }
            if let Some(last) = set.segments.last()
                && last.base + segment_size != base
            {
                return Err(StorageError::Corrupt {
                    path,
                    file_offset: 0,
                    reason: format!("gap after segment {}", last.base),
                });
            }
            let file = disk.open(&path, OpenOptions::existing_direct())?;
            let size = disk.file_size(file)?;
            if size != segment_size {
                disk.close(file)?;
                return Err(StorageError::Corrupt {
                    path,
                    file_offset: size,
                    reason: format!("segment of {size} bytes, expected {segment_size}"),
                });
            }
            set.segments.push(Segment { base, file, path });
        }
        Ok(set)
    }

    /// The segment size in bytes.
    pub fn segment_size(&self) -> u64 {
        self.segment_size
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// All segments, oldest first.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The newest segment.
    pub fn last(&self) -> Option<&Segment> {
        self.segments.last()
    }

    /// The base of the segment holding shard-local `offset`.
    pub fn base_of(&self, offset: u64) -> u64 {
        offset - offset % self.segment_size
    }

    /// The open segment holding `offset`, if any.
    pub fn get(&self, offset: u64) -> Option<&Segment> {
        let first = self.segments.first()?;
        if offset < first.base {
            return None;
        }
        let index = ((offset - first.base) / self.segment_size) as usize;
        self.segments.get(index)
    }

    /// Creates (or re-creates, zero-filled) the segment at `base`, which must
    /// be the next one after the newest (or any base if the set is empty).
    ///
    /// # Errors
    /// The errno of creation, preallocation or fsync.
    pub fn create(&mut self, disk: &mut impl Disk, base: u64) -> Result<&Segment, StorageError> {
        assert!(
            base.is_multiple_of(self.segment_size),
            "segment base {base} unaligned"
        );
        if let Some(last) = self.segments.last() {
            assert!(
                last.base + self.segment_size == base,
                "segment {base} does not follow {}",
                last.base
            );
        }
        let path = self.dir.join(segment_file_name(base));
        let file = disk.open(&path, OpenOptions::create_direct(self.segment_size))?;
        disk.sync_dir(&self.dir)?;
        self.segments.push(Segment { base, file, path });
        Ok(self.segments.last().expect("just pushed"))
    }

    /// Adds the segment at `base`, created in the background
    /// ([`Disk::submit_create`]) and open as `file`; it must follow the
    /// newest.
    pub fn push_created(&mut self, base: u64, file: FileId, path: PathBuf) {
        assert!(
            base.is_multiple_of(self.segment_size),
            "segment base {base} unaligned"
        );
        if let Some(last) = self.segments.last() {
            assert!(
                last.base + self.segment_size == base,
                "segment {base} does not follow {}",
                last.base
            );
        }
        self.segments.push(Segment { base, file, path });
    }

    /// Takes the oldest segment out of the set (still open; the caller
    /// closes and removes it).
    pub fn take_oldest(&mut self) -> Option<Segment> {
        (!self.segments.is_empty()).then(|| self.segments.remove(0))
    }

    /// Re-creates the newest segment zero-filled (recovery found nothing
    /// valid in it).
    ///
    /// # Errors
    /// Disk errors.
    pub fn recreate_last(&mut self, disk: &mut impl Disk) -> Result<(), StorageError> {
        let Some(last) = self.segments.pop() else {
            return Ok(());
        };
        disk.close(last.file)?;
        self.create(disk, last.base)?;
        Ok(())
    }

    /// Removes what a [`SegmentSet::create`] of `base` that failed left
    /// (the file, empty or partly allocated), if anything.
    ///
    /// # Errors
    /// Disk errors other than the file being absent.
    pub fn discard_failed_create(
        &self,
        disk: &mut impl Disk,
        base: u64,
    ) -> Result<(), StorageError> {
        let path = self.dir.join(segment_file_name(base));
        match disk.remove(&path) {
            Ok(()) => Ok(disk.sync_dir(&self.dir)?),
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Closes and removes every segment starting at or after `base`.
    ///
    /// # Errors
    /// Disk errors.
    pub fn remove_from(&mut self, disk: &mut impl Disk, base: u64) -> Result<(), StorageError> {
        while let Some(last) = self.segments.last() {
            if last.base < base {
                break;
            }
            let last = self.segments.pop().expect("checked above");
            disk.close(last.file)?;
            disk.remove(&last.path)?;
        }
        disk.sync_dir(&self.dir)?;
        Ok(())
    }

    /// Closes and removes the oldest segment (retention).
    ///
    /// # Errors
    /// Disk errors.
    pub fn remove_oldest(&mut self, disk: &mut impl Disk) -> Result<Option<u64>, StorageError> {
        if self.segments.len() <= 1 {
            return Ok(None);
        }
        let first = self.segments.remove(0);
        disk.close(first.file)?;
        disk.remove(&first.path)?;
        disk.sync_dir(&self.dir)?;
        Ok(Some(first.base))
    }

    /// The spares in the directory, oldest first, at most `keep_max` of
    /// them; spares of another size than the segments', and those over
    /// `keep_max`, are removed.
    ///
    /// # Errors
    /// Disk errors.
    pub fn open_spares(
        &mut self,
        disk: &mut impl Disk,
        keep_max: usize,
    ) -> Result<Vec<PathBuf>, StorageError> {
        let mut bases: Vec<u64> = disk
            .list_dir(&self.dir)?
            .iter()
            .filter_map(|name| parse_spare_file_name(name))
            .collect();
        bases.sort_unstable();
        let (mut kept, mut unwanted) = (Vec::new(), Vec::new());
        for base in bases {
            let name = spare_file_name(base);
            let path = self.dir.join(&name);
            let file = disk.open(&path, OpenOptions::read_only())?;
            let size = disk.file_size(file)?;
            disk.close(file)?;
            if size == self.segment_size && kept.len() < keep_max {
                kept.push(path);
            } else {
                unwanted.push(name);
            }
        }
        remove_files(disk, &self.dir, &unwanted)?;
        Ok(kept)
    }

    /// Removes the files of removals a crash interrupted
    /// ([`REMOVING_SUFFIX`]); returns how many. They are retired segments,
    /// below the log's start, so nothing in them is needed.
    ///
    /// # Errors
    /// Disk errors.
    pub fn remove_interrupted_removals(
        &mut self,
        disk: &mut impl Disk,
    ) -> Result<usize, StorageError> {
        let names: Vec<String> = disk
            .list_dir(&self.dir)?
            .into_iter()
            .filter(|name| parse_removing_file_name(name).is_some())
            .collect();
        for name in &names {
            tracing::warn!(file = %name, "removing a retired commit log segment whose removal was interrupted");
        }
        remove_files(disk, &self.dir, &names)?;
        Ok(names.len())
    }

    /// Closes every segment.
    ///
    /// # Errors
    /// Disk errors.
    pub fn close_all(&mut self, disk: &mut impl Disk) -> Result<(), StorageError> {
        for segment in self.segments.drain(..) {
            disk.close(segment.file)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::sim::{SimConfig, SimDisk};

    #[test]
    fn segment_names_have_twenty_digits_and_parse_back() {
        assert_eq!(segment_file_name(1_073_741_824), "00000000001073741824");
        assert_eq!(
            parse_segment_file_name("00000000001073741824"),
            Some(1_073_741_824)
        );
        assert_eq!(parse_segment_file_name("1073741824"), None);
        assert_eq!(parse_segment_file_name("0000000000107374182x"), None);
    }

    #[test]
    fn spare_names_are_not_segment_names_and_parse_back() {
        assert_eq!(spare_file_name(65536), "00000000000000065536.spare");
        assert_eq!(
            parse_spare_file_name("00000000000000065536.spare"),
            Some(65536)
        );
        assert_eq!(parse_segment_file_name("00000000000000065536.spare"), None);
        assert_eq!(parse_spare_file_name("00000000000000065536"), None);
    }

    #[test]
    fn open_spares_keeps_full_size_spares_up_to_the_limit() {
        let mut disk = SimDisk::new(SimConfig::new(4));
        let dir = Path::new("/s/commitlog/0");
        let mut set = SegmentSet::open(&mut disk, dir, 65536).unwrap();
        for (base, len) in [(0, 65536), (65536, 4096), (131072, 65536), (196608, 65536)] {
            let file = disk
                .open(
                    &dir.join(spare_file_name(base)),
                    OpenOptions::buffered(Some(len)),
                )
                .unwrap();
            disk.close(file).unwrap();
        }
        let spares = set.open_spares(&mut disk, 2).unwrap();
        assert_eq!(
            spares,
            vec![
                dir.join(spare_file_name(0)),
                dir.join(spare_file_name(131072))
            ]
        );
        let names = disk.list_dir(dir).unwrap();
        assert_eq!(
            names.len(),
            2,
            "the short spare and the third one are gone: {names:?}"
        );
        assert!(set.segments().is_empty(), "spares are not segments");
    }

    #[test]
    fn open_finds_created_segments_and_rejects_gaps() {
        let mut disk = SimDisk::new(SimConfig::new(1));
        let dir = Path::new("/s/commitlog/0");
        let mut set = SegmentSet::open(&mut disk, dir, 65536).unwrap();
        set.create(&mut disk, 0).unwrap();
        set.create(&mut disk, 65536).unwrap();
        set.close_all(&mut disk).unwrap();
        let set = SegmentSet::open(&mut disk, dir, 65536).unwrap();
        assert_eq!(set.segments().len(), 2);
        assert_eq!(set.get(70000).unwrap().base, 65536);
        assert!(set.get(3 * 65536).is_none());
        let mut set = set;
        set.create(&mut disk, 2 * 65536).unwrap();
        set.close_all(&mut disk).unwrap();
        disk.remove(&dir.join(segment_file_name(65536))).unwrap();
        assert!(matches!(
            SegmentSet::open(&mut disk, dir, 65536),
            Err(StorageError::Corrupt { .. })
        ));
    }

    #[test]
    fn open_removes_an_empty_newest_segment_left_by_an_interrupted_creation() {
        let mut disk = SimDisk::new(SimConfig::new(2));
        let dir = Path::new("/s/commitlog/0");
        let mut set = SegmentSet::open(&mut disk, dir, 65536).unwrap();
        set.create(&mut disk, 0).unwrap();
        set.close_all(&mut disk).unwrap();
        let mut image = disk.snapshot();
        image
            .files
            .insert(dir.join(segment_file_name(65536)), Vec::new());
        let mut disk = SimDisk::from_image(image, SimConfig::new(3));
        let set = SegmentSet::open(&mut disk, dir, 65536).unwrap();
        assert_eq!(set.segments().len(), 1);
        assert!(
            !disk
                .snapshot()
                .files
                .contains_key(&dir.join(segment_file_name(65536)))
        );
    }
}
