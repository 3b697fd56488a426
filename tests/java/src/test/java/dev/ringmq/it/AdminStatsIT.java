package dev.ringmq.it;

import static dev.ringmq.it.FeatureSupport.unique;
import static dev.ringmq.it.ItSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.LanguageCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.body.BrokerStatsData;
import org.apache.rocketmq.remoting.protocol.body.CMResult;
import org.apache.rocketmq.remoting.protocol.body.ConsumeMessageDirectlyResult;
import org.apache.rocketmq.remoting.protocol.body.ConsumeQueueData;
import org.apache.rocketmq.remoting.protocol.body.ConsumeStatsList;
import org.apache.rocketmq.remoting.protocol.body.ConsumerConnection;
import org.apache.rocketmq.remoting.protocol.body.ConsumerRunningInfo;
import org.apache.rocketmq.remoting.protocol.body.ProducerInfo;
import org.apache.rocketmq.remoting.protocol.body.ProducerTableInfo;
import org.apache.rocketmq.remoting.protocol.body.QueryConsumeQueueResponseBody;
import org.apache.rocketmq.remoting.protocol.body.QueueTimeSpan;
import org.apache.rocketmq.remoting.protocol.heartbeat.SubscriptionData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What {@code mqadmin topicStatus}, {@code consumerProgress}, {@code topicConsumeByWho},
 * {@code getBrokerConfig}, {@code cloneGroupOffset} and the dashboard ask a broker, through
 * {@link DefaultMQAdminExt}: GET_TOPIC_STATS_INFO, GET_CONSUME_STATS, QUERY_TOPIC_CONSUME_BY_WHO,
 * QUERY_TOPICS_BY_CONSUMER, GET_BROKER_CONFIG, QUERY_SUBSCRIPTION_BY_CONSUMER,
 * GET_SYSTEM_TOPIC_LIST_FROM_BROKER, CLONE_GROUP_OFFSET, VIEW_BROKER_STATS_DATA,
 * QUERY_CONSUME_QUEUE, CONSUME_MESSAGE_DIRECTLY and GET_CONSUMER_STATUS_FROM_CLIENT. The topic's queues live on both shards
 * of the broker, so the answers about queues merge both shards' parts.
 *
 * <p>Queue {@code q} gets {@code q + 2} messages, which a lite pull consumer polls and commits;
 * then {@code q} more, which it leaves (it stays online and subscribed, but is not polled again).
 * Store times are compared with what VIEW_MESSAGE_BY_ID returns for the same message.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class AdminStatsIT {
    static final int PORT = 24800;
    static final int QUEUES = 4;

    @RegisterExtension
    static final ItBroker it = new ItBroker("admin-stats", PORT);
    static DefaultMQAdminExt admin;
    static String topic;
    static String group;
    static List<MessageQueue> queues;
    /** Per queue: every message sent, the last one committed, the last one stored. */
    static final List<List<SendResult>> SENT = new ArrayList<>();
    static final List<SendResult> LAST_CONSUMED = new ArrayList<>();
    static final List<SendResult> LAST_STORED = new ArrayList<>();
    static DefaultLitePullConsumer consumer;
    static String producerGroup;

    static int consumed(int queue) {
        return queue + 2;
    }

    static int lagging(int queue) {
        return queue;
    }

    @BeforeAll
    static void start() throws Exception {
        admin = it.admin();
        topic = unique("stats");
        group = unique("stats-group");
        queues = it.createTopic(topic, QUEUES);
        producerGroup = unique("stats-producer");
        DefaultMQProducer producer = it.startProducer(producerGroup);
        int total = 0;
        for (int q = 0; q < QUEUES; q++) {
            SENT.add(new ArrayList<>());
            LAST_CONSUMED.add(sendTo(producer, q, consumed(q)));
            total += consumed(q);
        }

        consumer = startLitePull(group, topic, "stats");
        List<MessageExt> polled = new ArrayList<>();
        final int expected = total;
        await("the first messages polled and committed", () -> {
            polled.addAll(consumer.poll(200));
            return polled.size() >= expected && ItSupport.committedUpToMax(admin, group, queues);
        }, () -> polled.size() + " of " + expected + " polled; " + ItSupport.offsets(admin, group, queues));
        assertEquals(expected, polled.size(), "messages polled");

        for (int q = 0; q < QUEUES; q++) {
            SendResult last = lagging(q) == 0 ? LAST_CONSUMED.get(q) : sendTo(producer, q, lagging(q));
            LAST_STORED.add(last);
        }
    }

    /** A started lite pull consumer of {@code consumerGroup} on {@code subscribed}, from its first message. */
    static DefaultLitePullConsumer startLitePull(String consumerGroup, String subscribed, String instance)
            throws Exception {
        DefaultLitePullConsumer started = it.keep(new DefaultLitePullConsumer(consumerGroup),
                DefaultLitePullConsumer::shutdown);
        started.setNamesrvAddr(it.broker().namesrvAddr());
        started.setInstanceName(ItSupport.instanceName(instance));
        started.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        started.setAutoCommit(true);
        started.setAutoCommitIntervalMillis(200);
        started.setPollTimeoutMillis(500);
        started.setPollNameServerInterval(ItSupport.POLL_NAMESRV_INTERVAL_MS);
        started.setHeartbeatBrokerInterval(ItSupport.HEARTBEAT_INTERVAL_MS);
        started.subscribe(subscribed, "*");
        started.start();
        return started;
    }

    /** Sends {@code count} messages to queue {@code q} (kept in {@link #SENT}); returns the last one's result. */
    static SendResult sendTo(DefaultMQProducer producer, int q, int count) throws Exception {
        SendResult last = null;
        for (int i = 0; i < count; i++) {
            last = producer.send(ItSupport.message(topic, "TagStats", topic + "-" + q + "-" + i, "stats " + i),
                    queues.get(q));
            assertEquals(q, last.getMessageQueue().getQueueId(), "queue of " + last);
            SENT.get(q).add(last);
        }
        return last;
    }

    /** The store time the broker gives the message of {@code sent} (VIEW_MESSAGE_BY_ID). */
    static long storeTime(SendResult sent) throws Exception {
        return admin.viewMessage(topic, sent.getOffsetMsgId()).getStoreTimestamp();
    }

    @Test
    void topicStatsGiveEveryQueuesOffsetsAndTheStoreTimeOfItsLastMessage() throws Exception {
        TopicStatsTable stats = admin.examineTopicStats(topic);
        assertEquals(QUEUES, stats.getOffsetTable().size(), "queues in " + stats.getOffsetTable());
        for (int q = 0; q < QUEUES; q++) {
            TopicOffset offsets = stats.getOffsetTable().get(queues.get(q));
            assertNotNull(offsets, "queue " + q + " in " + stats.getOffsetTable());
            assertEquals(0, offsets.getMinOffset(), "min offset of queue " + q);
            assertEquals(consumed(q) + lagging(q), offsets.getMaxOffset(), "max offset of queue " + q);
            assertEquals(storeTime(LAST_STORED.get(q)), offsets.getLastUpdateTimestamp(),
                    "last update of queue " + q);
        }
    }

    @Test
    void consumeStatsGiveEveryQueuesLagAndTheStoreTimeOfTheLastConsumedMessage() throws Exception {
        // mqadmin consumerProgress -g GROUP (every topic the group has offsets for) and -t TOPIC.
        for (ConsumeStats stats : List.of(admin.examineConsumeStats(group), admin.examineConsumeStats(group, topic))) {
            assertEquals(QUEUES, stats.getOffsetTable().size(), "queues in " + stats.getOffsetTable());
            long lag = assertEveryQueuesOffsets(stats);
            for (int q = 0; q < QUEUES; q++) {
                assertEquals(storeTime(LAST_CONSUMED.get(q)), stats.getOffsetTable().get(queues.get(q)).getLastTimestamp(),
                        "last consumed message's store time, queue " + q);
            }
            assertEquals(lag, stats.computeTotalDiff(), "total lag");
        }
    }

    /** Checks the broker and consumer offset of each of the topic's queues in {@code stats}; returns their lag. */
    static long assertEveryQueuesOffsets(ConsumeStats stats) {
        long lag = 0;
        for (int q = 0; q < QUEUES; q++) {
            OffsetWrapper offsets = stats.getOffsetTable().get(queues.get(q));
            assertNotNull(offsets, "queue " + q + " in " + stats.getOffsetTable());
            assertEquals(consumed(q) + lagging(q), offsets.getBrokerOffset(), "broker offset of queue " + q);
            assertEquals(consumed(q), offsets.getConsumerOffset(), "consumer offset of queue " + q);
            lag += lagging(q);
        }
        return lag;
    }

    @Test
    void consumeTimeSpansGiveEachQueuesStoreTimesAndDelay() throws Exception {
        long before = System.currentTimeMillis();
        List<QueueTimeSpan> spans = admin.queryConsumeTimeSpan(topic, group);
        assertEquals(QUEUES, spans.size(), "spans " + spans);
        for (QueueTimeSpan span : spans) {
            int q = span.getMessageQueue().getQueueId();
            List<SendResult> sent = SENT.get(q);
            assertEquals(storeTime(sent.get(0)), span.getMinTimeStamp(), "oldest message of queue " + q);
            assertEquals(storeTime(LAST_STORED.get(q)), span.getMaxTimeStamp(), "newest message of queue " + q);
            assertEquals(storeTime(LAST_CONSUMED.get(q)), span.getConsumeTimeStamp(), "last consumed of queue " + q);
            if (lagging(q) == 0) {
                assertEquals(0, span.getDelayTime(), "queue " + q + " is consumed to its end");
            } else {
                // The first message not consumed is the one after the last consumed.
                long firstLagging = storeTime(sent.get(consumed(q)));
                assertTrue(span.getDelayTime() >= before - firstLagging, "delay of queue " + q + ": " + span);
            }
        }
    }

    @Test
    void eachQueuesConsumeQueueEntriesPointAtItsMessages() throws Exception {
        // mqadmin queryCq -t TOPIC -q QUEUE -i 0 -c 100 -g GROUP, once per queue (on both shards).
        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        for (int q = 0; q < QUEUES; q++) {
            QueryConsumeQueueResponseBody body = admin.queryConsumeQueue(addr, topic, q, 0, 100, group);
            List<SendResult> sent = SENT.get(q);
            assertEquals(0, body.getMinQueueIndex(), "min of queue " + q);
            assertEquals(sent.size(), body.getMaxQueueIndex(), "max of queue " + q);
            assertEquals(sent.size(), body.getQueueData().size(), "entries of queue " + q);
            for (int i = 0; i < sent.size(); i++) {
                ConsumeQueueData entry = body.getQueueData().get(i);
                long offset = MessageDecoder.decodeMessageId(sent.get(i).getOffsetMsgId()).getOffset();
                assertEquals(offset, entry.getPhysicOffset(), "CommitLog offset of entry " + i + " of queue " + q);
                assertEquals("TagStats".hashCode(), entry.getTagsCode(), "tags code of entry " + i);
                assertTrue(entry.getPhysicSize() > ("stats " + i).length(), "record size " + entry.getPhysicSize());
            }
            assertNotNull(body.getSubscriptionData(), "the online group's subscription");
            assertEquals(topic, body.getSubscriptionData().getTopic());
            // A window inside the queue.
            QueryConsumeQueueResponseBody window = admin.queryConsumeQueue(addr, topic, q, 1, 1, group);
            assertEquals(1, window.getQueueData().size(), "one entry from index 1 of queue " + q);
            assertEquals(body.getQueueData().get(1).getPhysicOffset(), window.getQueueData().get(0).getPhysicOffset());
        }
        MQClientException missing = assertThrows(MQClientException.class,
                () -> admin.queryConsumeQueue(addr, unique("no-cq"), 0, 0, 10, null));
        assertEquals(ResponseCode.SYSTEM_ERROR, missing.getResponseCode(), missing.getMessage());
    }

    @Test
    void theBrokersConsumeStatsListEveryGroupWithItsLag() throws Exception {
        // mqadmin brokerConsumeStats: every subscription group of the broker, per topic.
        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        ConsumeStatsList all = admin.fetchConsumeStatsInBroker(addr, false, ItSupport.ADMIN_TIMEOUT_MS);
        assertEquals(addr, all.getBrokerAddr());
        List<ConsumeStats> ours = all.getConsumeStatsList().stream()
                .filter(groups -> groups.containsKey(group)).findFirst()
                .map(groups -> groups.get(group)).orElseThrow(() -> new AssertionError(group + " in " + all));
        ConsumeStats stats = ours.stream().filter(s -> s.getOffsetTable().keySet().stream()
                .anyMatch(q -> q.getTopic().equals(topic))).findFirst()
                .orElseThrow(() -> new AssertionError(topic + " in the stats of " + group));
        long lag = assertEveryQueuesOffsets(stats);
        assertTrue(all.getTotalDiff() >= lag, "total diff " + all.getTotalDiff() + " covers our lag " + lag);
    }

    @Test
    void everyProducerGroupIsListedWithItsConnections() throws Exception {
        // mqadmin producer -b ADDR
        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        ProducerTableInfo table = admin.getAllProducerInfo(addr);
        List<ProducerInfo> ours = table.getData().get(producerGroup);
        assertNotNull(ours, producerGroup + " in " + table.getData().keySet());
        assertEquals(1, ours.size(), "connections of " + producerGroup);
        assertEquals(LanguageCode.JAVA, ours.get(0).getLanguage());
        assertTrue(ours.get(0).getClientId().contains("@"), "client id " + ours.get(0).getClientId());
    }

    @Test
    void theGroupAndTheTopicAreFoundFromEachOther() throws Exception {
        assertTrue(admin.queryTopicConsumeByWho(topic).getGroupList().contains(group),
                "groups consuming " + topic);
        assertTrue(admin.queryTopicsByConsumer(group).getTopicList().contains(topic),
                "topics of " + group);
    }

    /** mqadmin cleanExpiredCQ: every shard cleans its ConsumeQueues below its log's start; the messages stay. */
    @Test
    void expiredConsumeQueuesAreCleanedOnRequest() throws Exception {
        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        assertTrue(admin.cleanExpiredConsumerQueueByAddr(addr), "cleanExpiredCQ on " + addr);
        long stored = admin.examineTopicStats(topic).getOffsetTable().values().stream()
                .mapToLong(offsets -> offsets.getMaxOffset() - offsets.getMinOffset())
                .sum();
        assertTrue(stored > 0, "the topic's messages are still there");
    }

    @Test
    void theBrokerConfigIsTheOneItRunsWith() throws Exception {
        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        Properties config = admin.getBrokerConfig(addr);
        assertEquals("java-admin-stats", config.getProperty("brokerName"), "brokerName in " + config);
        assertEquals(addr.substring(addr.lastIndexOf(':') + 1), config.getProperty("listenPort"));
        assertEquals("ASYNC_FLUSH", config.getProperty("flushDiskType"));
    }

    @Test
    void theOnlineGroupsSubscriptionAndTheUserTopicsAreListed() throws Exception {
        SubscriptionData subscription = admin.querySubscription(group, topic);
        assertNotNull(subscription, "subscription of " + group);
        assertEquals(topic, subscription.getTopic());
        assertEquals("*", subscription.getSubString());
        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        Set<String> user = admin.getUserTopicConfig(addr, false, ItSupport.ADMIN_TIMEOUT_MS)
                .getTopicConfigTable().keySet();
        assertTrue(user.contains(topic), topic + " in " + user);
        for (String system : List.of("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")) {
            assertTrue(!user.contains(system), system + " is not a user topic: " + user);
        }
    }

    @Test
    void aGroupsOffsetsAreClonedToAnother() throws Exception {
        String clone = unique("stats-clone");
        admin.cloneGroupOffset(group, clone, topic, false);
        for (int q = 0; q < QUEUES; q++) {
            assertEquals(consumed(q), ItSupport.committedOffset(admin, clone, queues.get(q)),
                    "cloned offset of queue " + q);
        }
    }

    @Test
    void aConsumersRunningInfoComesFromTheConsumerThroughTheBroker() throws Exception {
        // mqadmin consumerStatus: the connections of the group, then each one's running info,
        // which the broker asks the consumer for.
        ConsumerConnection connections = admin.examineConsumerConnectionInfo(group);
        assertEquals(1, connections.getConnectionSet().size(), "connections " + connections.getConnectionSet());
        String clientId = connections.getConnectionSet().iterator().next().getClientId();
        ConsumerRunningInfo info = admin.getConsumerRunningInfo(group, clientId, false);
        assertTrue(info.getSubscriptionSet().stream().anyMatch(s -> s.getTopic().equals(topic)),
                "subscriptions " + info.getSubscriptionSet());
        assertEquals(QUEUES, info.getMqTable().keySet().stream().filter(q -> q.getTopic().equals(topic)).count(),
                "queues the consumer holds " + info.getMqTable().keySet());
        MQClientException unknown = assertThrows(MQClientException.class,
                () -> admin.getConsumerRunningInfo(group, "127.0.0.1@nobody", false));
        assertEquals(ResponseCode.SYSTEM_ERROR, unknown.getResponseCode(), unknown.getMessage());
        assertTrue(unknown.getMessage().contains("not online"), unknown.getMessage());
    }

    /**
     * {@code mqadmin statsAll} and the dashboard: VIEW_BROKER_STATS_DATA's figures of what a topic
     * stored and a group pulled, and the last minute's rates behind {@code topicPutTps} and
     * {@code consumeTps}. A topic and group of its own, so the figures count only this test's
     * messages.
     */
    @Test
    void statsCountWhatATopicStoredAndAGroupPulled() throws Exception {
        String statsTopic = unique("statsall");
        String statsGroup = unique("statsall-group");
        List<MessageQueue> statsQueues = it.createTopic(statsTopic, 2);
        DefaultMQProducer producer = it.startProducer(unique("statsall-producer"));
        int count = 10;
        long bodyBytes = 0;
        for (int i = 0; i < count; i++) {
            String body = "statsall " + i;
            bodyBytes += body.getBytes(StandardCharsets.UTF_8).length;
            producer.send(ItSupport.message(statsTopic, "TagStats", statsTopic + "-" + i, body),
                    statsQueues.get(i % statsQueues.size()));
        }
        DefaultLitePullConsumer puller = startLitePull(statsGroup, statsTopic, "statsall");
        List<MessageExt> polled = new ArrayList<>();
        await("the messages polled", () -> {
            polled.addAll(puller.poll(200));
            return polled.size() >= count;
        }, () -> polled.size() + " of " + count + " polled");
        assertEquals(count, polled.size(), "messages polled");

        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        String groupKey = statsTopic + "@" + statsGroup;
        // The minute window is sampled every 10 s.
        await("a sampling after the puts and the pulls", 40_000,
                () -> admin.viewBrokerStatsData(addr, "TOPIC_PUT_NUMS", statsTopic).getStatsMinute().getSum() == count
                        && admin.viewBrokerStatsData(addr, "GROUP_GET_NUMS", groupKey).getStatsMinute().getSum() == count,
                () -> "put " + describe(addr, "TOPIC_PUT_NUMS", statsTopic)
                        + ", get " + describe(addr, "GROUP_GET_NUMS", groupKey));

        BrokerStatsData puts = admin.viewBrokerStatsData(addr, "TOPIC_PUT_NUMS", statsTopic);
        assertEquals(1.0, puts.getStatsMinute().getAvgpt(), 1e-9, "messages per send");
        assertTrue(puts.getStatsMinute().getTps() > 0, "put rate " + puts.getStatsMinute().getTps());
        BrokerStatsData gets = admin.viewBrokerStatsData(addr, "GROUP_GET_NUMS", groupKey);
        assertTrue(gets.getStatsMinute().getAvgpt() >= 1.0, "messages per pull " + gets.getStatsMinute().getAvgpt());
        // Sizes are of whole records; each stored record was pulled once.
        long putBytes = admin.viewBrokerStatsData(addr, "TOPIC_PUT_SIZE", statsTopic).getStatsMinute().getSum();
        long gotBytes = admin.viewBrokerStatsData(addr, "GROUP_GET_SIZE", groupKey).getStatsMinute().getSum();
        assertTrue(putBytes > bodyBytes, "whole records stored, " + putBytes + " bytes");
        assertEquals(putBytes, gotBytes, "bytes pulled");
        long brokerPuts = admin.viewBrokerStatsData(addr, "BROKER_PUT_NUMS", "DefaultCluster").getStatsMinute().getSum();
        assertTrue(brokerPuts >= count, "the broker's puts " + brokerPuts);

        // examineTopicStats keeps only the offset tables of the brokers' answers.
        double topicPutTps = admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl()
                .getTopicStatsInfo(addr, statsTopic, ItSupport.ADMIN_TIMEOUT_MS).getTopicPutTps();
        assertTrue(topicPutTps > 0, "topicPutTps " + topicPutTps);
        double consumeTps = admin.examineConsumeStats(statsGroup, statsTopic).getConsumeTps();
        assertTrue(consumeTps > 0, "consumeTps " + consumeTps);

        MQClientException none = assertThrows(MQClientException.class,
                () -> admin.viewBrokerStatsData(addr, "TOPIC_PUT_NUMS", unique("nothing-put")));
        assertEquals(ResponseCode.SYSTEM_ERROR, none.getResponseCode(), none.getMessage());
        assertTrue(none.getMessage().contains("not exist"), none.getMessage());
    }

    /** One item's minute figures, or why they could not be read. */
    static String describe(String addr, String name, String key) {
        try {
            BrokerStatsData data = admin.viewBrokerStatsData(addr, name, key);
            return "sum " + data.getStatsMinute().getSum() + " tps " + data.getStatsMinute().getTps();
        } catch (Exception e) {
            return e.toString();
        }
    }

    /**
     * {@code mqadmin consumeMessage} and the dashboard's resend: the broker reads the message and
     * hands it to one consumer of the group, whose listener gets it again; on both shards.
     */
    @Test
    void aMessageIsHandedToAConsumerDirectlyThroughTheBroker() throws Exception {
        String directTopic = unique("direct");
        String directGroup = unique("direct-group");
        List<MessageQueue> directQueues = it.createTopic(directTopic, 2);
        DefaultMQProducer producer = it.startProducer(unique("direct-producer"));
        List<SendResult> sent = new ArrayList<>();
        for (MessageQueue queue : directQueues) {
            sent.add(producer.send(ItSupport.message(directTopic, "TagDirect", directTopic + "-" + queue.getQueueId(),
                    "direct " + queue.getQueueId()), queue));
        }
        ConcurrentLinkedQueue<MessageExt> received = new ConcurrentLinkedQueue<>();
        it.startPushConsumer(directGroup, "direct", directTopic, ItSupport.collectInto(received));
        await("both messages consumed", () -> received.size() >= sent.size(), () -> received.size() + " received");
        String clientId = admin.examineConsumerConnectionInfo(directGroup).getConnectionSet().iterator().next()
                .getClientId();
        for (SendResult one : sent) {
            int before = received.size();
            ConsumeMessageDirectlyResult result =
                    admin.consumeMessageDirectly(directGroup, clientId, directTopic, one.getOffsetMsgId());
            assertEquals(CMResult.CR_SUCCESS, result.getConsumeResult(), "result " + result);
            assertEquals(before + 1, received.size(), "the listener got it once more");
            MessageExt again = received.stream().reduce((first, second) -> second).orElseThrow();
            assertEquals(one.getMsgId(), again.getMsgId(), "the message handed over");
        }
        // mqadmin getConsumerStatus: every consumer's own offsets of the topic, through the broker.
        Map<String, Map<MessageQueue, Long>> status = admin.getConsumeStatus(directTopic, directGroup, "");
        assertEquals(Set.of(clientId), status.keySet(), "consumers in " + status);
        for (MessageQueue queue : directQueues) {
            assertEquals(1L, status.get(clientId).get(queue), "the consumer's offset of " + queue + " in " + status);
        }
        assertEquals(status, admin.getConsumeStatus(directTopic, directGroup, clientId), "the one consumer named");
        MQClientException nobody = assertThrows(MQClientException.class,
                () -> admin.getConsumeStatus(directTopic, unique("no-consumers"), ""));
        assertEquals(ResponseCode.SYSTEM_ERROR, nobody.getResponseCode(), nobody.getMessage());
        MQClientException offline = assertThrows(MQClientException.class, () -> admin.getDefaultMQAdminExtImpl()
                .getMqClientInstance().getMQClientAPIImpl().consumeMessageDirectly(
                        ItSupport.masterAddrs(admin, it.broker()).get(0), directGroup, "127.0.0.1@nobody",
                        directTopic, sent.get(0).getOffsetMsgId(), ItSupport.ADMIN_TIMEOUT_MS));
        assertEquals(ResponseCode.SYSTEM_ERROR, offline.getResponseCode(), offline.getMessage());
        assertTrue(offline.getMessage().contains("not online"), offline.getMessage());
    }

    @Test
    void statsOfAnUnknownTopicAreRefusedWithTopicNotExist() throws Exception {
        String addr = ItSupport.masterAddrs(admin, it.broker()).get(0);
        MQBrokerException refused = assertThrows(MQBrokerException.class,
                () -> admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl()
                        .getTopicStatsInfo(addr, unique("missing"), ItSupport.ADMIN_TIMEOUT_MS));
        assertEquals(ResponseCode.TOPIC_NOT_EXIST, refused.getResponseCode(), refused.getMessage());
    }
}
