//! The name server's KV configuration (Java `KVConfigManager`): namespace →
//! key → value, held in memory. Persistence to `kvConfig.json` is the
//! caller's: changes report that the table must be written, and
//! [`KvConfig::to_file`] / [`KvConfig::from_file`] convert to and from the
//! file's body ([`KvConfigFile`]).
//!
//! # Invariants
//!
//! - No namespace maps to an empty table (deleting a namespace's last key
//!   removes the namespace, so GET_KVLIST_BY_NAMESPACE answers "not found"
//!   for it, as for a namespace never written).

use std::collections::BTreeMap;

use ringmq_protocol::json::KvConfigFile;

/// The KV namespace whose table REGISTER_BROKER returns to brokers and whose
/// entries give `orderTopicConf` (`NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG`).
pub const NAMESPACE_ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// The KV configuration tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvConfig {
    table: BTreeMap<String, BTreeMap<String, String>>,
}

impl KvConfig {
    /// An empty configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// The configuration read from `kvConfig.json`'s body (empty
    /// namespaces dropped).
    pub fn from_file(file: KvConfigFile) -> Self {
        let mut table = file.config_table;
        table.retain(|_, entries| !entries.is_empty());
        Self { table }
    }

    /// The body of `kvConfig.json`.
    pub fn to_file(&self) -> KvConfigFile {
        KvConfigFile {
            config_table: self.table.clone(),
        }
    }

    /// Sets a value; returns whether anything changed.
    pub fn put(&mut self, namespace: &str, key: &str, value: &str) -> bool {
        let entries = self.table.entry(namespace.to_owned()).or_default();
        let previous = entries.insert(key.to_owned(), value.to_owned());
        previous.as_deref() != Some(value)
    }

    /// A value.
    pub fn get(&self, namespace: &str, key: &str) -> Option<&str> {
        self.table.get(namespace)?.get(key).map(String::as_str)
    }

    /// Removes a value; returns whether it existed.
    pub fn delete(&mut self, namespace: &str, key: &str) -> bool {
        let Some(entries) = self.table.get_mut(namespace) else {
            return false;
        };
        let removed = entries.remove(key).is_some();
        if entries.is_empty() {
            self.table.remove(namespace);
        }
        removed
    }

    /// All entries of a namespace, or `None` if it has none.
    pub fn namespace(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.table.get(namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_delete_report_changes() {
        let mut kv = KvConfig::new();
        assert!(kv.put("ns", "k", "v"));
        assert!(!kv.put("ns", "k", "v"));
        assert!(kv.put("ns", "k", "w"));
        assert_eq!(kv.get("ns", "k"), Some("w"));
        assert_eq!(kv.get("ns", "other"), None);
        assert!(kv.delete("ns", "k"));
        assert!(!kv.delete("ns", "k"));
        assert_eq!(kv.namespace("ns"), None);
    }

    #[test]
    fn file_round_trip_drops_empty_namespaces() {
        let mut kv = KvConfig::new();
        kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "T", "broker-a:4");
        let mut file = kv.to_file();
        file.config_table.insert("empty".into(), BTreeMap::new());
        let again = KvConfig::from_file(file);
        assert_eq!(again, kv);
        assert_eq!(
            again.get(NAMESPACE_ORDER_TOPIC_CONFIG, "T"),
            Some("broker-a:4")
        );
    }
}
