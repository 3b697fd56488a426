//! The tail cache: the most recent CommitLog bytes, kept in memory so that
//! tailing consumers are served without a disk read.
//!
//! ```text
//!   chunks: [start_0 .. end_0) [start_1 .. end_1) ... [start_n .. end_n)
//!           oldest                                      newest (= encoded end)
//! ```
//!
//! # Invariants
//! - Chunks are sorted by start and do not overlap; there may be gaps (the
//!   padding after the BLANK marker at a segment end is not cached).
//! - A record lies entirely inside one chunk (a chunk only grows by whole
//!   records), so a record read is one slice.
//! - Eviction never drops bytes at or beyond the `keep_from` position it is
//!   given (data not yet on disk), whatever the cache size.

use std::collections::VecDeque;

use crate::limits::TAIL_CACHE_CHUNK_SIZE;

/// Evicted chunks kept for reuse.
const TAIL_CACHE_FREE_CHUNKS_MAX: usize = 4;

#[derive(Debug)]
struct Chunk {
    start: u64,
    bytes: Vec<u8>,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

/// Recent CommitLog bytes by shard-local offset.
#[derive(Debug)]
pub struct TailCache {
    chunks: VecDeque<Chunk>,
    /// Evicted chunk buffers, reused so that pushing allocates (and faults
    /// in fresh pages) only while the cache grows.
    free: Vec<Vec<u8>>,
    cached_bytes: usize,
    capacity_bytes: usize,
}

impl TailCache {
    /// An empty cache that keeps about `capacity_bytes`.
    pub fn new(capacity_bytes: usize) -> Self {
        TailCache {
            chunks: VecDeque::new(),
            free: Vec::new(),
            cached_bytes: 0,
            capacity_bytes,
        }
    }

    /// Bytes held.
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    /// Adds whole records `bytes` that start at `offset`.
    ///
    /// # Panics
    /// If `offset` is below the end of the newest chunk.
    pub fn push(&mut self, offset: u64, bytes: &[u8]) {
        if let Some(last) = self.chunks.back_mut() {
            assert!(
                offset >= last.end(),
                "tail cache push at {offset} below end {}",
                last.end()
            );
            if last.end() == offset && last.bytes.len() + bytes.len() <= last.bytes.capacity() {
                last.bytes.extend_from_slice(bytes);
                self.cached_bytes += bytes.len();
                return;
            }
        }
        let mut chunk_bytes = match self.free.pop() {
            Some(mut reused) if reused.capacity() >= bytes.len() => {
                reused.clear();
                reused
            }
            _ => Vec::with_capacity(TAIL_CACHE_CHUNK_SIZE.max(bytes.len())),
        };
        chunk_bytes.extend_from_slice(bytes);
        self.cached_bytes += bytes.len();
        self.chunks.push_back(Chunk {
            start: offset,
            bytes: chunk_bytes,
        });
    }

    /// The `len` bytes at `offset`, if they lie in one cached chunk.
    pub fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let index = self
            .chunks
            .partition_point(|c| c.start <= offset)
            .checked_sub(1)?;
        let chunk = &self.chunks[index];
        let from = (offset - chunk.start) as usize;
        chunk.bytes.get(from..from.checked_add(len)?)
    }

    /// Drops the oldest chunks while the cache holds more than its capacity,
    /// never a chunk that ends after `keep_from`.
    pub fn evict(&mut self, keep_from: u64) {
        while self.cached_bytes > self.capacity_bytes {
            let Some(first) = self.chunks.front() else {
                break;
            };
            if first.end() > keep_from {
                break;
            }
            self.cached_bytes -= first.bytes.len();
            let evicted = self.chunks.pop_front().expect("front exists");
            if evicted.bytes.capacity() == TAIL_CACHE_CHUNK_SIZE
                && self.free.len() < TAIL_CACHE_FREE_CHUNKS_MAX
            {
                self.free.push(evicted.bytes);
            }
        }
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.cached_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_returns_whole_records_and_none_across_gaps() {
        let mut cache = TailCache::new(1 << 20);
        cache.push(100, &[1; 10]);
        cache.push(110, &[2; 5]);
        cache.push(200, &[3; 4]);
        assert_eq!(cache.get(110, 5), Some(&[2u8; 5][..]));
        assert_eq!(cache.get(200, 4), Some(&[3u8; 4][..]));
        assert_eq!(cache.get(112, 10), None);
        assert_eq!(cache.get(50, 1), None);
    }

    #[test]
    fn evict_keeps_bytes_not_yet_on_disk() {
        let mut cache = TailCache::new(1);
        cache.push(0, &vec![1; TAIL_CACHE_CHUNK_SIZE]);
        cache.push(TAIL_CACHE_CHUNK_SIZE as u64, &[2; 8]);
        cache.evict(0);
        assert!(cache.get(0, 1).is_some());
        cache.evict(TAIL_CACHE_CHUNK_SIZE as u64);
        assert!(cache.get(0, 1).is_none());
        assert!(cache.get(TAIL_CACHE_CHUNK_SIZE as u64, 8).is_some());
    }
}
