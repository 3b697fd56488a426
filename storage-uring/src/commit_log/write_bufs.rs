//! The CommitLog's write buffers, which are also its tail cache.
//!
//! Records are encoded into the *active* buffer, the newest of a chain of
//! buffers that each cover a block-aligned range of one segment:
//!
//! ```text
//!  segment:  |..block..|..block..|..block..|..block..|..block..|....
//!  buf k:    ^base        written blocks   ^data_end (sealed: full)
//!  buf k+1:                        ^base = align_down(data_end of k)
//!                                  [copy of k's partial block | records ...
//! ```
//!
//! A buffer stays active across many group commits: each commit writes the
//! blocks between the buffer's `submitted_to` and the last whole block
//! straight from the buffer (an O_DIRECT `WriteShared`), while appends go on
//! past them. A buffer is sealed when the next append does not fit, or at a
//! segment end (after the BLANK marker); the next one starts with a copy of
//! its partial last block. Sealed buffers whose every byte is written stay in
//! the chain as the tail cache until it holds more than its capacity, so a
//! record is copied once (encoded in place) and read back from where it was
//! encoded.
//!
//! # Invariants
//! - Buffers are ordered by offset; consecutive ones overlap at most in one
//!   partial block, and each holds the CommitLog's bytes `[base, data_end)`.
//! - Bytes below a buffer's `data_end` never change: writes in flight and
//!   readers only ever look below it, appends only write past it. So no write
//!   reads bytes that are being changed, and a partial last block is written
//!   from a copy ([`WriteBufs::take_block`]), never from the buffer.
//! - A buffer leaves the chain only when it is not the active one, its end is
//!   written, and no write holds it ([`SharedBuf::try_into_inner`]).

use std::collections::VecDeque;

use crate::aligned::{AlignedBuf, BLOCK_SIZE, SharedBuf, align_down};
use crate::disk::{Disk, FileId};

/// Block buffers kept for the copies of partial last blocks.
const BLOCK_SPARES_MAX: usize = 4;

/// Bytes of a CPU cache line (x86-64), the unit of a prefetch.
const CACHE_LINE_SIZE: usize = 64;

#[cfg(target_arch = "x86_64")]
fn prefetch_line_for_write(line: *const u8) {
    use std::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
    // SAFETY: a prefetch never faults nor reads into the program's state.
    unsafe { _mm_prefetch::<_MM_HINT_ET0>(line.cast()) }
}

#[cfg(not(target_arch = "x86_64"))]
fn prefetch_line_for_write(_line: *const u8) {}

/// A write buffer bound to one segment.
#[derive(Debug)]
pub(crate) struct WriteBuf {
    pub(crate) buf: SharedBuf,
    pub(crate) file: FileId,
    pub(crate) segment_base: u64,
    /// Shard-local offset of `buf[0]`; block-aligned.
    pub(crate) base: u64,
    /// Offset after the last meaningful byte.
    pub(crate) data_end: u64,
    /// Logical end: `data_end`, or the segment end after a BLANK marker.
    pub(crate) end: u64,
    /// End of the bytes handed to writes from this buffer (block-aligned;
    /// a partial last block written from a copy does not count).
    pub(crate) submitted_to: u64,
}

impl WriteBuf {
    /// Bytes of the CommitLog the buffer holds, `[base, data_end)`.
    pub(crate) fn held_bytes(&self) -> usize {
        (self.data_end - self.base) as usize
    }

    /// Bytes still free in the buffer.
    pub(crate) fn free_bytes(&self) -> usize {
        self.buf.buf().capacity() - self.held_bytes()
    }

    /// Asks the CPU to bring the cache lines of `len` bytes starting `ahead`
    /// bytes past `data_end` into its cache for writing.
    pub(crate) fn prefetch_for_write(&self, ahead: usize, len: usize) {
        let capacity = self.buf.buf().capacity();
        let from = (self.held_bytes() + ahead).min(capacity);
        let to = (from + len).min(capacity);
        let base = self.buf.buf().as_ptr();
        let mut at = from - from % CACHE_LINE_SIZE;
        while at < to {
            prefetch_line_for_write(base.wrapping_add(at));
            at += CACHE_LINE_SIZE;
        }
    }

    /// Mutable bytes from `data_end` on.
    pub(crate) fn tail_mut(&mut self) -> &mut [u8] {
        let at = self.held_bytes();
        let capacity = self.buf.buf().capacity();
        // SAFETY: writes and readers only look below `data_end` (module
        // invariant), and `&mut self` keeps any other slice of this buffer
        // from living meanwhile.
        unsafe { self.buf.slice_mut(at..capacity) }
    }

    /// The bytes `[from, to)`, which lie in the buffer.
    pub(crate) fn bytes(&self, from: u64, to: u64) -> &[u8] {
        assert!(
            self.base <= from && from <= to && to <= self.data_end,
            "bytes [{from}, {to}) outside [{}, {})",
            self.base,
            self.data_end
        );
        self.buf
            .slice((from - self.base) as usize..(to - self.base) as usize)
    }
}

/// The chain of write buffers, oldest first; the last one is active.
#[derive(Debug)]
pub(crate) struct WriteBufs {
    bufs: VecDeque<WriteBuf>,
    spare: Vec<AlignedBuf>,
    block_spare: Vec<AlignedBuf>,
    buffer_size: usize,
    cache_bytes_max: usize,
}

impl WriteBufs {
    /// A chain whose active buffer continues at `end` in segment (`file`,
    /// `segment_base`), starting with `partial_block` = the bytes
    /// `[align_down(end), end)`; written buffers are kept while the chain
    /// holds at most `cache_bytes_max`.
    pub(crate) fn new(
        disk: &mut impl Disk,
        file: FileId,
        segment_base: u64,
        end: u64,
        partial_block: &[u8],
        buffer_size: usize,
        cache_bytes_max: usize,
    ) -> Self {
        let base = align_down(end);
        assert!(
            partial_block.len() as u64 == end - base,
            "partial block of {} bytes",
            partial_block.len()
        );
        let mut buf = disk.buffer(buffer_size);
        buf.as_full_mut_slice()[..partial_block.len()].copy_from_slice(partial_block);
        let mut bufs = VecDeque::new();
        bufs.push_back(WriteBuf {
            buf: SharedBuf::new(buf),
            file,
            segment_base,
            base,
            data_end: end,
            end,
            submitted_to: base,
        });
        WriteBufs {
            bufs,
            spare: Vec::new(),
            block_spare: Vec::new(),
            buffer_size,
            cache_bytes_max,
        }
    }

    /// Capacity of each buffer.
    pub(crate) fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// The active buffer.
    #[inline]
    pub(crate) fn active(&mut self) -> &mut WriteBuf {
        self.bufs
            .back_mut()
            .expect("the chain always has an active buffer")
    }

    /// The active buffer, shared.
    #[inline]
    pub(crate) fn active_ref(&self) -> &WriteBuf {
        self.bufs
            .back()
            .expect("the chain always has an active buffer")
    }

    /// Buffers in the chain.
    pub(crate) fn len(&self) -> usize {
        self.bufs.len()
    }

    /// Buffer `index` (0: the oldest).
    pub(crate) fn get_mut(&mut self, index: usize) -> &mut WriteBuf {
        &mut self.bufs[index]
    }

    /// Buffer `index` (0: the oldest), shared.
    pub(crate) fn get(&self, index: usize) -> &WriteBuf {
        &self.bufs[index]
    }

    /// Seals the active buffer; the new active one continues in `next`
    /// (`Some((file, segment_base))`: at the start of that segment) or in the
    /// same segment after a copy of the partial block.
    pub(crate) fn seal_active(&mut self, disk: &mut impl Disk, next: Option<(FileId, u64)>) {
        let mut buf = self
            .spare
            .pop()
            .unwrap_or_else(|| disk.buffer(self.buffer_size));
        let old = self.active_ref();
        let new_active = match next {
            Some((file, segment_base)) => {
                assert!(
                    segment_base == old.end,
                    "next segment {segment_base} != end {}",
                    old.end
                );
                WriteBuf {
                    buf: SharedBuf::new(buf),
                    file,
                    segment_base,
                    base: segment_base,
                    data_end: segment_base,
                    end: segment_base,
                    submitted_to: segment_base,
                }
            }
            None => {
                let base = align_down(old.data_end);
                let head = old.bytes(base, old.data_end);
                buf.as_full_mut_slice()[..head.len()].copy_from_slice(head);
                WriteBuf {
                    buf: SharedBuf::new(buf),
                    file: old.file,
                    segment_base: old.segment_base,
                    base,
                    data_end: old.data_end,
                    end: old.end,
                    submitted_to: base,
                }
            }
        };
        self.bufs.push_back(new_active);
    }

    /// The `len` bytes at shard-local `offset`, if one buffer holds them.
    pub(crate) fn cached(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let index = self
            .bufs
            .partition_point(|b| b.base <= offset)
            .checked_sub(1)?;
        let buf = &self.bufs[index];
        let to = offset.checked_add(len as u64)?;
        (to <= buf.data_end).then(|| buf.bytes(offset, to))
    }

    /// Bytes the chain holds.
    pub(crate) fn cached_bytes(&self) -> usize {
        self.bufs.iter().map(WriteBuf::held_bytes).sum()
    }

    /// Drops the oldest buffers while the chain holds more than its cache
    /// capacity, never the active one, one whose end is not `written` yet,
    /// or one a write still holds. Evicted buffers are kept for reuse: a
    /// pool's fresh buffer would be zeroed first.
    pub(crate) fn evict(&mut self, written: u64) {
        let mut cached = self.cached_bytes();
        while cached > self.cache_bytes_max && self.bufs.len() > 1 {
            let oldest = &self.bufs[0];
            if oldest.end > written {
                break;
            }
            let bytes = oldest.held_bytes();
            let oldest = self.bufs.pop_front().expect("the chain has two buffers");
            match oldest.buf.try_into_inner() {
                Ok(buf) => {
                    self.spare.push(buf);
                    cached -= bytes;
                }
                Err(buf) => {
                    // A write still holds it: try again later.
                    self.bufs.push_front(WriteBuf { buf, ..oldest });
                    break;
                }
            }
        }
    }

    /// A zeroed block, for the copy of a partial last block: past the last
    /// record the block must be zeros on disk (where recovery sees the clean
    /// end), and a reused block holds old bytes.
    pub(crate) fn take_block(&mut self, disk: &mut impl Disk) -> AlignedBuf {
        let mut block = self
            .block_spare
            .pop()
            .unwrap_or_else(|| disk.buffer(BLOCK_SIZE));
        block.as_full_mut_slice()[..BLOCK_SIZE].fill(0);
        block
    }

    /// A buffer given back by a completed write.
    pub(crate) fn give_back(&mut self, disk: &mut impl Disk, buf: AlignedBuf) {
        if buf.capacity() == BLOCK_SIZE && self.block_spare.len() < BLOCK_SPARES_MAX {
            self.block_spare.push(buf);
        } else {
            disk.recycle(buf);
        }
    }

    /// Gives every buffer no write holds back to the disk (shutdown); the
    /// chain keeps its active buffer.
    pub(crate) fn release(&mut self, disk: &mut impl Disk) {
        for buf in self.spare.drain(..).chain(self.block_spare.drain(..)) {
            disk.recycle(buf);
        }
        while self.bufs.len() > 1 {
            let oldest = self.bufs.pop_front().expect("the chain has two buffers");
            if let Ok(buf) = oldest.buf.try_into_inner() {
                disk.recycle(buf);
            }
        }
    }

    /// As [`WriteBufs::release`], and the active buffer too: the chain is
    /// about to be dropped.
    pub(crate) fn release_all(&mut self, disk: &mut impl Disk) {
        self.release(disk);
        if let Some(last) = self.bufs.pop_front()
            && let Ok(buf) = last.buf.try_into_inner()
        {
            disk.recycle(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::sim::{SimConfig, SimDisk};

    const SIZE: usize = 4 * BLOCK_SIZE;

    /// Appends `len` bytes of `byte` to the active buffer.
    fn append(bufs: &mut WriteBufs, byte: u8, len: usize) {
        let active = bufs.active();
        active.tail_mut()[..len].fill(byte);
        active.data_end += len as u64;
        active.end = active.data_end;
    }

    #[test]
    fn cached_serves_ranges_held_by_one_buffer_across_a_seal() {
        let mut disk = SimDisk::new(SimConfig::new(1));
        let mut bufs = WriteBufs::new(&mut disk, FileId(1), 0, 100, &[7; 100], SIZE, usize::MAX);
        append(&mut bufs, 1, 3 * BLOCK_SIZE);
        bufs.seal_active(&mut disk, None);
        append(&mut bufs, 2, 200);
        let sealed_end = 100 + 3 * BLOCK_SIZE as u64;
        assert_eq!(bufs.cached(0, 100), Some(&[7u8; 100][..]));
        // The partial block is in both buffers; the newer one answers.
        assert_eq!(bufs.active_ref().base, align_down(sealed_end));
        assert_eq!(bufs.cached(sealed_end - 10, 10), Some(&[1u8; 10][..]));
        assert_eq!(bufs.cached(sealed_end, 200), Some(&[2u8; 200][..]));
        // Across the older buffer's end into the newer one's head: the newer
        // one starts later, so nothing holds it whole.
        assert_eq!(bufs.cached(BLOCK_SIZE as u64, 3 * BLOCK_SIZE), None);
        assert_eq!(bufs.cached(sealed_end, 201), None, "past data_end");
    }

    #[test]
    fn evict_keeps_the_active_buffer_unwritten_ones_and_those_a_write_holds() {
        let mut disk = SimDisk::new(SimConfig::new(2));
        let mut bufs = WriteBufs::new(&mut disk, FileId(1), 0, 0, &[], SIZE, 0);
        append(&mut bufs, 1, SIZE);
        bufs.seal_active(&mut disk, None);
        append(&mut bufs, 2, SIZE);
        bufs.seal_active(&mut disk, None);
        append(&mut bufs, 3, 10);
        assert_eq!(bufs.len(), 3);
        bufs.evict(SIZE as u64 - 1);
        assert_eq!(bufs.len(), 3, "the oldest is not written yet");
        let in_flight = bufs.get(0).buf.clone();
        bufs.evict(u64::MAX);
        assert_eq!(bufs.len(), 3, "a write holds the oldest");
        drop(in_flight);
        bufs.evict(u64::MAX);
        assert_eq!(bufs.len(), 1, "only the active buffer stays");
        assert_eq!(bufs.cached(2 * SIZE as u64, 10), Some(&[3u8; 10][..]));
        assert_eq!(bufs.cached(0, 1), None);
        // Evicted buffers come back as the next active ones.
        bufs.seal_active(&mut disk, None);
        assert_eq!(bufs.spare.len(), 1);
    }

    #[test]
    fn take_block_is_zeroed_even_when_reused() {
        let mut disk = SimDisk::new(SimConfig::new(3));
        let mut bufs = WriteBufs::new(&mut disk, FileId(1), 0, 0, &[], SIZE, 0);
        let mut block = bufs.take_block(&mut disk);
        block.as_full_mut_slice().fill(0xAB);
        bufs.give_back(&mut disk, block);
        let block = bufs.take_block(&mut disk);
        assert!(block.as_full_slice()[..BLOCK_SIZE].iter().all(|b| *b == 0));
    }
}
