package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link DefaultLitePullConsumer} in subscribe mode with auto commit: every message polled once,
 * the offsets committed to the broker (QUERY_CONSUMER_OFFSET shows them, and
 * {@link DefaultLitePullConsumer#committed} too), and a second consumer of the group starting
 * where the first one stopped.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LitePullIT {
    static final int PORT = 23300;
    static final int QUEUES = 4;
    static final int COUNT = 80;
    static final int MORE = 20;
    static final long AUTO_COMMIT_INTERVAL_MS = 1_000;

    @RegisterExtension
    static final ItBroker it = new ItBroker("litepull", PORT);
    static DefaultMQProducer producer;
    /** This test's consumers. */
    final Clients consumers = new Clients(it::broker);

    @BeforeAll
    static void start() throws Exception {
        producer = it.startProducer(unique("litepull-producer"));
    }

    @AfterEach
    void shutdownConsumers() {
        consumers.close();
    }

    DefaultLitePullConsumer startSubscriber(String group, String topic) throws Exception {
        DefaultLitePullConsumer consumer =
                consumers.keep(new DefaultLitePullConsumer(group), DefaultLitePullConsumer::shutdown);
        consumer.setNamesrvAddr(it.broker().namesrvAddr());
        consumer.setInstanceName(ItSupport.instanceName("litepull"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(true);
        consumer.setAutoCommitIntervalMillis(AUTO_COMMIT_INTERVAL_MS);
        consumer.setPollTimeoutMillis(500);
        consumer.setPollNameServerInterval(ItSupport.POLL_NAMESRV_INTERVAL_MS);
        consumer.setHeartbeatBrokerInterval(ItSupport.HEARTBEAT_INTERVAL_MS);
        consumer.subscribe(topic, "*");
        consumer.start();
        return consumer;
    }

    static Map<String, Message> send(String topic, int from, int count) throws Exception {
        Map<String, Message> sent = new HashMap<>();
        for (int i = from; i < from + count; i++) {
            Message message = message(topic, i % 2 == 0 ? "TagEven" : "TagOdd", topic + "-key-" + i, "lite " + i);
            ItSupport.sendOk(producer, message, "send " + i);
            sent.put(message.getKeys(), message);
        }
        return sent;
    }

    static void check(Map<String, Message> sent, List<MessageExt> polled) {
        assertEquals(sent.size(), polled.size(), "messages polled (each exactly once)");
        assertEquals(sent.keySet(), polled.stream().map(MessageExt::getKeys).collect(Collectors.toSet()));
        for (MessageExt message : polled) {
            Message original = sent.get(message.getKeys());
            assertEquals(original.getTags(), message.getTags(), "tags of " + message.getKeys());
            assertEquals(body(original), body(message), "body of " + message.getKeys());
        }
    }

    /** Polls {@code consumer} into {@code polled} until {@code done} holds (see {@link ItSupport#await}). */
    static void pollUntil(String what, DefaultLitePullConsumer consumer, long pollMs, List<MessageExt> polled,
            ItSupport.Condition done, ItSupport.Detail detail) throws Exception {
        await(what, () -> {
            polled.addAll(consumer.poll(pollMs));
            return done.holds();
        }, detail);
    }

    /** Auto commit runs inside poll(): keeps polling until the broker has offsets at the max offsets. */
    static void awaitAutoCommitted(String what, DefaultLitePullConsumer consumer, List<MessageExt> polled,
            String group, List<MessageQueue> queues) throws Exception {
        pollUntil(what, consumer, 200, polled, () -> ItSupport.committedUpToMax(it.admin(), group, queues),
                () -> ItSupport.offsets(it.admin(), group, queues));
    }

    @Test
    void subscribeModeWithAutoCommitPollsEverythingOnceAndCommitsTheOffsets() throws Exception {
        String topic = unique("lite");
        String group = unique("lite-group");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        DefaultLitePullConsumer consumer = startSubscriber(group, topic);
        await("the subscriber assigned every queue", () -> consumer.assignment().size() == QUEUES,
                () -> "assignment " + consumer.assignment());

        Map<String, Message> sent = send(topic, 0, COUNT);
        List<MessageExt> polled = new ArrayList<>();
        pollUntil("every message polled", consumer, 500, polled, () -> polled.size() >= COUNT,
                () -> polled.size() + " of " + COUNT + " polled");
        awaitAutoCommitted("auto-committed offsets at the max offsets", consumer, polled, group, queues);
        check(sent, polled);
        for (MessageQueue queue : queues) {
            assertEquals(it.admin().maxOffset(queue), consumer.committed(queue), "committed() of " + queue);
            assertEquals(it.admin().maxOffset(queue), ItSupport.committedOffset(it.admin(), group, queue),
                    "broker offset of " + queue);
        }
        Set<Integer> queueIds = polled.stream().map(MessageExt::getQueueId).collect(Collectors.toSet());
        assertEquals(QUEUES, queueIds.size(), "queues the messages came from");

        // A new member of the group starts from the committed offsets: it sees only new messages.
        consumers.shutdown(consumer);
        DefaultLitePullConsumer next = startSubscriber(group, topic);
        Map<String, Message> more = send(topic, COUNT, MORE);
        List<MessageExt> polledNext = new ArrayList<>();
        pollUntil("the new messages polled by the next consumer", next, 500, polledNext,
                () -> ItSupport.keys(polledNext).containsAll(more.keySet()), () -> polledNext.size() + " polled");
        awaitAutoCommitted("the next consumer's offsets committed", next, polledNext, group, queues);
        assertTrue(polledNext.stream().noneMatch(m -> sent.containsKey(m.getKeys())),
                "the next consumer re-polled messages the first one had committed");
        check(more, polledNext);
    }
}
