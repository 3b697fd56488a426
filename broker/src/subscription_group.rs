//! Consumer group configurations (`SubscriptionGroupManager` in Java): the
//! system groups, auto-creation on first use, the admin commands, and
//! `config/subscriptionGroup.json`.
//!
//! Like the topic table, one shard owns the [`SubscriptionGroupTable`] and
//! the others read an `Arc<SubscriptionGroupSnapshot>` that the table
//! replaces on every change (see `topic_config` for why a full rebuild is
//! fine). Each change bumps the [`DataVersion`] and returns
//! [`GroupTableChange`]; a non-empty change means "persist
//! `subscriptionGroup.json`". The file (TABs shown as spaces):
//!
//! ```text
//! {
//!     "dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000000},
//!     "forbiddenTable":{},
//!     "subscriptionGroupTable":{
//!         "g1":{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,...}
//!     }
//! }
//! ```
//!
//! # Invariants
//!
//! - The snapshot always equals the table (every mutation ends in
//!   `publish`).
//! - The data version's counter grows by exactly one per applied change.
//! - Groups created here passed [`validate_group_name`].

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::header::DeleteSubscriptionGroupRequestHeader;
use ringmq_protocol::json::{
    DataVersion, JsonError, JsonStyle, SubscriptionGroupConfig, SubscriptionGroupWrapper,
};

use crate::topic_config::has_only_name_chars;

/// Path of the subscription group file under the store root.
pub const SUBSCRIPTION_GROUP_FILE_PATH: &str = "config/subscriptionGroup.json";

/// Longest group name, so that `%RETRY%<group>` fits a topic name (reference
/// 5.1).
pub const GROUP_NAME_LEN_MAX: usize = 120;

/// Prefix of broker-internal consumer groups, created even without
/// auto-creation (`MixAll.CID_SYS_RMQ_TRANS`-style, `MixAll.isSysConsumerGroup`).
pub const SYS_CONSUMER_GROUP_PREFIX: &str = "CID_RMQ_SYS_";

/// Consumer groups Java's `SubscriptionGroupManager.init` creates.
pub const STARTUP_GROUPS: [&str; 8] = [
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
];

/// Every system group name (`MixAll`'s constants), producers included.
pub const SYSTEM_GROUPS: [&str; 14] = [
    "DEFAULT_PRODUCER",
    "DEFAULT_CONSUMER",
    "TOOLS_CONSUMER",
    "SCHEDULE_CONSUMER",
    "FILTERSRV_CONSUMER",
    "__MONITOR_CONSUMER",
    "CLIENT_INNER_PRODUCER",
    "SELF_TEST_P_GROUP",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_ONSAPI_PULL",
    "CID_RMQ_SYS_TRANS",
];

/// Remark for a blank group name.
pub const REMARK_GROUP_BLANK: &str = "The specified group is blank.";
/// Remark for a group name with characters outside `[%|a-zA-Z0-9_-]`.
pub const REMARK_GROUP_ILLEGAL_CHARS: &str =
    "The specified group contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$";
/// Remark for a group name over [`GROUP_NAME_LEN_MAX`].
pub const REMARK_GROUP_TOO_LONG: &str = "The specified group is longer than group max length.";

/// Checks a group name: not blank, characters `[%|a-zA-Z0-9_-]`, at most
/// [`GROUP_NAME_LEN_MAX`] bytes. The error is the INVALID_PARAMETER remark.
///
/// # Errors
///
/// The remark naming the rule broken.
pub fn validate_group_name(group: &str) -> Result<(), &'static str> {
    if group.trim().is_empty() {
        return Err(REMARK_GROUP_BLANK);
    }
    if !has_only_name_chars(group) {
        return Err(REMARK_GROUP_ILLEGAL_CHARS);
    }
    if group.len() > GROUP_NAME_LEN_MAX {
        return Err(REMARK_GROUP_TOO_LONG);
    }
    Ok(())
}

/// Whether `group` is one of the system groups.
pub fn is_system_group(group: &str) -> bool {
    SYSTEM_GROUPS.contains(&group) || group.starts_with(SYS_CONSUMER_GROUP_PREFIX)
}

/// What a change to the group table asks of the caller. Empty means nothing
/// changed; otherwise persist `subscriptionGroup.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupTableChange {
    /// Groups created or updated.
    pub updated: Vec<String>,
    /// Groups deleted.
    pub deleted: Vec<String>,
    /// Groups whose consumer offsets must be removed too
    /// (DELETE_SUBSCRIPTIONGROUP with `cleanOffset=true`).
    pub clean_offsets_of: Vec<String>,
}

impl GroupTableChange {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.updated.is_empty() && self.deleted.is_empty()
    }

    /// Whether `subscriptionGroup.json` must be written.
    pub fn needs_persist(&self) -> bool {
        !self.is_empty()
    }
}

/// The response to an admin command plus the change it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCommandOutcome {
    /// The response to write back.
    pub response: RemotingCommand,
    /// What changed.
    pub change: GroupTableChange,
}

impl GroupCommandOutcome {
    fn unchanged(response: RemotingCommand) -> Self {
        Self {
            response,
            change: GroupTableChange::default(),
        }
    }
}

/// An immutable view of the group table for any shard, with the
/// auto-creation setting so that readers can decide whether an unknown group
/// would be created.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionGroupSnapshot {
    data_version: DataVersion,
    auto_create_subscription_group: bool,
    groups: BTreeMap<String, SubscriptionGroupConfig>,
}

impl SubscriptionGroupSnapshot {
    /// The config of `group`.
    pub fn get(&self, group: &str) -> Option<&SubscriptionGroupConfig> {
        self.groups.get(group)
    }

    /// Whether `group` exists.
    pub fn contains(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Every group's name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }

    /// Whether an unknown, valid `group` would be auto-created on first use.
    pub fn would_auto_create(&self, group: &str) -> bool {
        (self.auto_create_subscription_group || group.starts_with(SYS_CONSUMER_GROUP_PREFIX))
            && validate_group_name(group).is_ok()
    }

    /// The data version this snapshot was taken at.
    pub fn data_version(&self) -> DataVersion {
        self.data_version
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// The owner's copy of every subscription group config.
#[derive(Debug)]
pub struct SubscriptionGroupTable {
    auto_create_subscription_group: bool,
    groups: BTreeMap<String, SubscriptionGroupConfig>,
    forbidden_table: BTreeMap<String, BTreeMap<String, i32>>,
    data_version: DataVersion,
    snapshot: Arc<SubscriptionGroupSnapshot>,
}

impl SubscriptionGroupTable {
    /// A table with Java's startup groups; `auto_create_subscription_group`
    /// is the broker's `autoCreateSubscriptionGroup` (default true).
    pub fn new(auto_create_subscription_group: bool, now_ms: i64) -> Self {
        let groups = STARTUP_GROUPS
            .iter()
            .map(|&name| (name.to_owned(), SubscriptionGroupConfig::new(name)))
            .collect();
        let mut table = Self {
            auto_create_subscription_group,
            groups,
            forbidden_table: BTreeMap::new(),
            data_version: DataVersion {
                timestamp: now_ms,
                counter: 0,
                state_version: 0,
            },
            snapshot: Arc::new(SubscriptionGroupSnapshot::default()),
        };
        table.publish();
        table
    }

    fn publish(&mut self) {
        self.snapshot = Arc::new(SubscriptionGroupSnapshot {
            data_version: self.data_version,
            auto_create_subscription_group: self.auto_create_subscription_group,
            groups: self.groups.clone(),
        });
    }

    fn next_version(&mut self, now_ms: i64) {
        self.data_version.counter += 1;
        self.data_version.timestamp = now_ms;
    }

    /// The current snapshot, to hand to the other shards.
    pub fn snapshot(&self) -> Arc<SubscriptionGroupSnapshot> {
        Arc::clone(&self.snapshot)
    }

    /// The config of `group`, without auto-creation.
    pub fn get(&self, group: &str) -> Option<&SubscriptionGroupConfig> {
        self.groups.get(group)
    }

    /// The current data version.
    pub fn data_version(&self) -> DataVersion {
        self.data_version
    }

    /// Java's `findSubscriptionGroupConfig`: the config of `group`, created
    /// with the defaults of reference 3.8 when absent and auto-creation is on
    /// (or the group is a `CID_RMQ_SYS_` group) and the name is valid.
    pub fn find_or_create(
        &mut self,
        group: &str,
        now_ms: i64,
    ) -> (Option<SubscriptionGroupConfig>, GroupTableChange) {
        if let Some(config) = self.groups.get(group) {
            return (Some(config.clone()), GroupTableChange::default());
        }
        if !self.snapshot.would_auto_create(group) {
            return (None, GroupTableChange::default());
        }
        let config = SubscriptionGroupConfig::new(group);
        let change = self.put(config.clone(), now_ms);
        (Some(config), change)
    }

    fn put(&mut self, config: SubscriptionGroupConfig, now_ms: i64) -> GroupTableChange {
        let name = config.group_name.clone();
        self.groups.insert(name.clone(), config);
        self.next_version(now_ms);
        self.publish();
        GroupTableChange {
            updated: vec![name],
            ..GroupTableChange::default()
        }
    }

    /// A slave takes its master's table whole, with its data version
    /// (Java's `SlaveSynchronize.syncSubscriptionGroupConfig`); empty change
    /// when the master's groups are what the table holds.
    pub fn replace_from_master(&mut self, master: &SubscriptionGroupWrapper) -> GroupTableChange {
        let forbidden = master.forbidden_table.clone().unwrap_or_default();
        if master.subscription_group_table == self.groups && forbidden == self.forbidden_table {
            return GroupTableChange::default();
        }
        let updated = master
            .subscription_group_table
            .iter()
            .filter(|(name, config)| self.groups.get(*name) != Some(*config))
            .map(|(name, _)| name.clone())
            .collect();
        let deleted = self
            .groups
            .keys()
            .filter(|name| !master.subscription_group_table.contains_key(*name))
            .cloned()
            .collect();
        self.groups = master.subscription_group_table.clone();
        self.forbidden_table = forbidden;
        self.data_version = master.data_version;
        self.publish();
        GroupTableChange {
            updated,
            deleted,
            clean_offsets_of: Vec::new(),
        }
    }

    /// Removes `group` and its forbidden entries; empty change if absent.
    pub fn delete(&mut self, group: &str, now_ms: i64) -> GroupTableChange {
        let removed = self.groups.remove(group).is_some();
        self.forbidden_table.remove(group);
        if !removed {
            return GroupTableChange::default();
        }
        self.next_version(now_ms);
        self.publish();
        GroupTableChange {
            deleted: vec![group.to_owned()],
            ..GroupTableChange::default()
        }
    }

    /// Serves UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) and DELETE_SUBSCRIPTIONGROUP
    /// (207); `None` for any other code.
    pub fn handle(
        &mut self,
        request: &RemotingCommand,
        now_ms: i64,
    ) -> Option<GroupCommandOutcome> {
        match request.code {
            request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => {
                Some(self.update_and_create(request, now_ms))
            }
            request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => {
                Some(GroupCommandOutcome::unchanged(self.get_all(request)))
            }
            request_code::DELETE_SUBSCRIPTIONGROUP => Some(self.delete_command(request, now_ms)),
            _ => None,
        }
    }

    /// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): the body is a
    /// `SubscriptionGroupConfig`. A missing body succeeds without a change (as
    /// Java, which skips a null config); a body that does not parse is
    /// SYSTEM_ERROR; a bad group name INVALID_PARAMETER. An identical config
    /// is a success without a change.
    pub fn update_and_create(
        &mut self,
        request: &RemotingCommand,
        now_ms: i64,
    ) -> GroupCommandOutcome {
        let opaque = request.opaque;
        let success = RemotingCommand::new_response(response_code::SUCCESS, opaque, None);
        let Some(body) = &request.body else {
            return GroupCommandOutcome::unchanged(success);
        };
        let config = match SubscriptionGroupConfig::from_json(body) {
            Ok(config) => config,
            Err(err) => {
                return GroupCommandOutcome::unchanged(RemotingCommand::new_response(
                    response_code::SYSTEM_ERROR,
                    opaque,
                    Some(format!("bad SubscriptionGroupConfig body: {err}")),
                ));
            }
        };
        if let Err(remark) = validate_group_name(&config.group_name) {
            return GroupCommandOutcome::unchanged(RemotingCommand::new_response(
                response_code::INVALID_PARAMETER,
                opaque,
                Some(remark.to_owned()),
            ));
        }
        if self.groups.get(&config.group_name) == Some(&config) {
            return GroupCommandOutcome::unchanged(success);
        }
        let change = self.put(config, now_ms);
        GroupCommandOutcome {
            response: success,
            change,
        }
    }

    /// DELETE_SUBSCRIPTIONGROUP (207): removes the group; with `cleanOffset`
    /// the change also names the group in `clean_offsets_of`.
    pub fn delete_command(
        &mut self,
        request: &RemotingCommand,
        now_ms: i64,
    ) -> GroupCommandOutcome {
        let opaque = request.opaque;
        let header: DeleteSubscriptionGroupRequestHeader = match request.decode_custom_header() {
            Ok(header) => header,
            Err(err) => {
                return GroupCommandOutcome::unchanged(RemotingCommand::new_response(
                    response_code::SYSTEM_ERROR,
                    opaque,
                    Some(err.to_string()),
                ));
            }
        };
        let mut change = self.delete(&header.group_name, now_ms);
        if header.clean_offset {
            change.clean_offsets_of.push(header.group_name);
        }
        GroupCommandOutcome {
            response: RemotingCommand::new_response(response_code::SUCCESS, opaque, None),
            change,
        }
    }

    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): the whole wrapper, compact.
    /// The 5.x paging fields are ignored.
    pub fn get_all(&self, request: &RemotingCommand) -> RemotingCommand {
        let mut body = Vec::new();
        self.wrapper().to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
            .with_body(Bytes::from(body))
    }

    fn wrapper(&self) -> SubscriptionGroupWrapper {
        SubscriptionGroupWrapper {
            data_version: self.data_version,
            subscription_group_table: self.groups.clone(),
            forbidden_table: Some(self.forbidden_table.clone()),
        }
    }

    /// Merges `subscriptionGroup.json` into the table (Java's `decode`):
    /// file groups replace startup groups of the same name, the file's data
    /// version is taken.
    ///
    /// # Errors
    ///
    /// The file does not parse; the table is unchanged then.
    pub fn load(&mut self, content: &[u8]) -> Result<(), JsonError> {
        let wrapper = SubscriptionGroupWrapper::from_json(content)?;
        self.groups.extend(wrapper.subscription_group_table);
        if let Some(forbidden) = wrapper.forbidden_table {
            self.forbidden_table.extend(forbidden);
        }
        self.data_version = wrapper.data_version;
        self.publish();
        Ok(())
    }

    /// The bytes of `subscriptionGroup.json`, pretty as Java writes it.
    pub fn encode_file(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.wrapper().write_pretty(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_protocol::command::ExtFields;
    use ringmq_protocol::header::CustomHeader;

    const NOW: i64 = 1_700_000_000_000;

    fn update_request(config: &SubscriptionGroupConfig) -> RemotingCommand {
        let mut body = Vec::new();
        config.to_json(&mut body, JsonStyle::Java);
        RemotingCommand::new_request(
            request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            ExtFields::new(),
        )
        .with_body(Bytes::from(body))
    }

    fn delete_request(group: &str, clean_offset: bool) -> RemotingCommand {
        RemotingCommand::new_request(
            request_code::DELETE_SUBSCRIPTIONGROUP,
            DeleteSubscriptionGroupRequestHeader {
                group_name: group.to_owned(),
                clean_offset,
            }
            .to_ext_fields(),
        )
    }

    #[test]
    fn startup_groups_exist_with_defaults() {
        let table = SubscriptionGroupTable::new(true, NOW);
        for group in STARTUP_GROUPS {
            let config = table.get(group).unwrap();
            assert_eq!(config.retry_queue_nums, 1, "{group}");
            assert!(config.consume_broadcast_enable, "{group}");
        }
        assert_eq!(table.data_version().counter, 0);
        assert!(is_system_group("CLIENT_INNER_PRODUCER"));
        assert!(is_system_group("CID_RMQ_SYS_OTHER"));
        assert!(!is_system_group("g1"));
    }

    #[test]
    fn unknown_groups_are_auto_created_with_reference_defaults() {
        let mut table = SubscriptionGroupTable::new(true, NOW);
        let (config, change) = table.find_or_create("g1", NOW + 3);
        let config = config.unwrap();
        assert_eq!(config.group_name, "g1");
        assert!(config.consume_enable);
        assert_eq!(config.retry_queue_nums, 1);
        assert_eq!(config.retry_max_times, 16);
        assert_eq!(config.which_broker_when_consume_slowly, 1);
        assert!(config.notify_consumer_ids_changed_enable);
        assert_eq!(change.updated, vec!["g1".to_owned()]);
        assert_eq!(table.data_version().counter, 1);
        assert_eq!(table.data_version().timestamp, NOW + 3);
        assert!(table.snapshot().contains("g1"));
        let (_, again) = table.find_or_create("g1", NOW + 4);
        assert!(again.is_empty());
        assert_eq!(table.data_version().counter, 1);
    }

    #[test]
    fn auto_creation_off_creates_only_system_consumer_groups_and_never_bad_names() {
        let mut table = SubscriptionGroupTable::new(false, NOW);
        assert_eq!(table.find_or_create("g1", NOW).0, None);
        assert!(table.find_or_create("CID_RMQ_SYS_X", NOW).0.is_some());
        let mut table = SubscriptionGroupTable::new(true, NOW);
        assert_eq!(table.find_or_create("bad group", NOW).0, None);
        assert!(!table.snapshot().would_auto_create("bad group"));
        assert!(table.snapshot().would_auto_create("fine"));
    }

    #[test]
    fn group_names_are_validated() {
        assert_eq!(validate_group_name(""), Err(REMARK_GROUP_BLANK));
        assert_eq!(validate_group_name("a:b"), Err(REMARK_GROUP_ILLEGAL_CHARS));
        assert_eq!(validate_group_name(&"g".repeat(120)), Ok(()));
        assert_eq!(
            validate_group_name(&"g".repeat(121)),
            Err(REMARK_GROUP_TOO_LONG)
        );
    }

    #[test]
    fn update_and_create_stores_the_body_config() {
        let mut table = SubscriptionGroupTable::new(true, NOW);
        let config = SubscriptionGroupConfig {
            retry_queue_nums: 4,
            consume_broadcast_enable: false,
            ..SubscriptionGroupConfig::new("orders")
        };
        let outcome = table.handle(&update_request(&config), NOW + 1).unwrap();
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(outcome.change.updated, vec!["orders".to_owned()]);
        assert_eq!(table.get("orders"), Some(&config));
        let outcome = table.handle(&update_request(&config), NOW + 2).unwrap();
        assert!(outcome.change.is_empty());
        assert_eq!(table.data_version().counter, 1);
    }

    #[test]
    fn update_and_create_refuses_bad_names_and_bad_bodies() {
        let mut table = SubscriptionGroupTable::new(true, NOW);
        let outcome = table.update_and_create(
            &update_request(&SubscriptionGroupConfig::new("no spaces")),
            NOW,
        );
        assert_eq!(outcome.response.code, response_code::INVALID_PARAMETER);
        assert_eq!(
            outcome.response.remark.as_deref(),
            Some(REMARK_GROUP_ILLEGAL_CHARS)
        );
        let garbage = RemotingCommand::new_request(
            request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            ExtFields::new(),
        )
        .with_body(Bytes::from_static(b"{oops"));
        let outcome = table.update_and_create(&garbage, NOW);
        assert_eq!(outcome.response.code, response_code::SYSTEM_ERROR);
        let empty = RemotingCommand::new_request(
            request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            ExtFields::new(),
        );
        let outcome = table.update_and_create(&empty, NOW);
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert!(outcome.change.is_empty());
        assert_eq!(table.data_version().counter, 0);
    }

    #[test]
    fn delete_removes_the_group_and_asks_for_offset_cleanup_when_told() {
        let mut table = SubscriptionGroupTable::new(true, NOW);
        table.find_or_create("g1", NOW);
        table.find_or_create("g2", NOW);
        let outcome = table.handle(&delete_request("g1", false), NOW).unwrap();
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert_eq!(outcome.change.deleted, vec!["g1".to_owned()]);
        assert!(outcome.change.clean_offsets_of.is_empty());
        assert!(!table.snapshot().contains("g1"));
        let outcome = table.handle(&delete_request("g2", true), NOW).unwrap();
        assert_eq!(outcome.change.clean_offsets_of, vec!["g2".to_owned()]);
        let outcome = table.handle(&delete_request("absent", false), NOW).unwrap();
        assert_eq!(outcome.response.code, response_code::SUCCESS);
        assert!(outcome.change.is_empty());
        let missing =
            RemotingCommand::new_request(request_code::DELETE_SUBSCRIPTIONGROUP, ExtFields::new());
        assert_eq!(
            table.handle(&missing, NOW).unwrap().response.code,
            response_code::SYSTEM_ERROR
        );
    }

    #[test]
    fn get_all_returns_the_wrapper_with_forbidden_table() {
        let mut table = SubscriptionGroupTable::new(true, NOW);
        table.find_or_create("g1", NOW);
        let request = RemotingCommand::new_request(
            request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            ExtFields::new(),
        );
        let response = table.handle(&request, NOW).unwrap().response;
        assert_eq!(response.code, response_code::SUCCESS);
        let wrapper = SubscriptionGroupWrapper::from_json(response.body_bytes()).unwrap();
        assert_eq!(wrapper.subscription_group_table, table.groups);
        assert_eq!(wrapper.forbidden_table, Some(BTreeMap::new()));
        assert_eq!(wrapper.data_version.counter, 1);
    }

    #[test]
    fn subscription_group_file_round_trips_in_java_pretty_form() {
        let mut table = SubscriptionGroupTable::new(true, NOW);
        table.find_or_create("kept", NOW + 1);
        let file = table.encode_file();
        let text = String::from_utf8(file.clone()).unwrap();
        assert!(text.starts_with("{\n\t\"dataVersion\":{"), "{text}");
        assert!(text.contains("\"forbiddenTable\":{}"), "{text}");
        let mut restarted = SubscriptionGroupTable::new(true, NOW + 50);
        restarted.load(&file).unwrap();
        assert_eq!(restarted.groups, table.groups);
        assert_eq!(restarted.data_version(), table.data_version());
        assert!(restarted.snapshot().contains("kept"));
        assert!(restarted.load(b"[").is_err());
    }

    #[test]
    fn snapshots_cross_to_other_shard_threads() {
        let mut table = SubscriptionGroupTable::new(true, NOW);
        table.find_or_create("shared", NOW);
        let snapshot = table.snapshot();
        let seen = std::thread::spawn(move || snapshot.contains("shared"))
            .join()
            .unwrap();
        assert!(seen);
    }

    #[test]
    fn a_slave_takes_its_masters_groups_whole_and_reports_what_changed() {
        let mut master = SubscriptionGroupTable::new(true, NOW);
        master.update_and_create(
            &update_request(&SubscriptionGroupConfig::new("kept")),
            NOW + 1,
        );
        let mut slave = SubscriptionGroupTable::new(true, NOW + 50);
        slave.update_and_create(
            &update_request(&SubscriptionGroupConfig::new("gone")),
            NOW + 51,
        );
        let change = slave.replace_from_master(&master.wrapper());
        assert_eq!(change.updated, ["kept"]);
        assert_eq!(change.deleted, ["gone"]);
        assert_eq!(
            slave.wrapper(),
            master.wrapper(),
            "same groups, same data version"
        );
        assert!(slave.snapshot().get("kept").is_some());
        assert!(slave.replace_from_master(&master.wrapper()).is_empty());
    }
}
