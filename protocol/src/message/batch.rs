//! SEND_BATCH_MESSAGE bodies: concatenated short records, one per message
//! (remoting-protocol.md 4.10, Java `MessageDecoder.encodeMessage`).
//!
//! ```text
//! [total_size i32][magic i32][body_crc i32][flag i32][body_len i32][body]
//! [properties_len i16][properties]
//! total_size = 22 + body_len + properties_len
//! ```
//!
//! Java's broker reads these without any check. Here every entry is checked and
//! the first bad one ends the iteration with [`RecordError::BatchEntry`] (entry
//! index and byte offset):
//!
//! - a negative BODYLENGTH or PROPERTIESLENGTH is an error;
//! - an entry with an empty body is an error (no client sends one: the Java,
//!   Go and Rust producers reject empty bodies before sending);
//! - TOTALSIZE must equal `22 + n + p`, and the entry must fit in the body;
//! - bytes after the last whole entry (fewer than an entry's fixed part, or an
//!   entry whose TOTALSIZE runs past the end) are an error, not ignored.
//!
//! An empty body yields no entries; the send handler decides that an empty batch
//! is invalid. MAGICCODE and BODYCRC are kept as sent (clients write 0; the broker
//! ignores them and computes the CRC itself), so re-encoding reproduces the bytes.
//!
//! # Invariants
//!
//! - [`BatchIter`] yields entries whose body and properties lie inside the input
//!   and whose TOTALSIZE is consistent; after an error it yields nothing more.

use bytes::BufMut;

use super::error::{BatchFault, RecordError};
use crate::limits::PROPERTIES_SIZE_MAX;

/// Bytes of a batch entry without body and properties.
pub const BATCH_ENTRY_FIXED_SIZE: usize = 4 + 4 + 4 + 4 + 4 + 2;

const _: () = assert!(BATCH_ENTRY_FIXED_SIZE == 22);

/// One message of a batch body, borrowed from the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchEntry<'a> {
    /// User FLAG.
    pub flag: i32,
    /// Message body.
    pub body: &'a [u8],
    /// The message's own properties string (with its `UNIQ_KEY`, `TAGS`, ...).
    pub properties: &'a [u8],
    /// MAGICCODE as sent (clients write 0; ignored).
    pub magic_code: i32,
    /// BODYCRC as sent (clients write 0; ignored, the broker recomputes it).
    pub body_crc: i32,
}

impl<'a> BatchEntry<'a> {
    /// An entry as a client writes it: MAGICCODE and BODYCRC 0.
    pub fn new(flag: i32, body: &'a [u8], properties: &'a [u8]) -> BatchEntry<'a> {
        BatchEntry {
            flag,
            body,
            properties,
            magic_code: 0,
            body_crc: 0,
        }
    }

    /// TOTALSIZE of this entry.
    pub fn encoded_len(&self) -> usize {
        BATCH_ENTRY_FIXED_SIZE + self.body.len() + self.properties.len()
    }

    /// Appends the entry to `out`.
    ///
    /// # Errors
    ///
    /// [`RecordError::PropertiesTooLong`] over 32767 bytes, [`RecordError::TooLarge`]
    /// if the entry exceeds `i32::MAX`. Nothing is written on error.
    pub fn encode(&self, out: &mut impl BufMut) -> Result<usize, RecordError> {
        if self.properties.len() > PROPERTIES_SIZE_MAX {
            return Err(RecordError::PropertiesTooLong {
                len: self.properties.len(),
                max: PROPERTIES_SIZE_MAX,
            });
        }
        let len = self.encoded_len();
        let Ok(total_size) = i32::try_from(len) else {
            return Err(RecordError::TooLarge {
                field: "record",
                len,
            });
        };
        out.put_i32(total_size);
        out.put_i32(self.magic_code);
        out.put_i32(self.body_crc);
        out.put_i32(self.flag);
        // body.len() < len, which fits an i32.
        out.put_i32(self.body.len() as i32);
        out.put_slice(self.body);
        out.put_i16(self.properties.len() as i16);
        out.put_slice(self.properties);
        Ok(len)
    }
}

/// Appends every entry to `out`; returns the bytes written.
///
/// # Errors
///
/// As [`BatchEntry::encode`]; entries before the failing one stay written.
pub fn encode_batch<'e, 'a: 'e>(
    entries: impl IntoIterator<Item = &'e BatchEntry<'a>>,
    out: &mut impl BufMut,
) -> Result<usize, RecordError> {
    let mut written = 0;
    for entry in entries {
        written += entry.encode(out)?;
    }
    Ok(written)
}

/// Iterates the entries of a batch body; see the module docs for the checks.
pub fn iter_batch(body: &[u8]) -> BatchIter<'_> {
    BatchIter {
        body,
        at: 0,
        entry_index: 0,
        failed: false,
    }
}

/// Iterator over a SEND_BATCH_MESSAGE body; created by [`iter_batch`].
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    body: &'a [u8],
    at: usize,
    entry_index: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    /// Offset of the next entry's first byte (the body length once done).
    pub fn byte_offset(&self) -> usize {
        self.at
    }

    fn entry(&self) -> Result<(BatchEntry<'a>, usize), BatchFault> {
        let rest = &self.body[self.at..];
        if rest.len() < BATCH_ENTRY_FIXED_SIZE {
            return Err(BatchFault::Truncated {
                needed: BATCH_ENTRY_FIXED_SIZE,
                available: rest.len(),
            });
        }
        let word =
            |at: usize| i32::from_be_bytes([rest[at], rest[at + 1], rest[at + 2], rest[at + 3]]);
        let declared = word(0);
        let body_len = word(16);
        let body_len =
            usize::try_from(body_len).map_err(|_| BatchFault::NegativeBodyLength(body_len))?;
        if body_len == 0 {
            return Err(BatchFault::EmptyBody);
        }
        let properties_len_at = 20 + body_len;
        if rest.len() < properties_len_at + 2 {
            return Err(BatchFault::Truncated {
                needed: properties_len_at + 2,
                available: rest.len(),
            });
        }
        let properties_len =
            i16::from_be_bytes([rest[properties_len_at], rest[properties_len_at + 1]]);
        let properties_len = usize::try_from(properties_len)
            .map_err(|_| BatchFault::NegativePropertiesLength(properties_len))?;
        let computed = BATCH_ENTRY_FIXED_SIZE + body_len + properties_len;
        if usize::try_from(declared) != Ok(computed) {
            return Err(BatchFault::TotalSizeMismatch { declared, computed });
        }
        if rest.len() < computed {
            return Err(BatchFault::Truncated {
                needed: computed,
                available: rest.len(),
            });
        }
        let entry = BatchEntry {
            flag: word(12),
            body: &rest[20..properties_len_at],
            properties: &rest[properties_len_at + 2..computed],
            magic_code: word(4),
            body_crc: word(8),
        };
        Ok((entry, computed))
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchEntry<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at == self.body.len() {
            return None;
        }
        match self.entry() {
            Ok((entry, len)) => {
                self.at += len;
                self.entry_index += 1;
                Some(Ok(entry))
            }
            Err(fault) => {
                self.failed = true;
                Some(Err(RecordError::BatchEntry {
                    entry_index: self.entry_index,
                    byte_offset: self.at,
                    fault,
                }))
            }
        }
    }
}

impl std::iter::FusedIterator for BatchIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(entries: &[BatchEntry<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_batch(entries, &mut out).unwrap();
        out
    }

    #[test]
    fn batch_entry_layout_matches_reference() {
        let out = body_of(&[BatchEntry::new(7, b"abc", b"K\x01V\x02")]);
        let mut expected = Vec::new();
        expected.extend_from_slice(&29i32.to_be_bytes());
        expected.extend_from_slice(&[0; 8]);
        expected.extend_from_slice(&7i32.to_be_bytes());
        expected.extend_from_slice(&3i32.to_be_bytes());
        expected.extend_from_slice(b"abc");
        expected.extend_from_slice(&4i16.to_be_bytes());
        expected.extend_from_slice(b"K\x01V\x02");
        assert_eq!(out, expected);
    }

    #[test]
    fn iter_batch_yields_every_entry_then_none() {
        let entries = [
            BatchEntry::new(1, b"a", b""),
            BatchEntry::new(2, b"bb", b"x\x01y\x02"),
        ];
        let body = body_of(&entries);
        let got: Vec<_> = iter_batch(&body).collect::<Result<_, _>>().unwrap();
        assert_eq!(got, entries);
        assert_eq!(iter_batch(&[]).count(), 0);
    }

    #[test]
    fn iter_batch_reports_entry_index_and_offset_of_trailing_bytes() {
        let mut body = body_of(&[BatchEntry::new(1, b"a", b"")]);
        body.extend_from_slice(&[0, 0, 0]);
        let results: Vec<_> = iter_batch(&body).collect();
        assert_eq!(results.len(), 2);
        assert_eq!(
            results[1],
            Err(RecordError::BatchEntry {
                entry_index: 1,
                byte_offset: 23,
                fault: BatchFault::Truncated {
                    needed: 22,
                    available: 3
                },
            })
        );
    }

    #[test]
    fn iter_batch_rejects_total_size_mismatch() {
        let mut body = body_of(&[BatchEntry::new(1, b"a", b"")]);
        body[3] = 24;
        let err = iter_batch(&body).next().unwrap().unwrap_err();
        assert!(matches!(
            err,
            RecordError::BatchEntry {
                fault: BatchFault::TotalSizeMismatch {
                    declared: 24,
                    computed: 23
                },
                ..
            }
        ));
    }

    #[test]
    fn iter_batch_rejects_negative_lengths_and_empty_body() {
        let mut body = body_of(&[BatchEntry::new(1, b"a", b"")]);
        body[16..20].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            iter_batch(&body).next(),
            Some(Err(RecordError::BatchEntry {
                fault: BatchFault::NegativeBodyLength(-1),
                ..
            }))
        ));
        let mut body = body_of(&[BatchEntry::new(1, b"a", b"")]);
        body[21..23].copy_from_slice(&(-2i16).to_be_bytes());
        assert!(matches!(
            iter_batch(&body).next(),
            Some(Err(RecordError::BatchEntry {
                fault: BatchFault::NegativePropertiesLength(-2),
                ..
            }))
        ));
        let body = body_of(&[BatchEntry::new(1, b"", b"")]);
        assert!(matches!(
            iter_batch(&body).next(),
            Some(Err(RecordError::BatchEntry {
                fault: BatchFault::EmptyBody,
                ..
            }))
        ));
    }

    #[test]
    fn iter_batch_rejects_body_length_past_end() {
        let mut body = body_of(&[BatchEntry::new(1, b"a", b"")]);
        body[16..20].copy_from_slice(&1000i32.to_be_bytes());
        let mut iter = iter_batch(&body);
        assert!(matches!(
            iter.next(),
            Some(Err(RecordError::BatchEntry {
                fault: BatchFault::Truncated { .. },
                ..
            }))
        ));
        assert_eq!(iter.next(), None);
    }
}
