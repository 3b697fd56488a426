//! The name server's route tables (Java `RouteInfoManager`), as a plain
//! deterministic structure: time is a parameter, channels are opaque ids.
//!
//! ```text
//! topic_queue_table   topic       → broker name → QueueData
//! broker_addr_table   broker name → BrokerData {cluster, brokerAddrs: id → ip:port}
//! cluster_addr_table  cluster     → {broker name}
//! broker_live_table   (cluster, broker addr) → BrokerLiveInfo
//!                     {last update, timeout, DataVersion, channel, haServerAddr}
//! filter_server_table (cluster, broker addr) → [filter server addr]
//! ```
//!
//! Maps are `BTreeMap`s, so every answer (route data, cluster info, topic
//! lists) comes out in a stable, sorted order where Java's follows `HashMap`
//! iteration.
//!
//! # Invariants
//!
//! - A `BrokerData` exists only while it has an address, and its broker name
//!   stays in its cluster's set while it exists: the removal paths
//!   (unregister, expiry, closed channel) remove the last address, the
//!   `BrokerData` and the cluster membership together, and topics left
//!   without QueueData go too. (A broker name registered under two clusters,
//!   a misconfiguration Java does not guard against either, can leave its
//!   name in the other cluster's set.)
//! - One address appears under one broker id of a `BrokerData` at most
//!   (registration removes the address's other ids first).
//! - No topic maps to an empty table.

use std::collections::{BTreeMap, BTreeSet};

use ringmq_protocol::json::{
    BrokerData, ClusterInfo, DataVersion, QueueData, TopicConfig, TopicConfigSerializeWrapper,
    TopicRouteData,
};

use super::ChannelId;

/// Java's `DEFAULT_BROKER_CHANNEL_EXPIRED_TIME`: a broker silent this long
/// is removed, unless its registration asked for another timeout.
pub const BROKER_CHANNEL_EXPIRED_TIME_MS: i64 = 120_000;

/// The master's broker id (`MixAll.MASTER_ID`).
pub const MASTER_ID: i64 = 0;

/// `PermName.PERM_READ`.
pub const PERM_READ: i32 = 4;
/// `PermName.PERM_WRITE`.
pub const PERM_WRITE: i32 = 2;

/// `TopicSysFlag` bit: a unit topic.
const TOPIC_SYS_FLAG_UNIT: i32 = 1;
/// `TopicSysFlag` bit: a topic with a unit subscription.
const TOPIC_SYS_FLAG_UNIT_SUB: i32 = 2;

/// The key of the live and filter-server tables.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrokerAddrInfo {
    /// The broker's cluster.
    pub cluster_name: String,
    /// `ip:port`.
    pub broker_addr: String,
}

impl BrokerAddrInfo {
    /// The key for `cluster_name` and `broker_addr`.
    pub fn new(cluster_name: &str, broker_addr: &str) -> Self {
        Self {
            cluster_name: cluster_name.to_owned(),
            broker_addr: broker_addr.to_owned(),
        }
    }
}

/// What the name server knows about a registered broker address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerLiveInfo {
    /// When the broker last registered or sent a heartbeat.
    pub last_update_ms: i64,
    /// Silence after which the broker is removed.
    pub heartbeat_timeout_ms: i64,
    /// The topic-config version of the last registration.
    pub data_version: DataVersion,
    /// The connection it registered on.
    pub channel: ChannelId,
    /// Its HA address (`ip:haPort`).
    pub ha_server_addr: String,
}

/// One REGISTER_BROKER, decoded.
#[derive(Debug, Clone)]
pub struct Registration<'a> {
    /// `clusterName`.
    pub cluster_name: &'a str,
    /// `brokerAddr`.
    pub broker_addr: &'a str,
    /// `brokerName`.
    pub broker_name: &'a str,
    /// `brokerId`.
    pub broker_id: i64,
    /// `haServerAddr`.
    pub ha_server_addr: &'a str,
    /// `__ZONE_NAME`.
    pub zone_name: Option<&'a str>,
    /// `heartbeatTimeoutMillis`; `None` = [`BROKER_CHANNEL_EXPIRED_TIME_MS`].
    pub heartbeat_timeout_ms: Option<i64>,
    /// `enableActingMaster`; `None` marks a broker older than 5.0.
    pub enable_acting_master: Option<bool>,
    /// The body's topic configs and data version.
    pub topic_config_wrapper: &'a TopicConfigSerializeWrapper,
    /// The body's filter servers; `None` for bodies without the list.
    pub filter_server_list: Option<&'a [String]>,
    /// The connection the request came on.
    pub channel: ChannelId,
}

/// A successful registration's answer (the response header fields).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterOutcome {
    /// For a slave whose master is alive: the master's HA address.
    pub ha_server_addr: Option<String>,
    /// For a slave whose master is alive: the master's address.
    pub master_addr: Option<String>,
}

/// One broker address to remove (UNREGISTER_BROKER or its internal uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unregistration {
    /// `clusterName`.
    pub cluster_name: String,
    /// `brokerAddr`.
    pub broker_addr: String,
    /// `brokerName`.
    pub broker_name: String,
    /// `brokerId`.
    pub broker_id: i64,
}

/// A broker removed by [`RouteTable::scan`]: its channel should be closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredBroker {
    /// Which broker address expired.
    pub addr: BrokerAddrInfo,
    /// The connection it had registered on.
    pub channel: ChannelId,
}

/// The route tables.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    topic_queue_table: BTreeMap<String, BTreeMap<String, QueueData>>,
    broker_addr_table: BTreeMap<String, BrokerData>,
    cluster_addr_table: BTreeMap<String, BTreeSet<String>>,
    broker_live_table: BTreeMap<BrokerAddrInfo, BrokerLiveInfo>,
    filter_server_table: BTreeMap<BrokerAddrInfo, Vec<String>>,
}

impl RouteTable {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a registration (section 9, steps 2–5; the CRC is checked by
    /// the caller). `None` refuses it as Java does: a single-topic
    /// (incremental) registration from a broker id not registered yet.
    pub fn register(&mut self, reg: &Registration<'_>, now_ms: i64) -> Option<RegisterOutcome> {
        let data_version = reg.topic_config_wrapper.data_version;
        self.cluster_addr_table
            .entry(reg.cluster_name.to_owned())
            .or_default()
            .insert(reg.broker_name.to_owned());
        let mut register_first = !self.broker_addr_table.contains_key(reg.broker_name);
        let broker_data = self
            .broker_addr_table
            .entry(reg.broker_name.to_owned())
            .or_insert_with(|| BrokerData {
                cluster: reg.cluster_name.to_owned(),
                broker_name: reg.broker_name.to_owned(),
                ..BrokerData::default()
            });
        let is_old_version_broker = reg.enable_acting_master.is_none();
        broker_data.enable_acting_master = reg.enable_acting_master.unwrap_or(false);
        broker_data.zone_name = reg.zone_name.map(str::to_owned);

        // A slave switched to master (or the reverse) re-registers its
        // address under a new id: one address has one id.
        broker_data
            .broker_addrs
            .retain(|id, addr| addr != reg.broker_addr || *id == reg.broker_id);

        if let Some(old_addr) = broker_data.broker_addrs.get(&reg.broker_id)
            && old_addr != reg.broker_addr
            && let Some(old_live) = self
                .broker_live_table
                .get(&BrokerAddrInfo::new(reg.cluster_name, old_addr))
            && old_live.data_version.state_version > data_version.state_version
        {
            // Another broker holds this id with a newer state: ignore this one.
            self.broker_live_table
                .remove(&BrokerAddrInfo::new(reg.cluster_name, reg.broker_addr));
            return Some(RegisterOutcome::default());
        }

        if !broker_data.broker_addrs.contains_key(&reg.broker_id)
            && reg.topic_config_wrapper.topic_config_table.len() == 1
        {
            // Java leaves the group it just created behind, empty; keep the
            // tables consistent instead.
            if broker_data.broker_addrs.is_empty() {
                self.broker_addr_table.remove(reg.broker_name);
                if let Some(names) = self.cluster_addr_table.get_mut(reg.cluster_name) {
                    names.remove(reg.broker_name);
                    if names.is_empty() {
                        self.cluster_addr_table.remove(reg.cluster_name);
                    }
                }
            }
            return None;
        }

        let old_addr = broker_data
            .broker_addrs
            .insert(reg.broker_id, reg.broker_addr.to_owned());
        register_first |= old_addr.is_none_or(|addr| addr.is_empty());

        let is_master = reg.broker_id == MASTER_ID;
        let is_prime_slave = !is_old_version_broker
            && !is_master
            && broker_data.broker_addrs.keys().next() == Some(&reg.broker_id);

        if is_master || is_prime_slave {
            for topic_config in reg.topic_config_wrapper.topic_config_table.values() {
                if register_first
                    || self.is_topic_config_changed(reg, &data_version, &topic_config.topic_name)
                {
                    let mut queue_data = queue_data_of(reg.broker_name, topic_config);
                    if is_prime_slave {
                        queue_data.perm &= !PERM_WRITE;
                    }
                    self.topic_queue_table
                        .entry(topic_config.topic_name.clone())
                        .or_default()
                        .insert(reg.broker_name.to_owned(), queue_data);
                }
            }
        }

        let addr_info = BrokerAddrInfo::new(reg.cluster_name, reg.broker_addr);
        self.broker_live_table.insert(
            addr_info.clone(),
            BrokerLiveInfo {
                last_update_ms: now_ms,
                heartbeat_timeout_ms: reg
                    .heartbeat_timeout_ms
                    .unwrap_or(BROKER_CHANNEL_EXPIRED_TIME_MS),
                data_version,
                channel: reg.channel,
                ha_server_addr: reg.ha_server_addr.to_owned(),
            },
        );
        match reg.filter_server_list {
            Some([]) => {
                self.filter_server_table.remove(&addr_info);
            }
            Some(list) => {
                self.filter_server_table.insert(addr_info, list.to_vec());
            }
            None => {}
        }

        let mut outcome = RegisterOutcome::default();
        if reg.broker_id != MASTER_ID
            && let Some(master_addr) = self
                .broker_addr_table
                .get(reg.broker_name)
                .and_then(|data| data.broker_addrs.get(&MASTER_ID))
            && let Some(master_live) = self
                .broker_live_table
                .get(&BrokerAddrInfo::new(reg.cluster_name, master_addr))
        {
            outcome.ha_server_addr = Some(master_live.ha_server_addr.clone());
            outcome.master_addr = Some(master_addr.clone());
        }
        self.assert_invariants();
        Some(outcome)
    }

    fn is_topic_config_changed(
        &self,
        reg: &Registration<'_>,
        data_version: &DataVersion,
        topic: &str,
    ) -> bool {
        self.is_broker_topic_config_changed(reg.cluster_name, reg.broker_addr, data_version)
            || self
                .topic_queue_table
                .get(topic)
                .is_none_or(|table| !table.contains_key(reg.broker_name))
    }

    /// Whether `data_version` differs from the one the broker last
    /// registered (true for an unknown broker).
    pub fn is_broker_topic_config_changed(
        &self,
        cluster_name: &str,
        broker_addr: &str,
        data_version: &DataVersion,
    ) -> bool {
        self.broker_data_version(cluster_name, broker_addr) != Some(*data_version)
    }

    /// The data version the broker last registered.
    pub fn broker_data_version(
        &self,
        cluster_name: &str,
        broker_addr: &str,
    ) -> Option<DataVersion> {
        self.broker_live_table
            .get(&BrokerAddrInfo::new(cluster_name, broker_addr))
            .map(|live| live.data_version)
    }

    /// Refreshes a registered broker's last-update time; `false` if unknown.
    pub fn refresh(&mut self, cluster_name: &str, broker_addr: &str, now_ms: i64) -> bool {
        match self
            .broker_live_table
            .get_mut(&BrokerAddrInfo::new(cluster_name, broker_addr))
        {
            Some(live) => {
                live.last_update_ms = now_ms;
                true
            }
            None => false,
        }
    }

    /// Removes broker addresses, with the cleanup of section 9: a broker
    /// name with no address left loses its BrokerData, its cluster
    /// membership and its QueueData; topics left empty go. For a group that
    /// lost its master and runs in acting-master mode the QueueData lose the
    /// write bit.
    pub fn unregister(&mut self, requests: &[Unregistration]) {
        let mut removed_names = BTreeSet::new();
        let mut reduced_names = BTreeSet::new();
        for request in requests {
            let addr_info = BrokerAddrInfo::new(&request.cluster_name, &request.broker_addr);
            self.broker_live_table.remove(&addr_info);
            self.filter_server_table.remove(&addr_info);
            let mut remove_name = false;
            if let Some(data) = self.broker_addr_table.get_mut(&request.broker_name) {
                data.broker_addrs
                    .retain(|_, addr| *addr != request.broker_addr);
                if data.broker_addrs.is_empty() {
                    self.broker_addr_table.remove(&request.broker_name);
                    remove_name = true;
                }
            }
            if remove_name {
                if let Some(names) = self.cluster_addr_table.get_mut(&request.cluster_name) {
                    names.remove(&request.broker_name);
                    if names.is_empty() {
                        self.cluster_addr_table.remove(&request.cluster_name);
                    }
                }
                removed_names.insert(request.broker_name.clone());
            } else {
                reduced_names.insert(request.broker_name.clone());
            }
        }
        self.clean_topics(&removed_names, &reduced_names);
        self.assert_invariants();
    }

    fn clean_topics(&mut self, removed_names: &BTreeSet<String>, reduced_names: &BTreeSet<String>) {
        let acting_without_master: Vec<&String> = reduced_names
            .iter()
            .filter(|name| {
                self.broker_addr_table.get(*name).is_some_and(|data| {
                    data.enable_acting_master
                        && data
                            .broker_addrs
                            .keys()
                            .next()
                            .is_none_or(|id| *id > MASTER_ID)
                })
            })
            .collect();
        for table in self.topic_queue_table.values_mut() {
            for name in removed_names {
                table.remove(name);
            }
            for name in &acting_without_master {
                if let Some(queue_data) = table.get_mut(*name) {
                    queue_data.perm &= !PERM_WRITE;
                }
            }
        }
        self.topic_queue_table.retain(|_, table| !table.is_empty());
    }

    /// The unregistration that removes `addr_info` (Java
    /// `setupUnRegisterRequest`): the broker name and id come from the
    /// BrokerData of that cluster holding the address.
    fn unregistration_for(&self, addr_info: &BrokerAddrInfo) -> Option<Unregistration> {
        self.broker_addr_table
            .values()
            .filter(|data| data.cluster == addr_info.cluster_name)
            .find_map(|data| {
                data.broker_addrs
                    .iter()
                    .find(|(_, addr)| **addr == addr_info.broker_addr)
                    .map(|(id, _)| Unregistration {
                        cluster_name: addr_info.cluster_name.clone(),
                        broker_addr: addr_info.broker_addr.clone(),
                        broker_name: data.broker_name.clone(),
                        broker_id: *id,
                    })
            })
    }

    /// Removes `addr_info` as a destroyed channel does. A live entry
    /// without BrokerData (Java would keep it and retry every scan) is
    /// dropped as well.
    fn remove_addr(&mut self, addr_info: &BrokerAddrInfo) {
        match self.unregistration_for(addr_info) {
            Some(request) => self.unregister(&[request]),
            None => {
                self.broker_live_table.remove(addr_info);
                self.filter_server_table.remove(addr_info);
            }
        }
    }

    /// Removes every broker whose last update is older than its timeout
    /// (`last_update + timeout < now`, Java's `scanNotActiveBroker`), and
    /// returns them so that their channels can be closed.
    pub fn scan(&mut self, now_ms: i64) -> Vec<ExpiredBroker> {
        let expired: Vec<ExpiredBroker> = self
            .broker_live_table
            .iter()
            .filter(|(_, live)| {
                live.last_update_ms
                    .saturating_add(live.heartbeat_timeout_ms)
                    < now_ms
            })
            .map(|(addr, live)| ExpiredBroker {
                addr: addr.clone(),
                channel: live.channel,
            })
            .collect();
        for broker in &expired {
            self.remove_addr(&broker.addr);
        }
        expired
    }

    /// Removes the brokers that registered on `channel` (Java
    /// `BrokerHousekeepingService`); returns how many were removed.
    pub fn on_channel_closed(&mut self, channel: ChannelId) -> usize {
        let addrs: Vec<BrokerAddrInfo> = self
            .broker_live_table
            .iter()
            .filter(|(_, live)| live.channel == channel)
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in &addrs {
            self.remove_addr(addr);
        }
        addrs.len()
    }

    /// The route of `topic` (Java `pickupTopicRouteData`), or `None` when the
    /// topic has no QueueData or none of its brokers is known.
    pub fn pickup_topic_route_data(&self, topic: &str) -> Option<TopicRouteData> {
        let table = self.topic_queue_table.get(topic)?;
        let broker_datas: Vec<BrokerData> = table
            .keys()
            .filter_map(|name| self.broker_addr_table.get(name).cloned())
            .collect();
        if broker_datas.is_empty() {
            return None;
        }
        let mut filter_server_table = BTreeMap::new();
        if !self.filter_server_table.is_empty() {
            for data in &broker_datas {
                for addr in data.broker_addrs.values() {
                    if let Some(list) = self
                        .filter_server_table
                        .get(&BrokerAddrInfo::new(&data.cluster, addr))
                    {
                        filter_server_table.insert(addr.clone(), list.clone());
                    }
                }
            }
        }
        Some(TopicRouteData {
            queue_datas: table.values().cloned().collect(),
            broker_datas,
            filter_server_table,
            ..TopicRouteData::default()
        })
    }

    /// The cluster and broker tables (GET_BROKER_CLUSTER_INFO).
    pub fn cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            broker_addr_table: self.broker_addr_table.clone(),
            cluster_addr_table: self
                .cluster_addr_table
                .iter()
                .map(|(cluster, names)| (cluster.clone(), names.iter().cloned().collect()))
                .collect(),
        }
    }

    /// The BrokerData of `broker_name`.
    pub fn broker_data(&self, broker_name: &str) -> Option<&BrokerData> {
        self.broker_addr_table.get(broker_name)
    }

    /// The live entry of a broker address.
    pub fn live_info(&self, cluster_name: &str, broker_addr: &str) -> Option<&BrokerLiveInfo> {
        self.broker_live_table
            .get(&BrokerAddrInfo::new(cluster_name, broker_addr))
    }

    /// Every topic with a route, sorted.
    pub fn all_topics(&self) -> Vec<String> {
        self.topic_queue_table.keys().cloned().collect()
    }

    /// Topics with QueueData on any broker of `cluster`, sorted, each once.
    pub fn topics_by_cluster(&self, cluster: &str) -> Vec<String> {
        let Some(names) = self.cluster_addr_table.get(cluster) else {
            return Vec::new();
        };
        self.topic_queue_table
            .iter()
            .filter(|(_, table)| names.iter().any(|name| table.contains_key(name)))
            .map(|(topic, _)| topic.clone())
            .collect()
    }

    /// Cluster names, then broker names (GET_SYSTEM_TOPIC_LIST_FROM_NS: both
    /// are topics), and the first address of the first broker.
    pub fn system_topics(&self) -> (Vec<String>, Option<String>) {
        let mut topics = Vec::new();
        for (cluster, names) in &self.cluster_addr_table {
            topics.push(cluster.clone());
            topics.extend(names.iter().cloned());
        }
        let addr = self
            .broker_addr_table
            .values()
            .find_map(|data| data.broker_addrs.values().next().cloned());
        (topics, addr)
    }

    /// Topics whose first QueueData's `topicSysFlag` satisfies `filter`
    /// (the unit-topic lists 311, 312, 313).
    pub fn topics_by_sys_flag(&self, filter: impl Fn(i32) -> bool) -> Vec<String> {
        self.topic_queue_table
            .iter()
            .filter(|(_, table)| {
                table
                    .values()
                    .next()
                    .is_some_and(|q| filter(q.topic_sys_flag))
            })
            .map(|(topic, _)| topic.clone())
            .collect()
    }

    /// Removes a topic everywhere, or only from the brokers of `cluster`.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) {
        match cluster {
            None => {
                self.topic_queue_table.remove(topic);
            }
            Some(cluster) => {
                let Some(names) = self.cluster_addr_table.get(cluster) else {
                    return;
                };
                if let Some(table) = self.topic_queue_table.get_mut(topic) {
                    table.retain(|name, _| !names.contains(name));
                    if table.is_empty() {
                        self.topic_queue_table.remove(topic);
                    }
                }
            }
        }
    }

    /// REGISTER_TOPIC_IN_NAMESRV: adds a route for a topic that has none,
    /// if every QueueData names a known broker; otherwise changes nothing.
    pub fn register_topic(&mut self, topic: &str, queue_datas: &[QueueData]) {
        if queue_datas.is_empty() || self.topic_queue_table.contains_key(topic) {
            return;
        }
        if queue_datas
            .iter()
            .any(|q| !self.broker_addr_table.contains_key(&q.broker_name))
        {
            return;
        }
        let table = queue_datas
            .iter()
            .map(|q| (q.broker_name.clone(), q.clone()))
            .collect();
        self.topic_queue_table.insert(topic.to_owned(), table);
    }

    /// Clears the write bit of every QueueData of `broker_name`; returns how
    /// many topics it touched.
    pub fn wipe_write_perm(&mut self, broker_name: &str) -> i32 {
        self.update_perm(broker_name, |perm| perm & !PERM_WRITE)
    }

    /// Sets the QueueData of `broker_name` to read + write (Java sets
    /// exactly `PERM_READ | PERM_WRITE`); returns how many topics it touched.
    pub fn add_write_perm(&mut self, broker_name: &str) -> i32 {
        self.update_perm(broker_name, |_| PERM_READ | PERM_WRITE)
    }

    fn update_perm(&mut self, broker_name: &str, update: impl Fn(i32) -> i32) -> i32 {
        let mut count = 0;
        for table in self.topic_queue_table.values_mut() {
            if let Some(queue_data) = table.get_mut(broker_name) {
                queue_data.perm = update(queue_data.perm);
                count += 1;
            }
        }
        count
    }

    /// Whether no broker is registered.
    pub fn is_empty(&self) -> bool {
        self.broker_addr_table.is_empty() && self.broker_live_table.is_empty()
    }

    fn assert_invariants(&self) {
        debug_assert!(self.topic_queue_table.values().all(|t| !t.is_empty()));
        debug_assert!(
            self.broker_addr_table
                .values()
                .all(|d| !d.broker_addrs.is_empty())
        );
        debug_assert!(self.cluster_addr_table.values().all(|n| !n.is_empty()));
    }
}

/// Whether a `topicSysFlag` marks a unit topic.
pub fn has_unit_flag(topic_sys_flag: i32) -> bool {
    topic_sys_flag & TOPIC_SYS_FLAG_UNIT != 0
}

/// Whether a `topicSysFlag` marks a topic with a unit subscription.
pub fn has_unit_sub_flag(topic_sys_flag: i32) -> bool {
    topic_sys_flag & TOPIC_SYS_FLAG_UNIT_SUB != 0
}

fn queue_data_of(broker_name: &str, config: &TopicConfig) -> QueueData {
    QueueData {
        broker_name: broker_name.to_owned(),
        read_queue_nums: config.read_queue_nums,
        write_queue_nums: config.write_queue_nums,
        perm: config.perm,
        topic_sys_flag: config.topic_sys_flag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = "DefaultCluster";
    const MASTER: &str = "10.0.0.1:10911";
    const SLAVE: &str = "10.0.0.2:10911";

    fn wrapper(counter: i64, topics: &[(&str, i32)]) -> TopicConfigSerializeWrapper {
        TopicConfigSerializeWrapper {
            data_version: DataVersion {
                timestamp: 1_700_000_000_000 + counter,
                counter,
                state_version: 0,
            },
            topic_config_table: topics
                .iter()
                .map(|(name, queues)| {
                    let config = TopicConfig {
                        topic_name: (*name).to_owned(),
                        read_queue_nums: *queues,
                        write_queue_nums: *queues,
                        ..TopicConfig::default()
                    };
                    ((*name).to_owned(), config)
                })
                .collect(),
            ..TopicConfigSerializeWrapper::default()
        }
    }

    fn registration<'a>(
        name: &'a str,
        id: i64,
        addr: &'a str,
        wrapper: &'a TopicConfigSerializeWrapper,
        channel: u64,
    ) -> Registration<'a> {
        Registration {
            cluster_name: CLUSTER,
            broker_addr: addr,
            broker_name: name,
            broker_id: id,
            ha_server_addr: if id == 0 {
                "10.0.0.1:10912"
            } else {
                "10.0.0.2:10912"
            },
            zone_name: None,
            heartbeat_timeout_ms: None,
            enable_acting_master: None,
            topic_config_wrapper: wrapper,
            filter_server_list: None,
            channel: ChannelId(channel),
        }
    }

    fn queue_nums(table: &RouteTable, topic: &str, name: &str) -> Option<(i32, i32)> {
        let route = table.pickup_topic_route_data(topic)?;
        route
            .queue_datas
            .iter()
            .find(|q| q.broker_name == name)
            .map(|q| (q.write_queue_nums, q.perm))
    }

    #[test]
    fn master_registration_creates_cluster_broker_and_queue_data() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("TopicA", 4), ("TopicB", 8)]);
        let outcome = table.register(&registration("broker-a", 0, MASTER, &body, 1), 1000);
        assert_eq!(outcome, Some(RegisterOutcome::default()));
        assert_eq!(table.all_topics(), vec!["TopicA", "TopicB"]);
        let info = table.cluster_info();
        assert_eq!(info.cluster_addr_table[CLUSTER], vec!["broker-a"]);
        assert_eq!(info.broker_addr_table["broker-a"].broker_addrs[&0], MASTER);
        assert_eq!(queue_nums(&table, "TopicB", "broker-a"), Some((8, 6)));
        let live = table.live_info(CLUSTER, MASTER).unwrap();
        assert_eq!(live.last_update_ms, 1000);
        assert_eq!(live.heartbeat_timeout_ms, BROKER_CHANNEL_EXPIRED_TIME_MS);
        assert_eq!(live.data_version, body.data_version);
    }

    #[test]
    fn queue_data_is_rebuilt_only_when_the_data_version_changes() {
        let mut table = RouteTable::new();
        table.register(
            &registration("broker-a", 0, MASTER, &wrapper(1, &[("T", 4), ("Z", 1)]), 1),
            0,
        );
        // Same version, different content: Java keeps the old QueueData.
        table.register(
            &registration(
                "broker-a",
                0,
                MASTER,
                &wrapper(1, &[("T", 16), ("Z", 1)]),
                1,
            ),
            1,
        );
        assert_eq!(queue_nums(&table, "T", "broker-a"), Some((4, 6)));
        // A new version rebuilds it.
        table.register(
            &registration(
                "broker-a",
                0,
                MASTER,
                &wrapper(2, &[("T", 16), ("Z", 1)]),
                1,
            ),
            2,
        );
        assert_eq!(queue_nums(&table, "T", "broker-a"), Some((16, 6)));
        // A topic the tables lack is added even at an unchanged version.
        table.delete_topic("T", None);
        table.register(
            &registration(
                "broker-a",
                0,
                MASTER,
                &wrapper(2, &[("T", 16), ("U", 1), ("Z", 1)]),
                1,
            ),
            3,
        );
        assert_eq!(table.all_topics(), vec!["T", "U", "Z"]);
    }

    #[test]
    fn slaves_get_the_master_addresses_only_while_the_master_is_alive() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("Z", 1)]);
        let outcome = table
            .register(&registration("broker-a", 1, SLAVE, &body, 2), 0)
            .unwrap();
        assert_eq!(outcome, RegisterOutcome::default());
        table.register(&registration("broker-a", 0, MASTER, &body, 1), 0);
        let outcome = table
            .register(&registration("broker-a", 1, SLAVE, &body, 2), 10)
            .unwrap();
        assert_eq!(outcome.master_addr.as_deref(), Some(MASTER));
        assert_eq!(outcome.ha_server_addr.as_deref(), Some("10.0.0.1:10912"));
        let master = table
            .register(&registration("broker-a", 0, MASTER, &body, 1), 10)
            .unwrap();
        assert_eq!(
            master,
            RegisterOutcome::default(),
            "a master gets no master address"
        );
        table.on_channel_closed(ChannelId(1));
        let outcome = table
            .register(&registration("broker-a", 1, SLAVE, &body, 2), 20)
            .unwrap();
        assert_eq!(outcome, RegisterOutcome::default());
    }

    #[test]
    fn a_slave_does_not_write_queue_data_unless_it_is_an_acting_master() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("Z", 1)]);
        table.register(&registration("broker-a", 1, SLAVE, &body, 2), 0);
        assert!(table.all_topics().is_empty());
        let mut acting = registration("broker-b", 1, "10.0.1.2:10911", &body, 3);
        acting.enable_acting_master = Some(true);
        table.register(&acting, 0);
        // The lowest-id slave of a 5.x group in acting-master mode writes
        // read-only QueueData.
        assert_eq!(queue_nums(&table, "T", "broker-b"), Some((4, 4)));
    }

    #[test]
    fn an_address_moving_to_another_id_is_removed_from_the_old_one() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("Z", 1)]);
        table.register(&registration("broker-a", 1, SLAVE, &body, 2), 0);
        table.register(&registration("broker-a", 0, SLAVE, &body, 2), 1);
        let addrs = &table.broker_data("broker-a").unwrap().broker_addrs;
        assert_eq!(addrs.len(), 1);
        assert_eq!(addrs[&0], SLAVE);
    }

    #[test]
    fn a_stale_state_version_for_a_taken_id_is_ignored() {
        let mut table = RouteTable::new();
        let mut newer = wrapper(1, &[("T", 4), ("Z", 1)]);
        newer.data_version.state_version = 5;
        table.register(&registration("broker-a", 0, MASTER, &newer, 1), 0);
        let older = wrapper(1, &[("T", 4), ("Z", 1)]);
        let outcome = table.register(&registration("broker-a", 0, SLAVE, &older, 2), 1);
        assert_eq!(outcome, Some(RegisterOutcome::default()));
        assert_eq!(
            table.broker_data("broker-a").unwrap().broker_addrs[&0],
            MASTER
        );
        assert!(table.live_info(CLUSTER, SLAVE).is_none());
    }

    #[test]
    fn an_incremental_registration_of_an_unknown_id_is_refused_and_leaves_no_trace() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4)]);
        assert_eq!(
            table.register(&registration("broker-a", 0, MASTER, &body, 1), 0),
            None
        );
        assert!(table.is_empty());
        assert!(table.cluster_info().cluster_addr_table.is_empty());
        assert!(table.all_topics().is_empty());
        // A full registration (0 or 2+ topics) is accepted.
        let full = wrapper(1, &[("T", 4), ("U", 4)]);
        assert!(
            table
                .register(&registration("broker-a", 0, MASTER, &full, 1), 0)
                .is_some()
        );
        // Once registered, an incremental one is accepted.
        let body = wrapper(2, &[("V", 4)]);
        assert!(
            table
                .register(&registration("broker-a", 0, MASTER, &body, 1), 1)
                .is_some()
        );
        assert_eq!(table.all_topics(), vec!["T", "U", "V"]);
    }

    #[test]
    fn expiry_removes_brokers_silent_longer_than_their_timeout() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("U", 2)]);
        table.register(&registration("broker-a", 0, MASTER, &body, 1), 1000);
        let mut short = registration("broker-b", 0, "10.0.1.1:10911", &body, 7);
        short.heartbeat_timeout_ms = Some(10_000);
        table.register(&short, 1000);
        // Exactly at the deadline it is still alive (Java: last + timeout < now).
        assert!(table.scan(11_000).is_empty());
        let expired = table.scan(11_001);
        assert_eq!(
            expired,
            vec![ExpiredBroker {
                addr: BrokerAddrInfo::new(CLUSTER, "10.0.1.1:10911"),
                channel: ChannelId(7),
            }]
        );
        assert!(table.broker_data("broker-b").is_none());
        let route = table.pickup_topic_route_data("T").unwrap();
        assert_eq!(route.queue_datas.len(), 1);
        // A refresh keeps broker-a alive past its first deadline.
        assert!(table.refresh(CLUSTER, MASTER, 100_000));
        assert!(table.scan(121_000).is_empty());
        assert_eq!(table.scan(220_001).len(), 1);
        assert!(table.is_empty());
        assert!(
            table.all_topics().is_empty(),
            "topics with no QueueData left disappear"
        );
        assert!(table.cluster_info().cluster_addr_table.is_empty());
        assert!(!table.refresh(CLUSTER, MASTER, 0));
    }

    #[test]
    fn queue_data_survives_while_a_slave_of_the_group_is_alive() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("Z", 1)]);
        table.register(&registration("broker-a", 0, MASTER, &body, 1), 0);
        table.register(&registration("broker-a", 1, SLAVE, &body, 2), 0);
        assert_eq!(table.on_channel_closed(ChannelId(1)), 1);
        let route = table.pickup_topic_route_data("T").unwrap();
        assert_eq!(
            route.queue_datas[0].perm, 6,
            "not acting master: perm unchanged"
        );
        assert_eq!(
            route.broker_datas[0]
                .broker_addrs
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(
            table.cluster_info().cluster_addr_table[CLUSTER],
            vec!["broker-a"]
        );
        assert_eq!(table.on_channel_closed(ChannelId(2)), 1);
        assert!(table.pickup_topic_route_data("T").is_none());
        assert_eq!(table.on_channel_closed(ChannelId(2)), 0);
    }

    #[test]
    fn an_acting_master_group_losing_its_master_loses_the_write_bit() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("Z", 1)]);
        let mut master = registration("broker-a", 0, MASTER, &body, 1);
        master.enable_acting_master = Some(true);
        table.register(&master, 0);
        let mut slave = registration("broker-a", 1, SLAVE, &body, 2);
        slave.enable_acting_master = Some(true);
        table.register(&slave, 0);
        table.unregister(&[Unregistration {
            cluster_name: CLUSTER.into(),
            broker_addr: MASTER.into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
        }]);
        assert_eq!(queue_nums(&table, "T", "broker-a"), Some((4, 4)));
    }

    #[test]
    fn unregister_of_the_last_address_removes_the_group_and_its_cluster() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("Shared", 4)]);
        table.register(&registration("broker-a", 0, MASTER, &body, 1), 0);
        let other = wrapper(1, &[("Shared", 2), ("Only", 2)]);
        let mut b = registration("broker-b", 0, "10.0.1.1:10911", &other, 3);
        b.cluster_name = "OtherCluster";
        table.register(&b, 0);
        table.unregister(&[Unregistration {
            cluster_name: CLUSTER.into(),
            broker_addr: MASTER.into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
        }]);
        assert_eq!(table.all_topics(), vec!["Only", "Shared"]);
        let info = table.cluster_info();
        assert_eq!(
            info.cluster_addr_table.keys().collect::<Vec<_>>(),
            vec!["OtherCluster"]
        );
        assert!(table.live_info(CLUSTER, MASTER).is_none());
    }

    #[test]
    fn route_data_lists_queue_and_broker_data_sorted_by_broker_name() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("U", 4)]);
        table.register(&registration("broker-b", 0, "10.0.1.1:10911", &body, 3), 0);
        table.register(&registration("broker-a", 0, MASTER, &body, 1), 0);
        let route = table.pickup_topic_route_data("T").unwrap();
        let names: Vec<&str> = route
            .queue_datas
            .iter()
            .map(|q| q.broker_name.as_str())
            .collect();
        assert_eq!(names, vec!["broker-a", "broker-b"]);
        let names: Vec<&str> = route
            .broker_datas
            .iter()
            .map(|b| b.broker_name.as_str())
            .collect();
        assert_eq!(names, vec!["broker-a", "broker-b"]);
        assert!(route.filter_server_table.is_empty());
        assert!(table.pickup_topic_route_data("Nope").is_none());
    }

    #[test]
    fn filter_servers_appear_in_routes_and_an_empty_list_clears_them() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("U", 4)]);
        let servers = vec!["10.0.0.1:45000".to_owned()];
        let mut reg = registration("broker-a", 0, MASTER, &body, 1);
        reg.filter_server_list = Some(&servers);
        table.register(&reg, 0);
        let route = table.pickup_topic_route_data("T").unwrap();
        assert_eq!(route.filter_server_table[MASTER], servers);
        reg.filter_server_list = Some(&[]);
        table.register(&reg, 1);
        assert!(
            table
                .pickup_topic_route_data("T")
                .unwrap()
                .filter_server_table
                .is_empty()
        );
    }

    #[test]
    fn topics_by_cluster_delete_topic_and_write_perm_follow_java() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("U", 4)]);
        table.register(&registration("broker-a", 0, MASTER, &body, 1), 0);
        let mut b = registration("broker-b", 0, "10.0.1.1:10911", &body, 3);
        b.cluster_name = "OtherCluster";
        table.register(&b, 0);
        assert_eq!(table.topics_by_cluster(CLUSTER), vec!["T", "U"]);
        assert!(table.topics_by_cluster("Unknown").is_empty());
        assert_eq!(table.wipe_write_perm("broker-a"), 2);
        assert_eq!(queue_nums(&table, "T", "broker-a"), Some((4, 4)));
        assert_eq!(queue_nums(&table, "T", "broker-b"), Some((4, 6)));
        assert_eq!(table.add_write_perm("broker-a"), 2);
        assert_eq!(queue_nums(&table, "T", "broker-a"), Some((4, 6)));
        assert_eq!(table.wipe_write_perm("nobody"), 0);
        table.delete_topic("T", Some("OtherCluster"));
        assert_eq!(table.topics_by_cluster("OtherCluster"), vec!["U"]);
        assert_eq!(table.topics_by_cluster(CLUSTER), vec!["T", "U"]);
        table.delete_topic("T", Some("Unknown"));
        assert!(table.pickup_topic_route_data("T").is_some());
        table.delete_topic("T", Some(CLUSTER));
        assert!(table.pickup_topic_route_data("T").is_none());
        table.delete_topic("U", None);
        assert!(table.all_topics().is_empty());
    }

    #[test]
    fn register_topic_adds_routes_only_for_new_topics_on_known_brokers() {
        let mut table = RouteTable::new();
        table.register(&registration("broker-a", 0, MASTER, &wrapper(1, &[]), 1), 0);
        let queue = |name: &str| QueueData {
            broker_name: name.into(),
            read_queue_nums: 2,
            write_queue_nums: 2,
            perm: 6,
            topic_sys_flag: 0,
        };
        table.register_topic("X", &[queue("broker-a"), queue("unknown")]);
        assert!(table.pickup_topic_route_data("X").is_none());
        table.register_topic("X", &[queue("broker-a")]);
        assert_eq!(queue_nums(&table, "X", "broker-a"), Some((2, 6)));
        let mut other = queue("broker-a");
        other.write_queue_nums = 9;
        table.register_topic("X", &[other]);
        assert_eq!(
            queue_nums(&table, "X", "broker-a"),
            Some((2, 6)),
            "existing routes stay"
        );
    }

    #[test]
    fn system_and_unit_topic_lists_are_derived_from_the_tables() {
        let mut table = RouteTable::new();
        let mut body = wrapper(1, &[("Unit", 1), ("Sub", 1), ("Both", 1)]);
        for (name, flag) in [("Unit", 1), ("Sub", 2), ("Both", 3)] {
            body.topic_config_table
                .get_mut(name)
                .unwrap()
                .topic_sys_flag = flag;
        }
        table.register(&registration("broker-a", 0, MASTER, &body, 1), 0);
        let (topics, addr) = table.system_topics();
        assert_eq!(topics, vec![CLUSTER, "broker-a"]);
        assert_eq!(addr.as_deref(), Some(MASTER));
        assert_eq!(
            table.topics_by_sys_flag(has_unit_flag),
            vec!["Both", "Unit"]
        );
        assert_eq!(
            table.topics_by_sys_flag(has_unit_sub_flag),
            vec!["Both", "Sub"]
        );
    }

    #[test]
    fn zone_and_acting_master_flags_reach_the_route_broker_data() {
        let mut table = RouteTable::new();
        let body = wrapper(1, &[("T", 4), ("Z", 1)]);
        let mut reg = registration("broker-a", 0, MASTER, &body, 1);
        reg.zone_name = Some("zone-1");
        reg.enable_acting_master = Some(true);
        table.register(&reg, 0);
        let route = table.pickup_topic_route_data("T").unwrap();
        assert_eq!(route.broker_datas[0].zone_name.as_deref(), Some("zone-1"));
        assert!(route.broker_datas[0].enable_acting_master);
        assert_eq!(route.topic_queue_mapping_by_broker, None);
        reg.zone_name = None;
        reg.enable_acting_master = None;
        table.register(&reg, 1);
        let route = table.pickup_topic_route_data("T").unwrap();
        assert_eq!(route.broker_datas[0].zone_name, None);
        assert!(
            !route.broker_datas[0].enable_acting_master,
            "a 4.x broker is never acting master"
        );
    }
}
