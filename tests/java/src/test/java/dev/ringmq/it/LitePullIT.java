package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

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

    static BrokerUnderTest broker;
    static DefaultMQAdminExt admin;
    static DefaultMQProducer producer;
    final List<DefaultLitePullConsumer> consumers = new ArrayList<>();

    @BeforeAll
    static void start() throws Exception {
        broker = BrokerUnderTest.start("litepull", PORT);
        admin = ItSupport.startAdmin(broker);
        producer = ItSupport.startProducer(broker, unique("litepull-producer"));
    }

    @AfterEach
    void shutdownConsumers() {
        consumers.forEach(DefaultLitePullConsumer::shutdown);
        consumers.clear();
    }

    @AfterAll
    static void stop() {
        if (producer != null) {
            producer.shutdown();
        }
        if (admin != null) {
            admin.shutdown();
        }
        if (broker != null) {
            broker.close();
        }
    }

    DefaultLitePullConsumer startSubscriber(String group, String topic) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(broker.namesrvAddr());
        consumer.setInstanceName(ItSupport.instanceName("litepull"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(true);
        consumer.setAutoCommitIntervalMillis(AUTO_COMMIT_INTERVAL_MS);
        consumer.setPollTimeoutMillis(500);
        consumer.setPollNameServerInterval(ItSupport.POLL_NAMESRV_INTERVAL_MS);
        consumer.setHeartbeatBrokerInterval(ItSupport.HEARTBEAT_INTERVAL_MS);
        consumer.subscribe(topic, "*");
        consumer.start();
        consumers.add(consumer);
        return consumer;
    }

    static Map<String, Message> send(String topic, int from, int count) throws Exception {
        Map<String, Message> sent = new HashMap<>();
        for (int i = from; i < from + count; i++) {
            Message message = message(topic, i % 2 == 0 ? "TagEven" : "TagOdd", topic + "-key-" + i, "lite " + i);
            assertEquals(SendStatus.SEND_OK, producer.send(message).getSendStatus(), "send " + i);
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

    @Test
    void subscribeModeWithAutoCommitPollsEverythingOnceAndCommitsTheOffsets() throws Exception {
        String topic = unique("lite");
        String group = unique("lite-group");
        List<MessageQueue> queues = ItSupport.createTopic(admin, broker, topic, QUEUES);
        DefaultLitePullConsumer consumer = startSubscriber(group, topic);
        await("the subscriber assigned every queue", () -> consumer.assignment().size() == QUEUES,
                () -> "assignment " + consumer.assignment());

        Map<String, Message> sent = send(topic, 0, COUNT);
        List<MessageExt> polled = new ArrayList<>();
        await("every message polled", () -> {
            polled.addAll(consumer.poll(500));
            return polled.size() >= COUNT;
        }, () -> polled.size() + " of " + COUNT + " polled");
        // Auto commit runs inside poll(): keep polling until the broker has the offsets.
        await("auto-committed offsets at the max offsets", () -> {
            polled.addAll(consumer.poll(200));
            for (MessageQueue queue : queues) {
                if (ItSupport.committedOffset(admin, group, queue) < admin.maxOffset(queue)) {
                    return false;
                }
            }
            return true;
        }, () -> ItSupport.offsets(admin, group, queues));
        check(sent, polled);
        for (MessageQueue queue : queues) {
            assertEquals(admin.maxOffset(queue), consumer.committed(queue), "committed() of " + queue);
            assertEquals(admin.maxOffset(queue), ItSupport.committedOffset(admin, group, queue), "broker offset of "
                    + queue);
        }
        Set<Integer> queueIds = polled.stream().map(MessageExt::getQueueId).collect(Collectors.toSet());
        assertEquals(QUEUES, queueIds.size(), "queues the messages came from");

        // A new member of the group starts from the committed offsets: it sees only new messages.
        consumer.shutdown();
        consumers.remove(consumer);
        DefaultLitePullConsumer next = startSubscriber(group, topic);
        Map<String, Message> more = send(topic, COUNT, MORE);
        List<MessageExt> polledNext = new ArrayList<>();
        await("the new messages polled by the next consumer", () -> {
            polledNext.addAll(next.poll(500));
            Set<String> keys = new HashSet<>();
            polledNext.forEach(m -> keys.add(m.getKeys()));
            return keys.containsAll(more.keySet());
        }, () -> polledNext.size() + " polled");
        await("the next consumer's offsets committed", () -> {
            polledNext.addAll(next.poll(200));
            for (MessageQueue queue : queues) {
                if (ItSupport.committedOffset(admin, group, queue) < admin.maxOffset(queue)) {
                    return false;
                }
            }
            return true;
        }, () -> ItSupport.offsets(admin, group, queues));
        assertTrue(polledNext.stream().noneMatch(m -> sent.containsKey(m.getKeys())),
                "the next consumer re-polled messages the first one had committed");
        check(more, polledNext);
    }
}
