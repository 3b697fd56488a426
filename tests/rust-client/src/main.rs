//! `rust-capture`: drives `rocketmq-client-rust` 1.0.0 through the capture scenario.
//!
//! The capture server (`scripts/capture/capture_server.py`) records every request frame it
//! receives; this binary makes the Rust client send the interesting ones, in this order:
//!
//! 1. `DefaultMQProducer`: start, one sync send with keys and tags, one batch of three, shutdown.
//! 2. `DefaultMQPullConsumer` (classic pull, deprecated but available): max offset, consumer
//!    offset query, pull at 0, pull again at `nextBeginOffset`, offset update, shutdown.
//! 3. `DefaultLitePullConsumer` in assign mode: assign, seek(0), poll, `commit_sync`, committed.
//! 4. `DefaultMQPushConsumer`: subscribe `*`, start, wait for one message, shutdown.
//!
//! Usage: `rust-capture <namesrv host:port>`.
//!
//! # Invariants
//!
//! * Every step is bounded by [`STEP_TIMEOUT`]; a failed or timed-out step is reported and the
//!   scenario continues, so a partial capture still happens.
//! * A watchdog thread ends the process after [`WATCHDOG`] whatever happens.
//! * Exit code: 0 all steps succeeded, 1 some step failed, 2 watchdog, 64 usage error.

#![allow(deprecated)] // DefaultMQPullConsumer is deprecated upstream but is what emits PULL_MESSAGE.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketmq_client_rust::ClientConfig;
use rocketmq_client_rust::ClientError;
use rocketmq_client_rust::ClientOptions;
use rocketmq_client_rust::ClientResult;
use rocketmq_client_rust::ClientRuntime;
use rocketmq_client_rust::ClientRuntimeConfig;
use rocketmq_client_rust::ConsumeConcurrentlyContext;
use rocketmq_client_rust::ConsumeConcurrentlyStatus;
use rocketmq_client_rust::DefaultLitePullConsumer;
use rocketmq_client_rust::DefaultMQProducer;
use rocketmq_client_rust::DefaultMQPullConsumer;
use rocketmq_client_rust::DefaultMQPushConsumer;
use rocketmq_client_rust::MQPushConsumer;
use rocketmq_client_rust::MessageListenerConcurrently;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_runtime::RuntimeConfig;
use rocketmq_runtime::RuntimeOwner;

/// Hard upper bound on the whole run.
const WATCHDOG: Duration = Duration::from_secs(90);
/// Upper bound on one scenario step.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the push consumer may take to receive its first message.
const PUSH_WAIT: Duration = Duration::from_secs(10);
/// Client-side timeout for sends, in milliseconds.
const SEND_TIMEOUT_MS: u64 = 5_000;
/// Topic used by every step (same as the Java capture).
const TOPIC: &str = "CaptureTopic";
/// Broker name announced by the capture server's route data.
const BROKER_NAME: &str = "broker-a";
/// Producer group.
const PRODUCER_GROUP: &str = "CaptureProducerGroup";
/// Classic pull consumer group.
const PULL_GROUP: &str = "CapturePullGroup";
/// Lite pull consumer group.
const LITE_GROUP: &str = "CaptureLiteGroup";
/// Push consumer group.
const PUSH_GROUP: &str = "CapturePushGroup";

/// Counts failed steps.
static FAILURES: AtomicUsize = AtomicUsize::new(0);

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(namesrv), None) = (args.next(), args.next()) else {
        eprintln!("usage: rust-capture <namesrv host:port>");
        std::process::exit(64);
    };
    std::thread::spawn(|| {
        std::thread::sleep(WATCHDOG);
        eprintln!(
            "[rust-capture] watchdog: scenario exceeded {} s",
            WATCHDOG.as_secs()
        );
        std::process::exit(2);
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("[rust-capture] cannot build tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    runtime.block_on(async move {
        if let Err(e) = run(&namesrv).await {
            fail("scenario setup", &e);
        }
    });
    let failures = FAILURES.load(Ordering::SeqCst);
    println!("[rust-capture] done, failed steps: {failures}");
    // The client runtime may keep background tasks alive; leave without waiting for them.
    std::process::exit(i32::from(failures != 0));
}

/// Builds the client runtime the way the crate's examples do, then runs the four parts.
async fn run(namesrv: &str) -> ClientResult<()> {
    let owner = RuntimeOwner::plan(RuntimeConfig {
        thread_name: "rust-capture".to_string(),
        ..Default::default()
    })
    .map_err(|e| ClientError::internal("plan client runtime", e))?
    .build()
    .map_err(|e| ClientError::internal("create client runtime", e))?;
    let telemetry = rocketmq_observability::install_global(
        &rocketmq_observability::TelemetryBootstrapConfig::default(),
    )
    .map_err(|e| ClientError::internal("initialize telemetry", e))?;
    let client_runtime = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        telemetry.handle(),
    )?;

    let queue = produce(&client_runtime, namesrv)
        .await
        .unwrap_or_else(|| MessageQueue::from_parts(TOPIC, BROKER_NAME, 0));
    classic_pull(&client_runtime, namesrv, &queue).await;
    lite_pull(&client_runtime, namesrv, &queue).await;
    push(&client_runtime, namesrv).await;

    step("client runtime shutdown");
    let _ = tokio::time::timeout(STEP_TIMEOUT, client_runtime.shutdown()).await;
    Ok(())
}

/// Client configuration with a fixed, readable identity.
fn client_config(namesrv: &str, instance: &str) -> ClientResult<ClientConfig> {
    ClientConfig::builder()
        .namesrv_addr(namesrv)
        .client_ip("127.0.0.1")
        .instance_name(instance)
        .build()
}

/// Producer part; returns the queue the single message went to.
async fn produce(rt: &Arc<ClientRuntime>, namesrv: &str) -> Option<MessageQueue> {
    let config = match client_config(namesrv, "rust-capture-producer") {
        Ok(c) => c,
        Err(e) => {
            fail("producer config", &e);
            return None;
        }
    };
    let mut producer = DefaultMQProducer::builder(Arc::clone(rt))
        .client_config(config)
        .name_server_addr(namesrv)
        .producer_group(PRODUCER_GROUP)
        .build();
    if !bounded("producer.start", producer.start()).await {
        return None;
    }
    let single = Message::builder()
        .topic(TOPIC)
        .tags("TagA")
        .key("order-1")
        .body_slice(b"hello from the rust client")
        .build_unchecked();
    let mut queue = None;
    if let Some(Some(result)) = bounded_value(
        "producer.send_with_timeout (sync, keys + tags)",
        producer.send_with_timeout(single, SEND_TIMEOUT_MS),
    )
    .await
    {
        println!("[rust-capture]   {result:?}");
        queue = result.message_queue.clone();
    }
    let batch: Vec<Message> = (0..3)
        .map(|i| {
            Message::builder()
                .topic(TOPIC)
                .tags("TagB")
                .key(format!("batch-{i}"))
                .body_slice(format!("batch message {i}").as_bytes())
                .build_unchecked()
        })
        .collect();
    if let Some(result) = bounded_value("producer.send_batch (3)", producer.send_batch(batch)).await
    {
        println!("[rust-capture]   {result:?}");
    }
    step("producer.shutdown");
    let _ = tokio::time::timeout(STEP_TIMEOUT, producer.shutdown()).await;
    queue
}

/// Classic pull consumer part.
async fn classic_pull(rt: &Arc<ClientRuntime>, namesrv: &str, queue: &MessageQueue) {
    let built = client_config(namesrv, "rust-capture-pull").and_then(|config| {
        DefaultMQPullConsumer::builder(Arc::clone(rt))
            .client_options(ClientOptions::legacy(config))
            .name_server_addr(namesrv)
            .consumer_group(PULL_GROUP)
            .build()
    });
    let consumer = match built {
        Ok(c) => c,
        Err(e) => {
            fail("pullConsumer build", &e);
            return;
        }
    };
    if !bounded("pullConsumer.start", consumer.start()).await {
        return;
    }
    // Loads the topic route into this client instance; max_offset fails without it.
    if let Some(queues) = bounded_value(
        "pullConsumer.fetch_subscribe_message_queues",
        consumer.fetch_subscribe_message_queues(TOPIC),
    )
    .await
    {
        println!("[rust-capture]   {} queue(s)", queues.len());
    }
    if let Some(max) = bounded_value("pullConsumer.max_offset", consumer.max_offset(queue)).await {
        println!("[rust-capture]   max offset = {max}");
    }
    if let Some(off) = bounded_value(
        "pullConsumer.fetch_consume_offset(from_store = true)",
        consumer.fetch_consume_offset(queue, true),
    )
    .await
    {
        println!("[rust-capture]   consumer offset = {off}");
    }
    let mut next = 1_i64;
    if let Some(result) = bounded_value(
        "pullConsumer.pull(*, offset 0, 32)",
        consumer.pull(queue, "*", 0, 32),
    )
    .await
    {
        let found = result.msg_found_list().map_or(0, <[MessageExt]>::len);
        println!(
            "[rust-capture]   {:?} next={} msgs={found}",
            result.pull_status(),
            result.next_begin_offset()
        );
        next = i64::try_from(result.next_begin_offset()).unwrap_or(1);
    }
    if let Some(result) = bounded_value(
        "pullConsumer.pull again at nextBeginOffset",
        consumer.pull(queue, "*", next, 32),
    )
    .await
    {
        println!("[rust-capture]   {:?}", result.pull_status());
    }
    bounded(
        "pullConsumer.update_consume_offset",
        consumer.update_consume_offset(queue, next),
    )
    .await;
    if let Some(off) = bounded_value(
        "pullConsumer.fetch_consume_offset(from_store = true) after update",
        consumer.fetch_consume_offset(queue, true),
    )
    .await
    {
        println!("[rust-capture]   consumer offset = {off}");
    }
    bounded("pullConsumer.shutdown", consumer.shutdown()).await;
}

/// Lite pull consumer part (assign mode).
async fn lite_pull(rt: &Arc<ClientRuntime>, namesrv: &str, queue: &MessageQueue) {
    let built = DefaultLitePullConsumer::builder(Arc::clone(rt))
        .name_server_addr(namesrv)
        .client_ip("127.0.0.1")
        .instance_name("rust-capture-lite")
        .consumer_group(LITE_GROUP)
        .auto_commit(false)
        .poll_timeout_millis(3_000)
        .build();
    let consumer = match built {
        Ok(c) => c,
        Err(e) => {
            fail("litePullConsumer build", &e);
            return;
        }
    };
    if !bounded("litePullConsumer.start", consumer.start()).await {
        return;
    }
    if let Some(queues) = bounded_value(
        "litePullConsumer.fetch_message_queues",
        consumer.fetch_message_queues(TOPIC),
    )
    .await
    {
        println!("[rust-capture]   {} queue(s)", queues.len());
    }
    bounded(
        "litePullConsumer.assign",
        consumer.assign(vec![queue.clone()]),
    )
    .await;
    bounded("litePullConsumer.seek(0)", consumer.seek(queue, 0)).await;
    step("litePullConsumer.poll");
    let mut polled = 0;
    let deadline = tokio::time::Instant::now() + PUSH_WAIT;
    while polled == 0 && tokio::time::Instant::now() < deadline {
        polled = consumer.poll_with_timeout(3_000).await.len();
    }
    println!("[rust-capture]   polled {polled} message(s)");
    if polled == 0 {
        FAILURES.fetch_add(1, Ordering::SeqCst);
    }
    step("litePullConsumer.commit_sync_with_map(persist = true)");
    let offsets = HashMap::from([(queue.clone(), i64::from(polled > 0))]);
    let _ = tokio::time::timeout(STEP_TIMEOUT, consumer.commit_sync_with_map(offsets, true)).await;
    if let Some(store) = consumer.offset_store().await {
        bounded(
            "litePullConsumer offset store: update_consume_offset_to_broker (synchronous)",
            store.update_consume_offset_to_broker(queue, i64::from(polled > 0), false),
        )
        .await;
    } else {
        fail("litePullConsumer.offset_store", &"no offset store");
    }
    if let Some(off) = bounded_value("litePullConsumer.committed", consumer.committed(queue)).await
    {
        println!("[rust-capture]   committed = {off}");
    }
    step("litePullConsumer.shutdown");
    let _ = tokio::time::timeout(STEP_TIMEOUT, consumer.shutdown()).await;
}

/// Counts the messages the push consumer received.
struct CountingListener(Arc<AtomicUsize>);

impl MessageListenerConcurrently for CountingListener {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        self.0.fetch_add(msgs.len(), Ordering::SeqCst);
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// Push consumer part: rebalance (GET_CONSUMER_LIST_BY_GROUP), long-polling pulls, offsets.
async fn push(rt: &Arc<ClientRuntime>, namesrv: &str) {
    let config = match client_config(namesrv, "rust-capture-push") {
        Ok(c) => c,
        Err(e) => {
            fail("pushConsumer config", &e);
            return;
        }
    };
    let mut consumer = DefaultMQPushConsumer::builder(Arc::clone(rt))
        .client_config(config)
        .name_server_addr(namesrv)
        .consumer_group(PUSH_GROUP)
        .build();
    if !bounded("pushConsumer.subscribe(*)", consumer.subscribe(TOPIC, "*")).await {
        return;
    }
    let received = Arc::new(AtomicUsize::new(0));
    consumer.register_message_listener_concurrently(CountingListener(Arc::clone(&received)));
    if !bounded("pushConsumer.start", consumer.start()).await {
        return;
    }
    step("pushConsumer waiting for a message");
    let deadline = tokio::time::Instant::now() + PUSH_WAIT;
    while received.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = received.load(Ordering::SeqCst);
    println!("[rust-capture]   received {got} message(s)");
    if got == 0 {
        FAILURES.fetch_add(1, Ordering::SeqCst);
    }
    // Give the offset persister (5 s interval) a chance to send UPDATE_CONSUMER_OFFSET.
    tokio::time::sleep(Duration::from_secs(6)).await;
    step("pushConsumer.shutdown");
    let _ = tokio::time::timeout(STEP_TIMEOUT, consumer.shutdown()).await;
}

fn step(what: &str) {
    println!("[rust-capture] {what}");
}

fn fail(what: &str, error: &dyn std::fmt::Display) {
    FAILURES.fetch_add(1, Ordering::SeqCst);
    println!("[rust-capture]   FAILED {what}: {error}");
}

/// Runs a fallible step under [`STEP_TIMEOUT`]; true if it succeeded.
async fn bounded<T, F>(what: &str, fut: F) -> bool
where
    F: Future<Output = ClientResult<T>>,
{
    bounded_value(what, fut).await.is_some()
}

/// Runs a fallible step under [`STEP_TIMEOUT`]; its value if it succeeded.
async fn bounded_value<T, F>(what: &str, fut: F) -> Option<T>
where
    F: Future<Output = ClientResult<T>>,
{
    step(what);
    match tokio::time::timeout(STEP_TIMEOUT, fut).await {
        Ok(Ok(value)) => Some(value),
        Ok(Err(e)) => {
            fail(what, &e);
            None
        }
        Err(_) => {
            fail(
                what,
                &format!("timed out after {} s", STEP_TIMEOUT.as_secs()),
            );
            None
        }
    }
}
