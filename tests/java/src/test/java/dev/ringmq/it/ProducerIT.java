package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.byKey;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.LongStream;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link DefaultMQProducer}: sync, async, oneway and batch sends, with keys, tags and user
 * properties, each on a fresh topic of {@value #QUEUES} queues, then everything read back with a
 * {@code DefaultLitePullConsumer} (assign mode, from offset 0) and compared field by field.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ProducerIT {
    static final int PORT = 23100;
    static final int QUEUES = 4;
    static final int COUNT = 40;
    static final int BATCH = 16;

    @RegisterExtension
    static final ItBroker it = new ItBroker("producer", PORT);
    static DefaultMQProducer producer;

    @BeforeAll
    static void start() throws Exception {
        producer = it.startProducer(unique("producer-group"));
    }

    @Test
    void syncSendsAnswerSendOkWithConsecutiveOffsetsPerQueue() throws Exception {
        String topic = unique("sync");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        List<Message> sent = new ArrayList<>();
        List<SendResult> results = new ArrayList<>();
        for (int i = 0; i < COUNT; i++) {
            Message message = message(topic, "TagSync", topic + "-key-" + i, "sync body " + i);
            SendResult result = ItSupport.sendOk(producer, message, "send " + i);
            assertEquals(MessageClientIDSetter.getUniqID(message), result.getMsgId(), "msgId of send " + i);
            assertNotNull(result.getOffsetMsgId(), "offsetMsgId of send " + i);
            assertEquals(topic, result.getMessageQueue().getTopic());
            sent.add(message);
            results.add(result);
        }
        assertEquals(COUNT, results.stream().map(SendResult::getMsgId).distinct().count(), "distinct msgIds");
        assertConsecutiveOffsetsPerQueue(results);
        assertReadBackMatches(queues, sent, results);
    }

    @Test
    void asyncSendsCompleteEveryCallbackWithSendOk() throws Exception {
        String topic = unique("async");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        Map<String, SendResult> results = new ConcurrentHashMap<>();
        ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
        List<Message> sent = new ArrayList<>();
        for (int i = 0; i < COUNT; i++) {
            Message message = message(topic, "TagAsync", topic + "-key-" + i, "async body " + i);
            String key = message.getKeys();
            sent.add(message);
            producer.send(message, new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    if (results.put(key, result) != null) {
                        errors.add(new AssertionError("second callback for " + key));
                    }
                }

                @Override
                public void onException(Throwable e) {
                    errors.add(e);
                }
            });
        }
        await(COUNT + " async callbacks", () -> results.size() + errors.size() >= COUNT,
                () -> results.size() + " succeeded, errors " + errors);
        assertTrue(errors.isEmpty(), "async send errors: " + errors);
        List<SendResult> ordered = new ArrayList<>();
        for (Message message : sent) {
            SendResult result = results.get(message.getKeys());
            assertEquals(SendStatus.SEND_OK, result.getSendStatus(), message.getKeys() + ": " + result);
            assertEquals(MessageClientIDSetter.getUniqID(message), result.getMsgId(), "msgId of " + message.getKeys());
            ordered.add(result);
        }
        // Async sends may overtake each other on the wire, so only the set of offsets per queue
        // is fixed: 0..n-1 on a fresh topic.
        Map<Integer, Set<Long>> offsets = new TreeMap<>();
        for (SendResult result : ordered) {
            offsets.computeIfAbsent(result.getMessageQueue().getQueueId(), q -> new HashSet<>())
                    .add(result.getQueueOffset());
        }
        long total = 0;
        for (Map.Entry<Integer, Set<Long>> entry : offsets.entrySet()) {
            Set<Long> expected = LongStream.range(0, entry.getValue().size()).boxed().collect(Collectors.toSet());
            assertEquals(expected, entry.getValue(), "offsets of queue " + entry.getKey());
            total += entry.getValue().size();
        }
        assertEquals(COUNT, total, "distinct (queue, offset) pairs");
        assertReadBackMatches(queues, sent, ordered);
    }

    @Test
    void onewaySendsAreAllStored() throws Exception {
        String topic = unique("oneway");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        List<Message> sent = new ArrayList<>();
        for (int i = 0; i < COUNT; i++) {
            Message message = message(topic, "TagOneway", topic + "-key-" + i, "oneway body " + i);
            producer.sendOneway(message);
            sent.add(message);
        }
        assertReadBackMatches(queues, sent, null);
    }

    @Test
    void batchSendStoresTheMessagesConsecutivelyInOneQueue() throws Exception {
        String topic = unique("batch");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < BATCH; i++) {
            batch.add(message(topic, "TagBatch", topic + "-key-" + i, "batch body " + i));
        }
        SendResult result = producer.send(batch);
        assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "batch: " + result);
        List<String> ids = List.of(result.getMsgId().split(","));
        assertEquals(BATCH, ids.size(), "msgIds of the batch: " + result.getMsgId());
        for (int i = 0; i < BATCH; i++) {
            assertEquals(MessageClientIDSetter.getUniqID(batch.get(i)), ids.get(i), "msgId " + i + " of the batch");
        }
        assertEquals(0, result.getQueueOffset(), "first offset of a batch on a fresh queue");

        List<MessageExt> stored = it.readAll(queues, BATCH);
        // Apache RocketMQ 5.3.3 stores every message of a batch under the batch's own UNIQ_KEY
        // (apache/rocketmq issue 9416, fixed by PR 9417 after 5.3.3), so a consumer sees one msgId
        // 16 times. ringmq must store each message's own id, the one SendResult reports.
        boolean peerWithBatchIdBug = it.broker().isExternal();
        if (!peerWithBatchIdBug) {
            assertEquals(ids, stored.stream().map(MessageExt::getMsgId).toList(), "msgIds stored, in offset order");
        }
        for (int i = 0; i < BATCH; i++) {
            MessageExt message = stored.get(i);
            assertEquals(result.getMessageQueue().getQueueId(), message.getQueueId(), "queue of batch message " + i);
            assertEquals(result.getQueueOffset() + i, message.getQueueOffset(), "offset of batch message " + i);
            assertEquals(batch.get(i).getKeys(), message.getKeys(), "key of batch message " + i);
            assertEquals("TagBatch", message.getTags());
            assertEquals(body(batch.get(i)), body(message));
        }
    }

    @Test
    void keysTagsAndUserPropertiesSurviveTheRoundTrip() throws Exception {
        String topic = unique("props");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        List<Message> sent = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Message message = message(topic, "Tag" + (char) ('A' + i % 3),
                    topic + "-key-" + i + " second-" + i, "héllo wörld ✓ " + i + " " + "x".repeat(i * 500));
            message.putUserProperty("order", "o-" + i);
            message.putUserProperty("kind", i % 2 == 0 ? "even" : "odd");
            assertEquals(SendStatus.SEND_OK, producer.send(message).getSendStatus());
            sent.add(message);
        }
        List<MessageExt> stored = it.readAll(queues, sent.size());
        Map<String, MessageExt> byKeys = new HashMap<>();
        for (MessageExt message : stored) {
            byKeys.put(message.getKeys(), message);
        }
        for (Message message : sent) {
            MessageExt read = byKeys.get(message.getKeys());
            assertNotNull(read, "message with keys '" + message.getKeys() + "' not read back");
            assertEquals(message.getTags(), read.getTags());
            assertEquals(body(message), body(read));
            assertEquals(message.getUserProperty("order"), read.getUserProperty("order"));
            assertEquals(message.getUserProperty("kind"), read.getUserProperty("kind"));
            assertEquals(MessageClientIDSetter.getUniqID(message), read.getMsgId());
            assertEquals(topic, read.getTopic());
        }
    }

    /** Sequential sends: per queue the offsets are exactly 0, 1, 2, ... in send order. */
    static void assertConsecutiveOffsetsPerQueue(List<SendResult> results) {
        Map<Integer, List<Long>> offsets = new TreeMap<>();
        for (SendResult result : results) {
            offsets.computeIfAbsent(result.getMessageQueue().getQueueId(), q -> new ArrayList<>())
                    .add(result.getQueueOffset());
        }
        for (Map.Entry<Integer, List<Long>> entry : offsets.entrySet()) {
            List<Long> expected = LongStream.range(0, entry.getValue().size()).boxed().toList();
            assertEquals(expected, entry.getValue(), "offsets of queue " + entry.getKey() + " in send order");
        }
    }

    /**
     * Reads the topic back and checks it holds exactly {@code sent}: same keys, tags and bodies,
     * and, when {@code results} is given, each at the queue and offset its send answered.
     */
    static void assertReadBackMatches(List<MessageQueue> queues, List<Message> sent, List<SendResult> results)
            throws Exception {
        Map<String, MessageExt> stored = byKey(it.readAll(queues, sent.size()));
        assertEquals(sent.stream().map(Message::getKeys).collect(Collectors.toSet()), stored.keySet(), "keys stored");
        for (int i = 0; i < sent.size(); i++) {
            Message message = sent.get(i);
            MessageExt read = stored.get(message.getKeys());
            assertEquals(message.getTags(), read.getTags(), "tags of " + message.getKeys());
            assertEquals(body(message), body(read), "body of " + message.getKeys());
            assertEquals(message.getTopic(), read.getTopic());
            assertFalse(read.getMsgId() == null || read.getMsgId().isEmpty(), "msgId of " + message.getKeys());
            assertEquals(MessageClientIDSetter.getUniqID(message), read.getMsgId(), "msgId of " + message.getKeys());
            if (results != null) {
                SendResult result = results.get(i);
                assertEquals(result.getMessageQueue().getQueueId(), read.getQueueId(), "queue of " + message.getKeys());
                assertEquals(result.getQueueOffset(), read.getQueueOffset(), "offset of " + message.getKeys());
                assertEquals(result.getMsgId(), read.getMsgId(), "msgId of " + message.getKeys());
            }
        }
    }
}
