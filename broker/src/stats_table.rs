//! The per-topic and per-group figures of VIEW_BROKER_STATS_DATA (`mqadmin
//! statsAll`, the dashboard), and the rates behind `topicPutTps` and
//! `consumeTps`: the items of Java's `BrokerStatsManager`, kept by each
//! shard for the queues it owns.
//!
//! An item is named ([`StatsName`]) and keyed (a topic, `topic@group`, or
//! the cluster name), and holds two cumulative counters: `value` (messages,
//! or bytes) and `times` (how many increments). The table samples every
//! item's counters into three windows, as Java's `StatsItem` does:
//!
//! | window | sampled every | samples kept | spans |
//! | --- | --- | ---: | --- |
//! | minute | 10 s | 7 | 60 s |
//! | hour | 10 min | 7 | 60 min |
//! | day | 1 h | 25 | 24 h |
//!
//! A window's figures are between its oldest and newest sample: `sum` is
//! the value's growth, `tps` that growth per second, `avgpt` the growth per
//! increment. A window's first sampling also adds a zero sample one period
//! before it, as Java's does, so what an item counted before its first
//! sampling is in the figures. A window not sampled yet gives zeros.
//!
//! Several shards hold parts of one item (a topic's queues are spread over
//! the shards); [`ItemFigures::merge`] adds them: sums, increments and
//! rates add, `avgpt` is recomputed from the totals.
//!
//! # Invariants
//!
//! - At most [`STATS_ITEM_COUNT_MAX`] items per table; an increment of a
//!   new key beyond it is dropped and counted ([`StatsTable::dropped`]).
//! - A window holds at most its `keep` samples, their times increasing.
//! - An item without an increment for [`STATS_ITEM_IDLE_MS`] (longer than
//!   the day window, so all its windows read zero) is removed at the next
//!   sampling.
//! - Time is a parameter; nothing here reads a clock.

use std::collections::{HashMap, VecDeque};

/// Items one table holds at most (about 1 KiB each with full windows).
pub const STATS_ITEM_COUNT_MAX: usize = 20_000;

/// An item idle this long is removed (the day window plus an hour).
pub const STATS_ITEM_IDLE_MS: i64 = 25 * 3_600_000;

/// The figures Java's broker keeps and ringmq counts, by their wire names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatsName {
    /// Messages stored, by topic.
    TopicPutNums,
    /// Record bytes stored, by topic.
    TopicPutSize,
    /// Messages stored, by cluster name.
    BrokerPutNums,
    /// Messages returned to pulls, by `topic@group`.
    GroupGetNums,
    /// Record bytes returned to pulls, by `topic@group`.
    GroupGetSize,
    /// Messages returned to pulls, by cluster name.
    BrokerGetNums,
    /// Messages a consumer sent back, by `topic@group`.
    SendBackPutNums,
}

impl StatsName {
    /// Every name, in wire order of Java's constants.
    pub const ALL: [StatsName; 7] = [
        StatsName::TopicPutNums,
        StatsName::TopicPutSize,
        StatsName::GroupGetNums,
        StatsName::GroupGetSize,
        StatsName::SendBackPutNums,
        StatsName::BrokerPutNums,
        StatsName::BrokerGetNums,
    ];

    /// The name on the wire (`statsName`).
    pub fn as_str(self) -> &'static str {
        match self {
            StatsName::TopicPutNums => "TOPIC_PUT_NUMS",
            StatsName::TopicPutSize => "TOPIC_PUT_SIZE",
            StatsName::BrokerPutNums => "BROKER_PUT_NUMS",
            StatsName::GroupGetNums => "GROUP_GET_NUMS",
            StatsName::GroupGetSize => "GROUP_GET_SIZE",
            StatsName::BrokerGetNums => "BROKER_GET_NUMS",
            StatsName::SendBackPutNums => "SNDBCK_PUT_NUMS",
        }
    }

    /// The name `wire` stands for; `None` for one ringmq does not keep.
    pub fn parse(wire: &str) -> Option<StatsName> {
        StatsName::ALL
            .into_iter()
            .find(|name| name.as_str() == wire)
    }

    fn index(self) -> usize {
        StatsName::ALL
            .iter()
            .position(|name| *name == self)
            .expect("ALL lists every name")
    }
}

/// The key of a group's figures on a topic (Java's `buildStatsKey`).
pub fn group_key(topic: &str, group: &str) -> String {
    format!("{topic}@{group}")
}

/// How one window samples.
#[derive(Debug, Clone, Copy)]
struct Window {
    every_ms: i64,
    keep: usize,
}

const WINDOWS: [Window; 3] = [
    Window {
        every_ms: 10_000,
        keep: 7,
    },
    Window {
        every_ms: 600_000,
        keep: 7,
    },
    Window {
        every_ms: 3_600_000,
        keep: 25,
    },
];

const _: () = assert!(STATS_ITEM_IDLE_MS > WINDOWS[2].every_ms * (WINDOWS[2].keep as i64 - 1));

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    at_ms: i64,
    value: u64,
    times: u64,
}

#[derive(Debug, Clone)]
struct Item {
    value: u64,
    times: u64,
    last_add_ms: i64,
    windows: [VecDeque<Sample>; 3],
}

impl Item {
    fn new(now_ms: i64) -> Item {
        Item {
            value: 0,
            times: 0,
            last_add_ms: now_ms,
            windows: Default::default(),
        }
    }

    fn sample(&mut self, window_index: usize, now_ms: i64) {
        let window = WINDOWS[window_index];
        let samples = &mut self.windows[window_index];
        if samples.back().is_some_and(|last| now_ms <= last.at_ms) {
            // The clock stepped back: the window starts again.
            samples.clear();
        }
        if samples.is_empty() {
            samples.push_back(Sample {
                at_ms: now_ms - window.every_ms,
                value: 0,
                times: 0,
            });
        }
        if samples.len() == window.keep {
            samples.pop_front();
        }
        samples.push_back(Sample {
            at_ms: now_ms,
            value: self.value,
            times: self.times,
        });
        assert!(samples.len() <= window.keep, "a window outgrew its keep");
    }

    fn figures(&self) -> ItemFigures {
        let [minute, hour, day] = [0, 1, 2].map(|index| window_figures(&self.windows[index]));
        ItemFigures { minute, hour, day }
    }
}

fn window_figures(samples: &VecDeque<Sample>) -> WindowFigures {
    let (Some(first), Some(last)) = (samples.front(), samples.back()) else {
        return WindowFigures::default();
    };
    let elapsed_ms = last.at_ms - first.at_ms;
    if elapsed_ms <= 0 {
        return WindowFigures::default();
    }
    let sum = last.value.saturating_sub(first.value);
    WindowFigures {
        sum,
        // Counts and spans far below 2^53: the conversions are exact.
        tps: sum as f64 * 1_000.0 / elapsed_ms as f64,
        times: last.times.saturating_sub(first.times),
    }
}

/// One window's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowFigures {
    /// The value's growth over the window (`sum`).
    pub sum: u64,
    /// That growth per second (`tps`).
    pub tps: f64,
    /// Increments over the window.
    pub times: u64,
}

impl WindowFigures {
    /// Growth per increment (`avgpt`), 0 without increments.
    pub fn avgpt(&self) -> f64 {
        if self.times == 0 {
            0.0
        } else {
            self.sum as f64 / self.times as f64
        }
    }

    fn merge(&mut self, other: &WindowFigures) {
        self.sum += other.sum;
        self.tps += other.tps;
        self.times += other.times;
    }
}

/// An item's figures over the three windows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ItemFigures {
    /// The last minute (`statsMinute`).
    pub minute: WindowFigures,
    /// The last hour (`statsHour`).
    pub hour: WindowFigures,
    /// The last day (`statsDay`).
    pub day: WindowFigures,
}

impl ItemFigures {
    /// Adds another shard's part of the same item.
    pub fn merge(&mut self, other: &ItemFigures) {
        self.minute.merge(&other.minute);
        self.hour.merge(&other.hour);
        self.day.merge(&other.day);
    }
}

/// One shard's items (see the module doc).
#[derive(Debug, Clone)]
pub struct StatsTable {
    items: [HashMap<String, Item>; StatsName::ALL.len()],
    item_count: usize,
    next_sample_ms: [i64; 3],
    dropped: u64,
    /// Reused for `topic@group` keys, so a pull builds none.
    key_scratch: String,
}

impl StatsTable {
    /// An empty table whose first samplings are one period after `now_ms`.
    pub fn new(now_ms: i64) -> StatsTable {
        StatsTable {
            items: Default::default(),
            item_count: 0,
            next_sample_ms: WINDOWS.map(|window| now_ms.saturating_add(window.every_ms)),
            dropped: 0,
            key_scratch: String::new(),
        }
    }

    /// Adds `value` to item (`name`, `topic@group`), as [`StatsTable::add`].
    pub fn add_for_group(
        &mut self,
        name: StatsName,
        topic: &str,
        group: &str,
        value: u64,
        now_ms: i64,
    ) {
        let mut key = std::mem::take(&mut self.key_scratch);
        key.clear();
        key.push_str(topic);
        key.push('@');
        key.push_str(group);
        self.add(name, &key, value, now_ms);
        self.key_scratch = key;
    }

    /// Adds `value` to item (`name`, `key`) as one increment, creating it.
    pub fn add(&mut self, name: StatsName, key: &str, value: u64, now_ms: i64) {
        let items = &mut self.items[name.index()];
        let item = match items.get_mut(key) {
            Some(item) => item,
            None => {
                if self.item_count >= STATS_ITEM_COUNT_MAX {
                    self.dropped += 1;
                    return;
                }
                self.item_count += 1;
                items.entry(key.to_owned()).or_insert(Item::new(now_ms))
            }
        };
        item.value = item.value.saturating_add(value);
        item.times += 1;
        item.last_add_ms = now_ms;
    }

    /// Takes the samplings due at `now_ms` and removes idle items; call it
    /// every few seconds (a shard does from its tick).
    pub fn sample(&mut self, now_ms: i64) {
        let mut sampled = false;
        for (window_index, window) in WINDOWS.iter().enumerate() {
            if now_ms < self.next_sample_ms[window_index] {
                continue;
            }
            // A late call samples once; the schedule restarts from now.
            self.next_sample_ms[window_index] = now_ms.saturating_add(window.every_ms);
            for item in self.items.iter_mut().flat_map(HashMap::values_mut) {
                item.sample(window_index, now_ms);
            }
            sampled = true;
        }
        if sampled {
            let before = self.item_count;
            for items in &mut self.items {
                items.retain(|_, item| now_ms - item.last_add_ms <= STATS_ITEM_IDLE_MS);
            }
            self.item_count = self.items.iter().map(HashMap::len).sum();
            assert!(self.item_count <= before, "removing idle items added some");
        }
    }

    /// Item (`name`, `key`)'s figures, if this table holds it.
    pub fn figures(&self, name: StatsName, key: &str) -> Option<ItemFigures> {
        self.items[name.index()].get(key).map(Item::figures)
    }

    /// The last minute's rate of item (`name`, `key`), 0 without it (Java's
    /// `tpsTopicPutNums`, `tpsGroupGetNums`).
    pub fn minute_tps(&self, name: StatsName, key: &str) -> f64 {
        self.figures(name, key).map_or(0.0, |f| f.minute.tps)
    }

    /// Items held.
    pub fn item_count(&self) -> usize {
        self.item_count
    }

    /// Increments dropped because the table was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: i64 = 1_700_000_000_000;

    #[test]
    fn names_round_trip_and_unknown_ones_are_none() {
        for name in StatsName::ALL {
            assert_eq!(StatsName::parse(name.as_str()), Some(name));
        }
        assert_eq!(StatsName::parse("GROUP_GET_LATENCY"), None);
        assert_eq!(StatsName::parse("topic_put_nums"), None);
        assert_eq!(group_key("t", "g"), "t@g");
        let mut table = StatsTable::new(START);
        table.add_for_group(StatsName::GroupGetSize, "t", "g", 3, START);
        table.add_for_group(StatsName::GroupGetSize, "t", "g", 4, START);
        assert_eq!(table.items[StatsName::GroupGetSize.index()]["t@g"].value, 7);
        assert_eq!(table.item_count(), 1);
    }

    #[test]
    fn a_first_sampling_counts_from_a_zero_sample_one_period_back() {
        let mut table = StatsTable::new(START);
        table.add(StatsName::TopicPutNums, "t", 30, START + 2_000);
        table.add(StatsName::TopicPutNums, "t", 10, START + 3_000);
        // Not sampled yet: zeros.
        let before = table.figures(StatsName::TopicPutNums, "t").unwrap();
        assert_eq!(before, ItemFigures::default());
        // Not due yet: nothing changes.
        table.sample(START + 9_999);
        assert_eq!(table.figures(StatsName::TopicPutNums, "t").unwrap(), before);
        table.sample(START + 10_000);
        let f = table.figures(StatsName::TopicPutNums, "t").unwrap();
        assert_eq!(f.minute.sum, 40);
        assert_eq!(f.minute.times, 2);
        assert!((f.minute.tps - 4.0).abs() < 1e-9, "{}", f.minute.tps);
        assert!((f.minute.avgpt() - 20.0).abs() < 1e-9);
        // The hour and day windows have not sampled yet.
        assert_eq!(f.hour, WindowFigures::default());
        assert_eq!(f.day, WindowFigures::default());
        assert_eq!(table.figures(StatsName::TopicPutSize, "t"), None);
        assert_eq!(table.figures(StatsName::TopicPutNums, "u"), None);
        // An item created after a sampling waits for the next one.
        table.add(StatsName::TopicPutNums, "late", 5, START + 11_000);
        let late = table.figures(StatsName::TopicPutNums, "late").unwrap();
        assert_eq!(late, ItemFigures::default());
        table.sample(START + 20_000);
        let late = table.figures(StatsName::TopicPutNums, "late").unwrap();
        assert_eq!((late.minute.sum, late.minute.times), (5, 1));
    }

    #[test]
    fn a_clock_stepping_back_restarts_the_windows() {
        let mut table = StatsTable::new(START);
        table.add(StatsName::GroupGetNums, "t@g", 5, START + 1_000);
        table.sample(START + 10_000);
        table.add(StatsName::GroupGetNums, "t@g", 7, START + 11_000);
        // As if the clock stepped back across the schedule: a sampling at an
        // earlier time than the window's newest starts the window again
        // rather than leaving its times going back.
        table.next_sample_ms = [START; 3];
        table.sample(START + 5_000);
        let minute = table
            .figures(StatsName::GroupGetNums, "t@g")
            .unwrap()
            .minute;
        assert_eq!((minute.sum, minute.times), (12, 2));
        assert!((minute.tps - 1.2).abs() < 1e-9, "{}", minute.tps);
    }

    #[test]
    fn the_minute_window_keeps_seven_samples() {
        let mut table = StatsTable::new(START);
        table.add(StatsName::TopicPutNums, "t", 0, START);
        for second in 1..=12 {
            let now = START + second * 10_000;
            table.add(StatsName::TopicPutNums, "t", 100, now - 1);
            table.sample(now);
        }
        // Seven samples, 60 s, 600 messages.
        let minute = table.figures(StatsName::TopicPutNums, "t").unwrap().minute;
        assert_eq!(minute.sum, 600);
        assert_eq!(minute.times, 6);
        assert!((minute.tps - 10.0).abs() < 1e-9);
        let item = &table.items[StatsName::TopicPutNums.index()]["t"];
        assert_eq!(item.windows[0].len(), 7);
    }

    #[test]
    fn hour_and_day_windows_sample_at_their_periods() {
        let mut table = StatsTable::new(START);
        table.add(StatsName::TopicPutSize, "t", 0, START);
        let mut now = START;
        for _ in 0..(26 * 6) {
            now += 600_000;
            table.add(StatsName::TopicPutSize, "t", 1_000, now - 1);
            table.sample(now);
        }
        let f = table.figures(StatsName::TopicPutSize, "t").unwrap();
        // Hour: 7 samples 10 min apart, 6 increments of 1,000 between them.
        assert_eq!(f.hour.sum, 6_000);
        assert!((f.hour.tps - 6_000.0 / 3_600.0).abs() < 1e-9);
        // Day: 25 samples an hour apart.
        assert_eq!(f.day.sum, 24 * 6 * 1_000);
        let item = &table.items[StatsName::TopicPutSize.index()]["t"];
        assert_eq!(item.windows.each_ref().map(VecDeque::len), [7, 7, 25]);
    }

    #[test]
    fn idle_items_are_removed_and_the_table_has_a_bound() {
        let mut table = StatsTable::new(START);
        table.add(StatsName::BrokerPutNums, "cluster", 1, START);
        table.add(StatsName::TopicPutNums, "busy", 1, START);
        let mut now = START;
        while now - START <= STATS_ITEM_IDLE_MS {
            now += 3_600_000;
            table.add(StatsName::TopicPutNums, "busy", 1, now - 1);
            table.sample(now);
        }
        assert_eq!(table.figures(StatsName::BrokerPutNums, "cluster"), None);
        assert!(table.figures(StatsName::TopicPutNums, "busy").is_some());
        assert_eq!(table.item_count(), 1);

        for index in 1..STATS_ITEM_COUNT_MAX {
            table.add(StatsName::TopicPutNums, &format!("t{index}"), 1, now);
        }
        assert_eq!(table.item_count(), STATS_ITEM_COUNT_MAX);
        table.add(StatsName::GroupGetNums, "one@more", 1, now);
        table.add(StatsName::TopicPutNums, "busy", 1, now);
        assert_eq!(table.item_count(), STATS_ITEM_COUNT_MAX);
        assert_eq!(table.dropped(), 1);
        assert_eq!(table.figures(StatsName::GroupGetNums, "one@more"), None);
    }

    #[test]
    fn parts_of_one_item_merge_by_adding() {
        let a = ItemFigures {
            minute: WindowFigures {
                sum: 60,
                tps: 1.0,
                times: 6,
            },
            ..ItemFigures::default()
        };
        let b = ItemFigures {
            minute: WindowFigures {
                sum: 120,
                tps: 2.0,
                times: 3,
            },
            ..ItemFigures::default()
        };
        let mut merged = a;
        merged.merge(&b);
        assert_eq!(merged.minute.sum, 180);
        assert_eq!(merged.minute.times, 9);
        assert!((merged.minute.tps - 3.0).abs() < 1e-9);
        assert!((merged.minute.avgpt() - 20.0).abs() < 1e-9);
        assert_eq!(merged.day.avgpt(), 0.0);
    }
}
