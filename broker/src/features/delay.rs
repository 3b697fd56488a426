//! Delay levels (`messageDelayLevel`) and the scheduler that re-delivers
//! `SCHEDULE_TOPIC_XXXX` messages when they are due (Java's
//! `ScheduleMessageService`, remoting-protocol.md 5.4).
//!
//! ```text
//! send with DELAY=n ──▶ SCHEDULE_TOPIC_XXXX queue n-1, + REAL_TOPIC, REAL_QID
//!                       CQ tagsCode = store timestamp + delay(n)     (schedule_tags_code)
//! level n queue ──▶ DelayScheduler::poll(entries, now) ──▶ due entries
//!    ──▶ restore_from_schedule(record) ──▶ Repost to REAL_TOPIC/REAL_QID
//!    ──▶ appended ──▶ DelayScheduler::ack ──▶ offset_file() → config/delayOffset.json
//! ```
//!
//! `delayOffset.json` holds, per level, the next schedule-queue offset to
//! deliver (`{"offsetTable":{1:0,2:5}}`, [`DelayOffsetFile`]); Java's 5.x
//! broker adds a `dataVersion`, which is kept when present.
//!
//! # Invariants
//!
//! - A level's persisted offset only moves over entries whose re-delivered
//!   message was acknowledged as stored, in queue order: after a crash,
//!   delivery resumes at the first entry not known to be stored, so nothing is
//!   skipped (an entry may be delivered twice, which at-least-once allows).
//! - An entry is never handed out before its delivery time (the stored
//!   `tagsCode`), except that a delivery time further ahead than the level's
//!   delay (the clock went back) is taken as "now", as Java does.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use bytes::BytesMut;
use ringmq_protocol::json::{DataVersion, DelayOffsetFile};
use ringmq_protocol::message::layout::{
    SYS_FLAG_TRANSACTION_COMMIT_TYPE, SYS_FLAG_TRANSACTION_NOT_TYPE, transaction_type,
};
use ringmq_protocol::message::{
    Properties, RecordView, property_key, rewrite_properties, tags_code,
};

use super::{QueueEntry, Redirect, Repost};
use crate::topic_config::{SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUMS, TRANS_HALF_TOPIC};

/// Java's default `messageDelayLevel`.
pub const DELAY_LEVELS_DEFAULT: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";
/// Most levels a `messageDelayLevel` may define: the schedule topic has one
/// queue per level.
pub const DELAY_LEVEL_COUNT_MAX: usize = SCHEDULE_TOPIC_QUEUE_NUMS as usize;
/// Longest delay one level may have (Java has no limit; 30 days keeps the
/// delivery time far from overflow and catches a unit typo).
pub const DELAY_MS_MAX: i64 = 30 * 24 * 3600 * 1000;
/// Path of the progress file under the store root.
pub const DELAY_OFFSET_FILE_PATH: &str = "config/delayOffset.json";
/// Most entries one [`DelayScheduler::poll`] hands out, so one level cannot
/// hold a shard's loop turn.
pub const DELIVERIES_PER_POLL_MAX: usize = 64;
/// How long a level waits before looking again when its queue has nothing
/// (Java's `DELAY_FOR_A_WHILE`).
pub const IDLE_RECHECK_MS: i64 = 100;

const _: () = assert!(DELAY_LEVEL_COUNT_MAX == 18);

/// Why delay input is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DelayError {
    /// A `messageDelayLevel` item is not `<digits><s|m|h|d>`.
    #[error("delay level {level} item {item:?} is not a number followed by s, m, h or d")]
    BadLevelItem {
        /// 1-based level of the item.
        level: usize,
        /// The item as written.
        item: String,
    },
    /// A level's delay exceeds [`DELAY_MS_MAX`].
    #[error("delay level {level} item {item:?} exceeds the {max_ms} ms limit")]
    LevelTooLong {
        /// 1-based level.
        level: usize,
        /// The item as written.
        item: String,
        /// [`DELAY_MS_MAX`].
        max_ms: i64,
    },
    /// No level, or more than [`DELAY_LEVEL_COUNT_MAX`].
    #[error("messageDelayLevel defines {count} levels; 1 to {max} are allowed")]
    LevelCount {
        /// Levels given.
        count: usize,
        /// [`DELAY_LEVEL_COUNT_MAX`].
        max: usize,
    },
    /// The `DELAY` property is not an integer (Java's `Integer.parseInt` throws).
    #[error("DELAY property {0:?} is not an integer")]
    BadDelayProperty(String),
    /// A schedule record lacks `REAL_TOPIC` or `REAL_QID`, or has a bad one.
    #[error("schedule record lacks a valid {0}")]
    MissingRealDestination(&'static str),
    /// A schedule record names the half topic as its real topic (Java discards it).
    #[error("schedule record's real topic is the transaction half topic")]
    RealTopicIsHalfTopic,
    /// A property could not be written.
    #[error("rewriting properties: {0}")]
    Properties(#[from] ringmq_protocol::message::RecordError),
    /// [`DelayScheduler::poll`] was given entries that do not start where the
    /// level's reading position is.
    #[error("level {level}: entries start at offset {found}, expected {expected}")]
    Gap {
        /// The level.
        level: i32,
        /// [`DelayScheduler::read_from`].
        expected: i64,
        /// First offset given.
        found: i64,
    },
    /// A level outside `1..=max_level`.
    #[error("delay level {level} outside 1..={max}")]
    LevelOutOfRange {
        /// The level.
        level: i32,
        /// The highest level.
        max: i32,
    },
}

/// The delay of each level, in ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayLevels {
    delays_ms: Vec<i64>,
}

impl Default for DelayLevels {
    fn default() -> Self {
        DelayLevels::parse(DELAY_LEVELS_DEFAULT).expect("the default ladder parses")
    }
}

impl DelayLevels {
    /// Parses `messageDelayLevel`: items separated by single spaces, each a
    /// decimal count and a unit `s`, `m`, `h` or `d` (Java's
    /// `parseDelayLevel`). Surrounding whitespace is trimmed.
    ///
    /// # Errors
    ///
    /// [`DelayError::BadLevelItem`] naming the first bad item (an empty item
    /// from a double space included), [`DelayError::LevelTooLong`],
    /// [`DelayError::LevelCount`].
    pub fn parse(text: &str) -> Result<DelayLevels, DelayError> {
        let items: Vec<&str> = text.trim().split(' ').collect();
        if items.len() > DELAY_LEVEL_COUNT_MAX || text.trim().is_empty() {
            return Err(DelayError::LevelCount {
                count: if text.trim().is_empty() {
                    0
                } else {
                    items.len()
                },
                max: DELAY_LEVEL_COUNT_MAX,
            });
        }
        let mut delays_ms = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let level = index + 1;
            let bad = || DelayError::BadLevelItem {
                level,
                item: (*item).to_owned(),
            };
            // The unit is the last character (which may be multi-byte in
            // bad input: split on its boundary).
            let unit_start = item.char_indices().last().map_or(0, |(index, _)| index);
            let (count, unit) = item.split_at(unit_start);
            let unit_ms: i64 = match unit {
                "s" => 1000,
                "m" => 60 * 1000,
                "h" => 3600 * 1000,
                "d" => 24 * 3600 * 1000,
                _ => return Err(bad()),
            };
            if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let delay_ms = count
                .parse::<i64>()
                .ok()
                .and_then(|n| n.checked_mul(unit_ms))
                .filter(|ms| *ms <= DELAY_MS_MAX)
                .ok_or_else(|| DelayError::LevelTooLong {
                    level,
                    item: (*item).to_owned(),
                    max_ms: DELAY_MS_MAX,
                })?;
            delays_ms.push(delay_ms);
        }
        Ok(DelayLevels { delays_ms })
    }

    /// The highest level (18 by default).
    pub fn max_level(&self) -> i32 {
        self.delays_ms.len() as i32
    }

    /// The delay of `level` (1-based), `None` outside `1..=max_level`.
    pub fn delay_ms(&self, level: i32) -> Option<i64> {
        let index = usize::try_from(level).ok()?.checked_sub(1)?;
        self.delays_ms.get(index).copied()
    }

    /// Java's `computeDeliverTimestamp`: store time plus the level's delay,
    /// or plus 1 s for an unknown level.
    pub fn delivery_time_ms(&self, level: i32, store_timestamp_ms: i64) -> i64 {
        store_timestamp_ms.saturating_add(self.delay_ms(level).unwrap_or(1000))
    }

    /// `level` clamped to `1..=max_level` as the put path does (`None` for
    /// levels ≤ 0, which mean "no delay").
    pub fn clamp(&self, level: i32) -> Option<i32> {
        (level > 0).then(|| level.min(self.max_level()))
    }
}

/// The schedule queue of a level (`queueId = level - 1`).
pub fn queue_id_of_level(level: i32) -> i32 {
    level - 1
}

/// The level a schedule queue serves.
pub fn level_of_queue_id(queue_id: i32) -> i32 {
    queue_id + 1
}

/// The `DELAY` property as Java's `getDelayTimeLevel` reads it: 0 when absent.
///
/// # Errors
///
/// [`DelayError::BadDelayProperty`] when present but not an integer.
pub fn delay_level_of(properties: Properties<'_>) -> Result<i32, DelayError> {
    match properties.get(property_key::DELAY) {
        None => Ok(0),
        Some(text) => text
            .parse()
            .map_err(|_| DelayError::BadDelayProperty(text.to_owned())),
    }
}

/// The put-path rewrite of a message with `DELAY` > 0 (Java 5.x
/// `HookUtils.handleScheduleMessage`, 4.x `CommitLog.putMessage`): only for
/// transaction types NOT and COMMIT; the level is clamped to the highest;
/// timer properties (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`,
/// `TIMER_DELAY_MS`) are dropped, as the level wins;
/// `REAL_TOPIC` and `REAL_QID` record the destination; the message goes to
/// `SCHEDULE_TOPIC_XXXX` queue `level - 1`. `None` when the message is not
/// delayed.
///
/// # Errors
///
/// [`DelayError::BadDelayProperty`], or a property that cannot be written.
pub fn redirect_to_schedule(
    levels: &DelayLevels,
    topic: &str,
    queue_id: i32,
    sys_flag: i32,
    properties: &[u8],
) -> Result<Option<Redirect>, DelayError> {
    let transaction = transaction_type(sys_flag);
    if transaction != SYS_FLAG_TRANSACTION_NOT_TYPE
        && transaction != SYS_FLAG_TRANSACTION_COMMIT_TYPE
    {
        return Ok(None);
    }
    let Some(level) = levels.clamp(delay_level_of(Properties::new(properties))?) else {
        return Ok(None);
    };
    let level_text = level.to_string();
    let queue_text = queue_id.to_string();
    let mut out = BytesMut::with_capacity(properties.len() + topic.len() + 32);
    // Java's checkIfTimerMessage: a delay level wins over timer properties,
    // which are dropped so the delivered message is not timed again.
    rewrite_properties(
        properties,
        &[
            property_key::TIMER_DELIVER_MS,
            property_key::TIMER_DELAY_SEC,
            property_key::TIMER_DELAY_MS,
        ],
        &[
            (property_key::DELAY, &level_text),
            (property_key::REAL_TOPIC, topic),
            (property_key::REAL_QID, &queue_text),
        ],
        &mut out,
    )?;
    Ok(Some(Redirect {
        topic: SCHEDULE_TOPIC,
        queue_id: queue_id_of_level(level),
        properties: out.to_vec(),
        sys_flag,
    }))
}

/// The ConsumeQueue `tagsCode` of a record in `topic`: for
/// `SCHEDULE_TOPIC_XXXX` with `DELAY` > 0, the delivery time (store time plus
/// the clamped level's delay) as Java's `checkMessageAndReturnSize` computes
/// it; `None` for any other record (the caller uses the tag hash).
pub fn schedule_tags_code(
    levels: &DelayLevels,
    topic: &str,
    properties: Properties<'_>,
    store_timestamp_ms: i64,
) -> Option<i64> {
    if topic != SCHEDULE_TOPIC {
        return None;
    }
    let level = levels.clamp(delay_level_of(properties).ok()?)?;
    Some(levels.delivery_time_ms(level, store_timestamp_ms))
}

/// The message a due schedule record becomes (Java's `messageTimeup`):
/// topic and queue from `REAL_TOPIC` / `REAL_QID`, same body, flag, sysFlag,
/// born time and hosts and reconsume times, properties without `DELAY`,
/// `TIMER_DELIVER_MS`, `TIMER_DELAY_SEC` and with `WAIT=false`, tags code of
/// the tag.
///
/// # Errors
///
/// [`DelayError::MissingRealDestination`] or
/// [`DelayError::RealTopicIsHalfTopic`]: Java drops such a record and moves
/// on; so should the caller (acknowledging the entry as done).
pub fn restore_from_schedule(record: &RecordView<'_>) -> Result<Repost, DelayError> {
    let properties = record.properties();
    let topic = properties
        .get(property_key::REAL_TOPIC)
        .filter(|t| !t.is_empty())
        .ok_or(DelayError::MissingRealDestination(property_key::REAL_TOPIC))?;
    if topic == TRANS_HALF_TOPIC {
        return Err(DelayError::RealTopicIsHalfTopic);
    }
    let queue_id: i32 = properties
        .get(property_key::REAL_QID)
        .and_then(|q| q.parse().ok())
        .ok_or(DelayError::MissingRealDestination(property_key::REAL_QID))?;
    let mut out = BytesMut::with_capacity(properties.as_bytes().len());
    rewrite_properties(
        properties.as_bytes(),
        &[
            property_key::DELAY,
            property_key::TIMER_DELIVER_MS,
            property_key::TIMER_DELAY_SEC,
        ],
        &[(property_key::WAIT, "false")],
        &mut out,
    )?;
    Ok(Repost {
        topic: topic.to_owned(),
        queue_id,
        properties: out.to_vec(),
        sys_flag: record.sys_flag(),
        reconsume_times: record.reconsume_times(),
        prepared_transaction_offset: record.prepared_transaction_offset(),
        store_timestamp_ms: None,
        tags_code: tags_code(properties.get(property_key::TAGS)),
    })
}

/// What one [`DelayScheduler::poll`] of a level decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayPoll {
    /// Entries due now, in queue order: read each record, append
    /// [`restore_from_schedule`]'s repost, then [`DelayScheduler::ack`] it.
    pub due: Vec<QueueEntry>,
    /// When to poll this level again, in ms since the epoch.
    pub next_poll_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LevelProgress {
    /// Every entry below is delivered and stored: the persisted offset.
    durable: i64,
    /// Every entry below was handed out by `poll`.
    handed_out: i64,
    /// Handed-out entries at or above `durable` that are stored.
    acked: BTreeSet<i64>,
}

/// Per-level delivery progress of the schedule topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayScheduler {
    levels: DelayLevels,
    progress: Vec<LevelProgress>,
    data_version: Option<DataVersion>,
}

impl DelayScheduler {
    /// A scheduler starting every level at offset 0.
    pub fn new(levels: DelayLevels) -> DelayScheduler {
        let progress = vec![LevelProgress::default(); levels.delays_ms.len()];
        DelayScheduler {
            levels,
            progress,
            data_version: None,
        }
    }

    /// A scheduler resuming from `delayOffset.json`. Levels the file does not
    /// name start at 0; levels beyond the ladder are ignored.
    pub fn from_offset_file(levels: DelayLevels, file: &DelayOffsetFile) -> DelayScheduler {
        let mut scheduler = DelayScheduler::new(levels);
        for (level, offset) in &file.offset_table {
            if let Some(progress) = scheduler.level_mut(*level) {
                let offset = (*offset).max(0);
                progress.durable = offset;
                progress.handed_out = offset;
            }
        }
        scheduler.data_version = file.data_version;
        scheduler
    }

    /// The ladder.
    pub fn levels(&self) -> &DelayLevels {
        &self.levels
    }

    fn level_mut(&mut self, level: i32) -> Option<&mut LevelProgress> {
        let index = usize::try_from(level).ok()?.checked_sub(1)?;
        self.progress.get_mut(index)
    }

    fn level_ref(&self, level: i32) -> Result<&LevelProgress, DelayError> {
        usize::try_from(level)
            .ok()
            .and_then(|l| l.checked_sub(1))
            .and_then(|index| self.progress.get(index))
            .ok_or(DelayError::LevelOutOfRange {
                level,
                max: self.levels.max_level(),
            })
    }

    /// The schedule-queue offset from which [`Self::poll`] wants entries.
    ///
    /// # Errors
    ///
    /// [`DelayError::LevelOutOfRange`].
    pub fn read_from(&self, level: i32) -> Result<i64, DelayError> {
        Ok(self.level_ref(level)?.handed_out)
    }

    /// The persisted progress of `level`: every entry below is stored.
    ///
    /// # Errors
    ///
    /// [`DelayError::LevelOutOfRange`].
    pub fn durable_offset(&self, level: i32) -> Result<i64, DelayError> {
        Ok(self.level_ref(level)?.durable)
    }

    /// Decides which of `entries` (the level's queue entries from
    /// [`Self::read_from`] on, in order; entries below it are ignored) are due
    /// at `now_ms`, handing out at most [`DELIVERIES_PER_POLL_MAX`].
    ///
    /// # Errors
    ///
    /// [`DelayError::LevelOutOfRange`]; [`DelayError::Gap`] when the first
    /// entry at or above `read_from` is not exactly there or the entries are
    /// not consecutive (when the queue's oldest file was deleted, call
    /// [`Self::reset_level`] first, as Java does with the queue's min offset).
    pub fn poll(
        &mut self,
        level: i32,
        entries: &[QueueEntry],
        now_ms: i64,
    ) -> Result<DelayPoll, DelayError> {
        let delay_ms = self
            .levels
            .delay_ms(level)
            .ok_or(DelayError::LevelOutOfRange {
                level,
                max: self.levels.max_level(),
            })?;
        let progress = self.level_mut(level).expect("level checked above");
        let mut due = Vec::new();
        let start = progress.handed_out;
        // The position moves only when the poll succeeds: a gap found after
        // some due entries must not hand them out unseen.
        let mut next = start;
        let mut next_poll_ms = None;
        for entry in entries.iter().filter(|e| e.queue_offset >= start) {
            if entry.queue_offset != next {
                return Err(DelayError::Gap {
                    level,
                    expected: next,
                    found: entry.queue_offset,
                });
            }
            if due.len() == DELIVERIES_PER_POLL_MAX {
                next_poll_ms = Some(now_ms);
                break;
            }
            // Java's correctDeliverTimestamp: a time beyond now + delay means
            // the clock went back since the store; deliver now.
            let mut delivery_ms = entry.tags_code;
            if delivery_ms > now_ms.saturating_add(delay_ms) {
                delivery_ms = now_ms;
            }
            if delivery_ms > now_ms {
                next_poll_ms = Some(delivery_ms);
                break;
            }
            due.push(*entry);
            next += 1;
        }
        progress.handed_out = next;
        let next_poll_ms = next_poll_ms.unwrap_or(if due.is_empty() {
            now_ms.saturating_add(IDLE_RECHECK_MS)
        } else {
            now_ms
        });
        Ok(DelayPoll { due, next_poll_ms })
    }

    /// Records that the re-delivered message of the entry at `queue_offset`
    /// is stored (or that the entry was dropped as malformed). The durable
    /// offset advances over the acknowledged prefix.
    ///
    /// # Errors
    ///
    /// [`DelayError::LevelOutOfRange`].
    ///
    /// # Panics
    ///
    /// If `queue_offset` was never handed out by [`Self::poll`]: acknowledging
    /// an entry not delivered would skip it.
    pub fn ack(&mut self, level: i32, queue_offset: i64) -> Result<(), DelayError> {
        self.level_ref(level)?;
        let progress = self.level_mut(level).expect("level checked above");
        assert!(
            queue_offset < progress.handed_out,
            "ack of offset {queue_offset} not handed out (handed out below {})",
            progress.handed_out
        );
        if queue_offset < progress.durable {
            return Ok(());
        }
        progress.acked.insert(queue_offset);
        while progress.acked.remove(&progress.durable) {
            progress.durable += 1;
        }
        assert!(
            progress.durable <= progress.handed_out,
            "durable passed handed out"
        );
        Ok(())
    }

    /// Records that storing the re-delivery of `queue_offset` failed: the
    /// next [`Self::poll`] hands out entries from there again (entries after
    /// it that were stored meanwhile are handed out again too: at least once).
    ///
    /// # Errors
    ///
    /// [`DelayError::LevelOutOfRange`].
    pub fn retry_from(&mut self, level: i32, queue_offset: i64) -> Result<(), DelayError> {
        self.level_ref(level)?;
        let progress = self.level_mut(level).expect("level checked above");
        let offset = queue_offset.max(progress.durable);
        progress.handed_out = progress.handed_out.min(offset);
        progress.acked.retain(|acked| *acked < offset);
        Ok(())
    }

    /// Moves `level` to `queue_offset` when the queue no longer holds the
    /// entries before it (its minimum offset passed the progress).
    ///
    /// # Errors
    ///
    /// [`DelayError::LevelOutOfRange`].
    pub fn reset_level(&mut self, level: i32, queue_offset: i64) -> Result<(), DelayError> {
        self.level_ref(level)?;
        let progress = self.level_mut(level).expect("level checked above");
        *progress = LevelProgress {
            durable: queue_offset,
            handed_out: queue_offset,
            acked: BTreeSet::new(),
        };
        Ok(())
    }

    /// The durable progress as `delayOffset.json` holds it (level → next
    /// offset), with the data version the file was loaded with.
    pub fn offset_file(&self) -> DelayOffsetFile {
        let offset_table: BTreeMap<i32, i64> = self
            .progress
            .iter()
            .enumerate()
            .map(|(index, progress)| (index as i32 + 1, progress.durable))
            .collect();
        DelayOffsetFile {
            offset_table,
            data_version: self.data_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use ringmq_protocol::json::JsonStyle;
    use ringmq_protocol::message::{CrcCheck, decode_record};

    use super::*;
    use crate::features::test_support::{pairs, record_bytes};

    fn entry(queue_offset: i64, delivery_ms: i64) -> QueueEntry {
        QueueEntry {
            queue_offset,
            commit_log_offset: queue_offset * 100,
            size: 100,
            tags_code: delivery_ms,
        }
    }

    #[test]
    fn default_ladder_has_eighteen_levels_from_one_second_to_two_hours() {
        let levels = DelayLevels::default();
        assert_eq!(levels.max_level(), 18);
        assert_eq!(levels.delay_ms(1), Some(1000));
        assert_eq!(levels.delay_ms(2), Some(5000));
        assert_eq!(levels.delay_ms(5), Some(60_000));
        assert_eq!(levels.delay_ms(18), Some(7_200_000));
        assert_eq!(levels.delay_ms(0), None);
        assert_eq!(levels.delay_ms(19), None);
        assert_eq!(levels.delivery_time_ms(2, 10_000), 15_000);
        assert_eq!(levels.delivery_time_ms(99, 10_000), 11_000);
        assert_eq!(levels.clamp(40), Some(18));
        assert_eq!(levels.clamp(0), None);
    }

    #[test]
    fn bad_ladders_name_the_item() {
        assert_eq!(
            DelayLevels::parse("1s 5x"),
            Err(DelayError::BadLevelItem {
                level: 2,
                item: "5x".into()
            })
        );
        assert_eq!(
            DelayLevels::parse("1s  5s"),
            Err(DelayError::BadLevelItem {
                level: 2,
                item: String::new()
            })
        );
        assert!(matches!(
            DelayLevels::parse("5é"),
            Err(DelayError::BadLevelItem { level: 1, .. })
        ));
        assert!(matches!(
            DelayLevels::parse("-1s"),
            Err(DelayError::BadLevelItem { level: 1, .. })
        ));
        assert!(matches!(
            DelayLevels::parse("31d"),
            Err(DelayError::LevelTooLong { level: 1, .. })
        ));
        assert!(matches!(
            DelayLevels::parse(""),
            Err(DelayError::LevelCount { count: 0, .. })
        ));
        let nineteen = vec!["1s"; 19].join(" ");
        assert!(matches!(
            DelayLevels::parse(&nineteen),
            Err(DelayError::LevelCount { count: 19, .. })
        ));
        assert_eq!(
            DelayLevels::parse(" 2d 3h ").unwrap().delay_ms(2),
            Some(3 * 3600 * 1000)
        );
    }

    #[test]
    fn delayed_message_goes_to_the_level_queue_with_its_real_destination() {
        let levels = DelayLevels::default();
        let properties = b"DELAY\x0140\x02TAGS\x01t\x02TIMER_DELAY_SEC\x015\x02";
        let redirect = redirect_to_schedule(&levels, "T", 3, 0, properties)
            .unwrap()
            .unwrap();
        assert_eq!(redirect.topic, SCHEDULE_TOPIC);
        assert_eq!(redirect.queue_id, 17);
        assert_eq!(
            pairs(&redirect.properties),
            vec![
                ("DELAY".into(), "18".into()),
                ("REAL_QID".into(), "3".into()),
                ("REAL_TOPIC".into(), "T".into()),
                ("TAGS".into(), "t".into()),
            ]
        );
        let tags = schedule_tags_code(
            &levels,
            SCHEDULE_TOPIC,
            Properties::new(&redirect.properties),
            1_000,
        );
        assert_eq!(tags, Some(1_000 + 7_200_000));
        assert_eq!(
            schedule_tags_code(&levels, "T", Properties::new(properties), 1_000),
            None
        );
    }

    #[test]
    fn undelayed_half_and_rollback_messages_are_not_redirected() {
        let levels = DelayLevels::default();
        assert_eq!(
            redirect_to_schedule(&levels, "T", 0, 0, b"TAGS\x01t").unwrap(),
            None
        );
        assert_eq!(
            redirect_to_schedule(&levels, "T", 0, 0, b"DELAY\x010").unwrap(),
            None
        );
        assert_eq!(
            redirect_to_schedule(&levels, "T", 0, 0x4, b"DELAY\x012").unwrap(),
            None
        );
        assert!(
            redirect_to_schedule(&levels, "T", 0, 0x8, b"DELAY\x012")
                .unwrap()
                .is_some()
        );
        assert_eq!(
            redirect_to_schedule(&levels, "T", 0, 0, b"DELAY\x01two"),
            Err(DelayError::BadDelayProperty("two".into()))
        );
    }

    #[test]
    fn due_schedule_record_is_restored_to_its_real_queue() {
        let bytes = record_bytes(
            SCHEDULE_TOPIC,
            1,
            &[
                ("DELAY", "2"),
                ("REAL_TOPIC", "T"),
                ("REAL_QID", "3"),
                ("TAGS", "tagA"),
                ("TIMER_DELAY_SEC", "9"),
                ("WAIT", "true"),
            ],
            0,
        );
        let record = decode_record(&bytes, CrcCheck::Verify).unwrap();
        let repost = restore_from_schedule(&record).unwrap();
        assert_eq!(repost.topic, "T");
        assert_eq!(repost.queue_id, 3);
        assert_eq!(repost.tags_code, tags_code(Some("tagA")));
        assert_eq!(
            pairs(&repost.properties),
            vec![
                ("REAL_QID".into(), "3".into()),
                ("REAL_TOPIC".into(), "T".into()),
                ("TAGS".into(), "tagA".into()),
                ("WAIT".into(), "false".into()),
            ]
        );
        let spec = repost.to_spec(&record, 9_999);
        assert_eq!(spec.body, b"hello");
        assert_eq!(spec.born_timestamp_ms, 1_000);
        assert_eq!(spec.store_timestamp_ms, 9_999);
        assert_eq!(spec.flag, 7);
    }

    #[test]
    fn malformed_schedule_records_are_refused() {
        let no_qid = record_bytes(SCHEDULE_TOPIC, 1, &[("REAL_TOPIC", "T")], 0);
        let record = decode_record(&no_qid, CrcCheck::Verify).unwrap();
        assert_eq!(
            restore_from_schedule(&record),
            Err(DelayError::MissingRealDestination("REAL_QID"))
        );
        let half = record_bytes(
            SCHEDULE_TOPIC,
            1,
            &[("REAL_TOPIC", TRANS_HALF_TOPIC), ("REAL_QID", "0")],
            0,
        );
        let record = decode_record(&half, CrcCheck::Verify).unwrap();
        assert_eq!(
            restore_from_schedule(&record),
            Err(DelayError::RealTopicIsHalfTopic)
        );
    }

    #[test]
    fn poll_hands_out_due_entries_in_order_and_says_when_to_look_next() {
        let mut scheduler = DelayScheduler::new(DelayLevels::default());
        let entries = [entry(0, 5_000), entry(1, 5_500), entry(2, 9_000)];
        let poll = scheduler.poll(2, &entries, 4_999).unwrap();
        assert_eq!(
            poll,
            DelayPoll {
                due: vec![],
                next_poll_ms: 5_000
            }
        );
        let poll = scheduler.poll(2, &entries, 6_000).unwrap();
        assert_eq!(poll.due, vec![entries[0], entries[1]]);
        assert_eq!(poll.next_poll_ms, 9_000);
        assert_eq!(scheduler.read_from(2).unwrap(), 2);
        // Entries already handed out are ignored when given again.
        let poll = scheduler.poll(2, &entries, 6_000).unwrap();
        assert!(poll.due.is_empty());
        let idle = scheduler.poll(3, &[], 6_000).unwrap();
        assert_eq!(idle.next_poll_ms, 6_000 + IDLE_RECHECK_MS);
    }

    #[test]
    fn a_delivery_time_beyond_the_level_delay_is_delivered_now() {
        let mut scheduler = DelayScheduler::new(DelayLevels::default());
        // Level 1 is 1 s; a delivery time 1 h ahead means the clock went back.
        let poll = scheduler.poll(1, &[entry(0, 3_600_000)], 0).unwrap();
        assert_eq!(poll.due.len(), 1);
    }

    #[test]
    fn poll_is_bounded_per_call() {
        let mut scheduler = DelayScheduler::new(DelayLevels::default());
        let entries: Vec<QueueEntry> = (0..100).map(|i| entry(i, 0)).collect();
        let poll = scheduler.poll(1, &entries, 10).unwrap();
        assert_eq!(poll.due.len(), DELIVERIES_PER_POLL_MAX);
        assert_eq!(poll.next_poll_ms, 10);
    }

    #[test]
    fn gaps_are_refused_until_the_level_is_reset() {
        let mut scheduler = DelayScheduler::new(DelayLevels::default());
        assert_eq!(
            scheduler.poll(1, &[entry(5, 0)], 10),
            Err(DelayError::Gap {
                level: 1,
                expected: 0,
                found: 5
            })
        );
        assert!(matches!(
            scheduler.poll(1, &[entry(0, 0), entry(2, 0)], 10),
            Err(DelayError::Gap {
                expected: 1,
                found: 2,
                ..
            })
        ));
        // The due entry before the gap was not handed out either.
        assert_eq!(scheduler.read_from(1).unwrap(), 0);
        scheduler.reset_level(1, 5).unwrap();
        assert_eq!(scheduler.poll(1, &[entry(5, 0)], 10).unwrap().due.len(), 1);
        assert!(matches!(
            scheduler.poll(19, &[], 0),
            Err(DelayError::LevelOutOfRange { level: 19, .. })
        ));
    }

    #[test]
    fn durable_progress_moves_only_over_acknowledged_prefixes() {
        let mut scheduler = DelayScheduler::new(DelayLevels::default());
        let entries: Vec<QueueEntry> = (0..4).map(|i| entry(i, 0)).collect();
        scheduler.poll(1, &entries, 10).unwrap();
        scheduler.ack(1, 1).unwrap();
        scheduler.ack(1, 2).unwrap();
        assert_eq!(scheduler.durable_offset(1).unwrap(), 0);
        scheduler.ack(1, 0).unwrap();
        assert_eq!(scheduler.durable_offset(1).unwrap(), 3);
        assert_eq!(scheduler.offset_file().offset_table[&1], 3);
        // A crash now resumes at 3: entry 3 was handed out but not stored.
        let restarted =
            DelayScheduler::from_offset_file(DelayLevels::default(), &scheduler.offset_file());
        assert_eq!(restarted.read_from(1).unwrap(), 3);
    }

    #[test]
    fn a_failed_store_hands_the_entry_out_again() {
        let mut scheduler = DelayScheduler::new(DelayLevels::default());
        let entries: Vec<QueueEntry> = (0..3).map(|i| entry(i, 0)).collect();
        scheduler.poll(1, &entries, 10).unwrap();
        scheduler.ack(1, 0).unwrap();
        scheduler.ack(1, 2).unwrap();
        scheduler.retry_from(1, 1).unwrap();
        assert_eq!(scheduler.read_from(1).unwrap(), 1);
        let poll = scheduler.poll(1, &entries, 10).unwrap();
        assert_eq!(poll.due, vec![entries[1], entries[2]]);
        scheduler.ack(1, 1).unwrap();
        assert_eq!(scheduler.durable_offset(1).unwrap(), 2);
        scheduler.ack(1, 2).unwrap();
        assert_eq!(scheduler.durable_offset(1).unwrap(), 3);
    }

    #[test]
    #[should_panic(expected = "not handed out")]
    fn acknowledging_an_entry_never_handed_out_panics() {
        let mut scheduler = DelayScheduler::new(DelayLevels::default());
        let _ = scheduler.ack(1, 0);
    }

    #[test]
    fn delay_offset_file_round_trips_in_java_format() {
        let mut scheduler = DelayScheduler::new(DelayLevels::parse("1s 5s").unwrap());
        scheduler.poll(2, &[entry(0, 0)], 1).unwrap();
        scheduler.ack(2, 0).unwrap();
        let file = scheduler.offset_file();
        let mut out = Vec::new();
        file.to_json(&mut out, JsonStyle::Java);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"offsetTable":{1:0,2:1}}"#
        );
        let parsed = DelayOffsetFile::from_json(
            br#"{"offsetTable":{"1":7,2:5,40:1},"dataVersion":{"counter":2,"timestamp":3}}"#,
        )
        .unwrap();
        let resumed =
            DelayScheduler::from_offset_file(DelayLevels::parse("1s 5s").unwrap(), &parsed);
        assert_eq!(resumed.read_from(1).unwrap(), 7);
        assert_eq!(resumed.read_from(2).unwrap(), 5);
        assert_eq!(
            resumed.offset_file().data_version.map(|v| v.counter),
            Some(2)
        );
    }
}
