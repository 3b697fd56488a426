//! Bodies that carry stored records: PULL_MESSAGE, QUERY_MESSAGE and
//! VIEW_MESSAGE_BY_ID successes (remoting-protocol.md 4.11).
//!
//! ```text
//! [record 0 (TOTALSIZE bytes)][record 1]...[record k-1]
//! ```
//!
//! The broker serves pulls straight from CommitLog bytes: a pull body is the
//! stored records, concatenated, unmodified. [`encode_pull_body`] takes them as
//! raw slices (from the tail cache or a disk read) and checks only the cheap
//! framing (each slice is exactly one record by its TOTALSIZE and has a record
//! magic), because the store validated them when it wrote or read them.
//!
//! # Invariants
//!
//! - [`encode_pull_body`] appends exactly the concatenation of its inputs, or
//!   nothing.
//! - [`PullBodyIter`] yields records that each passed [`decode_record`]; a body
//!   that does not end on a record boundary ends with an error.

use super::decode::{CrcCheck, RecordView, decode_record};
use super::error::RecordError;
use super::layout::MessageVersion;

/// Checks that `record` is exactly one record by its framing.
fn check_framing(record_index: usize, record: &[u8]) -> Result<(), RecordError> {
    let declared = (record.len() >= 8).then(|| {
        let size = u32::from_be_bytes([record[0], record[1], record[2], record[3]]);
        let magic = u32::from_be_bytes([record[4], record[5], record[6], record[7]]);
        (size, MessageVersion::from_magic_code(magic).is_some())
    });
    match declared {
        Some((size, true)) if size as usize == record.len() => Ok(()),
        Some((size, true)) => Err(RecordError::PullBodyRecordLength {
            record_index,
            declared: Some(size),
            len: record.len(),
        }),
        _ => Err(RecordError::PullBodyRecordLength {
            record_index,
            declared: None,
            len: record.len(),
        }),
    }
}

/// Appends the stored records to `out` as a pull body; returns the bytes added.
///
/// `records` may be iterated once only; the output grows as needed (reserve the
/// total beforehand when it is known, e.g. from the ConsumeQueue entry sizes).
///
/// # Errors
///
/// [`RecordError::PullBodyRecordLength`] if a slice is not exactly one record
/// (TOTALSIZE differs from its length, or no V1/V2 magic); `out` is restored to
/// its previous length.
pub fn encode_pull_body<'r>(
    records: impl IntoIterator<Item = &'r [u8]>,
    out: &mut Vec<u8>,
) -> Result<usize, RecordError> {
    let start = out.len();
    for (record_index, record) in records.into_iter().enumerate() {
        if let Err(error) = check_framing(record_index, record) {
            out.truncate(start);
            return Err(error);
        }
        out.extend_from_slice(record);
    }
    Ok(out.len() - start)
}

/// Iterates the records of a pull (or query / view) body.
pub fn iter_pull_body(body: &[u8], crc: CrcCheck) -> PullBodyIter<'_> {
    PullBodyIter {
        body,
        at: 0,
        record_index: 0,
        crc,
        failed: false,
    }
}

/// Iterator over the records of a pull body; created by [`iter_pull_body`].
#[derive(Debug, Clone)]
pub struct PullBodyIter<'a> {
    body: &'a [u8],
    at: usize,
    record_index: usize,
    crc: CrcCheck,
    failed: bool,
}

impl<'a> Iterator for PullBodyIter<'a> {
    type Item = Result<RecordView<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at == self.body.len() {
            return None;
        }
        let rest = &self.body[self.at..];
        match decode_record(rest, self.crc) {
            Ok(view) => {
                self.at += view.as_bytes().len();
                self.record_index += 1;
                Some(Ok(view))
            }
            Err(error) => {
                self.failed = true;
                Some(Err(match error {
                    RecordError::Truncated { .. } => RecordError::PullBodyTrailing {
                        byte_offset: self.at,
                        count: rest.len(),
                    },
                    source => RecordError::PullBodyRecord {
                        record_index: self.record_index,
                        byte_offset: self.at,
                        source: Box::new(source),
                    },
                }))
            }
        }
    }
}

impl std::iter::FusedIterator for PullBodyIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::RecordSpec;

    fn record(topic: &str, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        RecordSpec {
            topic,
            body,
            ..RecordSpec::default()
        }
        .encode_append(&mut out)
        .unwrap();
        out
    }

    #[test]
    fn pull_body_is_the_concatenation_and_iterates_back() {
        let a = record("A", b"one");
        let b = record("B", b"two");
        let mut out = vec![9];
        let len = encode_pull_body([a.as_slice(), b.as_slice()], &mut out).unwrap();
        assert_eq!(len, a.len() + b.len());
        assert_eq!(out[1..], [a.clone(), b.clone()].concat());
        let views: Vec<_> = iter_pull_body(&out[1..], CrcCheck::Verify)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            views.iter().map(|v| v.topic()).collect::<Vec<_>>(),
            ["A", "B"]
        );
    }

    #[test]
    fn encode_pull_body_rejects_partial_record_and_restores_output() {
        let a = record("A", b"one");
        let mut out = vec![1, 2];
        let err = encode_pull_body([a.as_slice(), &a[..a.len() - 1]], &mut out).unwrap_err();
        assert_eq!(
            err,
            RecordError::PullBodyRecordLength {
                record_index: 1,
                declared: Some(a.len() as u32),
                len: a.len() - 1
            }
        );
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn iter_pull_body_reports_trailing_garbage() {
        let mut body = record("A", b"one");
        let first_len = body.len();
        body.extend_from_slice(&[0xDA, 0xA3]);
        let mut iter = iter_pull_body(&body, CrcCheck::Skip);
        assert!(iter.next().unwrap().is_ok());
        assert_eq!(
            iter.next(),
            Some(Err(RecordError::PullBodyTrailing {
                byte_offset: first_len,
                count: 2
            }))
        );
        assert_eq!(iter.next(), None);
    }

    #[test]
    fn iter_pull_body_reports_corrupt_record_with_index() {
        let mut body = [record("A", b"one"), record("B", b"two")].concat();
        let second = body.len() / 2;
        body[second + 4] ^= 0xFF;
        let results: Vec<_> = iter_pull_body(&body, CrcCheck::Skip).collect();
        assert!(matches!(
            &results[1],
            Err(RecordError::PullBodyRecord { record_index: 1, byte_offset, .. }) if *byte_offset == second
        ));
    }
}
