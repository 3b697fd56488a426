//! A pool of equal-sized [`AlignedBuf`]s registered with one ring as its
//! fixed-buffer table, so reads and writes from them use `READ_FIXED` /
//! `WRITE_FIXED` (no page pinning per operation).
//!
//! Registered memory is locked memory: without `CAP_IPC_LOCK` it counts
//! against `RLIMIT_MEMLOCK` (8 MiB by default on many systems), and the
//! kernel refuses a table larger than what is left. The refusal is
//! [`RingError::BuffersRefused`], whose message names the limit and the
//! remedies; a caller that can live without fixed buffers then allocates
//! plain ones (see `UringDisk`).
//!
//! # Invariants
//! - Every buffer of the pool carries its own index in the ring's table, and
//!   `give_back` accepts only such buffers.
//! - Registered buffers are never freed (`AlignedBuf`'s `Drop` leaks them):
//!   the kernel keeps their pages pinned until the ring goes away.

use crate::aligned::AlignedBuf;

use super::Ring;
use super::error::RingError;

/// Fixed buffers of one ring.
#[derive(Debug)]
pub struct FixedBufferPool {
    free: Vec<AlignedBuf>,
    buffer_size: usize,
    count: usize,
}

impl FixedBufferPool {
    /// Allocates `count` buffers of `buffer_size` bytes (rounded up to whole
    /// blocks) and registers them as `ring`'s fixed-buffer table.
    ///
    /// # Errors
    /// [`RingError::BuffersRefused`] when locked memory is short (cause and
    /// remedy in the message), [`RingError::AlreadyRegistered`], or
    /// [`RingError::Register`].
    ///
    /// # Panics
    /// If `count` or `buffer_size` exceeds the kernel's limits
    /// ([`super::FIXED_BUFFER_COUNT_MAX`], [`super::FIXED_BUFFER_SIZE_MAX`]).
    pub fn register(ring: &mut Ring, count: usize, buffer_size: usize) -> Result<Self, RingError> {
        let mut bufs: Vec<AlignedBuf> = (0..count).map(|_| AlignedBuf::new(buffer_size)).collect();
        let buffer_size = bufs.first().map_or(buffer_size, AlignedBuf::capacity);
        ring.register_buffers(&mut bufs)?;
        Ok(FixedBufferPool {
            free: bufs,
            buffer_size,
            count,
        })
    }

    /// A free buffer, `len() == 0`, content left from its last use; None when
    /// all are taken.
    pub fn take(&mut self) -> Option<AlignedBuf> {
        let mut buf = self.free.pop()?;
        buf.set_len(0);
        Some(buf)
    }

    /// Returns a buffer taken from this pool.
    ///
    /// # Panics
    /// If `buf` is not registered, or more buffers come back than exist.
    pub fn give_back(&mut self, buf: AlignedBuf) {
        assert!(
            buf.fixed_index().is_some(),
            "an unregistered buffer returned to the fixed pool"
        );
        assert!(
            buf.capacity() == self.buffer_size,
            "buffer of {} bytes in a pool of {}",
            buf.capacity(),
            self.buffer_size
        );
        assert!(
            self.free.len() < self.count,
            "more buffers returned than the pool holds"
        );
        self.free.push(buf);
    }

    /// Capacity of each buffer.
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// Buffers in the pool, taken or free.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Buffers currently free.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}
