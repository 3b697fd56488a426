package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.ownedQueues;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link DefaultMQPushConsumer}: two consumers of one group in CLUSTERING mode, a rebalance as a
 * consumer joins the group and leaves it, a tag-filtered subscription, and two consumers in
 * BROADCASTING mode.
 *
 * <p>Duplicates: RocketMQ is at-least-once. A message is delivered twice only when its queue moves
 * to another consumer (a rebalance) before the first consumer's offset for it was committed, or
 * when a consumer dies. These tests wait until the allocation is settled (each consumer holds its
 * share, and nothing overlaps) before the first send, and the group changes only once every
 * message sent was consumed and its offset committed, so there is no such window: they assert
 * exactly-once delivery, counted once every offset has been committed (which is what ends
 * redelivery).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class PushConsumerIT {
    static final int PORT = 23200;
    static final int QUEUES = 4;
    static final int COUNT = 100;

    @RegisterExtension
    static final ItBroker it = new ItBroker("push", PORT);
    static DefaultMQProducer producer;
    /** This test's consumers. */
    final Clients consumers = new Clients(it::broker);

    /** One delivery to one consumer. */
    record Delivery(String consumer, MessageExt message) {
    }

    @BeforeAll
    static void start() throws Exception {
        producer = it.startProducer(unique("push-producer"));
    }

    @AfterEach
    void shutdownConsumers() {
        consumers.close();
    }

    /** A started consumer that records every delivery in {@code deliveries} and acknowledges it. */
    DefaultMQPushConsumer startConsumer(String group, String name, String topic, String expression,
            MessageModel model, ConcurrentLinkedQueue<Delivery> deliveries) throws Exception {
        return consumers.startPushConsumer(group, name, topic, expression,
                (MessageListenerConcurrently) (messages, context) -> {
                    for (MessageExt message : messages) {
                        deliveries.add(new Delivery(name, message));
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                }, consumer -> consumer.setMessageModel(model));
    }

    /** Sends {@code count} messages with tags cycling through {@code tags}; returns them by key. */
    static Map<String, Message> send(String topic, int count, String... tags) throws Exception {
        return send(topic, 0, count, tags);
    }

    /** {@link #send(String, int, String...)} of the messages numbered {@code from} on. */
    static Map<String, Message> send(String topic, int from, int count, String... tags) throws Exception {
        Map<String, Message> sent = new HashMap<>();
        for (int i = from; i < from + count; i++) {
            Message message = message(topic, tags[i % tags.length], topic + "-key-" + i, "push body " + i);
            ItSupport.sendOk(producer, message, "send " + i);
            sent.put(message.getKeys(), message);
        }
        return sent;
    }

    static void assertSameContent(Message sent, MessageExt received) {
        assertEquals(sent.getTags(), received.getTags(), "tags of " + sent.getKeys());
        assertEquals(body(sent), body(received), "body of " + sent.getKeys());
        assertEquals(sent.getTopic(), received.getTopic(), "topic of " + sent.getKeys());
        assertEquals(0, received.getReconsumeTimes(), "reconsumeTimes of " + sent.getKeys());
    }

    static Set<String> keys(ConcurrentLinkedQueue<Delivery> deliveries, String consumer) {
        return deliveries.stream()
                .filter(d -> consumer == null || d.consumer().equals(consumer))
                .map(d -> d.message().getKeys())
                .collect(Collectors.toSet());
    }

    /** Queue id -> number of deliveries to {@code consumer}. */
    static Map<Integer, Long> queueIds(ConcurrentLinkedQueue<Delivery> deliveries, String consumer) {
        return deliveries.stream()
                .filter(d -> d.consumer().equals(consumer))
                .collect(Collectors.groupingBy(d -> d.message().getQueueId(), java.util.TreeMap::new,
                        Collectors.counting()));
    }

    @Test
    void clusteringSplitsTheQueuesAndDeliversEveryMessageOnce() throws Exception {
        String topic = unique("cluster");
        String group = unique("cluster-group");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        ConcurrentLinkedQueue<Delivery> deliveries = new ConcurrentLinkedQueue<>();
        DefaultMQPushConsumer first = startConsumer(group, "c1", topic, "*", MessageModel.CLUSTERING, deliveries);
        DefaultMQPushConsumer second = startConsumer(group, "c2", topic, "*", MessageModel.CLUSTERING, deliveries);
        await("both consumers holding half of the queues", () -> {
            Set<MessageQueue> a = ownedQueues(first, topic);
            Set<MessageQueue> b = ownedQueues(second, topic);
            Set<MessageQueue> union = new HashSet<>(a);
            union.addAll(b);
            return a.size() == QUEUES / 2 && b.size() == QUEUES / 2 && union.equals(new HashSet<>(queues));
        }, () -> "c1 " + ownedQueues(first, topic) + ", c2 " + ownedQueues(second, topic));
        Set<MessageQueue> firstQueues = ownedQueues(first, topic);

        Map<String, Message> sent = send(topic, COUNT, "TagA");
        await("every message consumed", () -> keys(deliveries, null).size() == COUNT,
                () -> keys(deliveries, null).size() + " of " + COUNT + " consumed; c1 got "
                        + queueIds(deliveries, "c1") + " holding " + ownedQueues(first, topic) + ", c2 got "
                        + queueIds(deliveries, "c2") + " holding " + ownedQueues(second, topic) + "; offsets "
                        + ItSupport.offsets(it.admin(), group, queues));
        ItSupport.awaitCommitted(it.admin(), group, queues);

        assertEquals(COUNT, deliveries.size(), "deliveries (each message exactly once)");
        assertEquals(sent.keySet(), keys(deliveries, null));
        for (Delivery delivery : deliveries) {
            MessageExt message = delivery.message();
            assertSameContent(sent.get(message.getKeys()), message);
            MessageQueue queue = new MessageQueue(topic, message.getBrokerName(), message.getQueueId());
            String owner = firstQueues.contains(queue) ? "c1" : "c2";
            assertEquals(owner, delivery.consumer(), "consumer of " + message.getKeys() + " from " + queue);
        }
        assertFalse(keys(deliveries, "c1").isEmpty(), "c1 consumed nothing");
        assertFalse(keys(deliveries, "c2").isEmpty(), "c2 consumed nothing");
    }

    /**
     * Waits until every message of {@code sent} was delivered and the group's offsets are
     * committed to the end of {@code queues} (so that a queue moving to another consumer next
     * starts after them).
     */
    void awaitConsumedAndCommitted(String group, List<MessageQueue> queues, Map<String, Message> sent,
            ConcurrentLinkedQueue<Delivery> deliveries) throws Exception {
        await("every message consumed", () -> keys(deliveries, null).containsAll(sent.keySet()),
                () -> keys(deliveries, null).size() + " of " + sent.size() + " consumed; offsets "
                        + ItSupport.offsets(it.admin(), group, queues));
        ItSupport.awaitCommitted(it.admin(), group, queues);
    }

    @Test
    void queuesMoveWhenAConsumerJoinsAndWhenItLeavesWithoutLossOrRepeats() throws Exception {
        String topic = unique("rebalance");
        String group = unique("rebalance-group");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        Set<MessageQueue> all = new HashSet<>(queues);
        int batch = COUNT / 2;
        ConcurrentLinkedQueue<Delivery> deliveries = new ConcurrentLinkedQueue<>();
        DefaultMQPushConsumer first = startConsumer(group, "r1", topic, "*", MessageModel.CLUSTERING, deliveries);
        await("r1 alone holding every queue", () -> ownedQueues(first, topic).equals(all),
                () -> "r1 " + ownedQueues(first, topic));
        Map<String, Message> sent = new HashMap<>(send(topic, 0, batch, "TagAlone"));
        awaitConsumedAndCommitted(group, queues, sent, deliveries);

        // A second consumer joins: the broker tells r1, and the queues are split.
        DefaultMQPushConsumer second = startConsumer(group, "r2", topic, "*", MessageModel.CLUSTERING, deliveries);
        await("r1 and r2 holding half of the queues each", () -> {
            Set<MessageQueue> a = ownedQueues(first, topic);
            Set<MessageQueue> b = ownedQueues(second, topic);
            Set<MessageQueue> union = new HashSet<>(a);
            union.addAll(b);
            return a.size() == QUEUES / 2 && b.size() == QUEUES / 2 && union.equals(all);
        }, () -> "r1 " + ownedQueues(first, topic) + ", r2 " + ownedQueues(second, topic));
        Set<MessageQueue> secondQueues = ownedQueues(second, topic);
        sent.putAll(send(topic, batch, batch, "TagShared"));
        awaitConsumedAndCommitted(group, queues, sent, deliveries);

        // It leaves: r1 takes its queues back, from the offsets r2 committed.
        consumers.shutdown(second);
        await("r1 holding every queue again", () -> ownedQueues(first, topic).equals(all),
                () -> "r1 " + ownedQueues(first, topic));
        sent.putAll(send(topic, 2 * batch, batch, "TagBack"));
        awaitConsumedAndCommitted(group, queues, sent, deliveries);

        assertEquals(sent.keySet(), keys(deliveries, null), "keys delivered");
        assertEquals(sent.size(), deliveries.size(), "deliveries (each message exactly once)");
        for (Delivery delivery : deliveries) {
            MessageExt message = delivery.message();
            assertSameContent(sent.get(message.getKeys()), message);
            MessageQueue queue = new MessageQueue(topic, message.getBrokerName(), message.getQueueId());
            String owner = message.getTags().equals("TagShared") && secondQueues.contains(queue) ? "r2" : "r1";
            assertEquals(owner, delivery.consumer(), "consumer of " + message.getKeys() + " (" + message.getTags()
                    + ") from " + queue);
        }
        assertFalse(keys(deliveries, "r2").isEmpty(), "r2 consumed nothing while it held half of the queues");
    }

    @Test
    void tagExpressionDeliversOnlyTheNamedTags() throws Exception {
        String topic = unique("tags");
        String group = unique("tags-group");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        ConcurrentLinkedQueue<Delivery> deliveries = new ConcurrentLinkedQueue<>();
        startConsumer(group, "tagged", topic, "TagA || TagB", MessageModel.CLUSTERING, deliveries);
        Map<String, Message> sent = send(topic, 60, "TagA", "TagB", "TagC");
        // One TagA message last in every queue: the consumer's offset passes a filtered-out
        // message at the tail of a queue only when a pull finds something after it (or a long
        // poll times out), so the fences let the committed offsets reach the end promptly.
        for (MessageQueue queue : queues) {
            Message fence = message(topic, "TagA", topic + "-fence-" + queue.getQueueId(), "fence");
            assertEquals(SendStatus.SEND_OK, producer.send(fence, queue).getSendStatus(), "fence " + queue);
            sent.put(fence.getKeys(), fence);
        }
        Set<String> wanted = sent.values().stream()
                .filter(m -> !m.getTags().equals("TagC"))
                .map(Message::getKeys)
                .collect(Collectors.toSet());
        assertEquals(40 + QUEUES, wanted.size());
        await("the TagA and TagB messages consumed", () -> keys(deliveries, null).containsAll(wanted),
                () -> keys(deliveries, null).size() + " of " + wanted.size() + " consumed");
        // Committed up to the max offset: the filtered-out TagC messages were passed over too.
        ItSupport.awaitCommitted(it.admin(), group, queues);

        assertEquals(wanted, keys(deliveries, null), "keys delivered (no TagC)");
        assertEquals(wanted.size(), deliveries.size(), "deliveries (each message exactly once)");
        for (Delivery delivery : deliveries) {
            assertSameContent(sent.get(delivery.message().getKeys()), delivery.message());
            assertTrue(Set.of("TagA", "TagB").contains(delivery.message().getTags()));
        }
    }

    @Test
    void broadcastingDeliversEveryMessageToEveryConsumer() throws Exception {
        String topic = unique("broadcast");
        String group = unique("broadcast-group");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        ConcurrentLinkedQueue<Delivery> deliveries = new ConcurrentLinkedQueue<>();
        DefaultMQPushConsumer first = startConsumer(group, "b1", topic, "*", MessageModel.BROADCASTING, deliveries);
        DefaultMQPushConsumer second = startConsumer(group, "b2", topic, "*", MessageModel.BROADCASTING, deliveries);
        await("both consumers holding every queue",
                () -> ownedQueues(first, topic).size() == QUEUES && ownedQueues(second, topic).size() == QUEUES,
                () -> "b1 " + ownedQueues(first, topic) + ", b2 " + ownedQueues(second, topic));

        Map<String, Message> sent = send(topic, COUNT / 2, "TagA", "TagB");
        await("every message consumed by both",
                () -> keys(deliveries, "b1").size() == sent.size() && keys(deliveries, "b2").size() == sent.size(),
                () -> "b1 " + keys(deliveries, "b1").size() + ", b2 " + keys(deliveries, "b2").size()
                        + " of " + sent.size());
        // Broadcasting offsets live in the client; wait until each consumer's own offsets reach
        // the end so that nothing is still on its way.
        await("local offsets at the end of every queue", () -> {
            for (MessageQueue queue : queues) {
                long max = it.admin().maxOffset(queue);
                for (DefaultMQPushConsumer consumer : List.of(first, second)) {
                    long local = consumer.getDefaultMQPushConsumerImpl().getOffsetStore()
                            .readOffset(queue, ReadOffsetType.READ_FROM_MEMORY);
                    if (local < max) {
                        return false;
                    }
                }
            }
            return true;
        }, () -> "local offsets behind the max offsets");

        for (String consumer : List.of("b1", "b2")) {
            assertEquals(sent.keySet(), keys(deliveries, consumer), "keys consumed by " + consumer);
            long count = deliveries.stream().filter(d -> d.consumer().equals(consumer)).count();
            assertEquals(sent.size(), count, "deliveries to " + consumer + " (each message exactly once)");
        }
        for (Delivery delivery : deliveries) {
            assertSameContent(sent.get(delivery.message().getKeys()), delivery.message());
        }
    }
}
