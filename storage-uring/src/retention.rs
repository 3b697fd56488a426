//! RocketMQ's expired-file policy (`CleanCommitLogService`, section 6.10 of
//! the protocol reference) as a pure decision: given the time, the hour of
//! day, the disk usage and the CommitLog segments, which segments go and
//! whether the store still accepts writes.
//!
//! The store executes a [`RetentionPlan`] (removing the segment files through
//! the disk seam) and then asks the ConsumeQueues
//! ([`crate::consume_queue::ConsumeQueueSet::delete_below_commit_log_offset`])
//! and the index ([`crate::index_file::IndexService::delete_below_commit_log_offset`])
//! to drop what lies below the new CommitLog minimum offset.
//!
//! Decision, as Java's `deleteExpiredFiles` / `isSpaceToDelete` /
//! `deleteExpiredFileByTime`:
//!
//! ```text
//! usage > warning level (90 %)   -> writes rejected, clean immediately
//! usage > clean forcibly (85 %)  -> clean immediately
//! usage > max used space (75 %)  -> delete expired files at any hour
//! hour in deleteWhen ("04")      -> delete expired files
//! otherwise                      -> nothing
//! ```
//!
//! "Clean immediately" (with `cleanFileForciblyEnable`) deletes the oldest
//! segments regardless of age; otherwise a segment goes once
//! `now >= last_modified + fileReservedTime`, oldest first, stopping at the
//! first one that has not expired.
//!
//! # Invariants
//! - The last (active) segment is never in a plan.
//! - A plan deletes a prefix of the segments, oldest first, of at most
//!   `delete_file_batch_max` segments.
//! - `writable` depends on the usage alone: writes are accepted again as soon
//!   as usage is at or below the warning level (no hysteresis, unlike Java,
//!   which keeps the disk-full flag until usage falls below the
//!   clean-forcibly ratio).

use crate::error::StorageError;

/// Default `fileReservedTime`: hours a CommitLog segment is kept after its
/// last modification.
pub const FILE_RESERVED_TIME_HOURS_DEFAULT: u32 = 72;
/// Default `deleteWhen`: hours of day at which expired segments are deleted.
pub const DELETE_WHEN_DEFAULT: &str = "04";
/// Default `diskMaxUsedSpaceRatio` (percent).
pub const DISK_MAX_USED_SPACE_RATIO_DEFAULT: u8 = 75;
/// Java clamps `diskMaxUsedSpaceRatio` to this range (percent).
pub const DISK_MAX_USED_SPACE_RATIO_RANGE: (u8, u8) = (10, 95);
/// Default `diskSpaceCleanForciblyRatio` (percent).
pub const DISK_SPACE_CLEAN_FORCIBLY_RATIO_DEFAULT: u8 = 85;
/// Java clamps `diskSpaceCleanForciblyRatio` to this range (percent).
pub const DISK_SPACE_CLEAN_FORCIBLY_RATIO_RANGE: (u8, u8) = (30, 85);
/// Default `diskSpaceWarningLevelRatio` (percent).
pub const DISK_SPACE_WARNING_LEVEL_RATIO_DEFAULT: u8 = 90;
/// Java clamps `diskSpaceWarningLevelRatio` to this range (percent).
pub const DISK_SPACE_WARNING_LEVEL_RATIO_RANGE: (u8, u8) = (35, 90);
/// Default `deleteFileBatchMax`: segments deleted per run at most.
pub const DELETE_FILE_BATCH_MAX_DEFAULT: usize = 10;
/// Largest `deleteFileBatchMax` accepted (a run must stay short).
pub const DELETE_FILE_BATCH_MAX_LIMIT: usize = 1_000;
/// Default `deleteCommitLogFilesInterval`: milliseconds between the removals
/// of two segments of one plan.
pub const DELETE_COMMIT_LOG_FILES_INTERVAL_MS_DEFAULT: u64 = 100;
/// Largest `deleteCommitLogFilesInterval` accepted (milliseconds).
pub const DELETE_COMMIT_LOG_FILES_INTERVAL_MS_MAX: u64 = 60_000;
/// Largest `fileReservedTime` accepted: ten years, so `hours * 3_600_000`
/// never overflows.
pub const FILE_RESERVED_TIME_HOURS_MAX: u32 = 24 * 365 * 10;

const MS_PER_HOUR: i64 = 3_600_000;

const _: () =
    assert!(DISK_SPACE_CLEAN_FORCIBLY_RATIO_RANGE.1 <= DISK_SPACE_WARNING_LEVEL_RATIO_RANGE.1);
const _: () =
    assert!(DISK_SPACE_CLEAN_FORCIBLY_RATIO_DEFAULT < DISK_SPACE_WARNING_LEVEL_RATIO_DEFAULT);
const _: () = assert!(DISK_MAX_USED_SPACE_RATIO_DEFAULT < DISK_SPACE_CLEAN_FORCIBLY_RATIO_DEFAULT);
const _: () = assert!(DELETE_FILE_BATCH_MAX_DEFAULT <= DELETE_FILE_BATCH_MAX_LIMIT);

/// The retention settings, with RocketMQ's names and defaults. Ratios are
/// percentages, stored as given; the getters apply Java's clamping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionConfig {
    /// `fileReservedTime`, hours.
    pub file_reserved_time_hours: u32,
    /// `deleteWhen`, parsed: the hours of day (0–23) at which expired
    /// segments are deleted.
    pub delete_when_hours: Vec<u8>,
    /// `diskMaxUsedSpaceRatio`, percent (clamped 10–95 when used).
    pub disk_max_used_space_ratio: u8,
    /// `diskSpaceCleanForciblyRatio`, percent (clamped 30–85 when used).
    pub disk_space_clean_forcibly_ratio: u8,
    /// `diskSpaceWarningLevelRatio`, percent (clamped 35–90 when used).
    pub disk_space_warning_level_ratio: u8,
    /// `deleteFileBatchMax`: segments deleted per run at most (≥ 1).
    pub delete_file_batch_max: usize,
    /// `cleanFileForciblyEnable`: whether a nearly full disk deletes
    /// segments regardless of age.
    pub clean_file_forcibly_enable: bool,
    /// `deleteCommitLogFilesInterval`, milliseconds: the store removes the
    /// segments of a plan one at a time, each after the previous removal
    /// completed and at least this long after it started.
    pub delete_commit_log_files_interval_ms: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            file_reserved_time_hours: FILE_RESERVED_TIME_HOURS_DEFAULT,
            delete_when_hours: vec![4],
            disk_max_used_space_ratio: DISK_MAX_USED_SPACE_RATIO_DEFAULT,
            disk_space_clean_forcibly_ratio: DISK_SPACE_CLEAN_FORCIBLY_RATIO_DEFAULT,
            disk_space_warning_level_ratio: DISK_SPACE_WARNING_LEVEL_RATIO_DEFAULT,
            delete_file_batch_max: DELETE_FILE_BATCH_MAX_DEFAULT,
            clean_file_forcibly_enable: true,
            delete_commit_log_files_interval_ms: DELETE_COMMIT_LOG_FILES_INTERVAL_MS_DEFAULT,
        }
    }
}

fn invalid(key: &'static str, value: &str, reason: impl Into<String>) -> StorageError {
    StorageError::InvalidConfig {
        key,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn parse_number<T: std::str::FromStr>(key: &'static str, value: &str) -> Result<T, StorageError>
where
    T::Err: std::fmt::Display,
{
    value
        .trim()
        .parse::<T>()
        .map_err(|e| invalid(key, value, e.to_string()))
}

fn parse_percent(key: &'static str, value: &str) -> Result<u8, StorageError> {
    let percent: u8 = parse_number(key, value)?;
    if percent > 100 {
        return Err(invalid(
            key,
            value,
            "a percentage must be between 0 and 100",
        ));
    }
    Ok(percent)
}

/// Parses `deleteWhen`: hours of day separated by `;` (e.g. `"04;05"`).
///
/// # Errors
/// [`StorageError::InvalidConfig`] naming `deleteWhen` for an empty list, a
/// part that is not a number, or an hour above 23.
pub fn parse_delete_when(value: &str) -> Result<Vec<u8>, StorageError> {
    const KEY: &str = "deleteWhen";
    let mut hours = Vec::new();
    for part in value.split(';') {
        let part = part.trim();
        if part.is_empty() {
            return Err(invalid(
                KEY,
                value,
                "empty hour (expected e.g. \"04\" or \"04;05\")",
            ));
        }
        let hour: u8 = part
            .parse()
            .map_err(|_| invalid(KEY, value, format!("{part:?} is not an hour of day")))?;
        if hour > 23 {
            return Err(invalid(KEY, value, format!("hour {hour} is not in 0..=23")));
        }
        hours.push(hour);
    }
    Ok(hours)
}

fn parse_bool(key: &'static str, value: &str) -> Result<bool, StorageError> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, value, "expected true or false")),
    }
}

impl RetentionConfig {
    /// Sets one setting from its broker.conf key (RocketMQ's spelling).
    /// Returns `Ok(false)` for a key that is not a retention setting, so a
    /// config loader can offer each key to several owners.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] naming the key when the value does not
    /// parse or is out of range.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, StorageError> {
        match key {
            "fileReservedTime" => {
                let hours: u32 = parse_number("fileReservedTime", value)?;
                if hours > FILE_RESERVED_TIME_HOURS_MAX {
                    return Err(invalid(
                        "fileReservedTime",
                        value,
                        format!("more than {FILE_RESERVED_TIME_HOURS_MAX} hours"),
                    ));
                }
                self.file_reserved_time_hours = hours;
            }
            "deleteWhen" => self.delete_when_hours = parse_delete_when(value)?,
            "diskMaxUsedSpaceRatio" => {
                self.disk_max_used_space_ratio = parse_percent("diskMaxUsedSpaceRatio", value)?;
            }
            "diskSpaceCleanForciblyRatio" => {
                self.disk_space_clean_forcibly_ratio =
                    parse_percent("diskSpaceCleanForciblyRatio", value)?;
            }
            "diskSpaceWarningLevelRatio" => {
                self.disk_space_warning_level_ratio =
                    parse_percent("diskSpaceWarningLevelRatio", value)?;
            }
            "deleteFileBatchMax" => {
                let batch: usize = parse_number("deleteFileBatchMax", value)?;
                if batch == 0 || batch > DELETE_FILE_BATCH_MAX_LIMIT {
                    return Err(invalid(
                        "deleteFileBatchMax",
                        value,
                        format!("must be in 1..={DELETE_FILE_BATCH_MAX_LIMIT}"),
                    ));
                }
                self.delete_file_batch_max = batch;
            }
            "deleteCommitLogFilesInterval" => {
                let interval: u64 = parse_number("deleteCommitLogFilesInterval", value)?;
                if interval > DELETE_COMMIT_LOG_FILES_INTERVAL_MS_MAX {
                    return Err(invalid(
                        "deleteCommitLogFilesInterval",
                        value,
                        format!("more than {DELETE_COMMIT_LOG_FILES_INTERVAL_MS_MAX} ms"),
                    ));
                }
                self.delete_commit_log_files_interval_ms = interval;
            }
            "cleanFileForciblyEnable" => {
                self.clean_file_forcibly_enable = parse_bool("cleanFileForciblyEnable", value)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `diskMaxUsedSpaceRatio` as Java uses it (clamped 10–95), as a fraction.
    pub fn max_used_ratio(&self) -> f64 {
        clamp_percent(
            self.disk_max_used_space_ratio,
            DISK_MAX_USED_SPACE_RATIO_RANGE,
        )
    }

    /// `diskSpaceCleanForciblyRatio` as Java uses it (clamped 30–85), as a
    /// fraction.
    pub fn clean_forcibly_ratio(&self) -> f64 {
        clamp_percent(
            self.disk_space_clean_forcibly_ratio,
            DISK_SPACE_CLEAN_FORCIBLY_RATIO_RANGE,
        )
    }

    /// `diskSpaceWarningLevelRatio` as Java uses it (clamped 35–90), as a
    /// fraction.
    pub fn warning_level_ratio(&self) -> f64 {
        clamp_percent(
            self.disk_space_warning_level_ratio,
            DISK_SPACE_WARNING_LEVEL_RATIO_RANGE,
        )
    }

    /// Decides what one retention run does.
    ///
    /// `segments` are the CommitLog segments, oldest first (ascending
    /// `base_offset`); the last one is the active segment. `disk_usage_ratio`
    /// is used over total space (0.0–1.0) of the store's partition; a NaN is
    /// treated as a full disk.
    ///
    /// # Panics
    /// If `segments` is not in ascending `base_offset` order, or
    /// `hour_of_day > 23` (both are the caller's invariants).
    pub fn plan(
        &self,
        now_ms: i64,
        hour_of_day: u8,
        disk_usage_ratio: f64,
        segments: &[SegmentInfo],
    ) -> RetentionPlan {
        self.plan_with_trigger(now_ms, hour_of_day, disk_usage_ratio, segments, false)
    }

    /// [`RetentionConfig::plan`] for a run an operator asked for (Java's
    /// `executeDeleteFilesManually`, `mqadmin deleteExpiredCommitLog`):
    /// expired segments go at any hour.
    ///
    /// # Panics
    /// As [`RetentionConfig::plan`].
    pub fn plan_manual(
        &self,
        now_ms: i64,
        hour_of_day: u8,
        disk_usage_ratio: f64,
        segments: &[SegmentInfo],
    ) -> RetentionPlan {
        self.plan_with_trigger(now_ms, hour_of_day, disk_usage_ratio, segments, true)
    }

    fn plan_with_trigger(
        &self,
        now_ms: i64,
        hour_of_day: u8,
        disk_usage_ratio: f64,
        segments: &[SegmentInfo],
        manual: bool,
    ) -> RetentionPlan {
        assert!(hour_of_day <= 23, "hour_of_day {hour_of_day} > 23");
        for pair in segments.windows(2) {
            assert!(
                pair[0].base_offset < pair[1].base_offset,
                "segments out of order: {} then {}",
                pair[0].base_offset,
                pair[1].base_offset
            );
        }
        let usage = if disk_usage_ratio.is_nan() {
            1.0
        } else {
            disk_usage_ratio
        };
        let writable = usage <= self.warning_level_ratio();
        let clean_immediately = usage > self.clean_forcibly_ratio();
        let reason = if !writable {
            RetentionReason::DiskAboveWarningLevel
        } else if clean_immediately {
            RetentionReason::DiskAboveCleanForciblyRatio
        } else if usage > self.max_used_ratio() {
            RetentionReason::DiskAboveMaxUsedRatio
        } else if self.delete_when_hours.contains(&hour_of_day) {
            RetentionReason::DeleteWhenHour(hour_of_day)
        } else if manual {
            RetentionReason::Manual
        } else {
            return RetentionPlan {
                delete: Vec::new(),
                writable,
                reason: RetentionReason::NotDue,
            };
        };
        let ignore_age = clean_immediately && self.clean_file_forcibly_enable;
        let reserved_ms = i64::from(self.file_reserved_time_hours) * MS_PER_HOUR;
        let deletable = &segments[..segments.len().saturating_sub(1)];
        let delete = deletable
            .iter()
            .take_while(|s| ignore_age || now_ms >= s.last_modified_ms.saturating_add(reserved_ms))
            .take(self.delete_file_batch_max.max(1))
            .map(|s| s.base_offset)
            .collect();
        RetentionPlan {
            delete,
            writable,
            reason,
        }
    }
}

fn clamp_percent(percent: u8, (low, high): (u8, u8)) -> f64 {
    f64::from(percent.clamp(low, high)) / 100.0
}

/// One CommitLog segment as retention sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The segment's base offset (its file name).
    pub base_offset: u64,
    /// The file's last modification time, ms since the Unix epoch.
    pub last_modified_ms: i64,
}

/// Why a retention run deletes (or does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetentionReason {
    /// Not the hour, and the disk is below `diskMaxUsedSpaceRatio`.
    NotDue,
    /// The hour of day is listed in `deleteWhen`.
    DeleteWhenHour(u8),
    /// An operator asked for a run: expired segments go at any hour.
    Manual,
    /// Usage is above `diskMaxUsedSpaceRatio`: expired segments go at any hour.
    DiskAboveMaxUsedRatio,
    /// Usage is above `diskSpaceCleanForciblyRatio`: segments go regardless of
    /// age (with `cleanFileForciblyEnable`).
    DiskAboveCleanForciblyRatio,
    /// Usage is above `diskSpaceWarningLevelRatio`: writes are rejected and
    /// segments go regardless of age.
    DiskAboveWarningLevel,
}

/// What one retention run does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionPlan {
    /// Base offsets of the segments to delete, oldest first.
    pub delete: Vec<u64>,
    /// Whether the store accepts writes; false means appends fail with the
    /// retriable [`StorageError::DiskFull`] until a later plan says true.
    pub writable: bool,
    /// Why.
    pub reason: RetentionReason,
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = MS_PER_HOUR;
    const NOW: i64 = 1_000 * HOUR;

    /// Segments modified `ages_h` hours before NOW, base offsets 0, 100, ...
    fn segments(ages_h: &[i64]) -> Vec<SegmentInfo> {
        ages_h
            .iter()
            .enumerate()
            .map(|(i, age)| SegmentInfo {
                base_offset: i as u64 * 100,
                last_modified_ms: NOW - age * HOUR,
            })
            .collect()
    }

    #[test]
    fn plan_deletes_nothing_outside_delete_when_hour_below_max_ratio() {
        let plan = RetentionConfig::default().plan(NOW, 3, 0.5, &segments(&[100, 90, 80, 1]));
        assert_eq!(
            plan,
            RetentionPlan {
                delete: vec![],
                writable: true,
                reason: RetentionReason::NotDue
            }
        );
    }

    #[test]
    fn plan_deletes_expired_segments_at_delete_when_hour_oldest_first() {
        let plan = RetentionConfig::default().plan(NOW, 4, 0.5, &segments(&[100, 73, 72, 71, 1]));
        assert_eq!(plan.delete, vec![0, 100, 200]);
        assert_eq!(plan.reason, RetentionReason::DeleteWhenHour(4));
        assert!(plan.writable);
    }

    #[test]
    fn plan_stops_at_first_unexpired_segment() {
        let plan = RetentionConfig::default().plan(NOW, 4, 0.5, &segments(&[100, 10, 100, 1]));
        assert_eq!(plan.delete, vec![0]);
    }

    #[test]
    fn plan_never_deletes_the_active_segment() {
        let plan = RetentionConfig::default().plan(NOW, 4, 0.5, &segments(&[100, 100]));
        assert_eq!(plan.delete, vec![0]);
        let only = RetentionConfig::default().plan(NOW, 4, 0.99, &segments(&[100]));
        assert!(only.delete.is_empty());
        assert!(
            RetentionConfig::default()
                .plan(NOW, 4, 0.99, &[])
                .delete
                .is_empty()
        );
    }

    #[test]
    fn plan_honours_every_listed_delete_when_hour() {
        let mut config = RetentionConfig::default();
        assert!(config.set("deleteWhen", "04;05").unwrap());
        let segs = segments(&[100, 1]);
        assert_eq!(config.plan(NOW, 5, 0.1, &segs).delete, vec![0]);
        assert_eq!(config.plan(NOW, 4, 0.1, &segs).delete, vec![0]);
        assert!(config.plan(NOW, 6, 0.1, &segs).delete.is_empty());
    }

    #[test]
    fn manual_plan_deletes_expired_segments_at_any_hour_only() {
        let config = RetentionConfig::default();
        let plan = config.plan_manual(NOW, 13, 0.1, &segments(&[100, 10, 1]));
        assert_eq!(
            plan,
            RetentionPlan {
                delete: vec![0],
                writable: true,
                reason: RetentionReason::Manual
            }
        );
    }

    #[test]
    fn plan_above_max_used_ratio_deletes_expired_at_any_hour() {
        let config = RetentionConfig::default();
        let segs = segments(&[100, 50, 1]);
        let at_limit = config.plan(NOW, 12, 0.75, &segs);
        assert_eq!(
            at_limit.reason,
            RetentionReason::NotDue,
            "75% is not above 75%"
        );
        let above = config.plan(NOW, 12, 0.76, &segs);
        assert_eq!(above.reason, RetentionReason::DiskAboveMaxUsedRatio);
        assert_eq!(
            above.delete,
            vec![0],
            "the 50-hour-old segment is not expired"
        );
        assert!(above.writable);
    }

    #[test]
    fn plan_above_clean_forcibly_ratio_ignores_age() {
        let config = RetentionConfig::default();
        let segs = segments(&[5, 4, 3, 1]);
        assert!(config.plan(NOW, 12, 0.85, &segs).delete.is_empty());
        let plan = config.plan(NOW, 12, 0.86, &segs);
        assert_eq!(plan.reason, RetentionReason::DiskAboveCleanForciblyRatio);
        assert_eq!(plan.delete, vec![0, 100, 200]);
        assert!(plan.writable);
    }

    #[test]
    fn plan_without_clean_forcibly_enable_keeps_unexpired_segments_on_full_disk() {
        let mut config = RetentionConfig::default();
        config.set("cleanFileForciblyEnable", "false").unwrap();
        let plan = config.plan(NOW, 12, 0.95, &segments(&[100, 4, 1]));
        assert_eq!(plan.delete, vec![0]);
        assert!(!plan.writable);
    }

    #[test]
    fn plan_above_warning_level_rejects_writes_and_recovers_below_it() {
        let config = RetentionConfig::default();
        let segs = segments(&[5, 4, 1]);
        let full = config.plan(NOW, 12, 0.91, &segs);
        assert!(!full.writable);
        assert_eq!(full.reason, RetentionReason::DiskAboveWarningLevel);
        assert_eq!(full.delete, vec![0, 100]);
        let at_level = config.plan(NOW, 12, 0.90, &segs);
        assert!(at_level.writable, "writable again at the warning level");
        assert!(config.plan(NOW, 12, 0.2, &segs).writable);
        assert!(
            !config.plan(NOW, 12, f64::NAN, &segs).writable,
            "unknown usage counts as full"
        );
    }

    #[test]
    fn plan_deletes_at_most_delete_file_batch_max_segments() {
        let mut config = RetentionConfig::default();
        config.set("deleteFileBatchMax", "2").unwrap();
        let plan = config.plan(NOW, 4, 0.1, &segments(&[100, 100, 100, 100, 1]));
        assert_eq!(plan.delete, vec![0, 100]);
        let default_batch = RetentionConfig::default().plan(NOW, 4, 0.1, &segments(&[100; 15]));
        assert_eq!(default_batch.delete.len(), 10);
    }

    #[test]
    fn plan_uses_file_reserved_time_exactly() {
        let mut config = RetentionConfig::default();
        config.set("fileReservedTime", "1").unwrap();
        let segs = vec![
            SegmentInfo {
                base_offset: 0,
                last_modified_ms: NOW - HOUR,
            },
            SegmentInfo {
                base_offset: 10,
                last_modified_ms: NOW - HOUR + 1,
            },
            SegmentInfo {
                base_offset: 20,
                last_modified_ms: NOW,
            },
        ];
        assert_eq!(config.plan(NOW, 4, 0.0, &segs).delete, vec![0]);
    }

    #[test]
    fn ratios_are_clamped_as_java_does() {
        let mut config = RetentionConfig::default();
        config.set("diskSpaceCleanForciblyRatio", "99").unwrap();
        config.set("diskSpaceWarningLevelRatio", "10").unwrap();
        config.set("diskMaxUsedSpaceRatio", "100").unwrap();
        assert_eq!(config.clean_forcibly_ratio(), 0.85);
        assert_eq!(config.warning_level_ratio(), 0.35);
        assert_eq!(config.max_used_ratio(), 0.95);
        config.set("diskSpaceCleanForciblyRatio", "5").unwrap();
        config.set("diskSpaceWarningLevelRatio", "95").unwrap();
        assert_eq!(config.clean_forcibly_ratio(), 0.30);
        assert_eq!(config.warning_level_ratio(), 0.90);
        let defaults = RetentionConfig::default();
        assert_eq!(
            (
                defaults.max_used_ratio(),
                defaults.clean_forcibly_ratio(),
                defaults.warning_level_ratio()
            ),
            (0.75, 0.85, 0.90)
        );
    }

    #[test]
    fn bad_config_values_name_the_key() {
        let mut config = RetentionConfig::default();
        let cases = [
            ("deleteWhen", "4am"),
            ("deleteWhen", "24"),
            ("deleteWhen", "04;"),
            ("deleteWhen", ""),
            ("fileReservedTime", "-1"),
            ("fileReservedTime", "1000000"),
            ("diskMaxUsedSpaceRatio", "101"),
            ("diskSpaceCleanForciblyRatio", "x"),
            ("diskSpaceWarningLevelRatio", "0.9"),
            ("deleteFileBatchMax", "0"),
            ("deleteCommitLogFilesInterval", "-5"),
            ("deleteCommitLogFilesInterval", "60001"),
            ("cleanFileForciblyEnable", "yes"),
        ];
        for (key, value) in cases {
            let err = config.set(key, value).expect_err(value);
            match &err {
                StorageError::InvalidConfig {
                    key: named,
                    value: given,
                    ..
                } => {
                    assert_eq!((*named, given.as_str()), (key, value));
                }
                other => panic!("unexpected error {other:?}"),
            }
            assert!(err.to_string().contains(key), "{err}");
        }
        assert_eq!(
            config,
            RetentionConfig::default(),
            "failed sets change nothing"
        );
        assert!(
            !config.set("brokerName", "b").unwrap(),
            "foreign keys are not ours"
        );
    }

    #[test]
    fn parse_delete_when_accepts_padded_hours() {
        assert_eq!(parse_delete_when("04").unwrap(), vec![4]);
        assert_eq!(parse_delete_when("00;12; 23").unwrap(), vec![0, 12, 23]);
        assert_eq!(
            parse_delete_when(DELETE_WHEN_DEFAULT).unwrap(),
            RetentionConfig::default().delete_when_hours
        );
    }
}
