//! Heap buffers whose address and capacity are multiples of the block size,
//! as O_DIRECT requires.
//!
//! Buffers of [`HUGE_PAGE_SIZE`] or more (the CommitLog's 8 MiB write
//! buffers, for one) are aligned to a huge page and advised `MADV_HUGEPAGE`
//! before their first touch. Registered with io_uring, such a buffer is a
//! few 2 MiB segments instead of thousands of 4 KiB pages, so a 128 KiB
//! WRITE_FIXED becomes one bio segment and one virtio descriptor instead of
//! 32, and the kernel's mapping work per commit shrinks with it
//! (docs/BENCHMARKS.md, eighth session: more throughput in 6 of 7
//! alternating ASYNC_FLUSH pairs and 3 of 3 SYNC_FLUSH pairs). Where the
//! kernel has no huge page to give, the buffer is on small pages and works
//! as before.
//!
//! # Invariants
//! - `ptr` is aligned to [`BLOCK_SIZE`] (to [`HUGE_PAGE_SIZE`] when
//!   `capacity >= HUGE_PAGE_SIZE`) and owns `capacity` bytes, a non-zero
//!   multiple of [`BLOCK_SIZE`], zero-initialised at allocation.
//! - `len <= capacity`.
//! - The memory never moves while the buffer lives, so it can be registered
//!   with io_uring (`IORING_REGISTER_BUFFERS`) and handed to the kernel; moving
//!   the `AlignedBuf` value moves only the handle.

use std::alloc::{self, Layout};
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

/// The O_DIRECT block size assumed throughout the store (ext4 on 4 KiB pages).
pub const BLOCK_SIZE: usize = 4096;

/// Size of a transparent huge page on x86-64 (and of a PMD on 4 KiB-page
/// arm64). Buffers of at least this size are aligned to it and asked for
/// huge pages (`MADV_HUGEPAGE`).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Rounds `n` up to a multiple of [`BLOCK_SIZE`].
pub const fn align_up(n: usize) -> usize {
    n.div_ceil(BLOCK_SIZE) * BLOCK_SIZE
}

/// Rounds the file or log offset `n` up to a multiple of [`BLOCK_SIZE`].
pub const fn align_up_offset(n: u64) -> u64 {
    n.next_multiple_of(BLOCK_SIZE as u64)
}

/// Rounds `n` down to a multiple of [`BLOCK_SIZE`].
pub const fn align_down(n: u64) -> u64 {
    n - n % BLOCK_SIZE as u64
}

/// An owned, block-aligned, zero-initialised byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    capacity: usize,
    len: usize,
    /// Index in the ring's registered-buffer table, if registered. A
    /// registered buffer is never freed (see `Drop`).
    fixed_index: Option<u16>,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>); no
// interior sharing, so moving it to another thread is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: `&AlignedBuf` only reads the bytes (mutation needs `&mut`, or the
// unsafe [`SharedBuf::slice_mut`] whose caller guarantees exclusivity), as
// for `Box<[u8]>`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `capacity` bytes rounded up to a whole number of blocks
    /// (at least one block), zero-filled, with `len == 0`.
    ///
    /// # Panics
    /// If the allocator fails (as `Vec` does).
    pub fn new(capacity: usize) -> Self {
        let capacity = align_up(capacity.max(1));
        let layout = Self::layout(capacity);
        let huge = layout.align() == HUGE_PAGE_SIZE;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe {
            if huge {
                alloc::alloc(layout)
            } else {
                alloc::alloc_zeroed(layout)
            }
        };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        if huge {
            // Asked before the first touch, so the zero fill faults in huge
            // pages where the kernel has them. Advice only: refused, the
            // buffer works on small pages.
            // SAFETY: the range is this allocation, aligned to a huge page,
            // and `raw` owns `capacity` writable bytes.
            unsafe {
                libc::madvise(raw.cast(), capacity, libc::MADV_HUGEPAGE);
                std::ptr::write_bytes(raw, 0, capacity);
            }
        }
        AlignedBuf {
            ptr,
            capacity,
            len: 0,
            fixed_index: None,
        }
    }

    fn layout(capacity: usize) -> Layout {
        let align = if capacity >= HUGE_PAGE_SIZE {
            HUGE_PAGE_SIZE
        } else {
            BLOCK_SIZE
        };
        Layout::from_size_align(capacity, align).expect("capacity is a block multiple")
    }

    /// Bytes the buffer can hold; a multiple of [`BLOCK_SIZE`].
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes are in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the number of bytes in use. The bytes up to `len` are always
    /// initialised (the buffer is zeroed at allocation).
    ///
    /// # Panics
    /// If `len > capacity`.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity,
            "len {len} > capacity {}",
            self.capacity
        );
        self.len = len;
    }

    /// The whole capacity, initialised bytes.
    pub fn as_full_slice(&self) -> &[u8] {
        // SAFETY: ptr owns capacity initialised bytes (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.capacity) }
    }

    /// The whole capacity, mutable.
    pub fn as_full_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.capacity) }
    }

    /// The bytes in use.
    pub fn as_slice(&self) -> &[u8] {
        &self.as_full_slice()[..self.len]
    }

    /// The io_uring fixed-buffer index, if this buffer is registered.
    pub fn fixed_index(&self) -> Option<u16> {
        self.fixed_index
    }

    /// Marks the buffer as registered under `index`. Only the ring that
    /// registered it may call this.
    pub(crate) fn set_fixed_index(&mut self, index: u16) {
        self.fixed_index = Some(index);
    }

    /// Raw pointer for submission to the kernel. The caller keeps the buffer
    /// alive and untouched until the operation completes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Raw const pointer, for writes submitted to the kernel.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.fixed_index.is_some() {
            // The kernel keeps registered pages pinned until the ring
            // unregisters them; freeing them could let a later allocation
            // alias memory a WRITE_FIXED would read. Leaking is the safe
            // choice; pools recycle registered buffers instead of dropping.
            return;
        }
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.capacity)) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("capacity", &self.capacity)
            .field("len", &self.len)
            .finish()
    }
}

/// An [`AlignedBuf`] shared by its owner and the writes in flight from it.
///
/// The CommitLog keeps encoding records into a write buffer past the blocks
/// its writes are reading, and serves reads of recent records from it; a
/// clone held by each write keeps the memory alive until the write's
/// completion, whatever the owner does meanwhile.
///
/// # Invariants
/// - Bytes are mutated only through [`SharedBuf::slice_mut`], whose caller
///   guarantees that no other reference to those bytes (a slice, or a write
///   in flight reading them) exists while the returned slice lives.
#[derive(Clone, Debug)]
pub struct SharedBuf(Arc<AlignedBuf>);

impl SharedBuf {
    /// Shares `buf`.
    pub fn new(buf: AlignedBuf) -> Self {
        SharedBuf(Arc::new(buf))
    }

    /// The buffer (address, capacity, registration).
    pub fn buf(&self) -> &AlignedBuf {
        &self.0
    }

    /// Bytes `range` of the full capacity.
    ///
    /// # Panics
    /// If `range` is past the capacity.
    pub fn slice(&self, range: Range<usize>) -> &[u8] {
        &self.0.as_full_slice()[range]
    }

    /// Bytes `range` of the full capacity, mutable.
    ///
    /// # Safety
    /// While the returned slice lives, nothing else may read or write these
    /// bytes: no slice from [`SharedBuf::slice`] or an earlier `slice_mut`
    /// overlaps them, and no operation in flight reads them.
    ///
    /// # Panics
    /// If `range` is past the capacity or reversed.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, range: Range<usize>) -> &mut [u8] {
        assert!(
            range.start <= range.end && range.end <= self.0.capacity,
            "range {range:?} past {} bytes",
            self.0.capacity
        );
        // SAFETY: the bytes lie inside the allocation (checked above), are
        // initialised (zeroed at allocation), and are not aliased while the
        // slice lives (the caller's guarantee). The memory is behind a raw
        // pointer, not inside the `AlignedBuf` value the `Arc` shares.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr.as_ptr().add(range.start), range.len()) }
    }

    /// The buffer back, if no other clone (no write in flight) holds it.
    ///
    /// # Errors
    /// `self`, while another clone lives.
    pub fn try_into_inner(self) -> Result<AlignedBuf, SharedBuf> {
        Arc::try_unwrap(self.0).map_err(SharedBuf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_buf_is_given_back_only_by_its_last_clone() {
        let shared = SharedBuf::new(AlignedBuf::new(BLOCK_SIZE));
        // SAFETY: no other reference to these bytes exists.
        unsafe { shared.slice_mut(0..3) }.copy_from_slice(b"abc");
        let in_flight = shared.clone();
        assert_eq!(in_flight.slice(0..3), b"abc");
        let shared = shared.try_into_inner().unwrap_err();
        drop(in_flight);
        let buf = shared.try_into_inner().expect("the last clone");
        assert_eq!(&buf.as_full_slice()[..3], b"abc");
    }

    #[test]
    fn new_rounds_capacity_up_to_whole_blocks_and_aligns_address() {
        let buf = AlignedBuf::new(5000);
        assert_eq!(buf.capacity(), 2 * BLOCK_SIZE);
        assert_eq!(buf.as_ptr() as usize % BLOCK_SIZE, 0);
        assert!(buf.as_full_slice().iter().all(|b| *b == 0));
    }

    #[test]
    fn a_buffer_of_a_huge_page_or_more_is_aligned_to_one_and_zeroed() {
        let mut buf = AlignedBuf::new(HUGE_PAGE_SIZE + BLOCK_SIZE);
        assert_eq!(buf.capacity(), HUGE_PAGE_SIZE + BLOCK_SIZE);
        assert_eq!(buf.as_ptr() as usize % HUGE_PAGE_SIZE, 0);
        assert!(buf.as_full_slice().iter().all(|b| *b == 0));
        buf.as_full_mut_slice()[HUGE_PAGE_SIZE] = 7;
        assert_eq!(buf.as_full_slice()[HUGE_PAGE_SIZE], 7);
        // Below a huge page, the block alignment is all that is promised.
        let small = AlignedBuf::new(HUGE_PAGE_SIZE - BLOCK_SIZE);
        assert_eq!(small.as_ptr() as usize % BLOCK_SIZE, 0);
    }

    #[test]
    #[should_panic(expected = "capacity")]
    fn set_len_past_capacity_panics() {
        AlignedBuf::new(1).set_len(BLOCK_SIZE + 1);
    }

    #[test]
    fn align_helpers_round_to_blocks() {
        assert_eq!(align_up(0), 0);
        assert_eq!(align_up(1), BLOCK_SIZE);
        assert_eq!(align_down(BLOCK_SIZE as u64 + 7), BLOCK_SIZE as u64);
    }
}
