//! Message records as RocketMQ stores and ships them (remoting-protocol.md
//! section 4): the CommitLog record layout, properties strings, batch bodies,
//! pull bodies, message ids and tag hashes. Pure functions over bytes: times are
//! parameters, output goes into the caller's buffer.
//!
//! ```text
//! record     [total_size i32][magic i32][body_crc i32][queue_id i32][flag i32]
//!            [queue_offset i64][commit_log_offset i64][sys_flag i32][born_ts i64]
//!            [born_host 8|20][store_ts i64][store_host 8|20][reconsume_times i32]
//!            [prepared_txn_offset i64][body_len i32][body][topic_len 1|2][topic]
//!            [properties_len i16][properties]
//! blank      [total_size i32 = bytes left in segment][0xCBD43194]
//! properties (key 0x01 value 0x02)*
//! batch      ([total_size i32][magic 0][crc 0][flag i32][body_len i32][body]
//!             [properties_len i16][properties])*
//! pull body  record*
//! ```
//!
//! - [`layout`]: magic codes, positions, `sysFlag` bits, [`MessageVersion`].
//! - [`crc32`]: the CRC-32/IEEE of BODYCRC and of the record CRC property.
//! - [`encode`]: [`RecordSpec`] → bytes, no intermediate allocation; the BLANK marker.
//! - [`decode`]: bytes → [`RecordView`] / [`Decoded::Blank`], validated like
//!   Java's `checkMessageAndReturnSize`.
//! - [`peek`]: fixed-position reads and in-place patches of offsets and times.
//! - [`properties`] and [`property_key`]: the properties string and its keys.
//! - [`batch`]: SEND_BATCH_MESSAGE bodies.
//! - [`pull_body`]: concatenated records in pull / query / view responses.
//! - [`id`]: offset message ids and `UNIQ_KEY` generation.
//! - [`tag`]: Java `String.hashCode`, `tagsCode`, the index key hash.
//! - [`fuzz`]: fuzz entry points.
//!
//! # Invariants
//!
//! - Nothing here panics on peer or disk input; every defect is a [`RecordError`].
//! - What [`RecordSpec::encode_into`] writes, [`decode_record`] accepts and its
//!   [`RecordView::to_spec`] re-encodes to the same bytes.

pub mod batch;
pub mod crc32;
pub mod decode;
pub mod encode;
pub mod error;
pub mod fuzz;
pub mod id;
pub mod layout;
pub mod peek;
pub mod properties;
pub mod property_key;
pub mod pull_body;
pub mod tag;

pub use batch::{BatchEntry, BatchIter, encode_batch, iter_batch};
pub use crc32::crc32_ieee;
pub use decode::{CrcCheck, Decoded, RecordView, decode_entry, decode_record, verify_body_crc};
pub use encode::{RecordSpec, body_crc, encode_blank};
pub use error::{BatchFault, RecordError};
pub use id::{
    OFFSET_MSG_ID_LEN_MAX, UniqIdGenerator, decode_offset_msg_id, offset_msg_id,
    push_offset_msg_id, write_offset_msg_id,
};
pub use layout::MessageVersion;
pub use peek::{
    patch_commit_log_offset, patch_queue_offset, patch_store_timestamp_ms, peek_commit_log_offset,
    peek_magic_code, peek_queue_offset, peek_store_timestamp_ms, peek_sys_flag, peek_total_size,
};
pub use properties::{
    Properties, PropertiesBuilder, append_property, remove_properties, rewrite_properties,
    set_property,
};
pub use pull_body::{PullBodyIter, encode_pull_body, iter_pull_body};
pub use tag::{index_key_hash, java_string_hash_code, tags_code};
