package dev.ringmq.it;

import static dev.ringmq.it.FeatureSupport.unique;
import static dev.ringmq.it.ItSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@code mqadmin resetOffsetByTime}: {@link DefaultMQAdminExt#resetOffsetByTimestamp} sends
 * INVOKE_BROKER_TO_RESET_OFFSET, which ringmq answers as Java 5.x's server-side reset (its
 * default): the group's offsets are set at once, and each queue's next pull by the group is
 * answered PULL_OFFSET_MOVED with the new offset. Each test sends an "old" batch, takes a time
 * between the batches, sends a "new" batch, and resets the group to that time: a consumer that
 * had read everything reads the new batch again (and nothing of the old one), and a group that
 * was offline starts at the new batch.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ResetOffsetIT {
    static final int PORT = 24900;
    static final int QUEUES = 4;
    static final int OLD_PER_QUEUE = 3;
    static final int NEW_PER_QUEUE = 2;

    @RegisterExtension
    static final ItBroker it = new ItBroker("reset-offset", PORT);

    /** Keys of the old and the new batch, and the time between them. */
    record Batches(Set<String> old, Set<String> fresh, long between) {
    }

    static Batches sendBatches(String topic, List<MessageQueue> queues) throws Exception {
        DefaultMQProducer producer = it.startProducer(unique("reset-producer"));
        Set<String> old = send(producer, topic, queues, "old", OLD_PER_QUEUE);
        Thread.sleep(50);
        long between = System.currentTimeMillis();
        Thread.sleep(50);
        Set<String> fresh = send(producer, topic, queues, "new", NEW_PER_QUEUE);
        it.shutdown(producer);
        return new Batches(old, fresh, between);
    }

    static Set<String> send(DefaultMQProducer producer, String topic, List<MessageQueue> queues, String batch,
            int perQueue) throws Exception {
        Set<String> keys = new HashSet<>();
        for (MessageQueue queue : queues) {
            for (int i = 0; i < perQueue; i++) {
                String key = topic + "-" + batch + "-" + queue.getQueueId() + "-" + i;
                producer.send(ItSupport.message(topic, "TagReset", key, batch + " " + i), queue);
                keys.add(key);
            }
        }
        return keys;
    }

    /** A push consumer of the group from the first offset, recording every delivery's key. */
    static DefaultMQPushConsumer consumer(String group, String topic, List<String> deliveries) throws Exception {
        MessageListenerConcurrently listener = (messages, context) -> {
            for (MessageExt message : messages) {
                deliveries.add(message.getKeys());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        DefaultMQPushConsumer consumer = it.pushConsumer(group, "reset", listener);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.start();
        return consumer;
    }

    static Map<String, Integer> counts(List<String> deliveries) {
        Map<String, Integer> counts = new HashMap<>();
        synchronized (deliveries) {
            for (String key : deliveries) {
                counts.merge(key, 1, Integer::sum);
            }
        }
        return counts;
    }

    /** Resets the group to {@code between} and checks the broker's answer: the first new message of each queue. */
    static void resetAndCheck(DefaultMQAdminExt admin, String topic, String group, List<MessageQueue> queues,
            long between) throws Exception {
        Map<MessageQueue, Long> reset = admin.resetOffsetByTimestamp(topic, group, between, true);
        assertEquals(QUEUES, reset.size(), "queues reset: " + reset);
        for (MessageQueue queue : queues) {
            assertEquals(OLD_PER_QUEUE, reset.get(queue), "new offset of " + queue + " in " + reset);
        }
    }

    /** A topic with both batches and a group whose push consumer has read and committed all of them. */
    record ReadEverything(String topic, String group, List<MessageQueue> queues, Batches batches,
            DefaultMQPushConsumer consumer, List<String> deliveries) {
    }

    static ReadEverything readEverything(String label) throws Exception {
        DefaultMQAdminExt admin = it.admin();
        String topic = unique("reset");
        String group = unique(label);
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        Batches batches = sendBatches(topic, queues);
        List<String> deliveries = Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer consumer = consumer(group, topic, deliveries);
        Set<String> all = new HashSet<>(batches.old());
        all.addAll(batches.fresh());
        await("every message consumed and committed", () -> counts(deliveries).keySet().containsAll(all)
                && ItSupport.committedUpToMax(admin, group, queues), () -> counts(deliveries) + "; "
                + ItSupport.offsets(admin, group, queues));
        return new ReadEverything(topic, group, queues, batches, consumer, deliveries);
    }

    @Test
    void aConsumerThatReadEverythingReadsTheNewBatchAgainAfterAReset() throws Exception {
        DefaultMQAdminExt admin = it.admin();
        ReadEverything read = readEverything("reset-online");
        Batches batches = read.batches();
        List<String> deliveries = read.deliveries();

        resetAndCheck(admin, read.topic(), read.group(), read.queues(), batches.between());
        // Each queue's next pull takes the reset (a held pull when it is answered, at most the
        // push consumer's 15 s suspend); the client drops the queue and takes it back at its next
        // rebalance, about 10 s later.
        await("the new batch delivered again", ItSupport.RETRY_WAIT_MS, () -> {
            Map<String, Integer> counts = counts(deliveries);
            return batches.fresh().stream().allMatch(key -> counts.getOrDefault(key, 0) >= 2);
        }, () -> counts(deliveries).toString());
        await("offsets committed up to the max again",
                () -> ItSupport.committedUpToMax(admin, read.group(), read.queues()),
                () -> ItSupport.offsets(admin, read.group(), read.queues()));
        Map<String, Integer> counts = counts(deliveries);
        for (String key : batches.old()) {
            assertEquals(1, counts.get(key), "deliveries of old message " + key);
        }
        for (String key : batches.fresh()) {
            assertEquals(2, counts.get(key), "deliveries of new message " + key);
        }
    }

    @Test
    void anOfflineGroupStartsAtTheResetOffsets() throws Exception {
        DefaultMQAdminExt admin = it.admin();
        ReadEverything read = readEverything("reset-offline");
        // The group goes offline with its offsets at the max.
        it.shutdown(read.consumer());

        resetAndCheck(admin, read.topic(), read.group(), read.queues(), read.batches().between());
        ConsumeStats stats = admin.examineConsumeStats(read.group(), read.topic());
        for (MessageQueue queue : read.queues()) {
            assertEquals(OLD_PER_QUEUE, stats.getOffsetTable().get(queue).getConsumerOffset(),
                    "committed offset of " + queue + " after the reset");
        }
        List<String> after = Collections.synchronizedList(new ArrayList<>());
        consumer(read.group(), read.topic(), after);
        await("the new batch delivered to the restarted group", () -> counts(after).keySet().containsAll(
                read.batches().fresh()), () -> counts(after).toString());
        assertTrue(counts(after).keySet().stream().noneMatch(read.batches().old()::contains),
                "no old message after the reset: " + counts(after));
    }
}
