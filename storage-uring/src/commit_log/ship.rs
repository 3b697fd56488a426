//! Shipping CommitLog byte ranges without copying them through user space:
//! a `splice` moves a range's blocks from the segment into a pipe, and the
//! pipe's owner splices them on to a socket or a file. This is the path for
//! sending large ranges of older records (a slave catching up, a large
//! pull) that are on the disk and in no cache.
//!
//! ```text
//!  start_ship(offset, len, pipe) ─ readable? fits? pipe empty? ─▶ SpliceToPipe (blocks)
//!  ring ─ splice completes ─▶ on_ship ─ short? ─▶ SpliceToPipe (the rest)
//!                                      └ all in ─▶ ticket done
//!  turn ─ take_shipped ─▶ owner: discard head ─▶ splice len on ─▶ discard tail
//! ```
//!
//! The segments are O_DIRECT files, and a splice from one moves whole
//! blocks (offset and length aligned, or EINVAL), so a ship puts the blocks
//! covering the range into the pipe; its [`Shipment`] says how many bytes
//! come before (`head`) and after (`tail`) the range there. The owner
//! discards those ([`ShipPipe::discard`]) around the range it passes on, or
//! sends all the blocks to a receiver told where the range is in them.
//!
//! Why not a second, buffered descriptor, which could splice the exact
//! range: each commit rewrites the log's partial last block with O_DIRECT;
//! a page of that block cached by a buffered splice and still held by a
//! pipe cannot be invalidated by the write, and a later buffered splice of
//! the block would ship the old bytes. A splice from the O_DIRECT
//! descriptor reads from the disk into fresh pages every time.
//!
//! # Invariants
//! - Only acknowledgeable bytes at or above the min offset, within one
//!   segment, are shipped (as reads check them); they never change.
//! - A ship starts only into an empty pipe whose capacity holds all of its
//!   blocks, so its splices never wait for a reader.
//! - Every ticket handed out comes back once from
//!   [`CommitLog::take_shipped`], with the [`Shipment`] or the error; after
//!   an error the pipe may hold part of the blocks and is not used again.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

use super::CommitLog;
use super::appender::{SEQ_SHIP, commit_log_op_id, op_counter};
use crate::disk::{Disk, DiskCompletion, DiskOp, FileId};
use crate::error::StorageError;

/// A pipe that CommitLog ranges are shipped through (see the module docs).
#[derive(Debug)]
pub struct ShipPipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl ShipPipe {
    /// A pipe holding at least `capacity` bytes (`F_SETPIPE_SZ`; the
    /// kernel rounds it up to a power of two pages).
    ///
    /// # Errors
    /// The errno of `pipe2`, or of `F_SETPIPE_SZ`, whose EPERM means more
    /// than `/proc/sys/fs/pipe-max-size` for a process without
    /// CAP_SYS_RESOURCE.
    pub fn new(capacity: usize) -> io::Result<ShipPipe> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are fresh and owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let wanted = libc::c_int::try_from(capacity)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pipe capacity over 2 GiB"))?;
        // SAFETY: F_SETPIPE_SZ on a pipe we own.
        let set = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, wanted) };
        if set < 0 {
            let error = io::Error::last_os_error();
            return Err(io::Error::new(
                error.kind(),
                format!(
                    "setting a pipe's capacity to {capacity} bytes: {error} \
                     (the limit for unprivileged processes is /proc/sys/fs/pipe-max-size)"
                ),
            ));
        }
        Ok(ShipPipe {
            read,
            write,
            capacity: set as usize,
        })
    }

    /// Bytes the pipe holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The read end, to splice the shipped bytes on from.
    pub fn read_fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// The write end, for filling the pipe by other means (tests, tools);
    /// a ship's bytes must not be mixed with others.
    pub fn write_fd(&self) -> RawFd {
        self.write.as_raw_fd()
    }

    /// Bytes in the pipe now (`FIONREAD`).
    ///
    /// # Errors
    /// The ioctl's errno.
    pub fn held(&self) -> io::Result<usize> {
        let mut count: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        if unsafe { libc::ioctl(self.read.as_raw_fd(), libc::FIONREAD, &mut count) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(count as usize)
    }

    /// Moves the next `out.len()` bytes of the pipe into `out` (for a
    /// receiver that wants them in memory, and for tests). Never waits: it
    /// fails unless the pipe holds that many.
    ///
    /// # Errors
    /// [`io::ErrorKind::UnexpectedEof`] when the pipe holds fewer; the
    /// errno of `read`.
    pub fn take(&self, out: &mut [u8]) -> io::Result<()> {
        let held = self.held()?;
        if held < out.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the pipe holds {held} bytes, not {}", out.len()),
            ));
        }
        let mut done = 0;
        while done < out.len() {
            let rest = &mut out[done..];
            // SAFETY: `rest` is a live, writable slice of `rest.len()` bytes.
            let count =
                unsafe { libc::read(self.read.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len()) };
            if count < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            done += count as usize;
        }
        Ok(())
    }

    /// Splices the next `len` bytes of the pipe to `fd` (a socket, a file
    /// at its position), waiting while `fd` has no room: for a thread that
    /// may block (tools, tests); a shard splices through its ring instead.
    ///
    /// # Errors
    /// The errno of `splice`; [`io::ErrorKind::WriteZero`] if it moved
    /// nothing.
    pub fn splice_to(&self, fd: RawFd, len: usize) -> io::Result<()> {
        let mut sent = 0;
        while sent < len {
            // SAFETY: splice between the pipe and a descriptor the caller
            // keeps open for the call.
            let count = unsafe {
                libc::splice(
                    self.read.as_raw_fd(),
                    std::ptr::null_mut(),
                    fd,
                    std::ptr::null_mut(),
                    len - sent,
                    libc::SPLICE_F_MORE,
                )
            };
            if count < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if count == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!(
                        "splice moved nothing with {} of {len} bytes left",
                        len - sent
                    ),
                ));
            }
            sent += count as usize;
        }
        Ok(())
    }

    /// Drops the next `count` bytes of the pipe (a shipment's head or
    /// tail). Never waits, as [`ShipPipe::take`].
    ///
    /// # Errors
    /// As [`ShipPipe::take`].
    pub fn discard(&self, mut count: usize) -> io::Result<()> {
        let mut scratch = [0u8; 4096];
        while count > 0 {
            let step = count.min(scratch.len());
            self.take(&mut scratch[..step])?;
            count -= step;
        }
        Ok(())
    }
}

/// Where a shipped range is in its pipe once its ticket is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shipment {
    /// The ticket [`CommitLog::start_ship`] gave.
    pub ticket: u64,
    /// Outside-visible offset of the range's first byte.
    pub offset: u64,
    /// Bytes in the pipe before the range.
    pub head: usize,
    /// The range's length.
    pub len: usize,
    /// Bytes in the pipe after the range.
    pub tail: usize,
}

/// A ship in flight: the blocks not yet in the pipe.
#[derive(Debug)]
struct Ship {
    shipment: Shipment,
    file: FileId,
    /// The segment's path, for errors.
    path: PathBuf,
    /// File offset of the next block to splice.
    next: u64,
    /// Bytes still to splice from `next`.
    left: usize,
    /// Held until the ship is done, so its descriptor cannot be closed
    /// (and reused) under a splice in flight.
    pipe: Arc<ShipPipe>,
}

/// The ships of one CommitLog in flight, and those done since the last
/// [`CommitLog::take_shipped`].
#[derive(Debug, Default)]
pub(super) struct Ships {
    last_ticket: u64,
    in_flight: Vec<Ship>,
    done: Vec<Result<Shipment, (u64, StorageError)>>,
}

impl Ships {
    pub(super) fn in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }
}

impl CommitLog {
    /// Starts shipping the acknowledgeable `len` bytes at outside-visible
    /// `offset` (within one segment) into `pipe`, which must be empty and
    /// hold their blocks (the log keeps a clone until the ship is done). The ticket comes back from
    /// [`CommitLog::take_shipped`] once they are all in the pipe. None when
    /// the range is not acknowledgeable or no longer kept.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] for an empty range, another
    /// shard's offset, a range across a segment end, a pipe too small or
    /// not empty; disk errors
    /// submitting the splice.
    pub fn start_ship(
        &mut self,
        disk: &mut impl Disk,
        offset: u64,
        len: usize,
        pipe: &Arc<ShipPipe>,
    ) -> Result<Option<u64>, StorageError> {
        if len == 0 {
            return Err(StorageError::InvalidArgument(format!(
                "shipping nothing at {offset}"
            )));
        }
        let Some(local) = self.readable(offset, len)? else {
            return Ok(None);
        };
        let Some(range) = self.segment_range(local, len)? else {
            return Ok(None);
        };
        let path = self
            .segments
            .get(local)
            .map(|segment| segment.path.clone())
            .unwrap_or_default();
        if range.len > pipe.capacity() {
            return Err(StorageError::InvalidArgument(format!(
                "shipping {len} bytes at {offset} takes {} bytes of blocks, more than the pipe's {}",
                range.len,
                pipe.capacity()
            )));
        }
        let held = pipe.held().map_err(|error| {
            StorageError::InvalidArgument(format!("the ship pipe cannot be asked: {error}"))
        })?;
        if held > 0 {
            return Err(StorageError::InvalidArgument(format!(
                "the ship pipe still holds {held} bytes"
            )));
        }
        self.ships.last_ticket += 1;
        let ticket = self.ships.last_ticket;
        let ship = Ship {
            shipment: Shipment {
                ticket,
                offset,
                head: range.skip,
                len,
                tail: range.len - range.skip - len,
            },
            file: range.file,
            path,
            next: range.file_offset,
            left: range.len,
            pipe: Arc::clone(pipe),
        };
        self.submit_ship(disk, &ship)?;
        self.ships.in_flight.push(ship);
        Ok(Some(ticket))
    }

    fn submit_ship(&mut self, disk: &mut impl Disk, ship: &Ship) -> Result<(), StorageError> {
        let op = DiskOp::SpliceToPipe {
            file: ship.file,
            file_offset: ship.next,
            len: ship.left,
            pipe: ship.pipe.write.as_raw_fd(),
        };
        let op_id = commit_log_op_id(SEQ_SHIP, ship.shipment.ticket);
        disk.submit(op_id, op, false)
            .map_err(|(error, _)| error.into())
    }

    /// The ships done since the last call: each shipment whose blocks are
    /// all in its pipe, or its ticket and the error.
    pub fn take_shipped(&mut self, out: &mut Vec<Result<Shipment, (u64, StorageError)>>) {
        out.append(&mut self.ships.done);
    }

    /// A ship's splice completed: done, or the rest of its blocks go on.
    pub(super) fn on_ship(&mut self, disk: &mut impl Disk, completion: DiskCompletion) {
        let ticket = op_counter(completion.op_id);
        let Some(index) = self
            .ships
            .in_flight
            .iter()
            .position(|ship| ship.shipment.ticket == ticket)
        else {
            tracing::warn!(ticket, "a splice completed for no ship in flight");
            return;
        };
        let mut ship = self.ships.in_flight.swap_remove(index);
        let moved = match completion.result {
            Ok(0) => Err(StorageError::Corrupt {
                path: ship.path.clone(),
                file_offset: ship.next,
                reason: format!("the file ends {} bytes before a shipped range", ship.left),
            }),
            Ok(moved) => Ok(moved.min(ship.left)),
            Err(error) => Err(error.into()),
        };
        match moved {
            Ok(moved) if moved == ship.left => self.ships.done.push(Ok(ship.shipment)),
            Ok(moved) => {
                ship.next += moved as u64;
                ship.left -= moved;
                match self.submit_ship(disk, &ship) {
                    Ok(()) => self.ships.in_flight.push(ship),
                    Err(error) => self.ships.done.push(Err((ticket, error))),
                }
            }
            Err(error) => self.ships.done.push(Err((ticket, error))),
        }
    }
}
