package dev.ringmq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * What every end-to-end test shares: unique names, clients configured for short test runs,
 * topic creation the way an operator does it ({@code mqadmin updateTopic}, i.e.
 * UPDATE_AND_CREATE_TOPIC sent by {@link DefaultMQAdminExt}), bounded polling, and reading a
 * topic back completely.
 *
 * <p>Waiting is always "poll a condition until it holds or a deadline passes"; nothing sleeps and
 * hopes, and no assertion is about how long something took.
 */
final class ItSupport {
    /** Deadline of an ordinary wait (routes, deliveries, committed offsets). */
    static final long WAIT_MS = 30_000;
    /** {@link #readAll}: a reader without progress this long seeks its queues again. */
    static final long READ_STALL_RESEEK_MS = 5_000;
    /** Deadline of a wait that includes RocketMQ's first retry delay (10 s at delay level 3). */
    static final long RETRY_WAIT_MS = 60_000;
    /** Poll period of {@link #await}. */
    static final long POLL_MS = 100;
    /** Client-side timeout of one send. */
    static final int SEND_TIMEOUT_MS = 10_000;
    /** Timeout of one admin request. */
    static final long ADMIN_TIMEOUT_MS = 10_000;
    /** How often consumers push their offsets to the broker (the client's minimum is 1 s). */
    static final int PERSIST_OFFSET_INTERVAL_MS = 1_000;
    /**
     * How often consumers send HEART_BEAT (default 30 s). Short, because a subscription version
     * bumped by a rebalance reaches the broker only with a heartbeat, and until then Apache
     * RocketMQ answers that consumer's pulls with SUBSCRIPTION_NOT_LATEST.
     */
    static final int HEARTBEAT_INTERVAL_MS = 2_000;
    /** How often clients refresh topic routes from the name server. */
    static final int POLL_NAMESRV_INTERVAL_MS = 2_000;

    private static final AtomicLong COUNTER = new AtomicLong();
    private static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);

    private ItSupport() {
    }

    /** Largest accepted {@code ringmq.it.portOffset}: test classes' port bases are 100 apart. */
    static final int MAX_PORT_OFFSET = 90;

    /** The Maven build directory (system property {@code ringmq.target}, set by the POM). */
    static File targetDir() {
        return new File(System.getProperty("ringmq.target", "target")).getAbsoluteFile();
    }

    /**
     * A test class's port base shifted by the system property {@code ringmq.it.portOffset}
     * (0 to {@value #MAX_PORT_OFFSET}; scripts/java-tests.sh passes RINGMQ_JAVA_PORT_OFFSET), so
     * that two suites can run side by side.
     */
    static int port(int base) {
        int offset = Integer.getInteger("ringmq.it.portOffset", 0);
        if (offset < 0 || offset > MAX_PORT_OFFSET) {
            fail("ringmq.it.portOffset=" + offset + " is outside 0.." + MAX_PORT_OFFSET);
        }
        return base + offset;
    }

    /** Keeps the client's log files and broadcasting offsets under target/ (idempotent). */
    static synchronized void configureClientLogging() {
        if (System.getProperty("rocketmq.client.logRoot") == null) {
            System.setProperty("rocketmq.client.logRoot", new File(targetDir(), "rocketmq-logs").getPath());
        }
        if (System.getProperty("rocketmq.client.localOffsetStoreDir") == null) {
            System.setProperty("rocketmq.client.localOffsetStoreDir",
                    new File(targetDir(), "rocketmq-offsets").getPath());
        }
    }

    /** A topic or group name no other test run uses; every name starts with {@code java-}. */
    static String unique(String what) {
        return "java-" + what + "-" + RUN + "-" + COUNTER.incrementAndGet();
    }

    /** A client instance name of its own, so no two clients share an MQClientInstance. */
    static String instanceName(String what) {
        return "java-" + what + "-" + ProcessHandle.current().pid() + "-" + COUNTER.incrementAndGet();
    }

    /** Something {@link #await} polls. */
    @FunctionalInterface
    interface Condition {
        /** True when the wait is over. */
        boolean holds() throws Exception;
    }

    /** What a failed {@link #await} reports about the state it saw. */
    @FunctionalInterface
    interface Detail {
        /** A description of the current state. */
        String get() throws Exception;
    }

    /** Polls {@code condition} until it holds; fails with {@code detail} after {@code timeoutMs}. */
    static void await(String what, long timeoutMs, Condition condition, Detail detail) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        Exception last = null;
        while (true) {
            try {
                if (condition.holds()) {
                    return;
                }
                last = null;
            } catch (Exception e) {
                last = e;
            }
            if (System.nanoTime() > deadline) {
                String state;
                try {
                    state = detail.get();
                } catch (Exception e) {
                    state = "(state unavailable: " + e + ")";
                }
                AssertionError error = new AssertionError(
                        "timed out after " + timeoutMs + " ms waiting for " + what + ": " + state);
                if (last != null) {
                    error.initCause(last);
                }
                throw error;
            }
            Thread.sleep(POLL_MS);
        }
    }

    /** {@link #await} with the default deadline. */
    static void await(String what, Condition condition, Detail detail) throws Exception {
        await(what, WAIT_MS, condition, detail);
    }

    /** A started admin client for the broker's name server. */
    static DefaultMQAdminExt startAdmin(BrokerUnderTest broker) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(ADMIN_TIMEOUT_MS);
        admin.setNamesrvAddr(broker.namesrvAddr());
        admin.setInstanceName(instanceName("admin"));
        admin.setAdminExtGroup(unique("admin"));
        admin.start();
        return admin;
    }

    /** The admin client's remoting API, for requests its public methods do not make. */
    static MQClientAPIImpl api(DefaultMQAdminExt admin) {
        return admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl();
    }

    /**
     * PULL_MESSAGE of one message of {@code queue} at {@code offset} by {@code group}, subscribed to
     * every tag, asked of the broker at {@code addr} without long polling. The answer's messages
     * are left undecoded ({@link PullResultExt#getMessageBinary}).
     */
    static PullResultExt pullOne(DefaultMQAdminExt admin, String addr, MessageQueue queue, String group,
            long offset) throws Exception {
        PullMessageRequestHeader header = new PullMessageRequestHeader();
        header.setConsumerGroup(group);
        header.setTopic(queue.getTopic());
        header.setQueueId(queue.getQueueId());
        header.setQueueOffset(offset);
        header.setMaxMsgNums(1);
        header.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
        header.setCommitOffset(0L);
        header.setSuspendTimeoutMillis(0L);
        header.setSubscription("*");
        header.setSubVersion(0L);
        header.setExpressionType(ExpressionType.TAG);
        return (PullResultExt) api(admin).pullMessage(addr, header, ADMIN_TIMEOUT_MS, CommunicationMode.SYNC, null);
    }

    /** Master addresses of every broker the name server knows, waiting for at least one. */
    static List<String> masterAddrs(DefaultMQAdminExt admin, BrokerUnderTest broker) throws Exception {
        List<String> addrs = new ArrayList<>();
        await("a broker registered with " + broker.namesrvAddr(), () -> {
            ClusterInfo info = admin.examineBrokerClusterInfo();
            addrs.clear();
            for (BrokerData data : info.getBrokerAddrTable().values()) {
                String master = data.getBrokerAddrs().get(MixAll.MASTER_ID);
                if (master != null) {
                    addrs.add(master);
                }
            }
            return !addrs.isEmpty();
        }, () -> "no master in GET_BROKER_CLUSTER_INFO; broker log " + broker.logPath());
        return addrs;
    }

    /**
     * Creates {@code topic} with {@code queues} read and write queues on every master
     * (UPDATE_AND_CREATE_TOPIC) and waits until the name server routes all of them.
     *
     * @return the topic's message queues
     */
    static List<MessageQueue> createTopic(DefaultMQAdminExt admin, BrokerUnderTest broker, String topic, int queues)
            throws Exception {
        List<String> masters = masterAddrs(admin, broker);
        for (String addr : masters) {
            TopicConfig config = new TopicConfig(topic, queues, queues, 6);
            admin.createAndUpdateTopicConfig(addr, config);
        }
        return awaitRoutes(admin, "routes of " + topic, topic, queues * masters.size());
    }

    /**
     * Waits until the name server routes {@code expected} queues of {@code topic} (after a topic
     * was created, or a broker restarted).
     *
     * @return the topic's message queues
     */
    static List<MessageQueue> awaitRoutes(DefaultMQAdminExt admin, String what, String topic, int expected)
            throws Exception {
        List<MessageQueue> result = new ArrayList<>();
        await(what, () -> {
            result.clear();
            result.addAll(queues(admin, topic));
            return result.size() == expected;
        }, () -> "routed queues " + result + ", expected " + expected);
        return result;
    }

    /** The topic's message queues according to the name server, sorted. */
    static List<MessageQueue> queues(DefaultMQAdminExt admin, String topic) throws Exception {
        TopicRouteData route = admin.examineTopicRouteInfo(topic);
        List<MessageQueue> result = new ArrayList<>();
        for (QueueData data : route.getQueueDatas()) {
            for (int id = 0; id < data.getReadQueueNums(); id++) {
                result.add(new MessageQueue(topic, data.getBrokerName(), id));
            }
        }
        result.sort(Comparator.comparing(MessageQueue::getBrokerName).thenComparing(MessageQueue::getQueueId));
        return result;
    }

    /** A started producer for {@code group}. */
    static DefaultMQProducer startProducer(BrokerUnderTest broker, String group) throws Exception {
        DefaultMQProducer producer = configured(new DefaultMQProducer(group), broker, "producer");
        producer.start();
        return producer;
    }

    /** {@code producer} set up for {@code broker}'s name server and short test timeouts. */
    private static <P extends DefaultMQProducer> P configured(P producer, BrokerUnderTest broker, String label) {
        producer.setNamesrvAddr(broker.namesrvAddr());
        producer.setInstanceName(instanceName(label));
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.setPollNameServerInterval(POLL_NAMESRV_INTERVAL_MS);
        return producer;
    }

    /**
     * A transactional producer for {@code group}, not yet started, whose local transactions and
     * check-backs {@code listener} answers. It sends heartbeats every
     * {@link #HEARTBEAT_INTERVAL_MS}: the broker checks back only with a producer of the group it
     * has a heartbeat from.
     */
    static TransactionMQProducer transactionProducer(BrokerUnderTest broker, String group, String label,
            TransactionListener listener) {
        TransactionMQProducer producer = configured(new TransactionMQProducer(group), broker, label);
        producer.setHeartbeatBrokerInterval(HEARTBEAT_INTERVAL_MS);
        producer.setTransactionListener(listener);
        return producer;
    }

    /**
     * Sends {@code message} synchronously and asserts SEND_OK; the failure message is {@code what}
     * and the send result.
     */
    static SendResult sendOk(DefaultMQProducer producer, Message message, String what) throws Exception {
        SendResult result = producer.send(message);
        assertEquals(SendStatus.SEND_OK, result.getSendStatus(), () -> what + ": " + result);
        return result;
    }

    /**
     * A concurrent listener that adds every delivered message to {@code sink} and answers
     * CONSUME_SUCCESS.
     */
    static MessageListenerConcurrently collectInto(Collection<MessageExt> sink) {
        return (messages, context) -> {
            sink.addAll(messages);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
    }

    /** The (single) keys of {@code messages}. */
    static Set<String> keys(Collection<? extends Message> messages) {
        return messages.stream().map(Message::getKeys).collect(Collectors.toSet());
    }

    /**
     * Waits, at most {@code timeoutMs}, until the messages in {@code received} (filled by a
     * consumer) include one with each of the keys {@code expected}.
     */
    static void awaitKeys(String what, long timeoutMs, Collection<? extends Message> received,
            Collection<String> expected) throws Exception {
        await(what, timeoutMs, () -> keys(received).containsAll(expected), () -> {
            Set<String> missing = new TreeSet<>(expected);
            missing.removeAll(keys(received));
            return received.size() + " delivered, missing " + missing;
        });
    }

    /**
     * A push consumer for {@code group}, not yet subscribed nor started: clustering, from the
     * first offset, offsets pushed to the broker every second.
     */
    static DefaultMQPushConsumer pushConsumer(BrokerUnderTest broker, String group, String label) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(broker.namesrvAddr());
        consumer.setInstanceName(instanceName(label));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPersistConsumerOffsetInterval(PERSIST_OFFSET_INTERVAL_MS);
        consumer.setPollNameServerInterval(POLL_NAMESRV_INTERVAL_MS);
        consumer.setHeartbeatBrokerInterval(HEARTBEAT_INTERVAL_MS);
        consumer.setConsumeThreadMin(4);
        consumer.setConsumeThreadMax(4);
        return consumer;
    }

    /** Queues of {@code topic} the push consumer holds right now (rebalance result). */
    static Set<MessageQueue> ownedQueues(DefaultMQPushConsumer consumer, String topic) {
        Map<MessageQueue, ProcessQueue> table =
                consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable();
        return table.entrySet().stream()
                .filter(e -> e.getKey().getTopic().equals(topic) && !e.getValue().isDropped())
                .map(Map.Entry::getKey)
                .collect(Collectors.toSet());
    }

    /** A message with tags, one key (or several, space-separated) and a UTF-8 body. */
    static Message message(String topic, String tags, String keys, String body) {
        return new Message(topic, tags, keys, body.getBytes(StandardCharsets.UTF_8));
    }

    /** The UTF-8 body of a message. */
    static String body(Message message) {
        return new String(message.getBody(), StandardCharsets.UTF_8);
    }

    /** GET_MAX_OFFSET of one queue. */
    static long maxOffset(DefaultMQAdminExt admin, MessageQueue queue) throws Exception {
        return admin.maxOffset(queue);
    }

    /** Sum over the queues of max offset minus min offset: how many messages they hold. */
    static long storedCount(DefaultMQAdminExt admin, List<MessageQueue> queues) throws Exception {
        long total = 0;
        for (MessageQueue queue : queues) {
            total += admin.maxOffset(queue) - admin.minOffset(queue);
        }
        return total;
    }

    /** The offset the broker holds for {@code group} on {@code queue} (QUERY_CONSUMER_OFFSET); -1 if none. */
    static long committedOffset(DefaultMQAdminExt admin, String group, MessageQueue queue) throws Exception {
        TopicRouteData route = admin.examineTopicRouteInfo(queue.getTopic());
        String addr = null;
        for (BrokerData data : route.getBrokerDatas()) {
            if (data.getBrokerName().equals(queue.getBrokerName())) {
                addr = data.getBrokerAddrs().get(MixAll.MASTER_ID);
            }
        }
        assertNotNull(addr, "no master address for " + queue);
        return committedOffsetAt(admin, addr, group, queue);
    }

    /** The offset the broker at {@code addr} holds for {@code group} on {@code queue}; -1 if none. */
    static long committedOffsetAt(DefaultMQAdminExt admin, String addr, String group, MessageQueue queue)
            throws Exception {
        QueryConsumerOffsetRequestHeader header = new QueryConsumerOffsetRequestHeader();
        header.setConsumerGroup(group);
        header.setTopic(queue.getTopic());
        header.setQueueId(queue.getQueueId());
        header.setBrokerName(queue.getBrokerName());
        header.setSetZeroIfNotFound(false);
        try {
            return admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl()
                    .queryConsumerOffset(addr, header, ADMIN_TIMEOUT_MS);
        } catch (MQBrokerException e) {
            if (e.getResponseCode() == ResponseCode.QUERY_NOT_FOUND) {
                return -1;
            }
            throw e;
        }
    }

    /** Committed and max offset per queue, for failure messages. */
    static String offsets(DefaultMQAdminExt admin, String group, List<MessageQueue> queues) {
        StringBuilder text = new StringBuilder();
        for (MessageQueue queue : queues) {
            try {
                text.append(queue.getQueueId()).append(": committed ")
                        .append(committedOffset(admin, group, queue)).append(" max ")
                        .append(admin.maxOffset(queue)).append("; ");
            } catch (Exception e) {
                text.append(queue.getQueueId()).append(": ").append(e).append("; ");
            }
        }
        return text.toString();
    }

    /** True when the broker's committed offset of {@code group} is at the max offset of every queue. */
    static boolean committedUpToMax(DefaultMQAdminExt admin, String group, List<MessageQueue> queues)
            throws Exception {
        for (MessageQueue queue : queues) {
            if (committedOffset(admin, group, queue) < admin.maxOffset(queue)) {
                return false;
            }
        }
        return true;
    }

    /** Waits until the broker's committed offset of {@code group} reaches the max offset of every queue. */
    static void awaitCommitted(DefaultMQAdminExt admin, String group, List<MessageQueue> queues) throws Exception {
        await("offsets of " + group + " committed up to the max offsets", () -> committedUpToMax(admin, group, queues),
                () -> offsets(admin, group, queues));
    }

    /**
     * Reads every message stored in {@code queues} with a {@link DefaultLitePullConsumer} in assign
     * mode (from the first offset, nothing committed), in queue and offset order.
     *
     * @param expected how many messages the queues must hold (waited for first), or -1 for "what
     *     they hold now"
     */
    static List<MessageExt> readAll(BrokerUnderTest broker, DefaultMQAdminExt admin, List<MessageQueue> queues,
            long expected) throws Exception {
        if (expected >= 0) {
            await(expected + " messages stored", () -> storedCount(admin, queues) == expected,
                    () -> "stored " + storedCount(admin, queues));
        }
        long stored = storedCount(admin, queues);
        // Keyed by position: a message the client hands out twice (a seek racing the first
        // pull) is one stored message.
        Map<String, MessageExt> byPosition = new TreeMap<>();
        DefaultLitePullConsumer reader = new DefaultLitePullConsumer(unique("reader"));
        reader.setNamesrvAddr(broker.namesrvAddr());
        reader.setInstanceName(instanceName("reader"));
        reader.setAutoCommit(false);
        reader.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        reader.setPollTimeoutMillis(1_000);
        reader.start();
        try {
            reader.assign(queues);
            // seekToBegin cancels the queue's running pull task; a pull it interrupts makes the
            // client close its channel to the broker, and this thread's next request on that
            // channel (GET_MIN_OFFSET of the next seek) fails. Seeking is idempotent: retried.
            Condition seekAll = () -> {
                for (MessageQueue queue : queues) {
                    reader.seekToBegin(queue);
                }
                return true;
            };
            await("the reader at the first offsets", seekAll, () -> "seekToBegin failed");
            // The same race can fail the new pull task's first pull, which consumed the seek
            // offset; the task then goes on from where the cancelled pull got to (the client's
            // own bug, seen once in LookupIT: nothing read for 30 s). Without progress for
            // READ_STALL_RESEEK_MS the queues are sought again.
            long[] lastProgress = {System.nanoTime()};
            int[] lastSize = {0};
            await(stored + " messages read back", () -> {
                for (MessageExt message : reader.poll(500)) {
                    byPosition.put(String.format("%s/%05d/%012d", message.getBrokerName(), message.getQueueId(),
                            message.getQueueOffset()), message);
                }
                long now = System.nanoTime();
                if (byPosition.size() != lastSize[0]) {
                    lastSize[0] = byPosition.size();
                    lastProgress[0] = now;
                } else if (byPosition.size() < stored
                        && now - lastProgress[0] > TimeUnit.MILLISECONDS.toNanos(READ_STALL_RESEEK_MS)) {
                    lastProgress[0] = now;
                    seekAll.holds();
                }
                return byPosition.size() >= stored;
            }, () -> "read " + byPosition.size() + " of " + stored);
        } finally {
            reader.shutdown();
        }
        assertEquals(stored, byPosition.size(), "messages read back");
        return new ArrayList<>(byPosition.values());
    }

    /** The messages by their (single) key; fails on a key seen twice. */
    static Map<String, MessageExt> byKey(List<MessageExt> messages) {
        Map<String, MessageExt> result = new HashMap<>();
        for (MessageExt message : messages) {
            MessageExt previous = result.put(message.getKeys(), message);
            if (previous != null) {
                fail("key " + message.getKeys() + " stored twice: " + previous + " and " + message);
            }
        }
        return result;
    }
}
