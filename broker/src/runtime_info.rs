//! The GET_BROKER_RUNTIME_INFO (28) answer: a `KVTable` of strings that
//! `mqadmin brokerStatus` prints and `mqadmin clusterList` parses.
//!
//! Shards count into a [`RuntimeStats`] (one per shard, merged with
//! [`RuntimeStats::merge`] when a request arrives); each shard's TPS
//! figures come from a [`TpsSampler`](crate::tps::TpsSampler) of its
//! counters ([`RuntimeStats::tps_counters`]), so the merged figures are the
//! sums over shards. [`runtime_info_body`] turns the merged counters into
//! the body Java's `AdminBrokerProcessor.prepareRuntimeInfo` would send:
//!
//! ```text
//! {"table":{"bootTimestamp":"1700000000000","brokerVersion":"479","brokerVersionDesc":"V5_3_3",
//!           "commitLogDiskRatio":"0.42","msgPutTotalTodayNow":"12",...,"putTps":"1.5 1.2 0.9",...}}
//! ```
//!
//! Values follow Java's `String.valueOf`: doubles as `Double.toString`
//! (`0.0`, `4.0E-4`), TPS as three space-separated numbers (10 s, 60 s and
//! 600 s windows; `clusterList` parses the first), byte amounts through
//! `MixAll.humanReadableByteCount` (`1.5 GiB`). The keys are Java's
//! (`StoreStatsService.getRuntimeInfo`, `DefaultMessageStore.getRuntimeInfo`,
//! `ScheduleMessageService.buildRunningStats`, `prepareRuntimeInfo`), plus
//! both spellings of the outbound TPS key: `getTransferedTps` (4.x) and
//! `getTransferredTps` (5.x), so both tool generations find it. One key is
//! ringmq's own: `commitLogSyncReads`, the CommitLog reads the shards
//! waited for on their threads (older records read anywhere but in the
//! background), which `brokerStatus` prints like any other.
//!
//! Where ringmq has no such thing the value says so the way Java would
//! when idle: thread pool queue sizes are the requests waiting in shard
//! queues as the shards count them, capacities are Java's defaults, the
//! page cache lock time is 0 (no lock), the transient store pool is
//! disabled. Members are written sorted by key (the protocol crate's
//! `KvTable`), where Java writes `HashMap` order; no reader depends on it
//! (`brokerStatus` sorts them itself).
//!
//! # Invariants
//!
//! - Every key of [`CLUSTER_LIST_KEYS`] is in every body.
//! - `msgPutTotalTodayMorning <= msgPutTotalTodayNow` as long as the
//!   counters only grow (the same for gets and for yesterday ≤ today).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ringmq_protocol::code::version;
use ringmq_protocol::json::{JsonStyle, KvTable};

use crate::config::BrokerConfig;
use crate::tps::{TpsCounters, TpsRates};

/// `MQVersion.CURRENT_VERSION` this broker reports (`brokerVersion`).
pub const BROKER_VERSION: i32 = version::CURRENT;

/// The name of [`BROKER_VERSION`] (`brokerVersionDesc`).
pub const BROKER_VERSION_DESC: &str = "V5_3_3";

const _: () = assert!(BROKER_VERSION == version::V5_3_3);

/// Milliseconds in a day, the period of the morning snapshots.
pub const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Buckets of `putMessageDistributeTime` (Java's
/// `PUT_MESSAGE_ENTIRE_TIME_MAX_DESC`).
pub const PUT_LATENCY_BUCKET_COUNT: usize = 13;

/// The names of the put latency buckets, as Java prints them.
pub const PUT_LATENCY_BUCKET_NAMES: [&str; PUT_LATENCY_BUCKET_COUNT] = [
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
];

/// Exclusive upper bounds in ms of buckets 1..=11; bucket 0 is `<= 0`,
/// bucket 12 everything from 10 s on.
const PUT_LATENCY_BUCKET_BOUNDS_MS: [i64; PUT_LATENCY_BUCKET_COUNT - 2] = [
    10, 50, 100, 200, 500, 1_000, 2_000, 3_000, 4_000, 5_000, 10_000,
];

/// Java's default `sendThreadPoolQueueCapacity`.
pub const SEND_THREAD_POOL_QUEUE_CAPACITY: u64 = 10_000;
/// Java's default `pullThreadPoolQueueCapacity`.
pub const PULL_THREAD_POOL_QUEUE_CAPACITY: u64 = 100_000;
/// Java's default `litePullThreadPoolQueueCapacity`.
pub const LITE_PULL_THREAD_POOL_QUEUE_CAPACITY: u64 = 100_000;
/// Java's default `queryThreadPoolQueueCapacity`.
pub const QUERY_THREAD_POOL_QUEUE_CAPACITY: u64 = 20_000;
/// Java's default `endTransactionPoolQueueCapacity`.
pub const END_TRANSACTION_POOL_QUEUE_CAPACITY: u64 = 100_000;

/// `remainTransientStoreBufferNumbs` with the transient store pool off
/// (Java answers `Integer.MAX_VALUE`).
pub const TRANSIENT_STORE_BUFFERS_DISABLED: i32 = i32::MAX;

/// The keys `mqadmin clusterList` reads; every body has them.
pub const CLUSTER_LIST_KEYS: [&str; 16] = [
    "brokerVersionDesc",
    "putTps",
    "getTransferedTps",
    "getTransferredTps",
    "sendThreadPoolQueueSize",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueSize",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "pageCacheLockTimeMills",
    "earliestMessageTimeStamp",
    "commitLogDiskRatio",
    "msgPutTotalYesterdayMorning",
    "msgPutTotalTodayMorning",
    "msgPutTotalTodayNow",
    "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning",
];

/// The bucket of `putMessageDistributeTime` a put taking `latency_ms` counts in.
pub fn put_latency_bucket(latency_ms: i64) -> usize {
    if latency_ms <= 0 {
        return 0;
    }
    PUT_LATENCY_BUCKET_BOUNDS_MS
        .iter()
        .position(|&bound| latency_ms < bound)
        .map_or(PUT_LATENCY_BUCKET_COUNT - 1, |index| index + 1)
}

/// A message count with Java's `BrokerStats` morning snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DailyTotals {
    /// The total at the start of yesterday (`...TotalYesterdayMorning`).
    pub yesterday_morning: u64,
    /// The total at the start of today (`...TotalTodayMorning`).
    pub today_morning: u64,
    /// The total since boot (`...TotalTodayNow`).
    pub now: u64,
}

impl DailyTotals {
    /// Counts `count` more messages.
    pub fn add(&mut self, count: u64) {
        self.now = self.now.saturating_add(count);
    }

    /// Takes the morning snapshot, as Java's `BrokerStats.record` does at
    /// midnight.
    pub fn roll_day(&mut self) {
        self.yesterday_morning = self.today_morning;
        self.today_morning = self.now;
    }

    fn merge(&mut self, other: &DailyTotals) {
        self.yesterday_morning = self
            .yesterday_morning
            .saturating_add(other.yesterday_morning);
        self.today_morning = self.today_morning.saturating_add(other.today_morning);
        self.now = self.now.saturating_add(other.now);
    }
}

/// Rates over Java's three windows: 10 s, 60 s and 600 s, per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tps {
    /// The last 10 seconds.
    pub last_10s: f64,
    /// The last minute.
    pub last_60s: f64,
    /// The last 10 minutes.
    pub last_600s: f64,
}

impl Tps {
    fn merge(&mut self, other: &Tps) {
        self.last_10s += other.last_10s;
        self.last_60s += other.last_60s;
        self.last_600s += other.last_600s;
    }

    /// `"<10s> <60s> <600s>"` as Java joins them.
    fn java_string(&self) -> String {
        format!(
            "{} {} {}",
            java_double(self.last_10s),
            java_double(self.last_60s),
            java_double(self.last_600s)
        )
    }
}

/// Space of the file system holding a store directory (`statvfs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskSpace {
    /// Size of the file system.
    pub total_bytes: u64,
    /// Free bytes, including those reserved for root (`f_bfree`).
    pub free_bytes: u64,
    /// Bytes an unprivileged process may use (`f_bavail`).
    pub available_bytes: u64,
}

impl DiskSpace {
    /// The used share as Java's 5.x `UtilAll.getDiskPartitionSpaceUsedPercent`
    /// computes it: used / (used + available), rounded up to hundredths;
    /// -1 for an empty file system.
    pub fn used_ratio(&self) -> f64 {
        if self.total_bytes == 0 {
            return -1.0;
        }
        let used = u128::from(self.total_bytes.saturating_sub(self.free_bytes));
        let entire = used + u128::from(self.available_bytes);
        if entire == 0 {
            return -1.0;
        }
        let hundredths = (used * 100).div_ceil(entire);
        // At most 100, so the conversion is exact.
        hundredths as f64 / 100.0
    }

    fn merge(&mut self, other: &DiskSpace) {
        // Shards share one file system; keep the fullest view.
        if other.used_ratio() > self.used_ratio() {
            *self = *other;
        }
    }
}

/// Counters for GET_BROKER_RUNTIME_INFO. Each shard keeps one and
/// updates it as it works; [`RuntimeStats::merge`] adds them up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeStats {
    /// When the store was opened (`bootTimestamp`).
    pub boot_timestamp_ms: i64,
    /// UTC day number (`ms / DAY_MS`) of the last morning snapshot.
    pub stats_day: i64,
    /// Messages put (`msgPutTotal*`, `putMessageTimesTotal`).
    pub msg_put: DailyTotals,
    /// Messages returned to pulls (`msgGetTotal*`; the transferred
    /// count behind `getTransferredTps`).
    pub msg_get: DailyTotals,
    /// Pull reads that found messages (Java's `getMessageTimesTotalFound`,
    /// behind `getFoundTps`).
    pub get_found_count: u64,
    /// Pull reads that found none (Java's `getMessageTimesTotalMiss`,
    /// behind `getMissTps`).
    pub get_miss_count: u64,
    /// Body bytes put (`putMessageSizeTotal`).
    pub put_message_size_total_bytes: u64,
    /// Puts that failed (`putMessageFailedTimes`).
    pub put_message_failed_count: u64,
    /// Slowest put (`putMessageEntireTimeMax`).
    pub put_message_entire_time_max_ms: i64,
    /// Slowest get (`getMessageEntireTimeMax`).
    pub get_message_entire_time_max_ms: i64,
    /// Puts per latency bucket, see [`put_latency_bucket`].
    pub put_latency_buckets: [u64; PUT_LATENCY_BUCKET_COUNT],
    /// 99th percentile put latency (`putLatency99`).
    pub put_latency_ms_p99: f64,
    /// 99.9th percentile put latency (`putLatency999`).
    pub put_latency_ms_p999: f64,
    /// Messages put per second (`putTps`).
    pub put_tps: Tps,
    /// Pulls that found messages, per second (`getFoundTps`).
    pub get_found_tps: Tps,
    /// Pulls that found none, per second (`getMissTps`).
    pub get_miss_tps: Tps,
    /// Messages returned to pulls per second (`getTransferredTps`).
    pub get_transferred_tps: Tps,
    /// Largest dispatch batch (`dispatchMaxBuffer`).
    pub dispatch_max_buffer: u64,
    /// CommitLog bytes not yet in the ConsumeQueue (`dispatchBehindBytes`).
    pub dispatch_behind_bytes: u64,
    /// CommitLog bytes written but not yet durable (`remainHowManyDataToFlush`).
    pub flush_behind_bytes: u64,
    /// CommitLog reads a shard waited for on its thread, their bytes in no
    /// cache (`commitLogSyncReads`, ringmq's own key; most reads of older
    /// records go in the background).
    pub commit_log_sync_reads: u64,
    /// Smallest CommitLog offset still stored (`commitLogMinOffset`).
    pub commit_log_min_offset: i64,
    /// CommitLog offset after the last record (`commitLogMaxOffset`).
    pub commit_log_max_offset: i64,
    /// Store time of the oldest message kept (`earliestMessageTimeStamp`);
    /// `None` for an empty store (Java: -1).
    pub earliest_message_store_timestamp_ms: Option<i64>,
    /// The file system of the CommitLog, if known.
    pub commit_log_disk: Option<DiskSpace>,
    /// The file system of the ConsumeQueue, if known.
    pub consume_queue_disk: Option<DiskSpace>,
    /// Send requests waiting for a shard (`sendThreadPoolQueueSize`).
    pub send_queue_size: u64,
    /// Pull requests waiting for a shard (`pullThreadPoolQueueSize`).
    pub pull_queue_size: u64,
    /// How long the oldest waiting send has waited
    /// (`sendThreadPoolQueueHeadWaitTimeMills`).
    pub send_queue_head_wait_ms: i64,
    /// How long the oldest waiting pull has waited
    /// (`pullThreadPoolQueueHeadWaitTimeMills`).
    pub pull_queue_head_wait_ms: i64,
    /// When sends were first accepted (`startAcceptSendRequestTimeStamp`).
    pub start_accept_send_request_timestamp_ms: i64,
    /// Delay level → (consumed offset, max offset) of the schedule topic
    /// (`scheduleMessageOffset_<level>`); empty while delays are not
    /// scheduled.
    pub schedule_offsets: BTreeMap<i32, (i64, i64)>,
}

impl RuntimeStats {
    /// Empty counters for a store opened at `boot_timestamp_ms`.
    pub fn new(boot_timestamp_ms: i64) -> Self {
        Self {
            boot_timestamp_ms,
            stats_day: boot_timestamp_ms.div_euclid(DAY_MS),
            ..Self::default()
        }
    }

    /// Counts one put of `body_size` bytes that took `latency_ms`.
    pub fn record_put(&mut self, body_size: u64, latency_ms: i64) {
        self.msg_put.add(1);
        self.put_message_size_total_bytes =
            self.put_message_size_total_bytes.saturating_add(body_size);
        self.put_message_entire_time_max_ms = self.put_message_entire_time_max_ms.max(latency_ms);
        let bucket = &mut self.put_latency_buckets[put_latency_bucket(latency_ms)];
        *bucket = bucket.saturating_add(1);
    }

    /// Counts one pull read of the store: `found` when it found messages,
    /// `message_count` of them returned to the puller. Java counts every
    /// read, a held pull's repeated reads too.
    pub fn record_get(&mut self, found: bool, message_count: u64) {
        if found {
            self.get_found_count = self.get_found_count.saturating_add(1);
            self.msg_get.add(message_count);
        } else {
            self.get_miss_count = self.get_miss_count.saturating_add(1);
        }
    }

    /// The cumulative counters the TPS figures are sampled from.
    pub fn tps_counters(&self) -> TpsCounters {
        TpsCounters {
            msg_put: self.msg_put.now,
            get_found: self.get_found_count,
            get_miss: self.get_miss_count,
            get_transferred: self.msg_get.now,
        }
    }

    /// Sets the four TPS figures from a sampler of this shard's counters.
    pub fn set_tps(&mut self, rates: &TpsRates) {
        self.put_tps = rates.put;
        self.get_found_tps = rates.get_found;
        self.get_miss_tps = rates.get_miss;
        self.get_transferred_tps = rates.get_transferred;
    }

    /// Takes the morning snapshots if a UTC day boundary passed since the
    /// last one (Java: local midnight); several days passed make yesterday
    /// and today the current totals, as repeated snapshots would.
    pub fn roll_day_if_due(&mut self, now_ms: i64) {
        let day = now_ms.div_euclid(DAY_MS);
        if day <= self.stats_day {
            return;
        }
        self.msg_put.roll_day();
        self.msg_get.roll_day();
        if day - self.stats_day > 1 {
            self.msg_put.roll_day();
            self.msg_get.roll_day();
        }
        self.stats_day = day;
    }

    /// Adds another shard's counters: sums of counts and rates, the
    /// extremes of maxima and offsets, the earliest boot and message. The
    /// percentiles take the larger value (an upper bound, not a merge).
    pub fn merge(&mut self, other: &RuntimeStats) {
        self.boot_timestamp_ms = match (self.boot_timestamp_ms, other.boot_timestamp_ms) {
            (0, theirs) => theirs,
            (ours, 0) => ours,
            (ours, theirs) => ours.min(theirs),
        };
        self.stats_day = self.stats_day.max(other.stats_day);
        self.msg_put.merge(&other.msg_put);
        self.msg_get.merge(&other.msg_get);
        self.get_found_count = self.get_found_count.saturating_add(other.get_found_count);
        self.get_miss_count = self.get_miss_count.saturating_add(other.get_miss_count);
        self.put_message_size_total_bytes = self
            .put_message_size_total_bytes
            .saturating_add(other.put_message_size_total_bytes);
        self.put_message_failed_count = self
            .put_message_failed_count
            .saturating_add(other.put_message_failed_count);
        self.put_message_entire_time_max_ms = self
            .put_message_entire_time_max_ms
            .max(other.put_message_entire_time_max_ms);
        self.get_message_entire_time_max_ms = self
            .get_message_entire_time_max_ms
            .max(other.get_message_entire_time_max_ms);
        for (ours, theirs) in self
            .put_latency_buckets
            .iter_mut()
            .zip(other.put_latency_buckets)
        {
            *ours = ours.saturating_add(theirs);
        }
        self.put_latency_ms_p99 = self.put_latency_ms_p99.max(other.put_latency_ms_p99);
        self.put_latency_ms_p999 = self.put_latency_ms_p999.max(other.put_latency_ms_p999);
        self.put_tps.merge(&other.put_tps);
        self.get_found_tps.merge(&other.get_found_tps);
        self.get_miss_tps.merge(&other.get_miss_tps);
        self.get_transferred_tps.merge(&other.get_transferred_tps);
        self.dispatch_max_buffer = self.dispatch_max_buffer.max(other.dispatch_max_buffer);
        self.dispatch_behind_bytes = self
            .dispatch_behind_bytes
            .saturating_add(other.dispatch_behind_bytes);
        self.flush_behind_bytes = self
            .flush_behind_bytes
            .saturating_add(other.flush_behind_bytes);
        self.commit_log_sync_reads = self
            .commit_log_sync_reads
            .saturating_add(other.commit_log_sync_reads);
        self.commit_log_min_offset = self.commit_log_min_offset.min(other.commit_log_min_offset);
        self.commit_log_max_offset = self.commit_log_max_offset.max(other.commit_log_max_offset);
        self.earliest_message_store_timestamp_ms = match (
            self.earliest_message_store_timestamp_ms,
            other.earliest_message_store_timestamp_ms,
        ) {
            (Some(ours), Some(theirs)) => Some(ours.min(theirs)),
            (ours, theirs) => ours.or(theirs),
        };
        merge_disk(&mut self.commit_log_disk, other.commit_log_disk);
        merge_disk(&mut self.consume_queue_disk, other.consume_queue_disk);
        self.send_queue_size = self.send_queue_size.saturating_add(other.send_queue_size);
        self.pull_queue_size = self.pull_queue_size.saturating_add(other.pull_queue_size);
        self.send_queue_head_wait_ms = self
            .send_queue_head_wait_ms
            .max(other.send_queue_head_wait_ms);
        self.pull_queue_head_wait_ms = self
            .pull_queue_head_wait_ms
            .max(other.pull_queue_head_wait_ms);
        self.start_accept_send_request_timestamp_ms = self
            .start_accept_send_request_timestamp_ms
            .max(other.start_accept_send_request_timestamp_ms);
        for (&level, &offsets) in &other.schedule_offsets {
            self.schedule_offsets.insert(level, offsets);
        }
    }
}

fn merge_disk(ours: &mut Option<DiskSpace>, theirs: Option<DiskSpace>) {
    match (ours.as_mut(), theirs) {
        (Some(ours), Some(theirs)) => ours.merge(&theirs),
        (None, theirs) => *ours = theirs,
        (Some(_), None) => {}
    }
}

/// Java's `Double.toString`: at least one fraction digit, scientific
/// (`4.0E-4`) below 10⁻³ and from 10⁷ on.
pub fn java_double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let magnitude = value.abs();
    if magnitude == 0.0 || (1e-3..1e7).contains(&magnitude) {
        let text = format!("{value}");
        if text.contains('.') {
            text
        } else {
            text + ".0"
        }
    } else {
        let text = format!("{value:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        if mantissa.contains('.') {
            format!("{mantissa}E{exponent}")
        } else {
            format!("{mantissa}.0E{exponent}")
        }
    }
}

/// Java's `MixAll.humanReadableByteCount(bytes, false)`: `512 B`,
/// `1.5 KiB`, `10.0 GiB`.
pub fn human_readable_byte_count(bytes: u64) -> String {
    const UNIT: u64 = 1024;
    const PREFIXES: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    if bytes < UNIT {
        return format!("{bytes} B");
    }
    let mut exponent = 0usize;
    let mut scaled = bytes;
    while scaled >= UNIT && exponent < PREFIXES.len() {
        scaled /= UNIT;
        exponent += 1;
    }
    let divisor = (UNIT as f64).powi(i32::try_from(exponent).unwrap_or(i32::MAX));
    format!("{:.1} {}iB", bytes as f64 / divisor, PREFIXES[exponent - 1])
}

/// `[ d days, h hours, m minutes, s seconds ]` since boot, as
/// `StoreStatsService.getFormatRuntime` writes it.
fn format_runtime(elapsed_ms: i64) -> String {
    const SECOND: i64 = 1000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    let elapsed = elapsed_ms.max(0);
    format!(
        "[ {} days, {} hours, {} minutes, {} seconds ]",
        group_thousands(elapsed / DAY_MS),
        (elapsed % DAY_MS) / HOUR,
        (elapsed % HOUR) / MINUTE,
        (elapsed % MINUTE) / SECOND
    )
}

/// `MessageFormat` prints numbers with grouping separators.
fn group_thousands(value: i64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The key/value table of GET_BROKER_RUNTIME_INFO for `stats` (merged over
/// the shards) at `now_ms`.
pub fn runtime_info_table(
    stats: &RuntimeStats,
    config: &BrokerConfig,
    now_ms: i64,
) -> BTreeMap<String, String> {
    let mut table = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        table.insert(key.to_owned(), value);
    };

    // StoreStatsService.getRuntimeInfo. Java divides by at least one put
    // and reports that one as the total, even on an idle broker.
    let put_count = stats.msg_put.now.max(1);
    put("bootTimestamp", stats.boot_timestamp_ms.to_string());
    put(
        "runtime",
        format_runtime(now_ms.saturating_sub(stats.boot_timestamp_ms)),
    );
    put(
        "putMessageEntireTimeMax",
        stats.put_message_entire_time_max_ms.to_string(),
    );
    put("putMessageTimesTotal", put_count.to_string());
    put(
        "putMessageSizeTotal",
        stats.put_message_size_total_bytes.to_string(),
    );
    put(
        "putMessageFailedTimes",
        stats.put_message_failed_count.to_string(),
    );
    let mut distribution = String::new();
    for (name, count) in PUT_LATENCY_BUCKET_NAMES
        .iter()
        .zip(stats.put_latency_buckets)
    {
        // Writing into a String cannot fail.
        let _ = write!(distribution, "{name}:{count} ");
    }
    put("putMessageDistributeTime", distribution);
    put(
        "putMessageAverageSize",
        java_double(stats.put_message_size_total_bytes as f64 / put_count as f64),
    );
    put("dispatchMaxBuffer", stats.dispatch_max_buffer.to_string());
    put(
        "getMessageEntireTimeMax",
        stats.get_message_entire_time_max_ms.to_string(),
    );
    put("putTps", stats.put_tps.java_string());
    put("getFoundTps", stats.get_found_tps.java_string());
    put("getMissTps", stats.get_miss_tps.java_string());
    let total_tps = Tps {
        last_10s: stats.get_found_tps.last_10s + stats.get_miss_tps.last_10s,
        last_60s: stats.get_found_tps.last_60s + stats.get_miss_tps.last_60s,
        last_600s: stats.get_found_tps.last_600s + stats.get_miss_tps.last_600s,
    };
    put("getTotalTps", total_tps.java_string());
    put("getTransferedTps", stats.get_transferred_tps.java_string());
    put("getTransferredTps", stats.get_transferred_tps.java_string());
    put("putLatency99", format!("{:.2}", stats.put_latency_ms_p99));
    put("putLatency999", format!("{:.2}", stats.put_latency_ms_p999));

    // DefaultMessageStore.getRuntimeInfo.
    let commit_log_ratio = stats.commit_log_disk.map_or(-1.0, |disk| disk.used_ratio());
    let commit_log_path = config.store_path_root_dir.join("commitlog");
    put(
        &format!("commitLogDiskRatio_{}", commit_log_path.display()),
        java_double(commit_log_ratio),
    );
    put("commitLogDiskRatio", java_double(commit_log_ratio));
    put(
        "consumeQueueDiskRatio",
        java_double(
            stats
                .consume_queue_disk
                .or(stats.commit_log_disk)
                .map_or(-1.0, |disk| disk.used_ratio()),
        ),
    );
    put(
        "commitLogMinOffset",
        stats.commit_log_min_offset.to_string(),
    );
    put(
        "commitLogMaxOffset",
        stats.commit_log_max_offset.to_string(),
    );

    // ScheduleMessageService.buildRunningStats.
    for (level, (offset, max_offset)) in &stats.schedule_offsets {
        put(
            &format!("scheduleMessageOffset_{level}"),
            format!("{offset},{max_offset}"),
        );
    }

    // AdminBrokerProcessor.prepareRuntimeInfo.
    put("brokerActive", "true".to_owned());
    put("brokerVersionDesc", BROKER_VERSION_DESC.to_owned());
    put("brokerVersion", BROKER_VERSION.to_string());
    put(
        "msgPutTotalYesterdayMorning",
        stats.msg_put.yesterday_morning.to_string(),
    );
    put(
        "msgPutTotalTodayMorning",
        stats.msg_put.today_morning.to_string(),
    );
    put("msgPutTotalTodayNow", stats.msg_put.now.to_string());
    put(
        "msgGetTotalYesterdayMorning",
        stats.msg_get.yesterday_morning.to_string(),
    );
    put(
        "msgGetTotalTodayMorning",
        stats.msg_get.today_morning.to_string(),
    );
    put("msgGetTotalTodayNow", stats.msg_get.now.to_string());
    put(
        "dispatchBehindBytes",
        stats.dispatch_behind_bytes.to_string(),
    );
    put("pageCacheLockTimeMills", "0".to_owned());
    put(
        "commitLogSyncReads",
        stats.commit_log_sync_reads.to_string(),
    );
    put(
        "earliestMessageTimeStamp",
        stats
            .earliest_message_store_timestamp_ms
            .unwrap_or(-1)
            .to_string(),
    );
    put(
        "startAcceptSendRequestTimeStamp",
        stats.start_accept_send_request_timestamp_ms.to_string(),
    );
    for key in ["timerReadBehind", "timerOffsetBehind", "timerCongestNum"] {
        put(key, "0".to_owned());
    }
    put("timerEnqueueTps", "0.0".to_owned());
    put("timerDequeueTps", "0.0".to_owned());
    put(
        "remainTransientStoreBufferNumbs",
        TRANSIENT_STORE_BUFFERS_DISABLED.to_string(),
    );
    put(
        "remainHowManyDataToFlush",
        human_readable_byte_count(stats.flush_behind_bytes),
    );
    if let Some(disk) = stats.commit_log_disk {
        put(
            "commitLogDirCapacity",
            format!(
                "Total : {}, Free : {}.",
                human_readable_byte_count(disk.total_bytes),
                human_readable_byte_count(disk.free_bytes)
            ),
        );
    }
    let pools: [(&str, u64, i64, u64); 4] = [
        (
            "sendThreadPoolQueue",
            stats.send_queue_size,
            stats.send_queue_head_wait_ms,
            SEND_THREAD_POOL_QUEUE_CAPACITY,
        ),
        (
            "pullThreadPoolQueue",
            stats.pull_queue_size,
            stats.pull_queue_head_wait_ms,
            PULL_THREAD_POOL_QUEUE_CAPACITY,
        ),
        (
            "litePullThreadPoolQueue",
            0,
            0,
            LITE_PULL_THREAD_POOL_QUEUE_CAPACITY,
        ),
        (
            "queryThreadPoolQueue",
            0,
            0,
            QUERY_THREAD_POOL_QUEUE_CAPACITY,
        ),
    ];
    for (pool, size, head_wait_ms, capacity) in pools {
        put(&format!("{pool}Size"), size.to_string());
        put(&format!("{pool}Capacity"), capacity.to_string());
        put(
            &format!("{pool}HeadWaitTimeMills"),
            head_wait_ms.to_string(),
        );
    }
    put("EndTransactionQueueSize", "0".to_owned());
    put(
        "EndTransactionThreadPoolQueueCapacity",
        END_TRANSACTION_POOL_QUEUE_CAPACITY.to_string(),
    );
    table
}

/// The GET_BROKER_RUNTIME_INFO body: `{"table":{...}}` as Java's
/// `KVTable.encode` writes it (members sorted, see the module doc).
pub fn runtime_info_body(stats: &RuntimeStats, config: &BrokerConfig, now_ms: i64) -> Vec<u8> {
    let table = KvTable {
        table: runtime_info_table(stats, config, now_ms),
    };
    let mut body = Vec::new();
    table.to_json(&mut body, JsonStyle::Java);
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigEnvironment;
    use std::net::{IpAddr, Ipv4Addr};
    use std::path::PathBuf;

    const BOOT: i64 = 1_700_000_000_000;

    fn config() -> BrokerConfig {
        BrokerConfig::defaults(&ConfigEnvironment {
            home_dir: PathBuf::from("/home/ringmq"),
            cpu_count: 2,
            broker_ip1: IpAddr::V4(Ipv4Addr::LOCALHOST),
        })
    }

    fn busy_stats() -> RuntimeStats {
        let mut stats = RuntimeStats::new(BOOT);
        for latency_ms in [0, 3, 12, 12_000] {
            stats.record_put(100, latency_ms);
        }
        stats.msg_get.add(3);
        stats.put_tps = Tps {
            last_10s: 1.5,
            last_60s: 0.25,
            last_600s: 0.0,
        };
        stats.get_transferred_tps.last_10s = 2.0;
        stats.commit_log_min_offset = 0;
        stats.commit_log_max_offset = 4096;
        stats.earliest_message_store_timestamp_ms = Some(BOOT + 5);
        stats.commit_log_disk = Some(DiskSpace {
            total_bytes: 10 << 30,
            free_bytes: 6 << 30,
            available_bytes: 5 << 30,
        });
        stats
    }

    #[test]
    fn body_decodes_and_has_every_key_the_admin_tools_read() {
        let body = runtime_info_body(&busy_stats(), &config(), BOOT + 90_061_000);
        let table = KvTable::from_json(&body).unwrap().table;
        for key in CLUSTER_LIST_KEYS {
            assert!(table.contains_key(key), "missing {key}");
        }
        for key in [
            "msgGetTotalTodayNow",
            "brokerVersion",
            "brokerActive",
            "bootTimestamp",
            "runtime",
            "commitLogMinOffset",
            "commitLogMaxOffset",
            "consumeQueueDiskRatio",
            "timerReadBehind",
            "timerOffsetBehind",
            "timerCongestNum",
            "timerEnqueueTps",
            "timerDequeueTps",
            "EndTransactionQueueSize",
            "remainHowManyDataToFlush",
            "commitLogDirCapacity",
        ] {
            assert!(table.contains_key(key), "missing {key}");
        }
        assert!(body.starts_with(b"{\"table\":{\"EndTransactionQueueSize\":\"0\""));
    }

    #[test]
    fn values_are_formatted_as_java_formats_them() {
        let table = runtime_info_table(&busy_stats(), &config(), BOOT + 90_061_000);
        assert_eq!(table["brokerVersionDesc"], "V5_3_3");
        assert_eq!(table["brokerVersion"], "479");
        assert_eq!(table["putTps"], "1.5 0.25 0.0");
        assert_eq!(table["getTransferedTps"], "2.0 0.0 0.0");
        assert_eq!(table["getTransferredTps"], table["getTransferedTps"]);
        assert_eq!(table["msgPutTotalTodayNow"], "4");
        assert_eq!(table["msgGetTotalTodayNow"], "3");
        assert_eq!(table["msgPutTotalTodayMorning"], "0");
        assert_eq!(table["putMessageTimesTotal"], "4");
        assert_eq!(table["putMessageSizeTotal"], "400");
        assert_eq!(table["putMessageAverageSize"], "100.0");
        assert_eq!(table["putMessageEntireTimeMax"], "12000");
        assert_eq!(
            table["putMessageDistributeTime"],
            "[<=0ms]:1 [0~10ms]:1 [10~50ms]:1 [50~100ms]:0 [100~200ms]:0 [200~500ms]:0 \
             [500ms~1s]:0 [1~2s]:0 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:1 "
        );
        assert_eq!(
            table["runtime"],
            "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"
        );
        assert_eq!(table["earliestMessageTimeStamp"], (BOOT + 5).to_string());
        // used 4 GiB of 4 + 5 available: 44.4..% rounded up.
        assert_eq!(table["commitLogDiskRatio"], "0.45");
        assert_eq!(
            table["commitLogDiskRatio_/home/ringmq/store/commitlog"],
            "0.45"
        );
        assert_eq!(
            table["commitLogDirCapacity"],
            "Total : 10.0 GiB, Free : 6.0 GiB."
        );
        assert_eq!(table["remainHowManyDataToFlush"], "0 B");
        assert_eq!(table["putLatency99"], "0.00");
        assert_eq!(table["timerEnqueueTps"], "0.0");
    }

    #[test]
    fn an_idle_broker_reports_what_java_reports_when_idle() {
        let table = runtime_info_table(&RuntimeStats::new(BOOT), &config(), BOOT);
        // Java reports one put on an idle broker; the daily totals stay 0.
        assert_eq!(table["putMessageTimesTotal"], "1");
        assert_eq!(table["msgPutTotalTodayNow"], "0");
        assert_eq!(table["putMessageAverageSize"], "0.0");
        assert_eq!(table["earliestMessageTimeStamp"], "-1");
        assert_eq!(table["commitLogDiskRatio"], "-1.0");
        assert!(!table.contains_key("commitLogDirCapacity"));
        assert_eq!(
            table["runtime"],
            "[ 0 days, 0 hours, 0 minutes, 0 seconds ]"
        );
        // Numbers the tools parse do parse.
        let earliest: i64 = table["earliestMessageTimeStamp"].parse().unwrap();
        assert_eq!(earliest, -1);
        let ratio: f64 = table["commitLogDiskRatio"].parse().unwrap();
        assert!(ratio < 0.0);
        let first_tps: f64 = table["putTps"].split(' ').next().unwrap().parse().unwrap();
        assert_eq!(first_tps, 0.0);
    }

    #[test]
    fn schedule_offsets_appear_per_delay_level() {
        let mut stats = RuntimeStats::new(BOOT);
        stats.schedule_offsets.insert(3, (7, 9));
        let table = runtime_info_table(&stats, &config(), BOOT);
        assert_eq!(table["scheduleMessageOffset_3"], "7,9");
    }

    #[test]
    fn day_roll_moves_today_to_yesterday_once_per_day() {
        let mut stats = RuntimeStats::new(BOOT);
        stats.msg_put.add(5);
        stats.roll_day_if_due(BOOT + 1);
        assert_eq!(stats.msg_put.today_morning, 0);
        let next_day = (stats.stats_day + 1) * DAY_MS;
        stats.roll_day_if_due(next_day);
        assert_eq!(
            stats.msg_put,
            DailyTotals {
                yesterday_morning: 0,
                today_morning: 5,
                now: 5
            }
        );
        stats.msg_put.add(2);
        stats.roll_day_if_due(next_day + 1000);
        assert_eq!(stats.msg_put.today_morning, 5);
        // Three days later: both snapshots are the current total.
        stats.roll_day_if_due(next_day + 3 * DAY_MS);
        assert_eq!(
            stats.msg_put,
            DailyTotals {
                yesterday_morning: 7,
                today_morning: 7,
                now: 7
            }
        );
    }

    #[test]
    fn merge_adds_counts_and_keeps_extremes() {
        let mut total = busy_stats();
        let mut other = RuntimeStats::new(BOOT - 10);
        other.record_put(50, 70);
        other.commit_log_min_offset = -1;
        other.commit_log_max_offset = 10_000;
        other.earliest_message_store_timestamp_ms = Some(BOOT);
        other.put_tps.last_10s = 0.5;
        total.commit_log_sync_reads = 2;
        other.commit_log_sync_reads = 3;
        total.merge(&other);
        assert_eq!(total.commit_log_sync_reads, 5);
        assert_eq!(total.msg_put.now, 5);
        assert_eq!(total.put_message_size_total_bytes, 450);
        assert_eq!(total.put_latency_buckets[3], 1);
        assert_eq!(total.put_tps.last_10s, 2.0);
        assert_eq!(total.boot_timestamp_ms, BOOT - 10);
        assert_eq!(total.commit_log_min_offset, -1);
        assert_eq!(total.commit_log_max_offset, 10_000);
        assert_eq!(total.earliest_message_store_timestamp_ms, Some(BOOT));
        assert!(total.commit_log_disk.is_some());
    }

    #[test]
    fn puts_and_pull_reads_move_the_counters_the_tps_sampler_reads() {
        let mut stats = RuntimeStats::new(BOOT);
        assert_eq!(stats.tps_counters(), TpsCounters::default());
        stats.record_put(10, 1);
        stats.record_put(10, 1);
        stats.record_get(true, 32);
        stats.record_get(false, 0);
        stats.record_get(false, 0);
        assert_eq!(
            stats.tps_counters(),
            TpsCounters {
                msg_put: 2,
                get_found: 1,
                get_miss: 2,
                get_transferred: 32,
            }
        );
        assert_eq!(stats.msg_get.now, 32);
        let mut other = RuntimeStats::new(BOOT);
        other.record_get(false, 0);
        stats.merge(&other);
        assert_eq!(stats.tps_counters().get_miss, 3);
    }

    #[test]
    fn sampled_puts_and_pulls_show_as_tps_in_the_body() {
        let mut stats = RuntimeStats::new(BOOT);
        let mut sampler = crate::tps::TpsSampler::new();
        sampler.record(BOOT, stats.tps_counters());
        for _ in 0..20 {
            stats.record_put(10, 1);
        }
        stats.record_get(true, 8);
        stats.record_get(true, 2);
        stats.record_get(false, 0);
        sampler.record(BOOT + 2_000, stats.tps_counters());
        stats.set_tps(&sampler.rates());
        let table = runtime_info_table(&stats, &config(), BOOT + 2_000);
        assert_eq!(table["putTps"], "10.0 10.0 10.0");
        assert_eq!(table["getFoundTps"], "1.0 1.0 1.0");
        assert_eq!(table["getMissTps"], "0.5 0.5 0.5");
        assert_eq!(table["getTotalTps"], "1.5 1.5 1.5");
        assert_eq!(table["getTransferredTps"], "5.0 5.0 5.0");
        assert_eq!(table["getTransferedTps"], "5.0 5.0 5.0");
    }

    #[test]
    fn put_latency_buckets_follow_javas_bounds() {
        let cases = [
            (-5, 0),
            (0, 0),
            (1, 1),
            (9, 1),
            (10, 2),
            (49, 2),
            (50, 3),
            (999, 6),
            (1_000, 7),
            (9_999, 11),
            (10_000, 12),
            (i64::MAX, 12),
        ];
        for (latency_ms, bucket) in cases {
            assert_eq!(put_latency_bucket(latency_ms), bucket, "{latency_ms} ms");
        }
    }

    #[test]
    fn java_double_matches_double_to_string() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.45, "0.45"),
            (100.0, "100.0"),
            (0.001, "0.001"),
            (4e-4, "4.0E-4"),
            (1.25e-5, "1.25E-5"),
            (1e7, "1.0E7"),
            (12_345_678.5, "1.23456785E7"),
            (9_999_999.0, "9999999.0"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
        ];
        for (value, text) in cases {
            assert_eq!(java_double(value), text, "{value:?}");
        }
    }

    #[test]
    fn byte_counts_read_as_mixall_writes_them() {
        assert_eq!(human_readable_byte_count(0), "0 B");
        assert_eq!(human_readable_byte_count(1023), "1023 B");
        assert_eq!(human_readable_byte_count(1024), "1.0 KiB");
        assert_eq!(human_readable_byte_count(1536), "1.5 KiB");
        assert_eq!(human_readable_byte_count(10 << 30), "10.0 GiB");
        assert_eq!(human_readable_byte_count(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn runtime_groups_thousands_of_days_as_message_format_does() {
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1234), "1,234");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
        assert_eq!(
            format_runtime(1000 * DAY_MS + 59_000),
            "[ 1,000 days, 0 hours, 0 minutes, 59 seconds ]"
        );
    }
}
