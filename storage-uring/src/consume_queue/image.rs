//! The in-memory image of one ConsumeQueue file, in chunks that never move.
//!
//! A single `Vec` grown by doubling copied the whole image at every growth:
//! up to 4 MB per queue at once, onto freshly faulted pages, and all the
//! queues of a balanced topic grew within the same few milliseconds. Under
//! load that stalled a shard's turn for tens of milliseconds
//! (docs/BENCHMARKS.md, eighth session). Here only the first chunk grows by
//! doubling, up to [`CHUNK_BYTES`] (so a queue of a few messages still costs
//! a few KiB); every later chunk is allocated at its final size and never
//! reallocated, so no append copies more than one chunk.
//!
//! A full file that is written and fdatasynced can give its chunks up for a
//! read-only view of the file on disk ([`CqImage::from_view`]); the image
//! then reads from the view, and a change (a truncation) first copies the
//! kept bytes back into chunks.
//!
//! # Invariants
//! - Every chunk but the last is full ([`CHUNK_BYTES`]); `len` is the sum of
//!   the chunks' lengths, or, with a view, no chunks and `len <= view.len()`.
//! - [`CHUNK_BYTES`] is a whole number of entries, so no entry straddles two
//!   chunks.

use super::CQ_ENTRY_SIZE;
use crate::disk::FileView;

/// Entries per chunk.
const CHUNK_ENTRIES: usize = 4096;
/// Bytes per full chunk (80 KiB).
const CHUNK_BYTES: usize = CHUNK_ENTRIES * CQ_ENTRY_SIZE;
/// First allocation of the first chunk.
const FIRST_CHUNK_BYTES_MIN: usize = 4096;

/// The bytes of one ConsumeQueue file's entries.
#[derive(Debug, Default)]
pub(super) struct CqImage {
    chunks: Vec<Vec<u8>>,
    len: usize,
    /// The file's bytes on disk, read instead of chunks (see the module doc).
    view: Option<FileView>,
}

impl CqImage {
    /// An image holding `bytes` (a whole number of entries).
    pub(super) fn from_bytes(bytes: &[u8]) -> Self {
        assert!(
            bytes.len().is_multiple_of(CQ_ENTRY_SIZE),
            "{} bytes is not a whole number of entries",
            bytes.len()
        );
        CqImage {
            chunks: bytes.chunks(CHUNK_BYTES).map(<[u8]>::to_vec).collect(),
            len: bytes.len(),
            view: None,
        }
    }

    /// An image reading the first `len` bytes (a whole number of entries)
    /// of `view`, holding no chunks.
    ///
    /// # Panics
    /// If the view is shorter than `len`.
    pub(super) fn from_view(view: FileView, len: usize) -> Self {
        assert!(
            len <= view.len() && len.is_multiple_of(CQ_ENTRY_SIZE),
            "{len} bytes of a {}-byte view",
            view.len()
        );
        CqImage {
            chunks: Vec::new(),
            len,
            view: Some(view),
        }
    }

    /// Whether the image reads from a view of the file.
    pub(super) fn is_on_view(&self) -> bool {
        self.view.is_some()
    }

    /// Copies a view's bytes into chunks and drops the view (before a
    /// change).
    fn back_into_memory(&mut self) {
        if let Some(view) = self.view.take() {
            *self = CqImage::from_bytes(&view[..self.len]);
        }
    }

    /// Bytes held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The entry at `index`.
    ///
    /// # Panics
    /// If `index` is past the last entry.
    pub(super) fn entry(&self, index: usize) -> &[u8; CQ_ENTRY_SIZE] {
        let start = index * CQ_ENTRY_SIZE;
        assert!(
            start + CQ_ENTRY_SIZE <= self.len,
            "entry {index} past {} bytes",
            self.len
        );
        if let Some(view) = &self.view {
            return view[start..start + CQ_ENTRY_SIZE]
                .try_into()
                .expect("slice of CQ_ENTRY_SIZE");
        }
        let chunk = &self.chunks[start / CHUNK_BYTES];
        let at = start % CHUNK_BYTES;
        chunk[at..at + CQ_ENTRY_SIZE]
            .try_into()
            .expect("slice of CQ_ENTRY_SIZE")
    }

    /// Appends one entry; the image never grows past `size_max` bytes (the
    /// file size), which only the first chunk's growth needs to know.
    pub(super) fn push(&mut self, entry: &[u8; CQ_ENTRY_SIZE], size_max: usize) {
        self.back_into_memory();
        let last_full = self.chunks.last().is_none_or(|c| c.len() == CHUNK_BYTES);
        if last_full {
            let first = self.chunks.is_empty();
            let capacity = if first {
                FIRST_CHUNK_BYTES_MIN
            } else {
                CHUNK_BYTES
            };
            self.chunks
                .push(Vec::with_capacity(capacity.min(size_max - self.len)));
        }
        let last = self.chunks.last_mut().expect("a chunk with room");
        if last.len() == last.capacity() {
            // Only the first chunk (or a partial one loaded from disk) is
            // ever below its final size: double it.
            let want = (last.len() * 2).min(CHUNK_BYTES).min(size_max);
            last.reserve_exact(want - last.len());
        }
        last.extend_from_slice(entry);
        self.len += CQ_ENTRY_SIZE;
    }

    /// Copies bytes `start..start + out.len()` into `out`.
    ///
    /// # Panics
    /// If the range is past `len`.
    pub(super) fn copy_to(&self, start: usize, out: &mut [u8]) {
        let end = start + out.len();
        assert!(
            end <= self.len,
            "range {start}..{end} past {} bytes",
            self.len
        );
        if let Some(view) = &self.view {
            out.copy_from_slice(&view[start..end]);
            return;
        }
        let mut at = start;
        while at < end {
            let chunk = &self.chunks[at / CHUNK_BYTES];
            let from = at % CHUNK_BYTES;
            let n = (chunk.len() - from).min(end - at);
            out[at - start..at - start + n].copy_from_slice(&chunk[from..from + n]);
            at += n;
        }
    }

    /// Keeps the first `len` bytes (a whole number of entries, at most
    /// [`CqImage::len`]).
    pub(super) fn truncate(&mut self, len: usize) {
        assert!(
            len <= self.len && len.is_multiple_of(CQ_ENTRY_SIZE),
            "truncate to {len} of {} bytes",
            self.len
        );
        self.back_into_memory();
        let chunks = len.div_ceil(CHUNK_BYTES);
        self.chunks.truncate(chunks);
        if let Some(last) = self.chunks.last_mut() {
            last.truncate(len - (chunks - 1) * CHUNK_BYTES);
        }
        self.len = len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(n: u32) -> [u8; CQ_ENTRY_SIZE] {
        let mut e = [0u8; CQ_ENTRY_SIZE];
        e[..4].copy_from_slice(&n.to_be_bytes());
        e[16..].copy_from_slice(&(!n).to_be_bytes());
        e
    }

    #[test]
    fn a_small_image_stays_small_and_later_chunks_are_allocated_whole() {
        let size_max = 300_000 * CQ_ENTRY_SIZE;
        let mut image = CqImage::default();
        image.push(&entry(0), size_max);
        assert_eq!(image.chunks[0].capacity(), FIRST_CHUNK_BYTES_MIN);
        for n in 1..=CHUNK_ENTRIES as u32 {
            image.push(&entry(n), size_max);
        }
        assert_eq!(image.chunks.len(), 2);
        assert_eq!(image.chunks[0].len(), CHUNK_BYTES);
        assert_eq!(image.chunks[1].capacity(), CHUNK_BYTES);
        assert_eq!(image.len(), (CHUNK_ENTRIES + 1) * CQ_ENTRY_SIZE);
    }

    #[test]
    fn the_last_chunk_is_no_larger_than_the_file_needs() {
        // 1.5 chunks of entries in the file.
        let size_max = CHUNK_BYTES + CHUNK_BYTES / 2;
        let mut image = CqImage::default();
        for n in 0..(size_max / CQ_ENTRY_SIZE) as u32 {
            image.push(&entry(n), size_max);
        }
        assert_eq!(image.len(), size_max);
        assert_eq!(image.chunks[1].capacity(), CHUNK_BYTES / 2);
    }

    proptest! {
        /// Against a flat vector: entries, copies of any range and
        /// truncations agree, and `from_bytes` round-trips.
        #[test]
        fn behaves_as_one_flat_vector(
            pushes in 0usize..(3 * CHUNK_ENTRIES),
            truncate_to in 0usize..(3 * CHUNK_ENTRIES),
            more in 0usize..(CHUNK_ENTRIES + 7),
            range in (0usize..(4 * CHUNK_BYTES), 0usize..(4 * CHUNK_BYTES)),
        ) {
            let size_max = 300_000 * CQ_ENTRY_SIZE;
            let mut image = CqImage::default();
            let mut flat = Vec::new();
            for n in 0..pushes as u32 {
                image.push(&entry(n), size_max);
                flat.extend_from_slice(&entry(n));
            }
            let keep = truncate_to.min(pushes) * CQ_ENTRY_SIZE;
            image.truncate(keep);
            flat.truncate(keep);
            for n in 0..more as u32 {
                image.push(&entry(n + 1_000_000), size_max);
                flat.extend_from_slice(&entry(n + 1_000_000));
            }
            prop_assert_eq!(image.len(), flat.len());
            for index in 0..flat.len() / CQ_ENTRY_SIZE {
                let start = index * CQ_ENTRY_SIZE;
                prop_assert_eq!(&image.entry(index)[..], &flat[start..start + CQ_ENTRY_SIZE]);
            }
            let (a, b) = (range.0.min(flat.len()), range.1.min(flat.len()));
            let (start, end) = (a.min(b), a.max(b));
            let mut out = vec![0u8; end - start];
            image.copy_to(start, &mut out);
            prop_assert_eq!(&out[..], &flat[start..end]);
            // A view of the same bytes (and more after them) reads alike,
            // and a truncation of it comes back into chunks.
            let mut padded = flat.clone();
            padded.extend_from_slice(&[7u8; CQ_ENTRY_SIZE]);
            let mut viewed = CqImage::from_view(FileView::owned(padded), flat.len());
            prop_assert!(viewed.is_on_view());
            for index in 0..flat.len() / CQ_ENTRY_SIZE {
                let start = index * CQ_ENTRY_SIZE;
                prop_assert_eq!(&viewed.entry(index)[..], &flat[start..start + CQ_ENTRY_SIZE]);
            }
            let mut out = vec![0u8; end - start];
            viewed.copy_to(start, &mut out);
            prop_assert_eq!(&out[..], &flat[start..end]);
            viewed.truncate(keep.min(flat.len()));
            prop_assert!(!viewed.is_on_view());
            prop_assert_eq!(viewed.len(), keep.min(flat.len()));
            let mut kept = vec![0u8; viewed.len()];
            viewed.copy_to(0, &mut kept);
            prop_assert_eq!(&kept[..], &flat[..viewed.len()]);
            let copy = CqImage::from_bytes(&flat);
            prop_assert_eq!(copy.len(), flat.len());
            let mut all = vec![0u8; flat.len()];
            copy.copy_to(0, &mut all);
            prop_assert_eq!(all, flat);
        }
    }
}
