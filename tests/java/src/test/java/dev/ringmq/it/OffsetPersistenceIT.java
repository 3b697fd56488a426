package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

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

    @RegisterExtension
    static final ItBroker it = new ItBroker("offsets", PORT);
    /** This test's clients, started again after a broker restart. */
    final Clients clients = new Clients(it::broker);
    DefaultMQAdminExt admin;
    DefaultMQProducer producer;

    @BeforeEach
    void connect() throws Exception {
        admin = clients.startAdmin();
        producer = clients.startProducer(unique("offsets-producer"));
    }

    @AfterEach
    void disconnect() {
        clients.close();
        producer = null;
        admin = null;
    }

    Map<String, Message> send(String topic, int from, int count) throws Exception {
        Map<String, Message> sent = new HashMap<>();
        for (int i = from; i < from + count; i++) {
            Message message = message(topic, "TagPhase" + (i / BATCH), topic + "-key-" + i, "offsets " + i);
            ItSupport.sendOk(producer, message, "send " + i);
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
        DefaultMQPushConsumer consumer =
                clients.startPushConsumer(group, "offsets", topic, ItSupport.collectInto(deliveries));
        ItSupport.awaitKeys(expected.size() + " messages consumed", ItSupport.WAIT_MS, deliveries, expected.keySet());
        ItSupport.awaitCommitted(admin, group, queues);
        clients.shutdown(consumer);

        assertEquals(expected.keySet(), ItSupport.keys(deliveries),
                "keys consumed by this consumer (nothing from before its start)");
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
        List<MessageQueue> queues = clients.createTopic(admin, topic, QUEUES);
        consumeExactly(group, topic, queues, send(topic, 0, BATCH));
        consumeExactly(group, topic, queues, send(topic, BATCH, BATCH));
    }

    @Test
    void committedOffsetsAndMessagesSurviveABrokerRestart() throws Exception {
        it.broker().assumeControllable("a broker restart");
        String topic = unique("restart");
        String group = unique("restart-group");
        List<MessageQueue> queues = clients.createTopic(admin, topic, QUEUES);
        consumeExactly(group, topic, queues, send(topic, 0, BATCH));
        Map<String, Message> second = send(topic, BATCH, BATCH);
        Map<MessageQueue, Long> committed = new HashMap<>();
        for (MessageQueue queue : queues) {
            committed.put(queue, ItSupport.committedOffset(admin, group, queue));
        }

        disconnect();
        it.broker().stop();
        it.broker().restart();
        connect();

        ItSupport.awaitRoutes(admin, "routes of " + topic + " after the restart", topic, QUEUES);
        for (MessageQueue queue : queues) {
            assertEquals(committed.get(queue).longValue(), ItSupport.committedOffset(admin, group, queue),
                    "committed offset of " + queue + " after the restart");
        }
        assertEquals(2L * BATCH, ItSupport.storedCount(admin, queues), "messages stored after the restart");
        consumeExactly(group, topic, queues, second);
    }
}
