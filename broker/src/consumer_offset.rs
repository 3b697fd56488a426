//! Committed consumer offsets (`ConsumerOffsetManager` in Java):
//! QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), offsets
//! committed by pulls, removal when a topic or group goes away, and
//! `config/consumerOffset.json`.
//!
//! Offsets belong to the shard that owns the queue (design.md, Shards), so
//! every shard may hold a [`ConsumerOffsetTable`] for its own queues:
//! [`ConsumerOffsetTable::load`] keeps only the queues a predicate accepts,
//! and [`ConsumerOffsetTable::export_into`] merges a shard's offsets into the
//! one file all shards share. A single-shard broker just uses
//! [`ConsumerOffsetTable::encode_file`]. The key and the file (TABs shown as spaces):
//!
//! ```text
//! key "topic@group" → queue id → next offset to consume
//!
//! {
//!     "dataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},
//!     "offsetTable":{
//!         "TopicTest@g1":{0:250,1:248
//!         }
//!     }
//! }
//! ```
//!
//! Integer keys are unquoted, as fastjson writes them. Commits only mark the
//! table dirty; the caller writes the file every
//! [`OFFSET_PERSIST_INTERVAL_MS`] when [`ConsumerOffsetTable::persist_due`]
//! says so, and on shutdown.
//!
//! # Invariants
//!
//! - `dirty` is set by every change and cleared only by `mark_persisted`.
//! - The data version's counter grows by one every
//!   [`OFFSET_VERSION_STEP`] commits (Java's
//!   `consumerOffsetUpdateVersionStep`), never otherwise.

use std::collections::BTreeMap;

use bytes::Bytes;
use ringmq_protocol::code::response_code;
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::{
    QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ringmq_protocol::json::{ConsumerOffsetFile, DataVersion, JsonError, JsonStyle};

use crate::subscription_group::SubscriptionGroupSnapshot;
use crate::topic_config::TopicConfigSnapshot;

/// Path of the consumer offset file under the store root.
pub const CONSUMER_OFFSET_FILE_PATH: &str = "config/consumerOffset.json";

/// How often dirty offsets are written (`flushConsumerOffsetInterval`).
pub const OFFSET_PERSIST_INTERVAL_MS: i64 = 5_000;

/// Commits per data version bump (`consumerOffsetUpdateVersionStep`).
pub const OFFSET_VERSION_STEP: u64 = 500;

/// Separator of the `topic@group` key.
pub const TOPIC_GROUP_SEPARATOR: char = '@';

/// QUERY_NOT_FOUND remark when the client asked not to start from zero.
pub const REMARK_NOT_FOUND_NO_ZERO: &str =
    "Not found, do not set to zero, maybe this group boot first";
/// QUERY_NOT_FOUND remark when the queue no longer starts in memory at 0.
pub const REMARK_NOT_FOUND: &str =
    "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first";

/// The `topic@group` key of the offset table.
pub fn offset_key(topic: &str, group: &str) -> String {
    let mut key = String::with_capacity(topic.len() + 1 + group.len());
    key.push_str(topic);
    key.push(TOPIC_GROUP_SEPARATOR);
    key.push_str(group);
    key
}

/// Splits a `topic@group` key; `None` for a key without the separator.
pub fn split_offset_key(key: &str) -> Option<(&str, &str)> {
    key.split_once(TOPIC_GROUP_SEPARATOR)
}

/// The committed offsets of one shard's queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerOffsetTable {
    offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    /// Offsets reset by INVOKE_BROKER_TO_RESET_OFFSET and not yet handed to
    /// the group's next pull of the queue (`topic@group` → queue → offset);
    /// memory only, as Java's `resetOffsetTable`.
    resets: BTreeMap<String, BTreeMap<i32, i64>>,
    data_version: DataVersion,
    commits_since_version: u64,
    dirty: bool,
    last_persist_ms: i64,
}

impl ConsumerOffsetTable {
    /// An empty table; the persist interval counts from `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self {
            offsets: BTreeMap::new(),
            resets: BTreeMap::new(),
            data_version: DataVersion {
                timestamp: now_ms,
                counter: 0,
                state_version: 0,
            },
            commits_since_version: 0,
            dirty: false,
            last_persist_ms: now_ms,
        }
    }

    /// The committed offset of (group, topic, queue), if any.
    pub fn query(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.offsets
            .get(&offset_key(topic, group))
            .and_then(|queues| queues.get(&queue_id))
            .copied()
    }

    /// The committed offsets of `group` on `topic`, by queue id.
    pub fn offsets_of(&self, group: &str, topic: &str) -> Option<&BTreeMap<i32, i64>> {
        self.offsets.get(&offset_key(topic, group))
    }

    /// Every `topic@group` key of the table, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.offsets.keys().map(String::as_str)
    }

    /// Topics `group` has offsets for, sorted.
    pub fn topics_of_group(&self, group: &str) -> Vec<&str> {
        self.offsets
            .keys()
            .filter_map(|key| split_offset_key(key))
            .filter(|(_, g)| *g == group)
            .map(|(topic, _)| topic)
            .collect()
    }

    /// Groups with offsets on `topic`, sorted.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<&str> {
        self.offsets
            .keys()
            .filter_map(|key| split_offset_key(key))
            .filter(|(t, _)| *t == topic)
            .map(|(_, group)| group)
            .collect()
    }

    /// Stores `offset` for (group, topic, queue) (Java's `commitOffset`).
    /// An offset lower than the stored one is stored too: a consumer that
    /// reset its offset means it.
    pub fn commit(&mut self, group: &str, topic: &str, queue_id: i32, offset: i64, now_ms: i64) {
        let key = offset_key(topic, group);
        self.offsets
            .entry(key)
            .or_default()
            .insert(queue_id, offset);
        self.dirty = true;
        self.commits_since_version += 1;
        if self.commits_since_version >= OFFSET_VERSION_STEP {
            self.commits_since_version = 0;
            self.data_version.counter += 1;
            self.data_version.timestamp = now_ms;
        }
    }

    /// The commit a pull carries (`COMMIT_OFFSET` sys-flag bit, first
    /// processing, master only — the pull handler decides those); ignored
    /// while a reset of the queue waits for the group's next pull.
    pub fn commit_from_pull(
        &mut self,
        group: &str,
        topic: &str,
        queue_id: i32,
        commit_offset: i64,
        now_ms: i64,
    ) {
        if !self.reset_pending(group, topic, queue_id) {
            self.commit(group, topic, queue_id, commit_offset, now_ms);
        }
    }

    /// Resets (group, topic, queue) to `offset` (INVOKE_BROKER_TO_RESET_OFFSET,
    /// Java 5.x's server-side reset): the offset is stored at once and kept
    /// for the group's next pull of the queue ([`Self::take_reset`]), which
    /// tells the consumer to move there. Until then the group's commits of
    /// the queue are ignored: they come from consumers still reading from
    /// before the reset.
    pub fn assign_reset(
        &mut self,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
        now_ms: i64,
    ) {
        self.commit(group, topic, queue_id, offset, now_ms);
        self.resets
            .entry(offset_key(topic, group))
            .or_default()
            .insert(queue_id, offset);
    }

    /// The reset waiting for the group's next pull of the queue, removed.
    pub fn take_reset(&mut self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        let key = offset_key(topic, group);
        let queues = self.resets.get_mut(&key)?;
        let offset = queues.remove(&queue_id);
        if queues.is_empty() {
            self.resets.remove(&key);
        }
        offset
    }

    /// Whether a reset of the queue waits for the group's next pull.
    pub fn reset_pending(&self, group: &str, topic: &str, queue_id: i32) -> bool {
        self.resets
            .get(&offset_key(topic, group))
            .is_some_and(|queues| queues.contains_key(&queue_id))
    }

    /// Replaces `dest`'s offsets of `topic` with a copy of `src`'s
    /// (CLONE_GROUP_OFFSET, Java's `cloneOffset`); nothing when `src` has
    /// none. Returns how many queues were copied.
    pub fn clone_offsets(&mut self, src: &str, dest: &str, topic: &str, now_ms: i64) -> usize {
        let Some(queues) = self.offsets.get(&offset_key(topic, src)).cloned() else {
            return 0;
        };
        let copied = queues.len();
        self.offsets.insert(offset_key(topic, dest), queues);
        self.dirty = true;
        self.data_version.counter += 1;
        self.data_version.timestamp = now_ms;
        copied
    }

    /// Removes every group's offsets of `topic` (DELETE_TOPIC_IN_BROKER);
    /// returns how many `topic@group` entries went.
    pub fn remove_topic(&mut self, topic: &str) -> usize {
        self.remove_where(|t, _| t == topic)
    }

    /// Removes every topic's offsets of `group` (DELETE_SUBSCRIPTIONGROUP
    /// with `cleanOffset`); returns how many entries went.
    pub fn remove_group(&mut self, group: &str) -> usize {
        self.remove_where(|_, g| g == group)
    }

    fn remove_where(&mut self, doomed: impl Fn(&str, &str) -> bool) -> usize {
        self.resets.retain(|key, _| match split_offset_key(key) {
            Some((topic, group)) => !doomed(topic, group),
            None => true,
        });
        let before = self.offsets.len();
        self.offsets.retain(|key, _| match split_offset_key(key) {
            Some((topic, group)) => !doomed(topic, group),
            None => true,
        });
        let removed = before - self.offsets.len();
        if removed > 0 {
            self.dirty = true;
        }
        removed
    }

    /// QUERY_CONSUMER_OFFSET (14), reference 2.3.14: a stored offset is
    /// answered; otherwise QUERY_NOT_FOUND, unless the client allows zero and
    /// `queue_starts_in_memory(topic, queue_id)` says the queue's min offset
    /// is ≤ 0 and its message at offset 0 is still in memory, which answers
    /// offset 0 (a new group reads a new topic from its start).
    pub fn query_consumer_offset(
        &self,
        request: &RemotingCommand,
        queue_starts_in_memory: impl FnOnce(&str, i32) -> bool,
    ) -> RemotingCommand {
        let opaque = request.opaque;
        let header: QueryConsumerOffsetRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => {
                return RemotingCommand::new_response(
                    response_code::SYSTEM_ERROR,
                    opaque,
                    Some(err.to_string()),
                );
            }
        };
        let found = |offset: i64| {
            RemotingCommand::new_response(response_code::SUCCESS, opaque, None)
                .with_custom_header(&QueryConsumerOffsetResponseHeader { offset })
        };
        let not_found = |remark: &str| {
            RemotingCommand::new_response(
                response_code::QUERY_NOT_FOUND,
                opaque,
                Some(remark.to_owned()),
            )
        };
        match self.query(&header.consumer_group, &header.topic, header.queue_id) {
            Some(offset) if offset >= 0 => found(offset),
            _ if header.set_zero_if_not_found == Some(false) => not_found(REMARK_NOT_FOUND_NO_ZERO),
            _ if queue_starts_in_memory(&header.topic, header.queue_id) => found(0),
            _ => not_found(REMARK_NOT_FOUND),
        }
    }

    /// UPDATE_CONSUMER_OFFSET (15), as Java 5.x: the group must exist
    /// (SUBSCRIPTION_GROUP_NOT_EXIST) and the topic too (TOPIC_NOT_EXIST);
    /// a commit of a queue whose reset waits for a pull is not stored.
    /// The request is usually one-way; the caller drops the response then.
    pub fn update_consumer_offset(
        &mut self,
        request: &RemotingCommand,
        topics: &TopicConfigSnapshot,
        groups: &SubscriptionGroupSnapshot,
        now_ms: i64,
    ) -> RemotingCommand {
        let opaque = request.opaque;
        let header: UpdateConsumerOffsetRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => {
                return RemotingCommand::new_response(
                    response_code::SYSTEM_ERROR,
                    opaque,
                    Some(err.to_string()),
                );
            }
        };
        if !groups.contains(&header.consumer_group) {
            return RemotingCommand::new_response(
                response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
                opaque,
                Some(format!("Group {} not exist!", header.consumer_group)),
            );
        }
        if !topics.contains(&header.topic) {
            return RemotingCommand::new_response(
                response_code::TOPIC_NOT_EXIST,
                opaque,
                Some(format!("Topic {} not exist!", header.topic)),
            );
        }
        // Java 5.x skips the commit while a reset waits, and says SUCCESS.
        if !self.reset_pending(&header.consumer_group, &header.topic, header.queue_id) {
            self.commit(
                &header.consumer_group,
                &header.topic,
                header.queue_id,
                header.commit_offset,
                now_ms,
            );
        }
        RemotingCommand::new_response(response_code::SUCCESS, opaque, None)
    }

    /// GET_ALL_CONSUMER_OFFSET (43): this table as the file's JSON, compact.
    pub fn get_all_consumer_offset(&self, request: &RemotingCommand) -> RemotingCommand {
        let mut body = Vec::new();
        self.to_file().to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
            .with_body(Bytes::from(body))
    }

    /// Whether anything changed since the last persist.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Whether the file should be written now: dirty, and
    /// [`OFFSET_PERSIST_INTERVAL_MS`] since the last write.
    pub fn persist_due(&self, now_ms: i64) -> bool {
        self.dirty && now_ms.saturating_sub(self.last_persist_ms) >= OFFSET_PERSIST_INTERVAL_MS
    }

    /// Records that the content exported before `now_ms` is on disk.
    pub fn mark_persisted(&mut self, now_ms: i64) {
        self.dirty = false;
        self.last_persist_ms = now_ms;
    }

    /// The data version.
    pub fn data_version(&self) -> DataVersion {
        self.data_version
    }

    /// This table as file content.
    pub fn to_file(&self) -> ConsumerOffsetFile {
        ConsumerOffsetFile {
            offset_table: self.offsets.clone(),
            data_version: Some(self.data_version),
        }
    }

    /// Merges this table's offsets into `file` (several shards write one
    /// file); the file keeps the newest data version seen.
    pub fn export_into(&self, file: &mut ConsumerOffsetFile) {
        for (key, queues) in &self.offsets {
            file.offset_table
                .entry(key.clone())
                .or_default()
                .extend(queues.iter().map(|(&queue_id, &offset)| (queue_id, offset)));
        }
        let newer = match file.data_version {
            Some(version) => {
                (self.data_version.counter, self.data_version.timestamp)
                    > (version.counter, version.timestamp)
            }
            None => true,
        };
        if newer {
            file.data_version = Some(self.data_version);
        }
    }

    /// The bytes of `consumerOffset.json` for this table alone, pretty as
    /// Java writes it.
    pub fn encode_file(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.to_file().write_pretty(&mut out);
        out
    }

    /// A slave takes its master's offsets of the queues `takes` accepts
    /// (by `topic@group` key and queue id; Java's
    /// `SlaveSynchronize.syncConsumerOffset`): each one the master has
    /// replaces the slave's; offsets only the slave has stay. Returns how
    /// many changed (the table is dirty when any did).
    pub fn take_from_master(
        &mut self,
        master: &ConsumerOffsetFile,
        takes: impl Fn(&str, i32) -> bool,
    ) -> usize {
        let mut changed = 0;
        for (key, queues) in &master.offset_table {
            let mut owned = queues.iter().filter(|(q, _)| takes(key, **q)).peekable();
            if owned.peek().is_none() {
                continue;
            }
            let entry = self.offsets.entry(key.clone()).or_default();
            for (&queue_id, &offset) in owned {
                if entry.insert(queue_id, offset) != Some(offset) {
                    changed += 1;
                }
            }
        }
        if changed > 0 {
            self.dirty = true;
            if let Some(version) = master.data_version {
                self.data_version = version;
            }
        }
        changed
    }

    /// Loads `consumerOffset.json`, keeping the queues `owns_queue` accepts
    /// (this shard's). Loading does not make the table dirty.
    ///
    /// # Errors
    ///
    /// The file does not parse; the table is unchanged then.
    pub fn load(
        &mut self,
        content: &[u8],
        owns_queue: impl Fn(i32) -> bool,
    ) -> Result<(), JsonError> {
        let file = ConsumerOffsetFile::from_json(content)?;
        for (key, queues) in file.offset_table {
            let mine: BTreeMap<i32, i64> = queues
                .into_iter()
                .filter(|(queue_id, _)| owns_queue(*queue_id))
                .collect();
            if !mine.is_empty() {
                self.offsets.entry(key).or_default().extend(mine);
            }
        }
        if let Some(version) = file.data_version {
            self.data_version = version;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subscription_group::SubscriptionGroupTable;
    use crate::topic_config::{TopicConfigSettings, TopicConfigTable};
    use ringmq_protocol::code::request_code;
    use ringmq_protocol::command::ExtFields;
    use ringmq_protocol::header::CustomHeader;

    const NOW: i64 = 1_700_000_000_000;

    fn query_request(
        group: &str,
        topic: &str,
        queue_id: i32,
        zero: Option<bool>,
    ) -> RemotingCommand {
        let mut request = RemotingCommand::new_request(
            request_code::QUERY_CONSUMER_OFFSET,
            QueryConsumerOffsetRequestHeader {
                consumer_group: group.to_owned(),
                topic: topic.to_owned(),
                queue_id,
                set_zero_if_not_found: zero,
                broker_name: None,
            }
            .to_ext_fields(),
        );
        request.opaque = 5;
        request
    }

    fn update_request(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
        RemotingCommand::new_request(
            request_code::UPDATE_CONSUMER_OFFSET,
            UpdateConsumerOffsetRequestHeader {
                consumer_group: group.to_owned(),
                topic: topic.to_owned(),
                queue_id,
                commit_offset: offset,
                broker_name: None,
            }
            .to_ext_fields(),
        )
    }

    fn offset_of(response: &RemotingCommand) -> i64 {
        response
            .decode_custom_header::<QueryConsumerOffsetResponseHeader>()
            .unwrap()
            .offset
    }

    #[test]
    fn query_answers_a_stored_offset() {
        let mut table = ConsumerOffsetTable::new(NOW);
        table.commit("g", "T", 1, 42, NOW);
        let response = table.query_consumer_offset(&query_request("g", "T", 1, None), |_, _| {
            panic!("the store is not asked when an offset exists")
        });
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(response.opaque, 5);
        assert_eq!(offset_of(&response), 42);
    }

    #[test]
    fn query_answers_zero_for_a_new_group_when_the_queue_starts_in_memory() {
        let table = ConsumerOffsetTable::new(NOW);
        let mut asked = None;
        let response = table.query_consumer_offset(&query_request("g", "T", 3, None), |t, q| {
            asked = Some((t.to_owned(), q));
            true
        });
        assert_eq!(asked, Some(("T".to_owned(), 3)));
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(offset_of(&response), 0);
        let response =
            table.query_consumer_offset(&query_request("g", "T", 3, Some(true)), |_, _| true);
        assert_eq!(offset_of(&response), 0);
    }

    #[test]
    fn query_is_not_found_when_zero_is_refused_or_the_queue_start_is_gone() {
        let table = ConsumerOffsetTable::new(NOW);
        let response =
            table.query_consumer_offset(&query_request("g", "T", 0, Some(false)), |_, _| true);
        assert_eq!(response.code, response_code::QUERY_NOT_FOUND);
        assert_eq!(response.remark.as_deref(), Some(REMARK_NOT_FOUND_NO_ZERO));
        let response = table.query_consumer_offset(&query_request("g", "T", 0, None), |_, _| false);
        assert_eq!(response.code, response_code::QUERY_NOT_FOUND);
        assert_eq!(response.remark.as_deref(), Some(REMARK_NOT_FOUND));
        assert!(!response.ext_fields.contains_key("offset"));
    }

    #[test]
    fn query_with_a_missing_field_is_a_system_error() {
        let table = ConsumerOffsetTable::new(NOW);
        let request =
            RemotingCommand::new_request(request_code::QUERY_CONSUMER_OFFSET, ExtFields::new());
        let response = table.query_consumer_offset(&request, |_, _| true);
        assert_eq!(response.code, response_code::SYSTEM_ERROR);
    }

    #[test]
    fn update_checks_group_and_topic_then_stores_and_marks_dirty() {
        let mut topics = TopicConfigTable::new(TopicConfigSettings::default(), NOW);
        topics.ensure_retry_topic("g", 1, false, NOW);
        let mut groups = SubscriptionGroupTable::new(true, NOW);
        groups.find_or_create("g", NOW);
        let (topics, groups) = (topics.snapshot(), groups.snapshot());
        let mut table = ConsumerOffsetTable::new(NOW);
        let response = table.update_consumer_offset(
            &update_request("nobody", "%RETRY%g", 0, 9),
            &topics,
            &groups,
            NOW,
        );
        assert_eq!(response.code, response_code::SUBSCRIPTION_GROUP_NOT_EXIST);
        assert_eq!(response.remark.as_deref(), Some("Group nobody not exist!"));
        let response =
            table.update_consumer_offset(&update_request("g", "Nope", 0, 9), &topics, &groups, NOW);
        assert_eq!(response.code, response_code::TOPIC_NOT_EXIST);
        assert_eq!(response.remark.as_deref(), Some("Topic Nope not exist!"));
        assert!(!table.is_dirty());
        let response = table.update_consumer_offset(
            &update_request("g", "%RETRY%g", 2, 9),
            &topics,
            &groups,
            NOW,
        );
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(table.query("g", "%RETRY%g", 2), Some(9));
        assert!(table.is_dirty());
    }

    #[test]
    fn a_reset_wins_over_commits_until_a_pull_takes_it() {
        let mut topics = TopicConfigTable::new(TopicConfigSettings::default(), NOW);
        topics.ensure_retry_topic("g", 1, false, NOW);
        let mut groups = SubscriptionGroupTable::new(true, NOW);
        groups.find_or_create("g", NOW);
        let (topics, groups) = (topics.snapshot(), groups.snapshot());
        let retry = "%RETRY%g";
        let mut table = ConsumerOffsetTable::new(NOW);
        table.commit("g", retry, 0, 50, NOW);
        table.assign_reset("g", retry, 0, 7, NOW);
        assert_eq!(table.query("g", retry, 0), Some(7), "stored at once");
        // Commits of a consumer still reading from before the reset.
        table.commit_from_pull("g", retry, 0, 51, NOW);
        let response =
            table.update_consumer_offset(&update_request("g", retry, 0, 52), &topics, &groups, NOW);
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(table.query("g", retry, 0), Some(7));
        // Other queues and groups are not held back.
        table.commit_from_pull("g", retry, 1, 3, NOW);
        table.commit_from_pull("h", retry, 0, 4, NOW);
        assert_eq!(table.query("g", retry, 1), Some(3));
        assert_eq!(table.query("h", retry, 0), Some(4));
        assert!(table.reset_pending("g", retry, 0));
        assert_eq!(table.take_reset("g", retry, 0), Some(7));
        assert_eq!(table.take_reset("g", retry, 0), None, "taken once");
        table.commit_from_pull("g", retry, 0, 8, NOW);
        assert_eq!(table.query("g", retry, 0), Some(8), "commits count again");
        // Deleting the group drops a reset with its offsets.
        table.assign_reset("g", retry, 1, 0, NOW);
        table.remove_group("g");
        assert!(!table.reset_pending("g", retry, 1));
    }

    #[test]
    fn cloning_replaces_the_destination_groups_offsets_of_the_topic_only() {
        let mut table = ConsumerOffsetTable::new(NOW);
        table.commit("src", "T", 0, 10, NOW);
        table.commit("src", "T", 2, 12, NOW);
        table.commit("src", "U", 0, 99, NOW);
        table.commit("dest", "T", 4, 40, NOW);
        table.commit("dest", "U", 0, 1, NOW);
        assert_eq!(table.clone_offsets("src", "dest", "T", NOW + 1), 2);
        assert_eq!(table.offsets_of("dest", "T"), table.offsets_of("src", "T"));
        assert_eq!(table.query("dest", "T", 4), None, "replaced, not merged");
        assert_eq!(
            table.query("dest", "U", 0),
            Some(1),
            "other topics untouched"
        );
        assert_eq!(table.clone_offsets("nobody", "dest", "U", NOW), 0);
        assert_eq!(table.query("dest", "U", 0), Some(1));
        assert!(table.is_dirty());
    }

    #[test]
    fn lower_offsets_replace_higher_ones() {
        let mut table = ConsumerOffsetTable::new(NOW);
        table.commit_from_pull("g", "T", 0, 100, NOW);
        table.commit_from_pull("g", "T", 0, 10, NOW);
        assert_eq!(table.query("g", "T", 0), Some(10));
    }

    #[test]
    fn persist_is_due_only_when_dirty_and_the_interval_passed() {
        let mut table = ConsumerOffsetTable::new(NOW);
        assert!(!table.persist_due(NOW + 10_000));
        table.commit("g", "T", 0, 1, NOW + 1);
        assert!(!table.persist_due(NOW + 4_999));
        assert!(table.persist_due(NOW + 5_000));
        table.mark_persisted(NOW + 5_000);
        assert!(!table.is_dirty());
        table.commit("g", "T", 0, 2, NOW + 6_000);
        assert!(!table.persist_due(NOW + 9_999));
        assert!(table.persist_due(NOW + 10_000));
    }

    #[test]
    fn data_version_moves_once_per_version_step_of_commits() {
        let mut table = ConsumerOffsetTable::new(NOW);
        for i in 0..OFFSET_VERSION_STEP - 1 {
            table.commit("g", "T", 0, i64::try_from(i).unwrap(), NOW + 1);
        }
        assert_eq!(table.data_version().counter, 0);
        table.commit("g", "T", 0, 0, NOW + 2);
        assert_eq!(table.data_version().counter, 1);
        assert_eq!(table.data_version().timestamp, NOW + 2);
    }

    #[test]
    fn removing_a_topic_or_group_drops_only_its_entries() {
        let mut table = ConsumerOffsetTable::new(NOW);
        table.commit("g1", "A", 0, 1, NOW);
        table.commit("g2", "A", 0, 1, NOW);
        table.commit("g1", "B", 0, 1, NOW);
        table.mark_persisted(NOW);
        assert_eq!(table.groups_of_topic("A"), ["g1", "g2"]);
        assert_eq!(table.topics_of_group("g1"), ["A", "B"]);
        assert_eq!(table.remove_topic("A"), 2);
        assert!(table.is_dirty());
        assert_eq!(table.query("g1", "B", 0), Some(1));
        assert_eq!(table.remove_group("g1"), 1);
        assert_eq!(table.remove_group("g1"), 0);
        assert!(table.offsets_of("g1", "B").is_none());
    }

    #[test]
    fn the_file_has_unquoted_queue_keys_and_loads_back_per_shard() {
        let mut table = ConsumerOffsetTable::new(NOW);
        table.commit("g", "T", 0, 250, NOW);
        table.commit("g", "T", 1, 248, NOW);
        let file = table.encode_file();
        let text = String::from_utf8(file.clone()).unwrap();
        assert!(text.contains("\"T@g\":{0:250,1:248"), "{text}");
        let mut all = ConsumerOffsetTable::new(NOW);
        all.load(&file, |_| true).unwrap();
        assert_eq!(all.query("g", "T", 1), Some(248));
        assert!(!all.is_dirty());
        let mut odd = ConsumerOffsetTable::new(NOW);
        odd.load(&file, |queue_id| queue_id % 2 == 1).unwrap();
        assert_eq!(odd.query("g", "T", 0), None);
        assert_eq!(odd.query("g", "T", 1), Some(248));
        assert!(odd.load(b"{\"offsetTable\":[]}", |_| true).is_err());
    }

    #[test]
    fn shards_export_into_one_file() {
        let mut even = ConsumerOffsetTable::new(NOW);
        even.commit("g", "T", 0, 5, NOW);
        let mut odd = ConsumerOffsetTable::new(NOW);
        odd.commit("g", "T", 1, 7, NOW);
        odd.commit("h", "T", 1, 3, NOW);
        let mut file = ConsumerOffsetFile::default();
        even.export_into(&mut file);
        odd.export_into(&mut file);
        assert_eq!(file.offset_table["T@g"], BTreeMap::from([(0, 5), (1, 7)]));
        assert_eq!(file.offset_table["T@h"], BTreeMap::from([(1, 3)]));
        assert!(file.data_version.is_some());
    }

    #[test]
    fn get_all_consumer_offset_returns_the_table_as_json() {
        let mut table = ConsumerOffsetTable::new(NOW);
        table.commit("g", "T", 0, 5, NOW);
        let request =
            RemotingCommand::new_request(request_code::GET_ALL_CONSUMER_OFFSET, ExtFields::new());
        let response = table.get_all_consumer_offset(&request);
        assert_eq!(response.code, response_code::SUCCESS);
        let file = ConsumerOffsetFile::from_json(response.body_bytes()).unwrap();
        assert_eq!(file.offset_table, table.offsets);
    }

    #[test]
    fn offset_keys_split_at_the_separator() {
        assert_eq!(offset_key("T", "g"), "T@g");
        assert_eq!(split_offset_key("T@g"), Some(("T", "g")));
        assert_eq!(split_offset_key("broken"), None);
    }

    #[test]
    fn a_slave_takes_its_masters_offsets_of_its_own_queues() {
        let mut master = ConsumerOffsetTable::new(NOW);
        master.commit("g", "t", 0, 40, NOW);
        master.commit("g", "t", 1, 41, NOW);
        master.commit("g", "t", 2, 42, NOW);
        let mut slave = ConsumerOffsetTable::new(NOW);
        slave.commit("g", "t", 0, 7, NOW);
        slave.commit("only-here", "t", 0, 9, NOW);
        slave.mark_persisted(NOW);
        master.commit("internal", "t", 0, 5, NOW);
        // The slave's shard owns the even queues, and leaves out a group.
        let changed = slave.take_from_master(&master.to_file(), |key, queue_id| {
            queue_id % 2 == 0 && key != "t@internal"
        });
        assert_eq!(changed, 2);
        assert_eq!(slave.query("internal", "t", 0), None, "left out");
        assert!(slave.is_dirty());
        assert_eq!(slave.query("g", "t", 0), Some(40));
        assert_eq!(slave.query("g", "t", 1), None, "not this shard's queue");
        assert_eq!(slave.query("g", "t", 2), Some(42));
        assert_eq!(slave.query("only-here", "t", 0), Some(9));
        slave.mark_persisted(NOW);
        assert_eq!(
            slave.take_from_master(&master.to_file(), |key, q| q % 2 == 0
                && key != "t@internal"),
            0
        );
        assert!(!slave.is_dirty(), "nothing new, nothing to write");
    }
}
