package dev.ringmq.it;

import static dev.ringmq.it.FeatureSupport.unique;
import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQAdminImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageId;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Lookups, the way {@code mqadmin queryMsgByKey / queryMsgById / queryMsgByUniqueKey} and the
 * client's {@link MQAdminImpl} do them: QUERY_MESSAGE by key within a time range and with a limit,
 * QUERY_MESSAGE in its {@code _UNIQUE_KEY_QUERY} form (the client's msgId), VIEW_MESSAGE_BY_ID
 * (the offset msgId, whose broker address and commit log offset the client decodes), and the
 * time lookups GET_EARLIEST_MSG_STORETIME and SEARCH_OFFSET_BY_TIMESTAMP.
 *
 * <p>The broker's index is built after the store returns, so every first lookup polls until the
 * message is found (the client reports "nothing found" as an {@link MQClientException}).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LookupIT {
    static final int PORT = 24400;
    static final int QUEUES = 2;
    static final int COUNT = 6;
    /** Limit of an ordinary query (larger than what any key matches). */
    static final int MAX_NUM = 32;
    /** Slack around the sends' wall-clock interval for the query's time range. */
    static final long RANGE_SLACK_MS = 60_000;

    /** One sent message and what the broker answered. */
    record Sent(Message message, SendResult result) {
        String key() {
            return message.getKeys().split(" ")[0];
        }
    }

    @RegisterExtension
    static final ItBroker it = new ItBroker("lookup", PORT);
    static DefaultMQAdminExt admin;
    static String topic;
    static String sharedKey;
    static final List<Sent> SENT = new ArrayList<>();
    static long sendsBeganMs;
    static long sendsEndedMs;

    @BeforeAll
    static void start() throws Exception {
        admin = it.admin();
        DefaultMQProducer producer = it.startProducer(unique("lookup-producer"));
        topic = unique("lookup");
        sharedKey = topic + "-shared";
        it.createTopic(topic, QUEUES);
        sendsBeganMs = System.currentTimeMillis();
        for (int i = 0; i < COUNT; i++) {
            // Two keys: its own and one all messages share (KEYS is space-separated).
            Message message = new Message(topic, "TagLookup" + (i % 2), topic + "-key-" + i + " " + sharedKey,
                    ("lookup body " + i).getBytes(StandardCharsets.UTF_8));
            message.putUserProperty("lookupIndex", Integer.toString(i));
            SENT.add(new Sent(message, ItSupport.sendOk(producer, message, "send " + i)));
        }
        sendsEndedMs = System.currentTimeMillis();
    }

    static MQAdminImpl adminImpl() {
        return admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQAdminImpl();
    }

    static long rangeBegin() {
        return sendsBeganMs - RANGE_SLACK_MS;
    }

    static long rangeEnd() {
        return sendsEndedMs + RANGE_SLACK_MS;
    }

    /** Polls QUERY_MESSAGE by {@code key} until it answers; returns the messages found. */
    static List<MessageExt> awaitQuery(String key, int maxNum) throws Exception {
        List<MessageExt> found = new ArrayList<>();
        await("QUERY_MESSAGE " + topic + " key " + key, () -> {
            QueryResult result = admin.queryMessage(topic, key, maxNum, rangeBegin(), rangeEnd());
            found.clear();
            found.addAll(result.getMessageList());
            return !found.isEmpty();
        }, () -> "found " + found);
        return found;
    }

    /** The message as sent, compared field by field with what a lookup returned. */
    static void assertSameMessage(Sent sent, MessageExt found, String how) {
        String what = sent.key() + " " + how;
        assertEquals(topic, found.getTopic(), "topic of " + what);
        assertEquals(sent.message().getKeys(), found.getKeys(), "keys of " + what);
        assertEquals(sent.message().getTags(), found.getTags(), "tags of " + what);
        assertEquals(body(sent.message()), body(found), "body of " + what);
        assertEquals(sent.message().getUserProperty("lookupIndex"), found.getUserProperty("lookupIndex"),
                "user property of " + what);
        assertEquals(sent.result().getMessageQueue().getQueueId(), found.getQueueId(), "queue of " + what);
        assertEquals(sent.result().getQueueOffset(), found.getQueueOffset(), "queue offset of " + what);
    }

    static Set<String> uniqKeys(List<MessageExt> messages) {
        return messages.stream().map(MessageExt::getMsgId).collect(Collectors.toSet());
    }

    @Test
    void queryByKeyFindsExactlyTheMessageWithThatKey() throws Exception {
        for (Sent sent : SENT) {
            List<MessageExt> found = awaitQuery(sent.key(), MAX_NUM);
            assertEquals(1, found.size(), "messages with key " + sent.key() + ": " + found);
            assertEquals(sent.result().getMsgId(), found.get(0).getMsgId(), "msgId of " + sent.key());
            assertSameMessage(sent, found.get(0), "found by key");
        }
    }

    @Test
    void queryBySharedKeyFindsEveryMessageWithItAndHonoursTheLimit() throws Exception {
        Set<String> all = SENT.stream().map(s -> s.result().getMsgId()).collect(Collectors.toSet());
        List<MessageExt> found = new ArrayList<>();
        await("all " + COUNT + " messages with key " + sharedKey, () -> {
            found.clear();
            found.addAll(admin.queryMessage(topic, sharedKey, MAX_NUM, rangeBegin(), rangeEnd()).getMessageList());
            return found.size() >= COUNT;
        }, () -> "found " + uniqKeys(found));
        assertEquals(COUNT, found.size(), "messages with key " + sharedKey);
        assertEquals(all, uniqKeys(found), "msgIds of the messages with key " + sharedKey);

        List<MessageExt> limited = admin.queryMessage(topic, sharedKey, 2, rangeBegin(), rangeEnd()).getMessageList();
        assertEquals(2, limited.size(), "messages with key " + sharedKey + " at maxNum 2");
        assertTrue(all.containsAll(uniqKeys(limited)), "limited result " + uniqKeys(limited) + " within " + all);
    }

    @Test
    void queryOutsideTheTimeRangeOrByAnUnknownKeyFindsNothing() throws Exception {
        Sent first = SENT.get(0);
        awaitQuery(first.key(), MAX_NUM);
        assertThrows(MQClientException.class,
                () -> admin.queryMessage(topic, first.key(), MAX_NUM, rangeBegin() - RANGE_SLACK_MS, rangeBegin()),
                "a time range that ends before the message was stored");
        assertThrows(MQClientException.class,
                () -> admin.queryMessage(topic, topic + "-never-sent", MAX_NUM, rangeBegin(), rangeEnd()),
                "a key no message has");
    }

    @Test
    void viewByOffsetMsgIdReturnsTheMessage() throws Exception {
        for (Sent sent : SENT) {
            String offsetMsgId = sent.result().getOffsetMsgId();
            MessageId decoded = MessageDecoder.decodeMessageId(offsetMsgId);
            MessageExt found = adminImpl().viewMessage(topic, offsetMsgId);
            assertSameMessage(sent, found, "viewed by offset msgId " + offsetMsgId);
            assertEquals(sent.result().getMsgId(), found.getMsgId(), "UNIQ_KEY of " + sent.key());
            assertEquals(decoded.getOffset(), found.getCommitLogOffset(), "commit log offset of " + sent.key());
        }
    }

    @Test
    void queryByUniqueKeyReturnsTheMessage() throws Exception {
        for (Sent sent : SENT) {
            String msgId = sent.result().getMsgId();
            MessageExt[] found = new MessageExt[1];
            await("QUERY_MESSAGE _UNIQUE_KEY_QUERY " + msgId, () -> {
                found[0] = adminImpl().queryMessageByUniqKey(topic, msgId);
                return found[0] != null;
            }, () -> "nothing found");
            assertEquals(msgId, found[0].getMsgId(), "msgId of " + sent.key());
            assertSameMessage(sent, found[0], "found by unique key " + msgId);
            // mqadmin queryMsgById: the unique key first, then the offset id.
            assertSameMessage(sent, admin.viewMessage(topic, msgId), "viewed by msgId " + msgId);
        }
    }

    @Test
    void timeLookupsAnswerFromTheStoreTimestamps() throws Exception {
        MessageQueue queue = SENT.get(0).result().getMessageQueue();
        List<MessageExt> stored = it.readAll(List.of(queue), -1);
        assertEquals(SENT.stream().filter(s -> s.result().getMessageQueue().equals(queue)).count(), stored.size(),
                "messages in " + queue);
        Map<Long, Long> storeTimeByOffset = new HashMap<>();
        for (MessageExt message : stored) {
            storeTimeByOffset.put(message.getQueueOffset(), message.getStoreTimestamp());
        }
        long minOffset = admin.minOffset(queue);
        long maxOffset = admin.maxOffset(queue);
        assertEquals(storeTimeByOffset.get(minOffset), admin.earliestMsgStoreTime(queue),
                "GET_EARLIEST_MSG_STORETIME of " + queue);
        for (MessageExt message : stored) {
            long timestamp = message.getStoreTimestamp();
            // The first offset stored at or after the timestamp (several may share a millisecond).
            long expected = storeTimeByOffset.entrySet().stream().filter(e -> e.getValue() >= timestamp)
                    .mapToLong(Map.Entry::getKey).min().orElseThrow();
            assertEquals(expected, admin.searchOffset(queue, timestamp),
                    "SEARCH_OFFSET_BY_TIMESTAMP " + timestamp + " in " + queue + " (store times " + storeTimeByOffset
                            + ")");
        }
        assertEquals(minOffset, admin.searchOffset(queue, rangeBegin()), "SEARCH_OFFSET_BY_TIMESTAMP before the first");
        // Apache RocketMQ 5.3.3 answers the max offset (the next message's) for a time after the last.
        assertEquals(maxOffset, admin.searchOffset(queue, rangeEnd()), "SEARCH_OFFSET_BY_TIMESTAMP after the last");
    }
}
