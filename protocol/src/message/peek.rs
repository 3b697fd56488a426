//! Fixed-position reads and in-place patches of record fields, for the store's
//! hot paths (assigning offsets after encoding, re-reading a record's offsets
//! and store time during recovery) where a full decode is not needed.
//!
//! Positions are those of [`super::layout`]: everything up to SYSFLAG is at a
//! fixed position; STORETIMESTAMP moves by 12 bytes when the born host is IPv6,
//! so its peek and patch read SYSFLAG first.
//!
//! # Invariants
//!
//! - Nothing here validates the record: callers use these on records they wrote
//!   or already decoded. Short buffers are errors, never panics, and a failed
//!   patch writes nothing.
//! - No patched field is covered by BODYCRC, so patching keeps a record valid.

use super::error::RecordError;
use super::layout::{
    self, COMMIT_LOG_OFFSET_POSITION, MAGIC_CODE_POSITION, QUEUE_OFFSET_POSITION,
    SYS_FLAG_POSITION, array_at,
};

fn read_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(array_at(bytes, at))
}

fn read_i64(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(array_at(bytes, at))
}

fn need(buf: &[u8], end: usize) -> Result<(), RecordError> {
    if buf.len() < end {
        return Err(RecordError::Truncated {
            needed: end,
            available: buf.len(),
        });
    }
    Ok(())
}

/// TOTALSIZE at `buf[0]`, unvalidated.
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` has fewer than 4 bytes.
pub fn peek_total_size(buf: &[u8]) -> Result<i32, RecordError> {
    need(buf, 4)?;
    Ok(read_i32(buf, 0))
}

/// MAGICCODE at `buf[4]`, unvalidated.
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` has fewer than 8 bytes.
pub fn peek_magic_code(buf: &[u8]) -> Result<u32, RecordError> {
    need(buf, 8)?;
    Ok(read_i32(buf, MAGIC_CODE_POSITION) as u32)
}

/// QUEUEOFFSET at its fixed position, unvalidated.
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` is too short.
pub fn peek_queue_offset(buf: &[u8]) -> Result<i64, RecordError> {
    need(buf, QUEUE_OFFSET_POSITION + 8)?;
    Ok(read_i64(buf, QUEUE_OFFSET_POSITION))
}

/// PHYSICALOFFSET at its fixed position, unvalidated.
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` is too short.
pub fn peek_commit_log_offset(buf: &[u8]) -> Result<i64, RecordError> {
    need(buf, COMMIT_LOG_OFFSET_POSITION + 8)?;
    Ok(read_i64(buf, COMMIT_LOG_OFFSET_POSITION))
}

/// SYSFLAG at its fixed position, unvalidated.
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` is too short.
pub fn peek_sys_flag(buf: &[u8]) -> Result<i32, RecordError> {
    need(buf, SYS_FLAG_POSITION + 4)?;
    Ok(read_i32(buf, SYS_FLAG_POSITION))
}

/// STORETIMESTAMP (its position depends on the born host's IPv6 bit), unvalidated.
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` is too short.
pub fn peek_store_timestamp_ms(buf: &[u8]) -> Result<i64, RecordError> {
    let at = layout::store_timestamp_position(peek_sys_flag(buf)?);
    need(buf, at + 8)?;
    Ok(read_i64(buf, at))
}

fn patch(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), RecordError> {
    need(buf, at + bytes.len())?;
    buf[at..at + bytes.len()].copy_from_slice(bytes);
    Ok(())
}

/// Overwrites QUEUEOFFSET in place (no CRC covers it).
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` is too short; nothing is written then.
pub fn patch_queue_offset(buf: &mut [u8], queue_offset: i64) -> Result<(), RecordError> {
    patch(buf, QUEUE_OFFSET_POSITION, &queue_offset.to_be_bytes())
}

/// Overwrites PHYSICALOFFSET in place (no CRC covers it).
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` is too short; nothing is written then.
pub fn patch_commit_log_offset(buf: &mut [u8], commit_log_offset: i64) -> Result<(), RecordError> {
    patch(
        buf,
        COMMIT_LOG_OFFSET_POSITION,
        &commit_log_offset.to_be_bytes(),
    )
}

/// Overwrites STORETIMESTAMP in place (no CRC covers it).
///
/// # Errors
///
/// [`RecordError::Truncated`] if `buf` is too short; nothing is written then.
pub fn patch_store_timestamp_ms(
    buf: &mut [u8],
    store_timestamp_ms: i64,
) -> Result<(), RecordError> {
    let at = layout::store_timestamp_position(peek_sys_flag(buf)?);
    patch(buf, at, &store_timestamp_ms.to_be_bytes())
}
