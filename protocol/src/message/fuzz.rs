//! Fuzz entry points for the message decoders. Each is an ordinary function so
//! that cargo-fuzz targets call it and `cargo test` replays a corpus through it
//! on stable.
//!
//! # Invariants
//!
//! - Each function panics only if a property of the codec is violated (that is
//!   the finding), never because the input is malformed.

use super::batch::{encode_batch, iter_batch};
use super::decode::{CrcCheck, Decoded, decode_entry};
use super::encode::{BODY_CRC_MASK, body_crc};
use super::peek::{
    peek_commit_log_offset, peek_queue_offset, peek_store_timestamp_ms, peek_sys_flag,
    peek_total_size,
};
use super::pull_body::iter_pull_body;

/// Decodes `data` as a record; checks that a decoded record re-encodes from its
/// fields to the same bytes (when its stored CRC has bit 31 clear, as every valid
/// one has), that the peeks agree with the view, and that CRC
/// verification accepts it exactly when its CRC is valid. Also walks `data` as a
/// pull body.
///
/// # Panics
///
/// When one of those properties fails.
pub fn record(data: &[u8]) {
    match decode_entry(data, CrcCheck::Skip) {
        Ok(Decoded::Record(view)) => {
            let mut out = Vec::new();
            let len = view
                .to_spec()
                .encode_append(&mut out)
                .expect("decoded record re-encodes");
            assert_eq!(len, view.total_size() as usize, "re-encoded length");
            // The encoder masks BODYCRC to 31 bits as Java does, so only a CRC
            // with bit 31 clear (every valid one) survives byte for byte.
            if view.body_crc() & !BODY_CRC_MASK == 0 {
                assert_eq!(out, view.as_bytes(), "re-encoded bytes");
            }
            let bytes = view.as_bytes();
            assert_eq!(peek_total_size(bytes).ok(), Some(view.total_size() as i32));
            assert_eq!(peek_queue_offset(bytes).ok(), Some(view.queue_offset()));
            assert_eq!(
                peek_commit_log_offset(bytes).ok(),
                Some(view.commit_log_offset())
            );
            assert_eq!(peek_sys_flag(bytes).ok(), Some(view.sys_flag()));
            assert_eq!(
                peek_store_timestamp_ms(bytes).ok(),
                Some(view.store_timestamp_ms())
            );
            // Every accessor, including lazy properties parsing, is total.
            let _ = view.properties().iter().count();
            let _ = view.properties_str();
            let crc_valid = body_crc(view.body()) == view.body_crc();
            assert_eq!(
                decode_entry(data, CrcCheck::Verify).is_ok(),
                crc_valid,
                "CRC check"
            );
        }
        Ok(Decoded::Blank { total_size }) => {
            assert!(total_size >= 8, "blank of {total_size} bytes");
        }
        Err(_) => {}
    }
    let consumed: usize = iter_pull_body(data, CrcCheck::Skip)
        .map_while(Result::ok)
        .map(|view| view.as_bytes().len())
        .sum();
    assert!(consumed <= data.len(), "pull body iterator overran");
}

/// Iterates `data` as a SEND_BATCH_MESSAGE body; when every entry decodes,
/// re-encoding the entries gives `data` back.
///
/// # Panics
///
/// When that property fails.
pub fn batch(data: &[u8]) {
    let mut entries = Vec::new();
    let mut failed = false;
    for entry in iter_batch(data) {
        match entry {
            Ok(entry) => entries.push(entry),
            Err(_) => failed = true,
        }
    }
    if !failed {
        let mut out = Vec::with_capacity(data.len());
        let len = encode_batch(&entries, &mut out).expect("decoded batch re-encodes");
        assert_eq!(len, data.len(), "re-encoded batch length");
        assert_eq!(out, data, "re-encoded batch bytes");
    }
}
