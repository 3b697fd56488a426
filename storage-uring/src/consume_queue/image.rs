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
//! Written and fdatasynced bytes leave memory for a read-only view of the
//! file on disk in one way, from the file's start: whole chunks while the
//! file is being filled, and the last, partial chunk too once the file is
//! full ([`CqImage::leave_end`], [`CqImage::leave_to_view`]); a file loaded
//! from disk starts wholly on its view ([`CqImage::from_view`]). A queue
//! whose file fills slowly, one of thousands sharing a shard's appends, then
//! holds a chunk or two of its last file instead of up to the whole 6 MB,
//! and a file that fills up keeps the view it had. A change below the view's
//! end (a truncation) first copies the viewed bytes back into chunks.
//!
//! # Invariants
//! - Bytes `..view_len` are read from the view (`view_len` is 0 without
//!   one, and never past the view's length); the chunks hold bytes
//!   `view_len..len`, every chunk but the last full ([`CHUNK_BYTES`]).
//! - `view_len` and [`CHUNK_BYTES`] are whole numbers of entries, so no
//!   entry straddles the view's end or two chunks.

use super::CQ_ENTRY_SIZE;
use crate::disk::FileView;

/// Entries per chunk. The crate's unit tests use chunks of 5 entries, so
/// that their small files (the queue model's hold 7 entries) cross chunk
/// ends and give chunks up to views.
const CHUNK_ENTRIES: usize = if cfg!(test) { 5 } else { 1024 };
/// Bytes per full chunk (20 KiB).
const CHUNK_BYTES: usize = CHUNK_ENTRIES * CQ_ENTRY_SIZE;
/// First allocation of the first chunk (two entries in unit tests).
const FIRST_CHUNK_BYTES_MIN: usize = if cfg!(test) { 40 } else { 4096 };

/// The bytes of one ConsumeQueue file's entries.
#[derive(Debug, Default)]
pub(super) struct CqImage {
    chunks: Vec<Vec<u8>>,
    len: usize,
    /// The file's bytes on disk, read instead of chunks below `view_len`
    /// (see the module doc).
    view: Option<FileView>,
    view_len: usize,
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
            view_len: 0,
        }
    }

    /// An image reading the first `len` bytes (a whole number of entries)
    /// of `view`, holding no chunks; later pushes go to chunks.
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
            view_len: len,
        }
    }

    /// Whether every byte is read from a view (none held in memory).
    pub(super) fn is_wholly_on_view(&self) -> bool {
        self.view.is_some() && self.view_len == self.len
    }

    /// Bytes read from the view (0 without one).
    pub(super) fn view_len(&self) -> usize {
        self.view_len
    }

    /// Copies the viewed bytes into chunks and drops the view (before a
    /// change below its end).
    fn back_into_memory(&mut self) {
        if let Some(view) = self.view.take() {
            let mut bytes = Vec::with_capacity(self.len);
            bytes.extend_from_slice(&view[..self.view_len]);
            for chunk in &self.chunks {
                bytes.extend_from_slice(chunk);
            }
            *self = CqImage::from_bytes(&bytes);
        }
    }

    /// How far [`CqImage::leave_to_view`] may go when bytes `..durable`
    /// are written and fdatasynced: to the end of the whole chunks below
    /// `durable`, or to the end of the image when it is complete (`len` is
    /// the file's `size`, so nothing is pushed after it) and all durable.
    /// The view's end when nothing may leave.
    pub(super) fn leave_end(&self, durable: usize, size: usize) -> usize {
        if self.len == size && durable >= size {
            return self.len;
        }
        let whole = durable.min(self.len).saturating_sub(self.view_len) / CHUNK_BYTES;
        self.view_len + whole * CHUNK_BYTES
    }

    /// Reads bytes `..end` (from [`CqImage::leave_end`]) from the view
    /// the image already has, dropping the chunks that held them, if that
    /// view shows them as held (a shared mapping shows what was written
    /// since it was made). False, and nothing changed, otherwise.
    pub(super) fn leave_to_current_view(&mut self, end: usize) -> bool {
        let shows = self
            .view
            .as_ref()
            .is_some_and(|view| self.chunks_match(view, end));
        if shows {
            self.drop_chunks_to(end);
        }
        shows
    }

    /// As [`CqImage::leave_to_current_view`] with a new view of the file,
    /// which must show every byte up to `end` as the image holds it; the
    /// old view, if any, is dropped. False, and nothing changed (the new
    /// view dropped), otherwise.
    pub(super) fn leave_to_view(&mut self, view: FileView, end: usize) -> bool {
        let old_matches = match &self.view {
            Some(old) => view.get(..self.view_len) == Some(&old[..self.view_len]),
            None => true,
        };
        if !old_matches || !self.chunks_match(&view, end) {
            return false;
        }
        self.view = Some(view);
        self.drop_chunks_to(end);
        true
    }

    /// Whether `view` holds the chunks' bytes from `view_len` to `end` (a
    /// whole chunk's end, or the image's end).
    fn chunks_match(&self, view: &[u8], end: usize) -> bool {
        let count = self.chunks_to(end);
        self.chunks[..count].iter().enumerate().all(|(i, chunk)| {
            let at = self.view_len + i * CHUNK_BYTES;
            view.get(at..at + chunk.len()) == Some(&chunk[..])
        })
    }

    /// How many chunks hold the bytes from `view_len` to `end`.
    fn chunks_to(&self, end: usize) -> usize {
        assert!(
            end >= self.view_len
                && end <= self.len
                && (end == self.len || (end - self.view_len).is_multiple_of(CHUNK_BYTES)),
            "{end} is neither a chunk end past {} nor the end ({})",
            self.view_len,
            self.len
        );
        (end - self.view_len).div_ceil(CHUNK_BYTES)
    }

    fn drop_chunks_to(&mut self, end: usize) {
        let count = self.chunks_to(end);
        self.chunks.drain(..count);
        self.view_len = end;
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
        let bytes = match &self.view {
            Some(view) if start < self.view_len => &view[start..start + CQ_ENTRY_SIZE],
            _ => {
                let at = start - self.view_len;
                let chunk = &self.chunks[at / CHUNK_BYTES];
                &chunk[at % CHUNK_BYTES..at % CHUNK_BYTES + CQ_ENTRY_SIZE]
            }
        };
        bytes.try_into().expect("slice of CQ_ENTRY_SIZE")
    }

    /// Appends one entry; the image never grows past `size_max` bytes (the
    /// file size), which only the first chunk's growth needs to know.
    pub(super) fn push(&mut self, entry: &[u8; CQ_ENTRY_SIZE], size_max: usize) {
        let last_full = self.chunks.last().is_none_or(|c| c.len() == CHUNK_BYTES);
        if last_full {
            // A queue's first chunk starts small; one after a view is as
            // busy as the chunks that left for it.
            let first = self.chunks.is_empty() && self.view.is_none();
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
        let mut at = start;
        if let Some(view) = &self.view
            && at < self.view_len
        {
            let n = end.min(self.view_len) - at;
            out[..n].copy_from_slice(&view[at..at + n]);
            at += n;
        }
        while at < end {
            let in_chunks = at - self.view_len;
            let chunk = &self.chunks[in_chunks / CHUNK_BYTES];
            let from = in_chunks % CHUNK_BYTES;
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
        if len < self.view_len {
            self.back_into_memory();
        }
        let kept = len - self.view_len;
        let chunks = kept.div_ceil(CHUNK_BYTES);
        self.chunks.truncate(chunks);
        if let Some(last) = self.chunks.last_mut() {
            last.truncate(kept - (chunks - 1) * CHUNK_BYTES);
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
        let half = CHUNK_ENTRIES / 2 * CQ_ENTRY_SIZE;
        let size_max = CHUNK_BYTES + half;
        let mut image = CqImage::default();
        for n in 0..(size_max / CQ_ENTRY_SIZE) as u32 {
            image.push(&entry(n), size_max);
        }
        assert_eq!(image.len(), size_max);
        assert_eq!(image.chunks[1].capacity(), half);
    }

    #[test]
    fn whole_chunks_leave_for_a_view_that_shows_them_and_stay_otherwise() {
        let size_max = 300_000 * CQ_ENTRY_SIZE;
        let total = 3 * CHUNK_ENTRIES + 3;
        let flat: Vec<u8> = (0..total as u32).flat_map(entry).collect();
        // A live mapping shows later writes: a view holding every entry
        // that will be written stands for one.
        let mut file = flat.clone();
        file.resize(size_max, 0);
        let mut image = CqImage::default();
        for n in 0..(2 * CHUNK_ENTRIES + 2) as u32 {
            image.push(&entry(n), size_max);
        }
        let end = image.leave_end(2 * CHUNK_BYTES + CQ_ENTRY_SIZE, size_max);
        assert_eq!(end, 2 * CHUNK_BYTES);
        assert!(!image.leave_to_current_view(end), "no view yet");
        let mut wrong = file.clone();
        wrong[CHUNK_BYTES + 3] ^= 1;
        assert!(!image.leave_to_view(FileView::owned(wrong), end));
        assert_eq!((image.view_len(), image.chunks.len()), (0, 3));
        assert!(image.leave_to_view(FileView::owned(file), end));
        assert_eq!((image.view_len(), image.chunks.len()), (end, 1));
        assert!(!image.is_wholly_on_view());
        for n in (2 * CHUNK_ENTRIES + 2) as u32..total as u32 {
            image.push(&entry(n), size_max);
        }
        assert_eq!(
            image.chunks[0].capacity(),
            CHUNK_BYTES,
            "a chunk after a view is allocated whole"
        );
        let end = image.leave_end(image.len(), size_max);
        assert_eq!(end, 3 * CHUNK_BYTES);
        assert!(image.leave_to_current_view(end));
        assert_eq!(image.chunks.len(), 1, "only the last 3 entries held");
        let mut all = vec![0u8; flat.len()];
        image.copy_to(0, &mut all);
        assert_eq!(all, flat);
        image.truncate(CHUNK_BYTES);
        assert_eq!((image.view_len(), image.len()), (0, CHUNK_BYTES));
        let mut kept = vec![0u8; CHUNK_BYTES];
        image.copy_to(0, &mut kept);
        assert_eq!(kept, flat[..CHUNK_BYTES]);
    }

    #[test]
    fn a_full_file_leaves_wholly_for_the_view_it_has_and_its_last_partial_chunk_too() {
        // 2.4 chunks of entries in the file.
        let entries = 2 * CHUNK_ENTRIES + 2;
        let size_max = entries * CQ_ENTRY_SIZE;
        let flat: Vec<u8> = (0..entries as u32).flat_map(entry).collect();
        let mut image = CqImage::default();
        for n in 0..entries as u32 - 1 {
            image.push(&entry(n), size_max);
        }
        // Not full: only whole chunks may leave, even with all durable.
        let end = image.leave_end(image.len(), size_max);
        assert_eq!(end, 2 * CHUNK_BYTES);
        assert!(image.leave_to_view(FileView::owned(flat.clone()), end));
        image.push(&entry(entries as u32 - 1), size_max);
        assert_eq!(
            image.leave_end(size_max - 1, size_max),
            end,
            "not all durable"
        );
        assert_eq!(image.leave_end(size_max, size_max), size_max);
        let mut wrong = flat.clone();
        wrong[size_max - 1] ^= 1;
        assert!(!image.leave_to_view(FileView::owned(wrong), size_max));
        assert!(!image.is_wholly_on_view());
        assert!(image.leave_to_current_view(size_max));
        assert!(image.is_wholly_on_view());
        assert!(image.chunks.is_empty());
        let mut all = vec![0u8; size_max];
        image.copy_to(0, &mut all);
        assert_eq!(all, flat);
        // A cut below the view's end comes back into chunks.
        image.truncate(size_max - CQ_ENTRY_SIZE);
        assert_eq!(image.view_len(), 0);
        let mut kept = vec![0u8; image.len()];
        image.copy_to(0, &mut kept);
        assert_eq!(kept, flat[..size_max - CQ_ENTRY_SIZE]);
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
            durable in 0usize..(4 * CHUNK_BYTES),
            tail in 0usize..(CHUNK_ENTRIES + 7),
            cut_at in 0usize..(4 * CHUNK_ENTRIES),
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
            let mut viewed = CqImage::from_view(FileView::owned(padded.clone()), flat.len());
            prop_assert!(viewed.is_wholly_on_view());
            for index in 0..flat.len() / CQ_ENTRY_SIZE {
                let start = index * CQ_ENTRY_SIZE;
                prop_assert_eq!(&viewed.entry(index)[..], &flat[start..start + CQ_ENTRY_SIZE]);
            }
            let mut out = vec![0u8; end - start];
            viewed.copy_to(start, &mut out);
            prop_assert_eq!(&out[..], &flat[start..end]);
            // Kept on the view when the cut is not below its end.
            viewed.truncate(keep.min(flat.len()));
            prop_assert_eq!(viewed.is_wholly_on_view(), keep >= flat.len());
            prop_assert_eq!(viewed.len(), keep.min(flat.len()));
            let mut kept = vec![0u8; viewed.len()];
            viewed.copy_to(0, &mut kept);
            prop_assert_eq!(&kept[..], &flat[..viewed.len()]);
            // Whole chunks below a durable end on a view of the file, the
            // rest in chunks: reads alike, takes pushes, truncates anywhere.
            let mut partial = CqImage::from_bytes(&flat);
            let end = partial.leave_end(durable, size_max);
            prop_assert!(end <= durable.min(flat.len()) && durable.min(flat.len()) - end < CHUNK_BYTES);
            prop_assert!(partial.leave_to_view(FileView::owned(padded), end));
            prop_assert_eq!(partial.view_len(), end);
            let mut grown = flat.clone();
            for n in 0..tail as u32 {
                partial.push(&entry(n + 2_000_000), size_max);
                grown.extend_from_slice(&entry(n + 2_000_000));
            }
            let mut all = vec![0u8; grown.len()];
            partial.copy_to(0, &mut all);
            prop_assert_eq!(&all[..], &grown[..]);
            for index in 0..grown.len() / CQ_ENTRY_SIZE {
                let start = index * CQ_ENTRY_SIZE;
                prop_assert_eq!(&partial.entry(index)[..], &grown[start..start + CQ_ENTRY_SIZE]);
            }
            let cut = (cut_at.min(grown.len() / CQ_ENTRY_SIZE)) * CQ_ENTRY_SIZE;
            partial.truncate(cut);
            prop_assert_eq!(partial.view_len() > 0, cut >= end && end > 0);
            let mut kept = vec![0u8; cut];
            partial.copy_to(0, &mut kept);
            prop_assert_eq!(&kept[..], &grown[..cut]);
            let copy = CqImage::from_bytes(&flat);
            prop_assert_eq!(copy.len(), flat.len());
            let mut all = vec![0u8; flat.len()];
            copy.copy_to(0, &mut all);
            prop_assert_eq!(all, flat);
        }
    }
}
