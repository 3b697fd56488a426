package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Committed consumer offsets survive a consumer restart and a broker restart.
 *
 * <p>Each phase consumes, then waits until the broker's committed offsets (QUERY_CONSUMER_OFFSET)
 * reach the max offsets before the consumer shuts down. At-least-once would allow the next
 * consumer to see again what was consumed but not yet committed; since everything consumed was
 * committed first, the next consumer must see exactly the messages sent after that point: none
 * lost, none repeated.
 *
 * <p>The broker restart (SIGTERM, start on the same store and ports) needs a broker this harness
 * started, so it is skipped against an external broker.
 */
@Timeout(value = 150, unit = TimeUnit.SECONDS)
class OffsetPersistenceIT {
    static final int PORT = 23600;
    static final int QUEUES = 4;
    static final int BATCH = 50;

    static BrokerUnderTest broker;
    DefaultMQAdminExt admin;
    DefaultMQProducer producer;
    final List<DefaultMQPushConsumer> consumers = new ArrayList<>();

    @BeforeAll
    static void startBroker() throws Exception {
        broker = BrokerUnderTest.start("offsets", PORT);
    }

    @AfterAll
    static void stopBroker() {
        if (broker != null) {
            broker.close();
        }
    }

    @BeforeEach
    void connect() throws Exception {
        admin = ItSupport.startAdmin(broker);
        producer = ItSupport.startProducer(broker, unique("offsets-producer"));
    }

    @AfterEach
    void disconnect() {
        consumers.forEach(DefaultMQPushConsumer::shutdown);
        consumers.clear();
        if (producer != null) {
            producer.shutdown();
            producer = null;
        }
        if (admin != null) {
            admin.shutdown();
            admin = null;
        }
    }

    Map<String, Message> send(String topic, int from, int count) throws Exception {
        Map<String, Message> sent = new HashMap<>();
        for (int i = from; i < from + count; i++) {
            Message message = message(topic, "TagPhase" + (i / BATCH), topic + "-key-" + i, "offsets " + i);
            assertEquals(SendStatus.SEND_OK, producer.send(message).getSendStatus(), "send " + i);
            sent.put(message.getKeys(), message);
        }
        return sent;
    }

    /**
     * Starts a consumer of {@code group}, waits until it consumed every key of {@code expected}
     * and committed up to the max offsets, shuts it down, and checks it consumed exactly
     * {@code expected}, each once.
     */
    void consumeExactly(String group, String topic, List<MessageQueue> queues, Map<String, Message> expected)
            throws Exception {
        ConcurrentLinkedQueue<MessageExt> deliveries = new ConcurrentLinkedQueue<>();
        DefaultMQPushConsumer consumer = ItSupport.pushConsumer(broker, group, "offsets");
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            deliveries.addAll(messages);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        consumers.add(consumer);
        await(expected.size() + " messages consumed", () -> deliveries.stream().map(MessageExt::getKeys)
                .collect(Collectors.toSet()).containsAll(expected.keySet()),
                () -> deliveries.size() + " delivered");
        ItSupport.awaitCommitted(admin, group, queues);
        consumer.shutdown();
        consumers.remove(consumer);

        Set<String> keys = deliveries.stream().map(MessageExt::getKeys).collect(Collectors.toSet());
        assertEquals(expected.keySet(), keys, "keys consumed by this consumer (nothing from before its start)");
        assertEquals(expected.size(), deliveries.size(), "deliveries (each message once)");
        for (MessageExt message : deliveries) {
            Message original = expected.get(message.getKeys());
            assertEquals(original.getTags(), message.getTags(), "tags of " + message.getKeys());
            assertEquals(body(original), body(message), "body of " + message.getKeys());
        }
    }

    @Test
    void aRestartedConsumerContinuesFromTheCommittedOffsets() throws Exception {
        String topic = unique("offsets");
        String group = unique("offsets-group");
        List<MessageQueue> queues = ItSupport.createTopic(admin, broker, topic, QUEUES);
        consumeExactly(group, topic, queues, send(topic, 0, BATCH));
        consumeExactly(group, topic, queues, send(topic, BATCH, BATCH));
    }

    @Test
    void committedOffsetsAndMessagesSurviveABrokerRestart() throws Exception {
        broker.assumeControllable("a broker restart");
        String topic = unique("restart");
        String group = unique("restart-group");
        List<MessageQueue> queues = ItSupport.createTopic(admin, broker, topic, QUEUES);
        consumeExactly(group, topic, queues, send(topic, 0, BATCH));
        Map<String, Message> second = send(topic, BATCH, BATCH);
        Map<MessageQueue, Long> committed = new HashMap<>();
        for (MessageQueue queue : queues) {
            committed.put(queue, ItSupport.committedOffset(admin, group, queue));
        }

        disconnect();
        broker.stop();
        broker.restart();
        connect();

        List<MessageQueue> routed = new ArrayList<>();
        await("routes of " + topic + " after the restart", () -> {
            routed.clear();
            routed.addAll(ItSupport.queues(admin, topic));
            return routed.size() == QUEUES;
        }, () -> "routed " + routed);
        for (MessageQueue queue : queues) {
            assertEquals(committed.get(queue).longValue(), ItSupport.committedOffset(admin, group, queue),
                    "committed offset of " + queue + " after the restart");
        }
        assertEquals(2L * BATCH, ItSupport.storedCount(admin, queues), "messages stored after the restart");
        consumeExactly(group, topic, queues, second);
    }
}
