package dev.ringmq.capture;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.store.OffsetStore;
import org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Drives the official Apache RocketMQ Java client through a fixed scenario against the capture
 * server (scripts/capture/capture_server.py), which records every request frame it receives.
 *
 * <p>Scenario, in order: producer start (route query, heartbeat), one sync send with keys and
 * tags (SEND_MESSAGE_V2), one batch of three (SEND_BATCH_MESSAGE), producer shutdown
 * (UNREGISTER_CLIENT); then a classic {@link DefaultMQPullConsumer}: max offset, consumer-offset
 * query, pull, offset update (synchronous and one-way), shutdown; then a
 * {@link DefaultLitePullConsumer} in assign mode: seek, poll (LITE_PULL_MESSAGE), commitSync,
 * shutdown; then a {@link DefaultMQPushConsumer}: subscribe, rebalance (GET_CONSUMER_LIST_BY_GROUP),
 * long-polling PULL_MESSAGE, periodic one-way offset persistence, shutdown.
 *
 * <p>Every step is bounded and failures are reported and skipped, so a partial capture still
 * happens; a watchdog ends the process after {@link #WATCHDOG_SECONDS} whatever happens.
 *
 * <p>Usage: {@code java -cp ... dev.ringmq.capture.JavaCapture <namesrvAddr>} where
 * {@code namesrvAddr} is {@code host:port}. Exit code 0 if every step succeeded, 1 if some step
 * failed, 2 if the watchdog fired.
 */
public final class JavaCapture {
    /** Hard upper bound on the run time of the whole scenario. */
    static final int WATCHDOG_SECONDS = 60;
    /** Topic used by every step. */
    static final String TOPIC = "CaptureTopic";
    /** Producer group. */
    static final String PRODUCER_GROUP = "CaptureProducerGroup";
    /** Group of the classic pull consumer. */
    static final String PULL_GROUP = "CapturePullGroup";
    /** Group of the lite pull consumer. */
    static final String LITE_GROUP = "CaptureLiteGroup";
    /** Group of the push consumer. */
    static final String PUSH_GROUP = "CapturePushGroup";
    /** How long the push consumer may take to receive its first message, in milliseconds. */
    static final long PUSH_WAIT_MS = 10_000;
    /** Client timeout for sends and pulls, in milliseconds. */
    static final int CALL_TIMEOUT_MS = 5_000;

    private int failures;

    private JavaCapture() {}

    /**
     * Entry point.
     *
     * @param args one argument, the name server address {@code host:port}
     */
    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: JavaCapture <namesrvHost:port>");
            System.exit(64);
        }
        startWatchdog();
        JavaCapture capture = new JavaCapture();
        capture.run(args[0]);
        System.out.println("[java-capture] done, failed steps: " + capture.failures);
        System.exit(capture.failures == 0 ? 0 : 1);
    }

    private static void startWatchdog() {
        Thread watchdog = new Thread(() -> {
            try {
                TimeUnit.SECONDS.sleep(WATCHDOG_SECONDS);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("[java-capture] watchdog: scenario exceeded " + WATCHDOG_SECONDS + " s");
            Runtime.getRuntime().halt(2);
        }, "capture-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
    }

    private void run(String namesrv) {
        MessageQueue queue = produce(namesrv);
        if (queue == null) {
            queue = new MessageQueue(TOPIC, "broker-a", 0);
        }
        classicPull(namesrv, queue);
        litePull(namesrv, queue);
        push(namesrv);
    }

    /** Producer part; returns the queue the single message went to (or null). */
    private MessageQueue produce(String namesrv) {
        DefaultMQProducer producer = new DefaultMQProducer(PRODUCER_GROUP);
        configure(producer, namesrv, "java-capture-producer");
        producer.setSendMsgTimeout(CALL_TIMEOUT_MS);
        MessageQueue queue = null;
        try {
            step("producer.start");
            producer.start();

            step("producer.send (sync, keys + tags)");
            Message single = new Message(TOPIC, "TagA", "order-1",
                    "hello from the java client".getBytes(StandardCharsets.UTF_8));
            SendResult result = producer.send(single);
            System.out.println("[java-capture]   " + result);
            queue = result.getMessageQueue();

            step("producer.send (batch of 3)");
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                batch.add(new Message(TOPIC, "TagB", "batch-" + i,
                        ("batch message " + i).getBytes(StandardCharsets.UTF_8)));
            }
            SendResult batchResult = producer.send(batch);
            System.out.println("[java-capture]   " + batchResult);
        } catch (Exception e) {
            fail(e);
        } finally {
            step("producer.shutdown");
            producer.shutdown();
        }
        return queue;
    }

    /** Classic (deprecated) pull consumer: PULL_MESSAGE, QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX_OFFSET. */
    @SuppressWarnings("deprecation")
    private void classicPull(String namesrv, MessageQueue queue) {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(PULL_GROUP);
        configure(consumer, namesrv, "java-capture-pull");
        consumer.setConsumerPullTimeoutMillis(CALL_TIMEOUT_MS);
        try {
            step("pullConsumer.start");
            consumer.start();

            step("pullConsumer.maxOffset " + queue);
            System.out.println("[java-capture]   maxOffset = " + consumer.maxOffset(queue));

            step("pullConsumer.fetchConsumeOffset(fromStore=true)");
            long start = consumer.fetchConsumeOffset(queue, true);
            System.out.println("[java-capture]   consumer offset = " + start);

            step("pullConsumer.pull(*, offset 0, 32)");
            PullResult pulled = consumer.pull(queue, "*", 0, 32, CALL_TIMEOUT_MS);
            System.out.println("[java-capture]   " + pulled.getPullStatus() + " next="
                    + pulled.getNextBeginOffset() + " msgs="
                    + (pulled.getMsgFoundList() == null ? 0 : pulled.getMsgFoundList().size()));
            long next = pulled.getNextBeginOffset();

            step("pullConsumer.pull again at nextBeginOffset (expect NO_NEW_MSG)");
            PullResult again = consumer.pull(queue, "*", next, 32, CALL_TIMEOUT_MS);
            System.out.println("[java-capture]   " + again.getPullStatus());

            step("pullConsumer.updateConsumeOffset + synchronous updateConsumeOffsetToBroker");
            consumer.updateConsumeOffset(queue, next);
            OffsetStore store = consumer.getOffsetStore();
            if (store instanceof RemoteBrokerOffsetStore) {
                ((RemoteBrokerOffsetStore) store).updateConsumeOffsetToBroker(queue, next, false);
            }

            step("pullConsumer offsetStore.persist (one-way UPDATE_CONSUMER_OFFSET)");
            store.persist(queue);

            step("pullConsumer.fetchConsumeOffset(fromStore=true) after update");
            System.out.println("[java-capture]   consumer offset = " + consumer.fetchConsumeOffset(queue, true));
        } catch (Exception e) {
            fail(e);
        } finally {
            step("pullConsumer.shutdown");
            consumer.shutdown();
        }
    }

    /** Lite pull consumer, assign mode: LITE_PULL_MESSAGE and commitSync. */
    private void litePull(String namesrv, MessageQueue queue) {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(LITE_GROUP);
        configure(consumer, namesrv, "java-capture-lite");
        consumer.setAutoCommit(false);
        consumer.setPollTimeoutMillis(3_000);
        consumer.setConsumerPullTimeoutMillis(CALL_TIMEOUT_MS);
        try {
            step("litePullConsumer.start");
            consumer.start();

            step("litePullConsumer.assign + seek(0)");
            consumer.assign(Collections.singletonList(queue));
            consumer.seek(queue, 0);

            step("litePullConsumer.poll");
            List<MessageExt> messages = Collections.emptyList();
            long deadline = System.currentTimeMillis() + 10_000;
            while (messages.isEmpty() && System.currentTimeMillis() < deadline) {
                messages = consumer.poll(3_000);
            }
            System.out.println("[java-capture]   polled " + messages.size() + " message(s)");

            step("litePullConsumer.commitSync");
            consumer.commitSync();

            step("litePullConsumer.committed");
            System.out.println("[java-capture]   committed = " + consumer.committed(queue));
        } catch (Exception e) {
            fail(e);
        } finally {
            step("litePullConsumer.shutdown");
            consumer.shutdown();
        }
    }

    /** Push consumer: rebalance, long-polling pulls with a registered subscription. */
    private void push(String namesrv) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(PUSH_GROUP);
        configure(consumer, namesrv, "java-capture-push");
        // Persist offsets sooner than the 5 s default so the one-way update shows up quickly.
        consumer.setPersistConsumerOffsetInterval(1_000);
        AtomicInteger received = new AtomicInteger();
        try {
            step("pushConsumer.subscribe(" + TOPIC + ", TagA || TagB) + start");
            consumer.subscribe(TOPIC, "TagA || TagB");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                received.addAndGet(msgs.size());
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            long deadline = System.currentTimeMillis() + PUSH_WAIT_MS;
            while (received.get() == 0 && System.currentTimeMillis() < deadline) {
                TimeUnit.MILLISECONDS.sleep(100);
            }
            System.out.println("[java-capture]   received " + received.get() + " message(s)");
            if (received.get() == 0) {
                failures++;
            }
            TimeUnit.MILLISECONDS.sleep(2_500);
        } catch (Exception e) {
            fail(e);
        } finally {
            step("pushConsumer.shutdown");
            consumer.shutdown();
        }
    }

    private static void configure(org.apache.rocketmq.client.ClientConfig config, String namesrv, String instance) {
        config.setNamesrvAddr(namesrv);
        // Fixed identity so that the captured clientID is readable and stable.
        config.setClientIP("127.0.0.1");
        config.setInstanceName(instance);
        config.setVipChannelEnabled(false);
    }

    private static void step(String what) {
        System.out.println("[java-capture] " + what);
    }

    private void fail(Exception e) {
        failures++;
        System.out.println("[java-capture]   FAILED: " + e);
    }
}
