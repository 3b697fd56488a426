//! The checkpoint file and the abort marker of one shard.
//!
//! Paths: `<root>/checkpoint/<shard>` and `<root>/abort/<shard>` (one pair
//! per shard, beside `<root>/commitlog/<shard>`; RocketMQ has a single
//! `<root>/checkpoint` and `<root>/abort`).
//!
//! The checkpoint is one 4096-byte block, RocketMQ's fields (6.5) first,
//! then ours, then a CRC-32C of everything before it, so a torn checkpoint
//! write is detected and the checkpoint ignored (recovery then scans from
//! the first segment):
//!
//! ```text
//!  0  physicMsgTimestamp  i64 BE  store time of the last durable record
//!  8  logicsMsgTimestamp  i64 BE  store time of the last dispatched record
//! 16  indexMsgTimestamp   i64 BE  store time of the last indexed record
//! 24  masterFlushedOffset i64 BE  0 (no HA bookkeeping yet)
//! 32  confirmPhyOffset    i64 BE  outside-visible offset known durable
//! 40  magic               u32 BE  0x524D_5143 ("RMQC"): ours
//! 44  version             u32 BE  2 (1: without the fields below)
//! 48  shard id            u32 BE
//! 52  durable points      u8      1 if the next four fields are set
//! 56  queues durable      i64 BE  every ConsumeQueue entry of a record
//!                                 below this offset is fdatasynced
//! 64  index durable       i64 BE  every index entry of a record below this
//!                                 offset is fdatasynced ...
//! 72  index file          i64 BE  ... in the index files up to the one
//!                                 created at this time (0: no file) ...
//! 80  index count         i32 BE  ... whose entries below this count
//! 84  ...zero...
//! 4092 crc32c             u32 BE  CRC-32C of bytes 0..4092
//! ```
//!
//! # Invariants
//! - A checkpoint is only trusted if its magic and CRC-32C match.
//! - `confirm_offset` never exceeds what was durable when it was written.

use std::path::{Path, PathBuf};

use crate::aligned::AlignedBuf;
use crate::disk::{Disk, FileId, OpenOptions};
use crate::limits::CHECKPOINT_FILE_SIZE;

/// Our magic in the checkpoint's unused space ("RMQC").
pub const CHECKPOINT_MAGIC: u32 = 0x524D_5143;
/// Version of our checkpoint fields.
pub const CHECKPOINT_VERSION: u32 = 2;
/// The version before the durable points; still read (without them).
const CHECKPOINT_VERSION_1: u32 = 1;
/// Byte offset of the CRC-32C.
pub const CHECKPOINT_CRC_POSITION: usize = CHECKPOINT_FILE_SIZE - 4;

const _: () = assert!(CHECKPOINT_CRC_POSITION > 84);

/// How far the derived files (ConsumeQueues, index) are known durable: an
/// abnormal recovery keeps them up to these points and re-dispatches only
/// the CommitLog after them (see [`crate::store`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DurablePoints {
    /// Outside-visible CommitLog offset: every ConsumeQueue entry of a
    /// record below it is fdatasynced.
    pub queues_offset: i64,
    /// Outside-visible CommitLog offset: every index entry of a record
    /// below it is fdatasynced, in the files up to `index_file_created_ms`.
    pub index_offset: i64,
    /// Creation time (the name) of the newest index file then; 0 if there
    /// was none.
    pub index_file_created_ms: i64,
    /// `index_count` of that file then: its entries `1..index_count` are
    /// durable.
    pub index_count: i32,
}

/// The checkpoint's fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// `physicMsgTimestamp`.
    pub physic_msg_timestamp_ms: i64,
    /// `logicsMsgTimestamp`.
    pub logics_msg_timestamp_ms: i64,
    /// `indexMsgTimestamp`.
    pub index_msg_timestamp_ms: i64,
    /// `masterFlushedOffset`.
    pub master_flushed_offset: i64,
    /// `confirmPhyOffset`: outside-visible offset known durable.
    pub confirm_offset: i64,
    /// The shard.
    pub shard_id: u32,
    /// Durable points of the derived files (None: unknown, e.g. a version 1
    /// checkpoint).
    pub durable: Option<DurablePoints>,
}

impl Checkpoint {
    /// The 4096-byte encoding.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(
            out.len() >= CHECKPOINT_FILE_SIZE,
            "checkpoint buffer of {} bytes",
            out.len()
        );
        let out = &mut out[..CHECKPOINT_FILE_SIZE];
        out.fill(0);
        out[0..8].copy_from_slice(&self.physic_msg_timestamp_ms.to_be_bytes());
        out[8..16].copy_from_slice(&self.logics_msg_timestamp_ms.to_be_bytes());
        out[16..24].copy_from_slice(&self.index_msg_timestamp_ms.to_be_bytes());
        out[24..32].copy_from_slice(&self.master_flushed_offset.to_be_bytes());
        out[32..40].copy_from_slice(&self.confirm_offset.to_be_bytes());
        out[40..44].copy_from_slice(&CHECKPOINT_MAGIC.to_be_bytes());
        out[44..48].copy_from_slice(&CHECKPOINT_VERSION.to_be_bytes());
        out[48..52].copy_from_slice(&self.shard_id.to_be_bytes());
        if let Some(points) = self.durable {
            out[52] = 1;
            out[56..64].copy_from_slice(&points.queues_offset.to_be_bytes());
            out[64..72].copy_from_slice(&points.index_offset.to_be_bytes());
            out[72..80].copy_from_slice(&points.index_file_created_ms.to_be_bytes());
            out[80..84].copy_from_slice(&points.index_count.to_be_bytes());
        }
        let crc = crc32c::crc32c(&out[..CHECKPOINT_CRC_POSITION]);
        out[CHECKPOINT_CRC_POSITION..].copy_from_slice(&crc.to_be_bytes());
    }

    /// Decodes a checkpoint; None if it is torn, foreign or too short.
    pub fn decode(bytes: &[u8]) -> Option<Checkpoint> {
        let bytes = bytes.get(..CHECKPOINT_FILE_SIZE)?;
        let i64_at = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let version = u32_at(44);
        if u32_at(40) != CHECKPOINT_MAGIC
            || (version != CHECKPOINT_VERSION && version != CHECKPOINT_VERSION_1)
        {
            return None;
        }
        if crc32c::crc32c(&bytes[..CHECKPOINT_CRC_POSITION]) != u32_at(CHECKPOINT_CRC_POSITION) {
            return None;
        }
        Some(Checkpoint {
            physic_msg_timestamp_ms: i64_at(0),
            logics_msg_timestamp_ms: i64_at(8),
            index_msg_timestamp_ms: i64_at(16),
            master_flushed_offset: i64_at(24),
            confirm_offset: i64_at(32),
            shard_id: u32_at(48),
            durable: (version == CHECKPOINT_VERSION && bytes[52] == 1).then(|| DurablePoints {
                queues_offset: i64_at(56),
                index_offset: i64_at(64),
                index_file_created_ms: i64_at(72),
                index_count: i32::from_be_bytes(bytes[80..84].try_into().expect("4 bytes")),
            }),
        })
    }

    /// An aligned buffer holding the encoding.
    pub fn to_buf(&self, disk: &mut impl Disk) -> AlignedBuf {
        let mut buf = disk.buffer(CHECKPOINT_FILE_SIZE);
        self.encode(buf.as_full_mut_slice());
        buf.set_len(CHECKPOINT_FILE_SIZE);
        buf
    }
}

/// Paths of one shard's checkpoint and abort files.
#[derive(Clone, Debug)]
pub struct ShardFiles {
    /// `<root>/checkpoint/<shard>`.
    pub checkpoint: PathBuf,
    /// `<root>/abort/<shard>`.
    pub abort: PathBuf,
}

impl ShardFiles {
    /// The paths for `shard_id` under `root`.
    pub fn new(root: &Path, shard_id: u8) -> Self {
        ShardFiles {
            checkpoint: root.join("checkpoint").join(shard_id.to_string()),
            abort: root.join("abort").join(shard_id.to_string()),
        }
    }
}

/// Whether the abort file exists (the previous run did not shut down
/// cleanly).
///
/// # Errors
/// Disk errors of listing.
pub fn abort_exists(
    disk: &mut impl Disk,
    files: &ShardFiles,
) -> Result<bool, crate::disk::DiskError> {
    let (Some(dir), Some(name)) = (files.abort.parent(), files.abort.file_name()) else {
        return Ok(false);
    };
    let name = name.to_string_lossy();
    Ok(disk.list_dir(dir)?.iter().any(|n| *n == name))
}

/// Creates the abort file, durably.
///
/// # Errors
/// Disk errors.
pub fn create_abort(
    disk: &mut impl Disk,
    files: &ShardFiles,
) -> Result<(), crate::disk::DiskError> {
    let dir = files.abort.parent().expect("abort path has a parent");
    disk.create_dir_all(dir)?;
    let file = disk.open(&files.abort, OpenOptions::buffered(Some(0)))?;
    disk.close(file)?;
    disk.sync_dir(dir)
}

/// Removes the abort file, durably (clean shutdown).
///
/// # Errors
/// Disk errors.
pub fn remove_abort(
    disk: &mut impl Disk,
    files: &ShardFiles,
) -> Result<(), crate::disk::DiskError> {
    let dir = files.abort.parent().expect("abort path has a parent");
    disk.remove(&files.abort)?;
    disk.sync_dir(dir)
}

/// Opens (creating if needed) the checkpoint file, O_DIRECT.
///
/// # Errors
/// Disk errors.
pub fn open_checkpoint(
    disk: &mut impl Disk,
    files: &ShardFiles,
) -> Result<(FileId, bool), crate::disk::DiskError> {
    let dir = files
        .checkpoint
        .parent()
        .expect("checkpoint path has a parent");
    disk.create_dir_all(dir)?;
    match disk.open(&files.checkpoint, OpenOptions::existing_direct()) {
        Ok(file) => Ok((file, true)),
        Err(_) => {
            let file = disk.open(
                &files.checkpoint,
                OpenOptions::create_direct(CHECKPOINT_FILE_SIZE as u64),
            )?;
            disk.sync_dir(dir)?;
            Ok((file, false))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_and_a_torn_one_is_rejected() {
        let checkpoint = Checkpoint {
            physic_msg_timestamp_ms: 1,
            logics_msg_timestamp_ms: 2,
            index_msg_timestamp_ms: 3,
            master_flushed_offset: 0,
            confirm_offset: 4096,
            shard_id: 3,
            durable: Some(DurablePoints {
                queues_offset: 2048,
                index_offset: 1024,
                index_file_created_ms: 5,
                index_count: 7,
            }),
        };
        let mut bytes = vec![0; CHECKPOINT_FILE_SIZE];
        checkpoint.encode(&mut bytes);
        assert_eq!(Checkpoint::decode(&bytes), Some(checkpoint));
        let without = Checkpoint {
            durable: None,
            ..checkpoint
        };
        let mut plain = vec![0; CHECKPOINT_FILE_SIZE];
        without.encode(&mut plain);
        assert_eq!(Checkpoint::decode(&plain), Some(without));
        // A version 1 checkpoint is read, without durable points.
        plain[44..48].copy_from_slice(&1u32.to_be_bytes());
        let crc = crc32c::crc32c(&plain[..CHECKPOINT_CRC_POSITION]);
        plain[CHECKPOINT_CRC_POSITION..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(Checkpoint::decode(&plain), Some(without));
        assert_eq!(&bytes[32..40], &4096i64.to_be_bytes());
        bytes[33] ^= 1;
        assert_eq!(Checkpoint::decode(&bytes), None);
        assert_eq!(Checkpoint::decode(&[0; CHECKPOINT_FILE_SIZE]), None);
    }
}
