//! A sparse in-memory image of a file: 4 KiB pages allocated on first write,
//! with a dirty bit per page.
//!
//! # Invariants
//! - A page that was never written reads as zeros and costs one pointer.
//! - A page is dirty from its first change until [`SparseImage::take_dirty_runs`]
//!   hands it out for writing (or it is marked dirty again after a failed
//!   write).

use std::ops::Range;

/// Bytes per page: the page-cache page, the unit of dirtiness.
pub const PAGE_SIZE: usize = 4096;

const _: () = assert!(PAGE_SIZE == crate::aligned::BLOCK_SIZE);

/// A file image of a fixed length, in pages.
#[derive(Debug)]
pub struct SparseImage {
    len: usize,
    pages: Vec<Option<Box<[u8; PAGE_SIZE]>>>,
    dirty: Vec<u64>,
    dirty_count: usize,
}

impl SparseImage {
    /// An all-zero image of `len` bytes (no page allocated).
    pub fn new(len: usize) -> Self {
        let page_count = len.div_ceil(PAGE_SIZE);
        SparseImage {
            len,
            pages: (0..page_count).map(|_| None).collect(),
            dirty: vec![0; page_count.div_ceil(64)],
            dirty_count: 0,
        }
    }

    /// The image length in bytes.
    pub fn size(&self) -> usize {
        self.len
    }

    /// Pages allocated (the memory cost is this times [`PAGE_SIZE`]).
    pub fn allocated_pages(&self) -> usize {
        self.pages.iter().filter(|p| p.is_some()).count()
    }

    /// Whether page `page` is allocated (holds a non-zero byte or was
    /// written).
    pub fn is_allocated(&self, page: usize) -> bool {
        self.pages.get(page).is_some_and(Option::is_some)
    }

    /// Number of dirty pages.
    pub fn dirty_count(&self) -> usize {
        self.dirty_count
    }

    /// Copies `out.len()` bytes at `position` into `out`.
    ///
    /// # Panics
    /// If the range is past the image end.
    pub fn read(&self, position: usize, out: &mut [u8]) {
        assert!(
            position + out.len() <= self.len,
            "read past image end {}",
            self.len
        );
        let mut done = 0;
        while done < out.len() {
            let at = position + done;
            let (page, in_page) = (at / PAGE_SIZE, at % PAGE_SIZE);
            let n = (PAGE_SIZE - in_page).min(out.len() - done);
            match &self.pages[page] {
                Some(bytes) => out[done..done + n].copy_from_slice(&bytes[in_page..in_page + n]),
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Writes `data` at `position`, allocating and dirtying the pages touched.
    ///
    /// # Panics
    /// If the range is past the image end.
    pub fn write(&mut self, position: usize, data: &[u8]) {
        assert!(
            position + data.len() <= self.len,
            "write past image end {}",
            self.len
        );
        let mut done = 0;
        while done < data.len() {
            let at = position + done;
            let (page, in_page) = (at / PAGE_SIZE, at % PAGE_SIZE);
            let n = (PAGE_SIZE - in_page).min(data.len() - done);
            let bytes = self.pages[page].get_or_insert_with(|| Box::new([0u8; PAGE_SIZE]));
            bytes[in_page..in_page + n].copy_from_slice(&data[done..done + n]);
            self.mark_dirty(page);
            done += n;
        }
    }

    /// Stores a page read from disk: allocated only if it holds a non-zero
    /// byte; not dirty.
    pub fn load_page(&mut self, page: usize, bytes: &[u8]) {
        assert!(bytes.len() <= PAGE_SIZE, "page of {} bytes", bytes.len());
        if bytes.iter().all(|b| *b == 0) {
            return;
        }
        let mut owned = Box::new([0u8; PAGE_SIZE]);
        owned[..bytes.len()].copy_from_slice(bytes);
        self.pages[page] = Some(owned);
    }

    /// Reads an i32 (big-endian) at `position`.
    pub fn read_i32(&self, position: usize) -> i32 {
        let mut b = [0u8; 4];
        self.read(position, &mut b);
        i32::from_be_bytes(b)
    }

    /// Reads an i64 (big-endian) at `position`.
    pub fn read_i64(&self, position: usize) -> i64 {
        let mut b = [0u8; 8];
        self.read(position, &mut b);
        i64::from_be_bytes(b)
    }

    /// Marks a page dirty.
    pub fn mark_dirty(&mut self, page: usize) {
        let (word, bit) = (page / 64, page % 64);
        if self.dirty[word] & (1 << bit) == 0 {
            self.dirty[word] |= 1 << bit;
            self.dirty_count += 1;
        }
    }

    /// Marks pages dirty again (after a failed write).
    pub fn mark_dirty_range(&mut self, pages: Range<usize>) {
        for page in pages {
            self.mark_dirty(page);
        }
    }

    /// Takes dirty pages of `pages` outside `held`, lowest first and at most
    /// `pages_max` of them, as runs of consecutive pages each at most
    /// `run_pages_max` long, clearing their dirty bits. The flag is whether
    /// such pages are left.
    pub fn take_dirty_runs(
        &mut self,
        pages: Range<usize>,
        held: Range<usize>,
        run_pages_max: usize,
        pages_max: usize,
    ) -> (Vec<Range<usize>>, bool) {
        assert!(run_pages_max > 0, "run_pages_max is 0");
        let words = pages.start / 64..pages.end.div_ceil(64).min(self.dirty.len());
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut taken = 0;
        for (word, word_index) in self.dirty[words.clone()].iter_mut().zip(words) {
            let first = word_index * 64;
            let mut candidates = *word & range_bits(first, &pages) & !range_bits(first, &held);
            while candidates != 0 {
                if taken == pages_max {
                    return (runs, true);
                }
                let bit = candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                *word &= !(1 << bit);
                self.dirty_count -= 1;
                taken += 1;
                let page = first + bit;
                match runs.last_mut() {
                    Some(run) if run.end == page && run.len() < run_pages_max => run.end += 1,
                    _ => runs.push(page..page + 1),
                }
            }
        }
        (runs, false)
    }

    /// Frees up to `max` allocated pages, from the end: an image given up
    /// is dropped piecemeal, since freeing a full file's 100,000 pages at
    /// once took 5 ms. Returns false once every page is freed.
    pub fn release_pages(&mut self, max: usize) -> bool {
        let mut freed = 0;
        while freed < max {
            match self.pages.pop() {
                Some(Some(_)) => freed += 1,
                Some(None) => {}
                None => return false,
            }
        }
        !self.pages.is_empty()
    }

    /// Copies the bytes of `pages` (clipped to the image end) into `out`;
    /// returns how many bytes that is.
    pub fn copy_pages(&self, pages: Range<usize>, out: &mut [u8]) -> usize {
        let start = pages.start * PAGE_SIZE;
        let end = (pages.end * PAGE_SIZE).min(self.len);
        self.read(start, &mut out[..end - start]);
        end - start
    }
}

/// The bits of the dirty word for pages `first..first + 64` that fall in
/// `pages`.
fn range_bits(first: usize, pages: &Range<usize>) -> u64 {
    let start = pages.start.clamp(first, first + 64) - first;
    let end = pages.end.clamp(first, first + 64) - first;
    if start >= end {
        return 0;
    }
    let below_end = if end == 64 { u64::MAX } else { (1 << end) - 1 };
    below_end & !((1u64 << start) - 1)
}

#[cfg(test)]
// A list of page runs that holds one run is what these tests mean.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_pages_read_as_zero_and_are_not_allocated() {
        let image = SparseImage::new(10 * PAGE_SIZE + 40);
        let mut out = [1u8; 16];
        image.read(5 * PAGE_SIZE, &mut out);
        assert_eq!(out, [0u8; 16]);
        assert_eq!(image.allocated_pages(), 0);
    }

    #[test]
    fn write_across_a_page_boundary_dirties_both_pages() {
        let mut image = SparseImage::new(4 * PAGE_SIZE);
        image.write(PAGE_SIZE - 2, &[1, 2, 3, 4]);
        assert_eq!(image.allocated_pages(), 2);
        assert_eq!(image.dirty_count(), 2);
        let mut out = [0u8; 4];
        image.read(PAGE_SIZE - 2, &mut out);
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 0..0, 8, usize::MAX),
            (vec![0..2], false)
        );
        assert_eq!(image.dirty_count(), 0);
    }

    #[test]
    fn dirty_runs_split_at_gaps_and_at_the_run_limit() {
        let mut image = SparseImage::new(200 * PAGE_SIZE);
        for page in [0, 1, 2, 3, 10, 63, 64, 65, 150] {
            image.write(page * PAGE_SIZE, &[9]);
        }
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 0..0, 3, usize::MAX),
            (vec![0..3, 3..4, 10..11, 63..66, 150..151], false)
        );
    }

    #[test]
    fn held_pages_stay_dirty_and_are_taken_later() {
        let mut image = SparseImage::new(300 * PAGE_SIZE);
        let written = [0, 1, 2, 62, 63, 64, 127, 128, 129, 200, 299];
        for page in written {
            image.write(page * PAGE_SIZE, &[9]);
        }
        // Held pages span a word boundary and end inside a word.
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 2..129, 64, usize::MAX),
            (vec![0..2, 129..130, 200..201, 299..300], false)
        );
        assert_eq!(image.dirty_count(), 6);
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 0..0, 64, usize::MAX),
            (vec![2..3, 62..65, 127..129], false)
        );
        assert_eq!(image.dirty_count(), 0);
    }

    #[test]
    fn a_take_stops_at_its_page_budget_and_says_what_is_left() {
        let mut image = SparseImage::new(300 * PAGE_SIZE);
        for page in [1, 2, 3, 4, 70, 71, 250] {
            image.write(page * PAGE_SIZE, &[9]);
        }
        // Pages past the range are neither taken nor reported as left.
        assert_eq!(
            image.take_dirty_runs(0..70, 0..0, 64, 4),
            (vec![1..5], false)
        );
        for page in [1, 2, 3, 4] {
            image.mark_dirty(page);
        }
        // Held pages do not count against the budget.
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 2..4, 64, 3),
            (vec![1..2, 4..5, 70..71], true)
        );
        assert_eq!(image.dirty_count(), 4);
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 2..4, 64, 2),
            (vec![71..72, 250..251], false)
        );
        // Only held pages are left: nothing outside them.
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 2..4, 64, 5),
            (vec![], false)
        );
        assert_eq!(
            image.take_dirty_runs(0..usize::MAX, 0..0, 64, 2),
            (vec![2..4], false)
        );
        assert_eq!(image.dirty_count(), 0);
    }

    #[test]
    fn range_bits_match_a_page_by_page_membership_test() {
        for first in [0usize, 64, 128] {
            for start in 0..200 {
                for end in [start, start + 1, start + 63, start + 64, start + 65, 1000] {
                    let expected = (0..64)
                        .filter(|bit| (start..end).contains(&(first + bit)))
                        .fold(0u64, |word, bit| word | 1 << bit);
                    assert_eq!(
                        range_bits(first, &(start..end)),
                        expected,
                        "{first} {start}..{end}"
                    );
                }
            }
        }
    }

    #[test]
    fn pages_are_released_a_bounded_number_at_a_time() {
        let mut image = SparseImage::new(100 * PAGE_SIZE);
        for page in [0, 3, 50, 51, 99] {
            image.write(page * PAGE_SIZE, &[1]);
        }
        assert!(image.release_pages(2));
        assert_eq!(image.allocated_pages(), 3);
        assert!(image.release_pages(2));
        assert_eq!(image.allocated_pages(), 1);
        assert!(!image.release_pages(2));
        assert_eq!(image.allocated_pages(), 0);
    }

    #[test]
    fn copy_pages_clips_the_last_partial_page() {
        let mut image = SparseImage::new(PAGE_SIZE + 10);
        image.write(PAGE_SIZE + 9, &[7]);
        let mut out = vec![0u8; 2 * PAGE_SIZE];
        assert_eq!(image.copy_pages(1..2, &mut out), 10);
        assert_eq!(out[9], 7);
    }
}
