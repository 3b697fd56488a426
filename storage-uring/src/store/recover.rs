//! Recovery of the derived files (ConsumeQueues and index) while the store
//! opens.
//!
//! After a clean stop they are loaded as they are. After an abnormal stop
//! they may hold torn or unsynced entries past what was fdatasynced, so the
//! checkpoint's durable points ([`crate::checkpoint::DurablePoints`]) say
//! how far each is known good:
//!
//! ```text
//!  CommitLog   [.........................|.............|~~~~~ torn tail]
//!                              queues durable   end of valid records
//!  ConsumeQueue [entries of records below | cut here, re-dispatched ]
//!  scan         from the segment of min(durable points, confirm) to the end
//! ```
//!
//! Every queue is cut at its first entry pointing at or past the queues'
//! durable point, the index back to its durable file and count, and the
//! CommitLog scan re-dispatches from the earliest point. Entries below the
//! point were synced before the checkpoint that names it was written, so
//! they are intact; what can still be wrong is an entry past a queue's
//! synced prefix whose torn offset happens to point below the durable point.
//! Such an entry is caught either by the scan (a record past the point that
//! does not append at its queue offset) or by checking each queue's last
//! entry against its record. On any such inconsistency, and when the
//! checkpoint has no durable points, the derived files are rebuilt from the
//! whole CommitLog instead (slower: recovery then reads every segment).
//!
//! Deleted topics (DELETE_TOPIC) leave their records in the CommitLog but
//! no queue files. A record below the queues' durable point whose queue was
//! not loaded is not dispatched: every queue that held such a record was
//! synced past the point, so a missing one was deleted (after a clean stop
//! the point is the CommitLog end, and nothing comes back). Records past
//! the point (an abnormal stop before the point passed the deletion) and,
//! in a rebuild, every record are dispatched again, as RocketMQ's reput
//! does: the deleted topic's queues come back at the records' own queue
//! offsets, and into a queue of the topic created again since, the old
//! records go first and its new ones at offsets the old ones took are
//! dropped as duplicates.
//!
//! # Invariants
//! - After recovery every ConsumeQueue entry points at the record with its
//!   topic, queue id and queue offset (checked for the last entry of each
//!   queue, implied for the others by the synced prefix and the scan).

use ringmq_protocol::message::layout::is_dispatched_to_consume_queue;
use ringmq_protocol::message::{CrcCheck, RecordView, decode_record, tags_code};

use super::{DispatchProperties, StoreConfig};
use crate::checkpoint::{self, Checkpoint, DurablePoints, ShardFiles};
use crate::commit_log::{self, CommitLog, shard_offset};
use crate::consume_queue::{AppendOutcome, ConsumeQueueSet, CqEntry, LastStop};
use crate::disk::{Disk, FileId, remove_files};
use crate::error::StorageError;
use crate::index_file::{IndexDurablePoint, IndexRecord, IndexService};
use crate::limits::CHECKPOINT_FILE_SIZE;

/// Entries dropped from one queue's tail while looking for one that matches
/// its record; more means the queue is not what a crash can leave, and the
/// derived files are rebuilt.
const TAIL_ENTRIES_DROPPED_MAX: usize = 64;

/// Dispatches recovered records into the ConsumeQueues and the index.
pub(super) struct Dispatcher<'a> {
    pub(super) queues: &'a mut ConsumeQueueSet,
    pub(super) index: &'a mut IndexService,
    pub(super) shard_id: u8,
    pub(super) now_ms: u64,
    /// Records at or past this offset must append at their queue offset
    /// (the queues were cut there); None after a rebuild or a clean stop.
    pub(super) strict_from: Option<u64>,
    /// Records below this offset go only to queues that exist: every queue
    /// that held such a record was synced past it (the queues' durable
    /// point), so a missing one was deleted (DELETE_TOPIC) and must not come
    /// back. None for a rebuild from the whole CommitLog.
    pub(super) existing_queues_below: Option<u64>,
    /// The first dispatch error.
    pub(super) error: Option<StorageError>,
    /// Why the kept derived files disagree with the CommitLog, if they do.
    pub(super) inconsistent: Option<String>,
    /// Records appended to a ConsumeQueue.
    pub(super) redispatched: u64,
}

impl Dispatcher<'_> {
    pub(super) fn visit(&mut self, local: u64, view: &RecordView<'_>) {
        let topic = view.topic();
        let properties = DispatchProperties::find(view.properties_bytes());
        let commit_log_offset = shard_offset(self.shard_id, local);
        let record = IndexRecord {
            topic,
            commit_log_offset,
            store_timestamp_ms: view.store_timestamp_ms(),
            sys_flag: view.sys_flag(),
            uniq_key: properties.uniq_key,
            keys: properties.keys,
        };
        self.index.build_index(&record, self.now_ms as i64);
        if self.error.is_some() || !is_dispatched_to_consume_queue(view.sys_flag()) {
            return;
        }
        let entry = CqEntry {
            commit_log_offset,
            size: view.total_size(),
            tags_code: tags_code(properties.tags),
        };
        if self
            .existing_queues_below
            .is_some_and(|below| commit_log_offset < below)
            && self.queues.get(topic, view.queue_id() as u32).is_none()
        {
            return;
        }
        let queue_offset = view.queue_offset() as u64;
        let appended = self
            .queues
            .index_or_create(topic, view.queue_id() as u32)
            .and_then(|index| self.queues.queue_at_mut(index).append(queue_offset, entry));
        match appended {
            Ok(outcome) => {
                if outcome == AppendOutcome::Appended {
                    self.redispatched += 1;
                }
                if self
                    .strict_from
                    .is_some_and(|from| commit_log_offset >= from)
                    && outcome != AppendOutcome::Appended
                    && self.inconsistent.is_none()
                {
                    self.inconsistent = Some(format!(
                        "record at {commit_log_offset} ({topic}/{} offset {queue_offset}) past the durable point was {outcome:?}",
                        view.queue_id()
                    ));
                }
            }
            Err(error) => {
                if self.strict_from.is_some() {
                    self.inconsistent = Some(error.to_string());
                } else {
                    self.error = Some(error);
                }
            }
        }
    }
}

/// Opens the checkpoint file (created if missing) and reads the checkpoint
/// in it, if it holds a valid one of `shard_id`.
///
/// # Errors
/// Disk errors opening or reading it.
pub(super) fn read_checkpoint<D: Disk>(
    disk: &mut D,
    files: &ShardFiles,
    shard_id: u8,
) -> Result<(FileId, Option<Checkpoint>), StorageError> {
    let (file, existed) = checkpoint::open_checkpoint(disk, files)?;
    if !existed {
        return Ok((file, None));
    }
    let buf = commit_log::sync_read(disk, file, 0, CHECKPOINT_FILE_SIZE, &mut Vec::new())?;
    let decoded = Checkpoint::decode(buf.as_slice());
    disk.recycle(buf);
    Ok((file, decoded.filter(|c| c.shard_id == u32::from(shard_id))))
}

/// The derived files as the store opens them, before the CommitLog scan.
pub(super) struct Derived {
    pub(super) queues: ConsumeQueueSet,
    pub(super) index: IndexService,
    /// Shard-local offset the CommitLog scan dispatches from.
    pub(super) scan_from: u64,
    /// Outside-visible offset from which every scanned record must append
    /// at its queue offset (kept files after an abnormal stop).
    pub(super) strict_from: Option<u64>,
    /// Whether the files are kept or rebuilt, and how.
    pub(super) rebuild: Rebuild,
}

/// Whether and how the derived files are rebuilt from the CommitLog.
pub(super) enum Rebuild {
    /// Kept: the scan dispatches into them from `scan_from`.
    No,
    /// After the scan, which then only validates the log, from the whole
    /// CommitLog ([`rebuild`]).
    AfterScan,
    /// By the scan, which reads the whole log: it dispatches into the empty
    /// sets; the old files are removed once it has succeeded
    /// ([`reconcile_derived`]) and these floors ([`removed_queue_floors`],
    /// read before it) applied.
    ByScan(QueueFloors),
}

impl Rebuild {
    /// Whether the CommitLog scan dispatches into the sets.
    pub(super) fn scan_dispatches(&self) -> bool {
        !matches!(self, Rebuild::AfterScan)
    }
}

/// `(topic, queue id, queue offset)` of each ConsumeQueue whose first
/// entries pointed below the CommitLog's first segment
/// ([`removed_queue_floors`]).
pub(super) type QueueFloors = Vec<(String, u32, u64)>;

/// Opens the ConsumeQueues and the index: after a clean stop as they are;
/// after an abnormal one cut back to the checkpoint's durable points when
/// it has them ([`load_to_durable_points`]), else empty, to be rebuilt.
///
/// # Errors
/// Disk errors loading the files.
pub(super) fn open_derived<D: Disk>(
    disk: &mut D,
    config: &StoreConfig,
    abnormal: bool,
    durable_points: Option<DurablePoints>,
    confirm_local: u64,
) -> Result<Derived, StorageError> {
    if abnormal {
        if let Some(points) = durable_points
            && let Some((queues, index, from)) = load_to_durable_points(disk, config, points)?
        {
            return Ok(Derived {
                queues,
                index,
                scan_from: commit_log::split_shard_offset(from).1.min(confirm_local),
                strict_from: Some(split_points(points).0),
                rebuild: Rebuild::No,
            });
        }
        let rebuild = if durable_points.is_none() && confirm_local == 0 {
            // No checkpoint: the CommitLog scan reads the whole log anyway,
            // so it rebuilds the files on its way (one pass over the log
            // instead of two; a full rebuild waits on the disk).
            Rebuild::ByScan(removed_queue_floors(disk, config))
        } else {
            Rebuild::AfterScan
        };
        return Ok(Derived {
            queues: ConsumeQueueSet::new(&config.consume_queue_root),
            index: IndexService::new(&config.index_dir(), config.index_geometry)?,
            scan_from: confirm_local,
            strict_from: None,
            rebuild,
        });
    }
    let queues = ConsumeQueueSet::load_all(disk, &config.consume_queue_root, LastStop::Clean)?;
    let index = IndexService::load(disk, &config.index_dir(), config.index_geometry)?;
    let scan_from = match durable_points {
        // The checkpoint written at the clean stop says the queues and the
        // index are durable to its points (the end of what was dispatched,
        // since the stop flushed them): the scan starts there. The least
        // advanced queue's last entry (a quiet queue's is days back) and
        // the newest indexed record (none when no record had keys) made
        // every clean open read most or all of the log until the
        // twenty-third session.
        Some(points) => {
            let (queues_offset, index_point) = split_points(points);
            commit_log::split_shard_offset(queues_offset.min(index_point.offset))
                .1
                .min(confirm_local)
        }
        // A checkpoint without durable points (older stores): index entries
        // resume after the newest indexed record, queues after their last;
        // no queue at all, from the start.
        None => {
            let resume_local = queues
                .iter()
                .map(|q| commit_log::split_shard_offset(q.resume_offset()).1)
                .min();
            let indexed_local =
                commit_log::split_shard_offset(index.index_last_update_phy_offset() as u64).1;
            resume_local.map_or(0, |resume| resume.min(confirm_local).min(indexed_local))
        }
    };
    Ok(Derived {
        queues,
        index,
        scan_from,
        strict_from: None,
        rebuild: Rebuild::No,
    })
}

/// What the CommitLog's open scan left for [`reconcile_derived`].
pub(super) struct Scanned {
    /// Outside-visible offset after the last valid record.
    pub(super) end: u64,
    /// Records the scan dispatched.
    pub(super) redispatched: u64,
    /// Why the kept derived files disagree with the CommitLog, if they do.
    pub(super) inconsistent: Option<String>,
}

/// After the CommitLog's scan: cuts the derived files at its end, checks
/// kept ones against it, and rebuilds them from it when they cannot be
/// trusted (or were to be rebuilt anyway). Returns the queues, the index,
/// the records dispatched and whether the files were rebuilt.
///
/// # Errors
/// Disk errors; a dispatch error of the rebuild.
pub(super) fn reconcile_derived<D: Disk>(
    disk: &mut D,
    config: &StoreConfig,
    commit_log: &mut CommitLog,
    derived: Derived,
    scanned: Scanned,
    now_ms: u64,
) -> Result<(ConsumeQueueSet, IndexService, u64, bool), StorageError> {
    let Derived {
        mut queues,
        mut index,
        strict_from,
        rebuild: plan,
        ..
    } = derived;
    let Scanned {
        end,
        mut redispatched,
        mut inconsistent,
    } = scanned;
    if matches!(plan, Rebuild::ByScan(_)) {
        // The scan dispatched into empty sets, which nothing has written
        // yet: the old files go now (not before the scan, so that a failed
        // scan leaves them, and their floors, for the next open).
        remove_derived_files(disk, config)?;
    }
    queues.truncate_from_commit_log_offset(disk, end)?;
    if strict_from.is_some() {
        // Records past the end are gone: so are their index entries, and
        // the durable points cannot be past the end (new records will be
        // written there).
        queues.set_durable_point(queues.durable_point().min(end));
        if inconsistent.is_none() && !index.truncate_from_commit_log_offset(disk, end)? {
            inconsistent = Some("an index file could not be cut at the commit log end".into());
        }
        if inconsistent.is_none() {
            inconsistent = check_queue_tails(disk, commit_log, &mut queues)?;
        }
    }
    if let Some(reason) = &inconsistent {
        tracing::warn!(
            reason,
            "the kept consume queues disagree with the commit log; rebuilding them from it"
        );
        queues.close_all(disk)?;
        index.close_and_remove_all(disk)?;
    }
    let rebuilt = match plan {
        Rebuild::No if inconsistent.is_none() => false,
        Rebuild::ByScan(floors) => {
            // Without `strict_from` nothing is found inconsistent: the
            // scan's dispatch was the rebuild.
            debug_assert!(
                inconsistent.is_none(),
                "a rebuilt-by-scan store rebuilt again"
            );
            finish_rebuild(&mut queues, floors)?;
            true
        }
        Rebuild::No | Rebuild::AfterScan => {
            (queues, index, redispatched) = rebuild(disk, config, commit_log, now_ms)?;
            true
        }
    };
    Ok((queues, index, redispatched, rebuilt))
}

/// The checkpoint's durable points as the ConsumeQueues' offset and the
/// index's point.
pub(super) fn split_points(points: DurablePoints) -> (u64, IndexDurablePoint) {
    (
        points.queues_offset.max(0) as u64,
        IndexDurablePoint {
            offset: points.index_offset.max(0) as u64,
            file_created_ms: points.index_file_created_ms,
            index_count: points.index_count,
        },
    )
}

/// Loads the ConsumeQueues and the index cut back to `points`, and returns
/// them with the outside-visible offset the scan must start from; None if
/// the index files cannot be what the points describe (the caller rebuilds).
///
/// # Errors
/// Disk errors loading or cutting the files.
pub(super) fn load_to_durable_points<D: Disk>(
    disk: &mut D,
    config: &StoreConfig,
    points: DurablePoints,
) -> Result<Option<(ConsumeQueueSet, IndexService, u64)>, StorageError> {
    let (queues_offset, index_point) = split_points(points);
    // Entries of records retention removed are below every point a round
    // reaches; a point below the CommitLog's first segment would cut them
    // (and the offsets of queues left with no record): rebuild, which keeps
    // those offsets.
    let log_min_local = disk
        .list_dir(&config.commit_log_dir())?
        .iter()
        .filter_map(|name| crate::commit_log::segment::parse_segment_file_name(name))
        .min()
        .unwrap_or(0);
    if crate::commit_log::split_shard_offset(queues_offset).1 < log_min_local {
        tracing::warn!(
            queues_offset,
            log_min_local,
            "the consume queues' durable point is below the commit log; rebuilding them"
        );
        return Ok(None);
    }
    let mut queues =
        ConsumeQueueSet::load_all(disk, &config.consume_queue_root, LastStop::Abnormal)?;
    queues.truncate_from_commit_log_offset(disk, queues_offset)?;
    queues.set_durable_point(queues_offset);
    let mut index = IndexService::load(disk, &config.index_dir(), config.index_geometry)?;
    if !index.recover_to(disk, index_point)? {
        tracing::warn!(
            ?index_point,
            "index files do not match the checkpoint; rebuilding the derived files"
        );
        queues.close_all(disk)?;
        index.close_and_remove_all(disk)?;
        return Ok(None);
    }
    Ok(Some((queues, index, queues_offset.min(index_point.offset))))
}

/// Checks each queue's last entry against its record, dropping entries that
/// do not match (at most [`TAIL_ENTRIES_DROPPED_MAX`] per queue); returns why
/// the queues cannot be trusted, if they cannot.
///
/// # Errors
/// Disk errors reading records or cutting queues.
pub(super) fn check_queue_tails<D: Disk>(
    disk: &mut D,
    commit_log: &mut CommitLog,
    queues: &mut ConsumeQueueSet,
) -> Result<Option<String>, StorageError> {
    let log_min = commit_log.min_offset();
    for index in 0..queues.index_bound() {
        let mut dropped = 0;
        // Deleted topics leave holes.
        while let Some(queue) = queues.try_queue_at(index) {
            let max = queue.max_offset();
            if max <= queue.min_offset() {
                break;
            }
            let queue_offset = max - 1;
            let Some(entry) = queue.entry(queue_offset) else {
                break;
            };
            // Entries of records retention removed cannot be checked; they
            // were synced long before the durable point.
            if entry.is_filler() || entry.commit_log_offset < log_min {
                break;
            }
            let matches = commit_log
                .read(disk, entry.commit_log_offset, entry.size as usize)?
                .is_some_and(|bytes| {
                    decode_record(&bytes, CrcCheck::Skip).is_ok_and(|view| {
                        view.topic() == queue.topic()
                            && view.queue_id() as u32 == queue.queue_id()
                            && view.queue_offset() as u64 == queue_offset
                    })
                });
            if matches {
                break;
            }
            dropped += 1;
            if dropped > TAIL_ENTRIES_DROPPED_MAX {
                return Ok(Some(format!(
                    "consume queue {}/{}: more than {TAIL_ENTRIES_DROPPED_MAX} last entries match no record",
                    queue.topic(),
                    queue.queue_id()
                )));
            }
            tracing::warn!(
                topic = queue.topic(),
                queue_id = queue.queue_id(),
                queue_offset,
                ?entry,
                "dropping a consume queue entry that matches no record"
            );
            queues
                .queue_at_mut(index)
                .truncate_from_queue_offset(disk, queue_offset)?;
        }
    }
    Ok(None)
}

/// Throws the derived files away and rebuilds them from the whole
/// CommitLog; returns the new queues and index and the records
/// re-dispatched. Queues whose records retention removed keep their
/// offsets (their old files say where they ended).
///
/// # Errors
/// Disk errors; a dispatch error of the rebuild.
pub(super) fn rebuild<D: Disk>(
    disk: &mut D,
    config: &StoreConfig,
    commit_log: &mut CommitLog,
    now_ms: u64,
) -> Result<(ConsumeQueueSet, IndexService, u64), StorageError> {
    let (mut queues, mut index, queue_floors) = start_rebuild(disk, config)?;
    let mut dispatcher = Dispatcher {
        queues: &mut queues,
        index: &mut index,
        shard_id: config.shard_id,
        now_ms,
        strict_from: None,
        existing_queues_below: None,
        error: None,
        inconsistent: None,
        redispatched: 0,
    };
    commit_log.rescan(disk, &mut |local, view| dispatcher.visit(local, view))?;
    let redispatched = dispatcher.redispatched;
    if let Some(error) = dispatcher.error {
        return Err(error);
    }
    finish_rebuild(&mut queues, queue_floors)?;
    Ok((queues, index, redispatched))
}

/// The first half of a rebuild: the queue floors of the files on disk,
/// then the files removed and empty ones to dispatch into.
fn start_rebuild(
    disk: &mut impl Disk,
    config: &StoreConfig,
) -> Result<(ConsumeQueueSet, IndexService, QueueFloors), StorageError> {
    let queue_floors = removed_queue_floors(disk, config);
    remove_derived_files(disk, config)?;
    let queues = ConsumeQueueSet::new(&config.consume_queue_root);
    let index = IndexService::new(&config.index_dir(), config.index_geometry)?;
    Ok((queues, index, queue_floors))
}

/// Removes every ConsumeQueue and index file.
fn remove_derived_files(disk: &mut impl Disk, config: &StoreConfig) -> Result<(), StorageError> {
    remove_consume_queue_files(disk, &config.consume_queue_root)?;
    remove_files_in(disk, &config.index_dir())
}

/// The second half, after the dispatch: queues whose first records were
/// removed start at their floors again.
fn finish_rebuild(
    queues: &mut ConsumeQueueSet,
    queue_floors: QueueFloors,
) -> Result<(), StorageError> {
    for (topic, queue_id, floor) in queue_floors {
        let at = queues.index_or_create(&topic, queue_id)?;
        queues.queue_at_mut(at).start_at(floor);
    }
    Ok(())
}

/// For each ConsumeQueue on disk, the queue offset after its entries that
/// point below the CommitLog's first segment (records retention removed), if
/// any: `(topic, queue id, offset)`. Best effort: a queue that cannot be read
/// is left out (it is rebuilt from the CommitLog as before).
fn removed_queue_floors(disk: &mut impl Disk, config: &StoreConfig) -> QueueFloors {
    let log_min_local = match disk.list_dir(&config.commit_log_dir()) {
        Ok(names) => names
            .iter()
            .filter_map(|name| commit_log::segment::parse_segment_file_name(name))
            .min(),
        Err(error) => {
            tracing::warn!(%error, "listing the commit log for queue offsets failed");
            None
        }
    };
    let Some(log_min_local) = log_min_local.filter(|min| *min > 0) else {
        return Vec::new();
    };
    let log_min = shard_offset(config.shard_id, log_min_local);
    let queues =
        match ConsumeQueueSet::load_all(disk, &config.consume_queue_root, LastStop::Abnormal) {
            Ok(queues) => queues,
            Err(error) => {
                tracing::warn!(%error, "loading consume queues for their offsets failed");
                return Vec::new();
            }
        };
    let mut floors = Vec::new();
    for queue in queues.iter() {
        // Entries are in CommitLog order: binary search for the first one
        // still backed by the CommitLog.
        let (mut low, mut high) = (queue.min_offset(), queue.max_offset());
        while low < high {
            let mid = low + (high - low) / 2;
            match queue.entry(mid) {
                Some(entry) if entry.commit_log_offset < log_min => low = mid + 1,
                _ => high = mid,
            }
        }
        if low > 0 {
            floors.push((queue.topic().to_string(), queue.queue_id(), low));
        }
    }
    let mut queues = queues;
    if let Err(error) = queues.close_all(disk) {
        tracing::warn!(%error, "closing consume queues read for their offsets failed");
    }
    floors
}

/// Removes every file directly in `dir`.
fn remove_files_in(disk: &mut impl Disk, dir: &std::path::Path) -> Result<(), StorageError> {
    let names = disk.list_dir(dir)?;
    remove_files(disk, dir, &names)?;
    Ok(())
}

/// Removes every ConsumeQueue file under `root` (`consumequeue/<topic>/<queue>/<file>`).
fn remove_consume_queue_files(
    disk: &mut impl Disk,
    root: &std::path::Path,
) -> Result<(), StorageError> {
    let cq_root = root.join(crate::consume_queue::CQ_DIR_NAME);
    for topic in disk.list_dir(&cq_root)? {
        let topic_dir = cq_root.join(&topic);
        for queue in disk.list_dir(&topic_dir)? {
            remove_files_in(disk, &topic_dir.join(&queue))?;
        }
    }
    Ok(())
}
