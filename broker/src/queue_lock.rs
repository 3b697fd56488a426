//! Queue locks for orderly consumers (`RebalanceLockManager` in Java):
//! LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42), reference 2.3.17 and 8.6.
//!
//! An orderly push consumer only consumes a queue it holds the lock of on the
//! queue's master. The table maps (group, queue) to the client holding it and
//! when it last renewed:
//!
//! ```text
//! group → MessageQueue{topic, brokerName, queueId} → (clientId, last_update_ms)
//! ```
//!
//! A lock is granted when the queue is unlocked, its lock expired (no renewal
//! for [`LOCK_MAX_LIVE_TIME_MS`], 60 s), or already held by the same client
//! (a renewal). Clients renew every 20 s and consider their own lock stale
//! after 30 s, so a live client never loses a lock to expiry.
//!
//! While a group holds any unexpired lock, retry messages of that group go
//! straight to its DLQ ([`QueueLockTable::group_holds_locks`]).
//!
//! # Invariants
//!
//! - A queue is held by at most one client at a time: a lock is handed to
//!   another client only after it expired.
//! - Unlocking removes only entries held by the requesting client.
//! - Time is a parameter; nothing here reads a clock.

use std::collections::BTreeMap;

use bytes::Bytes;
use ringmq_protocol::code::{request_code, response_code};
use ringmq_protocol::command::RemotingCommand;
use ringmq_protocol::json::{
    JsonStyle, LockBatchRequestBody, LockBatchResponseBody, MessageQueue, UnlockBatchRequestBody,
};

/// How long a lock lives without renewal
/// (`rocketmq.broker.rebalance.lockMaxLiveTime`).
pub const LOCK_MAX_LIVE_TIME_MS: i64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct LockEntry {
    client_id: String,
    last_update_ms: i64,
}

impl LockEntry {
    fn is_expired(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_update_ms) > LOCK_MAX_LIVE_TIME_MS
    }

    fn is_held_by(&self, client_id: &str, now_ms: i64) -> bool {
        self.client_id == client_id && !self.is_expired(now_ms)
    }
}

/// Every queue lock of this broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueLockTable {
    groups: BTreeMap<String, BTreeMap<MessageQueue, LockEntry>>,
}

impl QueueLockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Java's `tryLockBatch`: locks or renews each of `queues` for
    /// `client_id` where allowed, and returns the queues the client now
    /// holds, in the order asked.
    pub fn try_lock_batch(
        &mut self,
        group: &str,
        queues: &[MessageQueue],
        client_id: &str,
        now_ms: i64,
    ) -> Vec<MessageQueue> {
        let locks = self.groups.entry(group.to_owned()).or_default();
        let mut locked = Vec::with_capacity(queues.len());
        for queue in queues {
            match locks.get_mut(queue) {
                None => {
                    locks.insert(
                        queue.clone(),
                        LockEntry {
                            client_id: client_id.to_owned(),
                            last_update_ms: now_ms,
                        },
                    );
                }
                Some(entry) if entry.is_held_by(client_id, now_ms) => {
                    entry.last_update_ms = now_ms;
                }
                Some(entry) if entry.is_expired(now_ms) => {
                    entry.client_id = client_id.to_owned();
                    entry.last_update_ms = now_ms;
                }
                Some(_) => continue,
            }
            locked.push(queue.clone());
        }
        if locks.is_empty() {
            self.groups.remove(group);
        }
        locked
    }

    /// Java's `unlockBatch`: releases the locks of `queues` that
    /// `client_id` holds (expired or not); others' locks stay.
    pub fn unlock_batch(&mut self, group: &str, queues: &[MessageQueue], client_id: &str) {
        let Some(locks) = self.groups.get_mut(group) else {
            return;
        };
        for queue in queues {
            if locks
                .get(queue)
                .is_some_and(|entry| entry.client_id == client_id)
            {
                locks.remove(queue);
            }
        }
        if locks.is_empty() {
            self.groups.remove(group);
        }
    }

    /// Whether `queue` is locked by `client_id` and not expired.
    pub fn is_locked_by(
        &self,
        group: &str,
        queue: &MessageQueue,
        client_id: &str,
        now_ms: i64,
    ) -> bool {
        self.groups
            .get(group)
            .and_then(|locks| locks.get(queue))
            .is_some_and(|entry| entry.is_held_by(client_id, now_ms))
    }

    /// Whether `group` holds any unexpired lock (Java's
    /// `!isLockAllExpired(group)`): its retry messages then go straight to
    /// the DLQ, because an orderly consumer already retried locally.
    pub fn group_holds_locks(&self, group: &str, now_ms: i64) -> bool {
        self.groups
            .get(group)
            .is_some_and(|locks| locks.values().any(|entry| !entry.is_expired(now_ms)))
    }

    /// Drops expired locks, so that groups gone for good do not stay in
    /// memory (Java keeps them forever). Returns how many went.
    pub fn remove_expired(&mut self, now_ms: i64) -> usize {
        let mut removed = 0;
        self.groups.retain(|_, locks| {
            let before = locks.len();
            locks.retain(|_, entry| !entry.is_expired(now_ms));
            removed += before - locks.len();
            !locks.is_empty()
        });
        removed
    }

    /// LOCK_BATCH_MQ (41): body `LockBatchRequestBody`; answers
    /// `LockBatchResponseBody` with the queues now locked by the client. A
    /// body that does not parse is SYSTEM_ERROR.
    pub fn lock_batch_mq(&mut self, request: &RemotingCommand, now_ms: i64) -> RemotingCommand {
        let body = match LockBatchRequestBody::from_json(request.body_bytes()) {
            Ok(body) => body,
            Err(err) => return bad_body(request, "LockBatchRequestBody", &err),
        };
        let locked =
            self.try_lock_batch(&body.consumer_group, &body.mq_set, &body.client_id, now_ms);
        let mut out = Vec::new();
        LockBatchResponseBody {
            lock_ok_mq_set: locked,
        }
        .to_json(&mut out, JsonStyle::Java);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
            .with_body(Bytes::from(out))
    }

    /// UNLOCK_BATCH_MQ (42): body `UnlockBatchRequestBody`; answers SUCCESS
    /// (often sent one-way; the caller then drops the response).
    pub fn unlock_batch_mq(&mut self, request: &RemotingCommand) -> RemotingCommand {
        let body = match UnlockBatchRequestBody::from_json(request.body_bytes()) {
            Ok(body) => body,
            Err(err) => return bad_body(request, "UnlockBatchRequestBody", &err),
        };
        self.unlock_batch(&body.consumer_group, &body.mq_set, &body.client_id);
        RemotingCommand::new_response(response_code::SUCCESS, request.opaque, None)
    }

    /// Serves LOCK_BATCH_MQ and UNLOCK_BATCH_MQ; `None` for other codes.
    pub fn handle(&mut self, request: &RemotingCommand, now_ms: i64) -> Option<RemotingCommand> {
        match request.code {
            request_code::LOCK_BATCH_MQ => Some(self.lock_batch_mq(request, now_ms)),
            request_code::UNLOCK_BATCH_MQ => Some(self.unlock_batch_mq(request)),
            _ => None,
        }
    }
}

fn bad_body(
    request: &RemotingCommand,
    what: &str,
    err: &ringmq_protocol::json::JsonError,
) -> RemotingCommand {
    RemotingCommand::new_response(
        response_code::SYSTEM_ERROR,
        request.opaque,
        Some(format!("bad {what}: {err}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_protocol::command::ExtFields;

    const NOW: i64 = 1_700_000_000_000;

    fn queues(ids: &[i32]) -> Vec<MessageQueue> {
        ids.iter()
            .map(|&id| MessageQueue::new("T", "broker-a", id))
            .collect()
    }

    fn lock_request(code: i32, client: &str, ids: &[i32]) -> RemotingCommand {
        let body = LockBatchRequestBody {
            consumer_group: "g".to_owned(),
            client_id: client.to_owned(),
            only_this_broker: false,
            mq_set: queues(ids),
        };
        let mut out = Vec::new();
        body.to_json(&mut out, JsonStyle::Java);
        let mut request =
            RemotingCommand::new_request(code, ExtFields::new()).with_body(Bytes::from(out));
        request.opaque = 77;
        request
    }

    #[test]
    fn free_queues_are_locked_and_renewed_by_their_holder() {
        let mut table = QueueLockTable::new();
        assert_eq!(
            table.try_lock_batch("g", &queues(&[0, 1]), "c1", NOW),
            queues(&[0, 1])
        );
        assert!(table.is_locked_by("g", &queues(&[0])[0], "c1", NOW + 1));
        // Renewal at 50 s pushes expiry to 110 s.
        assert_eq!(
            table.try_lock_batch("g", &queues(&[0]), "c1", NOW + 50_000),
            queues(&[0])
        );
        assert!(table.is_locked_by("g", &queues(&[0])[0], "c1", NOW + 100_000));
        assert!(!table.is_locked_by("g", &queues(&[1])[0], "c1", NOW + 100_000));
    }

    #[test]
    fn another_client_gets_a_lock_only_after_it_expired() {
        let mut table = QueueLockTable::new();
        table.try_lock_batch("g", &queues(&[0, 1]), "c1", NOW);
        assert!(
            table
                .try_lock_batch("g", &queues(&[0, 1]), "c2", NOW + 60_000)
                .is_empty()
        );
        table.try_lock_batch("g", &queues(&[1]), "c1", NOW + 30_000);
        assert_eq!(
            table.try_lock_batch("g", &queues(&[0, 1, 2]), "c2", NOW + 60_001),
            queues(&[0, 2])
        );
        assert!(table.is_locked_by("g", &queues(&[0])[0], "c2", NOW + 60_001));
        assert!(table.is_locked_by("g", &queues(&[1])[0], "c1", NOW + 60_001));
        // Other groups are independent.
        assert_eq!(
            table.try_lock_batch("h", &queues(&[1]), "c2", NOW),
            queues(&[1])
        );
    }

    #[test]
    fn unlock_releases_only_the_callers_locks() {
        let mut table = QueueLockTable::new();
        table.try_lock_batch("g", &queues(&[0]), "c1", NOW);
        table.try_lock_batch("g", &queues(&[1]), "c2", NOW);
        table.unlock_batch("g", &queues(&[0, 1]), "c1");
        assert!(!table.is_locked_by("g", &queues(&[0])[0], "c1", NOW));
        assert!(table.is_locked_by("g", &queues(&[1])[0], "c2", NOW));
        assert_eq!(
            table.try_lock_batch("g", &queues(&[0]), "c3", NOW),
            queues(&[0])
        );
        table.unlock_batch("absent", &queues(&[0]), "c1");
    }

    #[test]
    fn group_holds_locks_until_all_expire() {
        let mut table = QueueLockTable::new();
        assert!(!table.group_holds_locks("g", NOW));
        table.try_lock_batch("g", &queues(&[0]), "c1", NOW);
        table.try_lock_batch("g", &queues(&[1]), "c1", NOW + 30_000);
        assert!(table.group_holds_locks("g", NOW + 60_001));
        assert!(table.group_holds_locks("g", NOW + 90_000));
        assert!(!table.group_holds_locks("g", NOW + 90_001));
        assert!(!table.group_holds_locks("other", NOW));
    }

    #[test]
    fn remove_expired_forgets_dead_locks_and_empty_groups() {
        let mut table = QueueLockTable::new();
        table.try_lock_batch("g", &queues(&[0, 1]), "c1", NOW);
        table.try_lock_batch("h", &queues(&[0]), "c1", NOW + 50_000);
        assert_eq!(table.remove_expired(NOW + 60_001), 2);
        assert!(!table.groups.contains_key("g"));
        assert!(table.group_holds_locks("h", NOW + 60_001));
    }

    #[test]
    fn lock_batch_mq_answers_the_locked_set() {
        let mut table = QueueLockTable::new();
        table.try_lock_batch("g", &queues(&[1]), "other", NOW);
        let request = lock_request(request_code::LOCK_BATCH_MQ, "c1", &[0, 1]);
        let response = table.handle(&request, NOW).unwrap();
        assert_eq!(response.code, response_code::SUCCESS);
        assert_eq!(response.opaque, 77);
        let body = LockBatchResponseBody::from_json(response.body_bytes()).unwrap();
        assert_eq!(body.lock_ok_mq_set, queues(&[0]));
        let text = String::from_utf8(response.body_bytes().to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#
        );
    }

    #[test]
    fn unlock_batch_mq_releases_and_bad_bodies_are_system_errors() {
        let mut table = QueueLockTable::new();
        table.handle(&lock_request(request_code::LOCK_BATCH_MQ, "c1", &[0]), NOW);
        let response = table
            .handle(
                &lock_request(request_code::UNLOCK_BATCH_MQ, "c1", &[0]),
                NOW,
            )
            .unwrap();
        assert_eq!(response.code, response_code::SUCCESS);
        assert!(!table.group_holds_locks("g", NOW));
        let garbage = RemotingCommand::new_request(request_code::LOCK_BATCH_MQ, ExtFields::new())
            .with_body(Bytes::from_static(b"{"));
        assert_eq!(
            table.handle(&garbage, NOW).unwrap().code,
            response_code::SYSTEM_ERROR
        );
        let other = RemotingCommand::new_request(request_code::HEART_BEAT, ExtFields::new());
        assert_eq!(table.handle(&other, NOW), None);
    }

    /// xorshift64: a tiny seeded generator, so a failure replays exactly.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn seeds() -> Vec<u64> {
        match std::env::var("RINGMQ_TEST_SEED") {
            Ok(seed) => vec![seed.parse().expect("RINGMQ_TEST_SEED is a u64")],
            Err(_) => (1..=20).map(|i| 0x9E37_79B9_7F4A_7C15 ^ i).collect(),
        }
    }

    #[test]
    fn random_lock_traffic_never_gives_a_live_lock_to_a_second_client() {
        for seed in seeds() {
            let mut rng = Rng(seed);
            let mut table = QueueLockTable::new();
            // Model: queue id → (holder, last renewal).
            let mut model: BTreeMap<i32, (String, i64)> = BTreeMap::new();
            let mut now = NOW;
            for step in 0..2_000 {
                now += i64::try_from(rng.below(40_000)).unwrap();
                let client = format!("c{}", rng.below(3));
                let ids: Vec<i32> = (0..4).filter(|_| rng.below(2) == 0).collect();
                let context = format!("seed {seed} step {step} (RINGMQ_TEST_SEED={seed} replays)");
                if rng.below(4) == 0 {
                    table.unlock_batch("g", &queues(&ids), &client);
                    model.retain(|id, (holder, _)| !(ids.contains(id) && *holder == client));
                } else {
                    let granted = table.try_lock_batch("g", &queues(&ids), &client, now);
                    for queue in &granted {
                        if let Some((holder, last)) = model.get(&queue.queue_id) {
                            assert!(
                                *holder == client || now - last > LOCK_MAX_LIVE_TIME_MS,
                                "{context}: queue {} taken from live holder {holder}",
                                queue.queue_id
                            );
                        }
                        model.insert(queue.queue_id, (client.clone(), now));
                        assert!(table.is_locked_by("g", queue, &client, now), "{context}");
                    }
                    for id in ids
                        .iter()
                        .filter(|id| !granted.iter().any(|q| q.queue_id == **id))
                    {
                        let (holder, last) = model.get(id).expect("a refused queue has a holder");
                        assert!(
                            *holder != client && now - last <= LOCK_MAX_LIVE_TIME_MS,
                            "{context}"
                        );
                    }
                }
                for id in 0..4 {
                    let holders = ["c0", "c1", "c2"]
                        .iter()
                        .filter(|c| table.is_locked_by("g", &queues(&[id])[0], c, now))
                        .count();
                    assert!(holders <= 1, "{context}: queue {id} has {holders} holders");
                }
                let live = model
                    .values()
                    .any(|(_, last)| now - last <= LOCK_MAX_LIVE_TIME_MS);
                assert_eq!(table.group_holds_locks("g", now), live, "{context}");
            }
        }
    }
}
