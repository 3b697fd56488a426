//! The pieces every scenario uses: names, clients built the same way, recording listeners,
//! bounded polling, and queue/offset look-ups.
//!
//! # Invariants
//!
//! * Every client gets its own instance name (`<prefix>-<scenario>-<role>`), so two consumers
//!   of one group in this process are two group members, as two processes would be.
//! * Every wait is a poll with a deadline of at most [`WAIT_MAX`]; nothing asserts on how long
//!   something took.
//! * Every client call that can block is bounded by [`CALL_TIMEOUT`].

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Duration;

use anyhow::Context as _;
use anyhow::anyhow;
use anyhow::bail;
use anyhow::ensure;
use rocketmq_client_rust::ClientConfig;
use rocketmq_client_rust::ClientOptions;
use rocketmq_client_rust::ClientResult;
use rocketmq_client_rust::ClientRuntime;
use rocketmq_client_rust::ConsumeConcurrentlyContext;
use rocketmq_client_rust::ConsumeConcurrentlyStatus;
use rocketmq_client_rust::ConsumeOrderlyContext;
use rocketmq_client_rust::ConsumeOrderlyStatus;
use rocketmq_client_rust::DefaultMQProducer;
#[allow(deprecated)] // The classic pull consumer is the one client API that reads a group's
// committed offset from the broker without taking part in the group's rebalance.
use rocketmq_client_rust::DefaultMQPullConsumer;
use rocketmq_client_rust::DefaultMQPushConsumer;
use rocketmq_client_rust::MQPushConsumer;
use rocketmq_client_rust::MessageListenerConcurrently;
use rocketmq_client_rust::MessageListenerOrderly;
use rocketmq_client_rust::MessageSelector;
use rocketmq_client_rust::SendResult;
use rocketmq_client_rust::SendStatus;
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;

use crate::check::Delivery;
use crate::check::INDEX_PROPERTY;
use crate::check::Sent;

/// Longest any single wait polls before the scenario fails.
pub const WAIT_MAX: Duration = Duration::from_secs(30);
/// Pause between two polls of a condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Upper bound on one client call (start, send, query, shutdown).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Client-side timeout of one send, in milliseconds.
pub const SEND_TIMEOUT_MS: u64 = 5_000;
/// Queues of every topic a scenario creates through the admin API.
pub const TOPIC_QUEUE_COUNT: usize = 4;
/// The broker's template topic for creation (RocketMQ's TBW102).
pub const CREATE_TOPIC_KEY: &str = "TBW102";
/// Where a group's `%RETRY%` topic name starts.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";

/// What every scenario gets: the name server, the name prefix and the shared client runtime.
pub struct Env {
    /// Name server address (host:port).
    pub namesrv: String,
    /// Prefix of every topic, group and instance name of this run.
    pub prefix: String,
    /// The client runtime all clients of the run share.
    pub runtime: Arc<ClientRuntime>,
}

impl Env {
    /// Name of a scenario's resource: `<prefix>-<scenario>-<what>`.
    pub fn name(&self, scenario: &str, what: &str) -> String {
        format!("{}-{scenario}-{what}", self.prefix)
    }

    /// Client identity for one role in a scenario.
    pub fn client_config(&self, instance: &str) -> anyhow::Result<ClientConfig> {
        ClientConfig::builder()
            .namesrv_addr(self.namesrv.as_str())
            .client_ip("127.0.0.1")
            .instance_name(instance)
            .build()
            .map_err(|e| anyhow!("client config for {instance}: {e}"))
    }

    /// A started producer in group `<prefix>-<scenario>-producer`.
    pub async fn producer(&self, scenario: &str) -> anyhow::Result<DefaultMQProducer> {
        let instance = self.name(scenario, "producer");
        let mut producer = DefaultMQProducer::builder(Arc::clone(&self.runtime))
            .client_config(self.client_config(&instance)?)
            .name_server_addr(self.namesrv.as_str())
            .producer_group(instance.as_str())
            .build();
        bounded("producer start", producer.start()).await?;
        Ok(producer)
    }

    /// A started producer of `scenario` ([`Env::producer`]) and the scenario's topic
    /// `<prefix>-<scenario>-topic`, created through it ([`Env::create_topic`]).
    pub async fn producer_and_topic(
        &self,
        scenario: &str,
    ) -> anyhow::Result<(DefaultMQProducer, String)> {
        let topic = self.name(scenario, "topic");
        let mut producer = self.producer(scenario).await?;
        self.create_topic(&mut producer, &topic).await?;
        Ok((producer, topic))
    }

    /// Creates `topic` with [`TOPIC_QUEUE_COUNT`] queues through the admin API
    /// (UPDATE_AND_CREATE_TOPIC on every master of TBW102's route) and waits until the name
    /// server routes it.
    pub async fn create_topic(
        &self,
        producer: &mut DefaultMQProducer,
        topic: &str,
    ) -> anyhow::Result<()> {
        let queue_count = i32::try_from(TOPIC_QUEUE_COUNT).context("queue count")?;
        bounded(
            "create topic",
            producer.create_topic(CREATE_TOPIC_KEY, topic, queue_count, HashMap::new()),
        )
        .await?;
        let queues = publish_queues(producer, topic).await?;
        if queues.len() != TOPIC_QUEUE_COUNT {
            bail!(
                "topic {topic} created with {TOPIC_QUEUE_COUNT} queues is routed with {}",
                queues.len()
            );
        }
        Ok(())
    }

    /// A push consumer (not started) with a recording concurrent listener.
    pub async fn push_consumer(
        &self,
        spec: &ConsumerSpec<'_>,
        listener: impl MessageListenerConcurrently + 'static,
    ) -> anyhow::Result<DefaultMQPushConsumer> {
        let mut consumer = self.push_consumer_unregistered(spec).await?;
        consumer.register_message_listener_concurrently(listener);
        Ok(consumer)
    }

    /// A push consumer (not started) with an orderly listener.
    pub async fn push_consumer_orderly(
        &self,
        spec: &ConsumerSpec<'_>,
        listener: impl MessageListenerOrderly + 'static,
    ) -> anyhow::Result<DefaultMQPushConsumer> {
        let mut consumer = self.push_consumer_unregistered(spec).await?;
        consumer.register_message_listener_orderly(listener);
        Ok(consumer)
    }

    /// A push consumer (not started) subscribed with `selector` (SQL92 or tag) instead of
    /// `spec.expression`, with a concurrent listener.
    pub async fn push_consumer_with_selector(
        &self,
        spec: &ConsumerSpec<'_>,
        selector: MessageSelector,
        listener: impl MessageListenerConcurrently + 'static,
    ) -> anyhow::Result<DefaultMQPushConsumer> {
        let mut consumer = self.push_consumer_builder(spec)?;
        bounded(
            "push consumer subscribe with selector",
            consumer.subscribe_with_selector(spec.topic, Some(selector)),
        )
        .await?;
        consumer.register_message_listener_concurrently(listener);
        Ok(consumer)
    }

    fn push_consumer_builder(
        &self,
        spec: &ConsumerSpec<'_>,
    ) -> anyhow::Result<DefaultMQPushConsumer> {
        Ok(DefaultMQPushConsumer::builder(Arc::clone(&self.runtime))
            .client_config(self.client_config(spec.instance)?)
            .name_server_addr(self.namesrv.as_str())
            .consumer_group(spec.group)
            .message_model(spec.model)
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .build())
    }

    async fn push_consumer_unregistered(
        &self,
        spec: &ConsumerSpec<'_>,
    ) -> anyhow::Result<DefaultMQPushConsumer> {
        let mut consumer = self.push_consumer_builder(spec)?;
        bounded(
            "push consumer subscribe",
            consumer.subscribe(spec.topic, spec.expression),
        )
        .await?;
        Ok(consumer)
    }

    /// A started push consumer with a [`RecordingListener`] that records into `recorder` under
    /// the name `spec.instance`.
    pub async fn recording_consumer(
        &self,
        spec: &ConsumerSpec<'_>,
        recorder: &Recorder,
    ) -> anyhow::Result<DefaultMQPushConsumer> {
        let listener = RecordingListener {
            consumer: spec.instance.to_string(),
            recorder: recorder.clone(),
        };
        let mut consumer = self.push_consumer(spec, listener).await?;
        bounded("push consumer start", consumer.start()).await?;
        Ok(consumer)
    }

    /// Starts a recording push consumer for `spec`, waits until every message of `wanted`
    /// arrived (the wait named `what`) and every queue of `spec.topic` is committed up to
    /// `max`, shuts the consumer down (also when a wait failed) and returns everything it
    /// recorded until its shutdown.
    pub async fn consume_until_drained(
        &self,
        spec: &ConsumerSpec<'_>,
        what: &str,
        wanted: &[Sent],
        max: &BTreeMap<i32, i64>,
    ) -> anyhow::Result<Vec<Delivery>> {
        let recorder = Recorder::default();
        let mut consumer = self.recording_consumer(spec, &recorder).await?;
        let outcome = wait_consumed(&recorder, &[&consumer], what, wanted, spec.topic, max).await;
        bounded_shutdown("push consumer", consumer.shutdown()).await?;
        outcome?;
        // Taken after the shutdown, so that a late duplicate is in it too.
        Ok(recorder.snapshot())
    }

    /// A started classic pull consumer in `group`, used only to read committed offsets.
    #[allow(deprecated)]
    pub async fn offset_reader(
        &self,
        scenario: &str,
        group: &str,
    ) -> anyhow::Result<DefaultMQPullConsumer> {
        let instance = self.name(scenario, "offset-reader");
        let consumer = DefaultMQPullConsumer::builder(Arc::clone(&self.runtime))
            .client_options(ClientOptions::legacy(self.client_config(&instance)?))
            .name_server_addr(self.namesrv.as_str())
            .consumer_group(group)
            .build()
            .map_err(|e| anyhow!("offset reader for {group}: {e}"))?;
        bounded("offset reader start", consumer.start()).await?;
        Ok(consumer)
    }
}

/// Who a push consumer is and what it subscribes to.
pub struct ConsumerSpec<'a> {
    /// Consumer group.
    pub group: &'a str,
    /// Instance name (unique per client).
    pub instance: &'a str,
    /// Topic to subscribe.
    pub topic: &'a str,
    /// Subscription expression (`*` or `TagA || TagB`).
    pub expression: &'a str,
    /// Clustering or broadcasting.
    pub model: MessageModel,
}

impl<'a> ConsumerSpec<'a> {
    /// A clustering subscription to every message (`*`) of `topic`.
    pub fn clustering(group: &'a str, instance: &'a str, topic: &'a str) -> Self {
        Self {
            group,
            instance,
            topic,
            expression: "*",
            model: MessageModel::Clustering,
        }
    }
}

/// Checks one send result and returns it; `topic` is where it should have gone.
pub fn check_send_result(
    what: &str,
    topic: &str,
    result: Option<SendResult>,
) -> anyhow::Result<SendResult> {
    let result = result.ok_or_else(|| anyhow!("{what}: no send result"))?;
    ensure!(
        result.send_status == SendStatus::SendOk,
        "{what}: status {:?}, expected SendOk",
        result.send_status
    );
    let msg_id = result
        .msg_id
        .as_ref()
        .map(|id| id.to_string())
        .unwrap_or_default();
    ensure!(!msg_id.is_empty(), "{what}: send result has no msgId");
    let queue = result
        .message_queue
        .as_ref()
        .ok_or_else(|| anyhow!("{what}: send result has no queue"))?;
    ensure!(
        queue.topic_str() == topic,
        "{what}: sent to topic {:?}, expected {topic:?}",
        queue.topic_str()
    );
    Ok(result)
}

/// Sync-sends every message of `messages` to `topic`, one bounded `send_with_timeout` each, in
/// order, and checks every result ([`check_send_result`], named `send of <id>`). Returns the
/// results in the order of `messages`.
pub async fn send_all(
    producer: &DefaultMQProducer,
    topic: &str,
    messages: &[Sent],
) -> anyhow::Result<Vec<SendResult>> {
    send_all_as("send", producer, topic, messages).await
}

/// [`send_all`] with each result check named `<what> of <id>`.
pub async fn send_all_as(
    what: &str,
    producer: &DefaultMQProducer,
    topic: &str,
    messages: &[Sent],
) -> anyhow::Result<Vec<SendResult>> {
    let mut results = Vec::with_capacity(messages.len());
    for sent in messages {
        let result = bounded(
            "sync send",
            producer.send_with_timeout(message(topic, sent)?, SEND_TIMEOUT_MS),
        )
        .await?;
        results.push(check_send_result(
            &format!("{what} of {}", sent.id()),
            topic,
            result,
        )?);
    }
    Ok(results)
}

/// Waits until `recorder` holds every message of `wanted` (the wait named `what`) and the
/// `consumers` together committed every queue of `topic` up to `max`.
pub async fn wait_consumed(
    recorder: &Recorder,
    consumers: &[&DefaultMQPushConsumer],
    what: &str,
    wanted: &[Sent],
    topic: &str,
    max: &BTreeMap<i32, i64>,
) -> anyhow::Result<()> {
    if let Err(error) = recorder.wait_all(what, wanted).await {
        // Where the consumers stand tells a skipped offset (commit offsets at
        // the max, a hole in the delivered offsets) from a stalled pull.
        let mut commits = BTreeMap::new();
        for consumer in consumers {
            match assigned_offsets(consumer, topic).await {
                Ok(offsets) => commits.extend(offsets),
                Err(e) => return Err(error.context(format!("commit offsets unknown: {e:#}"))),
            }
        }
        let mut delivered: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for delivery in recorder.snapshot() {
            if delivery.queue_topic == topic {
                delivered
                    .entry(delivery.queue_id)
                    .or_default()
                    .push(delivery.queue_offset);
            }
        }
        for offsets in delivered.values_mut() {
            offsets.sort_unstable();
            offsets.truncate(DELIVERED_OFFSETS_SHOWN);
        }
        return Err(error.context(format!(
            "commit offsets {commits:?}, max offsets {max:?}, delivered queue offsets {delivered:?}"
        )));
    }
    wait_drained(consumers, topic, max).await
}

/// Delivered queue offsets per queue a failed [`wait_consumed`] shows at most.
const DELIVERED_OFFSETS_SHOWN: usize = 64;

/// Runs one client call under [`CALL_TIMEOUT`], naming it in the error.
pub async fn bounded<T, F>(what: &str, call: F) -> anyhow::Result<T>
where
    F: Future<Output = ClientResult<T>>,
{
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(anyhow!("{what} failed: {e}")),
        Err(_) => Err(anyhow!(
            "{what} did not finish within {} s",
            CALL_TIMEOUT.as_secs()
        )),
    }
}

/// Runs a shutdown future under [`CALL_TIMEOUT`]; an error if it hangs.
pub async fn bounded_shutdown<F: Future<Output = ()>>(
    what: &str,
    shutdown: F,
) -> anyhow::Result<()> {
    tokio::time::timeout(CALL_TIMEOUT, shutdown)
        .await
        .map_err(|_| {
            anyhow!(
                "{what} shutdown did not finish within {} s",
                CALL_TIMEOUT.as_secs()
            )
        })
}

/// Polls `probe` until it returns `Ok(Some(value))`, at most [`WAIT_MAX`]. `Ok(None)` means
/// "not yet", an error is remembered and retried. On the deadline the error names `what`, the
/// last error, and the state `describe` gives.
pub async fn wait_for<T>(
    what: &str,
    mut probe: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
    describe: impl Fn() -> String,
) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        let last_error = match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        if tokio::time::Instant::now() >= deadline {
            let state = describe();
            let seconds = WAIT_MAX.as_secs();
            return Err(match last_error {
                Some(e) => anyhow!(
                    "gave up after {seconds} s waiting for {what}; last error: {e:#}; state: {state}"
                ),
                None => anyhow!("gave up after {seconds} s waiting for {what}; state: {state}"),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The publish queues of `topic` as the name server routes them (polls until routed).
pub async fn publish_queues(
    producer: &mut DefaultMQProducer,
    topic: &str,
) -> anyhow::Result<Vec<MessageQueue>> {
    // A manual loop rather than `wait_for`: the probe needs `&mut producer`.
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        // The route is re-read from the name server on every call.
        let last = match bounded(
            "fetch publish queues",
            producer.fetch_publish_message_queues(topic),
        )
        .await
        {
            Ok(queues) if !queues.is_empty() => return Ok(queues),
            Ok(_) => "an empty route".to_string(),
            Err(e) => format!("{e:#}"),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "gave up after {} s waiting for a route for topic {topic}; last answer: {last}",
                WAIT_MAX.as_secs()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Locks a mutex, ignoring poisoning (a panicking listener is reported by its own check).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds a test message: `keys[0]` unique, the index as a user property.
pub fn message(topic: &str, spec: &Sent) -> anyhow::Result<Message> {
    let mut builder = Message::builder()
        .topic(topic)
        .keys(spec.keys.clone())
        .body_slice(&spec.body);
    if let Some(tags) = &spec.tags {
        builder = builder.tags(tags.as_str());
    }
    builder
        .raw_property(INDEX_PROPERTY, spec.index.to_string())
        .map_err(|e| anyhow!("property {INDEX_PROPERTY}: {e}"))?
        .build()
        .map_err(|e| anyhow!("message {}: {e}", spec.id()))
}

/// The messages a scenario sends: `count` of them, tags chosen by `tags_of(index)`.
///
/// Bodies differ in content and length and contain non-ASCII and non-UTF-8 bytes; the second
/// key is shared by all messages of the scenario (RocketMQ allows several keys per message).
pub fn sent_messages(
    env: &Env,
    scenario: &str,
    count: u32,
    tags_of: impl Fn(u32) -> Option<String>,
) -> Vec<Sent> {
    (0..count)
        .map(|index| {
            let mut body = format!(
                "{} {scenario} message #{index} of {count} \u{00e9}\u{4e2d}\u{1f680} ",
                env.prefix
            )
            .into_bytes();
            body.extend_from_slice(&[0x00, 0xff, 0x0a, 0x0d]);
            body.extend(std::iter::repeat_n(
                b'a' + (index % 26) as u8,
                index as usize * 7,
            ));
            Sent {
                keys: vec![
                    env.name(scenario, &format!("k{index}")),
                    env.name(scenario, "shared"),
                ],
                tags: tags_of(index),
                body,
                index,
            }
        })
        .collect()
}

/// Records every delivery a listener sees, in delivery order.
#[derive(Clone, Default)]
pub struct Recorder {
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl Recorder {
    /// Appends one delivery.
    pub fn record(&self, consumer: &str, queue_topic: &str, message: &MessageExt) {
        lock(&self.deliveries).push(delivery(consumer, queue_topic, message));
    }

    /// A copy of everything recorded so far.
    pub fn snapshot(&self) -> Vec<Delivery> {
        lock(&self.deliveries).clone()
    }

    /// Waits until every message of `sent` was delivered at least once.
    pub async fn wait_all(&self, what: &str, sent: &[Sent]) -> anyhow::Result<()> {
        wait_for(
            what,
            async || {
                let snapshot = self.snapshot();
                Ok(crate::check::missing_ids(sent, &snapshot)
                    .is_empty()
                    .then_some(()))
            },
            || {
                let snapshot = self.snapshot();
                let missing = crate::check::missing_ids(sent, &snapshot);
                format!(
                    "{} deliveries, {} of {} messages missing, e.g. {:?}",
                    snapshot.len(),
                    missing.len(),
                    sent.len(),
                    missing.iter().take(5).collect::<Vec<_>>()
                )
            },
        )
        .await
    }
}

/// Converts what the client decoded into a [`Delivery`].
pub fn delivery(consumer: &str, queue_topic: &str, message: &MessageExt) -> Delivery {
    let inner = &message.message;
    Delivery {
        consumer: consumer.to_string(),
        topic: message.topic().to_string(),
        queue_topic: queue_topic.to_string(),
        queue_id: message.queue_id(),
        queue_offset: message.queue_offset(),
        keys: inner.keys().unwrap_or_default(),
        tags: inner.tags().map(str::to_string),
        body: inner.body_slice().to_vec(),
        index: inner.property(INDEX_PROPERTY).map(str::to_string),
        uniq_key: inner.property("UNIQ_KEY").map(str::to_string),
        msg_id: message.msg_id().to_string(),
        retry_topic: inner.property("RETRY_TOPIC").map(str::to_string),
        reconsume_times: message.reconsume_times(),
    }
}

/// A concurrent listener that records and succeeds.
pub struct RecordingListener {
    /// Instance name stored in each delivery.
    pub consumer: String,
    /// Where deliveries go.
    pub recorder: Recorder,
}

impl MessageListenerConcurrently for RecordingListener {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let queue_topic = context.get_message_queue().topic_str().to_string();
        for message in msgs {
            self.recorder.record(&self.consumer, &queue_topic, message);
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// An orderly listener that records, and notes any overlap of two calls on one queue.
pub struct OrderlyRecordingListener {
    /// Instance name stored in each delivery.
    pub consumer: String,
    /// Where deliveries go.
    pub recorder: Recorder,
    /// Queue ids with a call in progress.
    pub in_flight: Arc<Mutex<Vec<i32>>>,
    /// Queue ids on which two calls overlapped (must stay empty).
    pub overlaps: Arc<Mutex<Vec<i32>>>,
}

impl MessageListenerOrderly for OrderlyRecordingListener {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        context: &mut ConsumeOrderlyContext,
    ) -> ClientResult<ConsumeOrderlyStatus> {
        let queue = context.get_message_queue();
        let queue_id = queue.queue_id();
        let queue_topic = queue.topic_str().to_string();
        {
            let mut in_flight = lock(&self.in_flight);
            if in_flight.contains(&queue_id) {
                lock(&self.overlaps).push(queue_id);
            }
            in_flight.push(queue_id);
        }
        for message in msgs {
            self.recorder.record(&self.consumer, &queue_topic, message);
        }
        lock(&self.in_flight).retain(|id| *id != queue_id);
        Ok(ConsumeOrderlyStatus::Success)
    }
}

/// Queues currently assigned to a push consumer for `topic`, with its in-memory commit
/// offsets (from the client's running info), sorted by queue id.
pub async fn assigned_offsets(
    consumer: &DefaultMQPushConsumer,
    topic: &str,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let info = bounded("consumer running info", consumer.consumer_running_info()).await?;
    Ok(info
        .mq_table
        .iter()
        .filter(|(queue, _)| queue.topic_str() == topic)
        .map(|(queue, process_queue)| (queue.queue_id(), process_queue.commit_offset))
        .collect())
}

/// Max offsets of every queue of `topic`, by queue id, read from the broker.
pub async fn max_offsets(
    producer: &mut DefaultMQProducer,
    topic: &str,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let queues = publish_queues(producer, topic).await?;
    let mut offsets = BTreeMap::new();
    for queue in &queues {
        let max = bounded("max offset", producer.max_offset(queue)).await?;
        offsets.insert(queue.queue_id(), max);
    }
    Ok(offsets)
}

/// True when the commit offsets cover every queue up to its max offset. A queue with no
/// messages counts as drained whatever its commit offset (the client only learns of an empty
/// queue when a long-polling pull times out).
pub fn drained(commits: &BTreeMap<i32, i64>, max: &BTreeMap<i32, i64>) -> bool {
    max.iter().all(|(queue_id, max_offset)| {
        *max_offset == 0 || commits.get(queue_id).is_some_and(|c| c >= max_offset)
    })
}

/// Waits until the push consumers together have consumed (committed in memory) every queue of
/// `topic` up to `max`: after this, the broker has nothing more to deliver to them.
pub async fn wait_drained(
    consumers: &[&DefaultMQPushConsumer],
    topic: &str,
    max: &BTreeMap<i32, i64>,
) -> anyhow::Result<()> {
    let last = Mutex::new(BTreeMap::new());
    wait_for(
        &format!("the consumers to commit every queue of {topic} up to its max offset"),
        async || {
            let mut commits = BTreeMap::new();
            for consumer in consumers {
                commits.extend(assigned_offsets(consumer, topic).await?);
            }
            let done = drained(&commits, max);
            *lock(&last) = commits;
            Ok(done.then_some(()))
        },
        || format!("commit offsets {:?}, max offsets {max:?}", lock(&last)),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drained_needs_every_non_empty_queue_committed_to_its_max() {
        let max = BTreeMap::from([(0, 3), (1, 0), (2, 5)]);
        assert!(drained(&BTreeMap::from([(0, 3), (2, 5)]), &max));
        assert!(drained(&BTreeMap::from([(0, 3), (1, -1), (2, 6)]), &max));
        assert!(!drained(&BTreeMap::from([(0, 3), (2, 4)]), &max));
        assert!(!drained(&BTreeMap::from([(0, 3)]), &max));
    }

    #[test]
    fn send_result_must_be_ok_with_a_msg_id_and_on_the_topic() {
        let ok = SendResult {
            send_status: SendStatus::SendOk,
            msg_id: Some("7F0000010001".into()),
            message_queue: Some(MessageQueue::from_parts("t", "broker-a", 1)),
            ..SendResult::default()
        };
        assert_eq!(check_send_result("s", "t", Some(ok.clone())).unwrap(), ok);
        assert!(check_send_result("s", "t", None).is_err());
        assert!(check_send_result("s", "other", Some(ok.clone())).is_err());
        let not_ok = SendResult {
            send_status: SendStatus::FlushDiskTimeout,
            ..ok.clone()
        };
        assert!(check_send_result("s", "t", Some(not_ok)).is_err());
        let no_id = SendResult {
            msg_id: None,
            ..ok.clone()
        };
        assert!(check_send_result("s", "t", Some(no_id)).is_err());
        let no_queue = SendResult {
            message_queue: None,
            ..ok
        };
        assert!(check_send_result("s", "t", Some(no_queue)).is_err());
    }

    #[test]
    fn clustering_spec_subscribes_to_every_message_of_its_topic() {
        let spec = ConsumerSpec::clustering("g", "i", "t");
        assert_eq!(
            (spec.group, spec.instance, spec.topic, spec.expression),
            ("g", "i", "t", "*")
        );
        assert_eq!(spec.model, MessageModel::Clustering);
    }
}
