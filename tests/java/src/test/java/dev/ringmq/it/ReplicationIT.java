package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.body.HARuntimeInfo;
import org.apache.rocketmq.remoting.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Master/slave replication seen through the official client: a master and a slave of the same
 * {@code brokerName} ({@code --brokerRole=SLAVE --brokerId=1}) register with one standalone
 * {@code ringmq namesrv}, so that the name server outlives a master killed with SIGKILL (an
 * embedded one would die with it). Then the name server routes the broker name to the slave alone,
 * and a consumer reads from it ({@code findBrokerAddressInSubscribe} falls back from the master to
 * brokerId 1).
 *
 * <p>The topic is created on the master before the slave starts: a slave takes its master's
 * topic table when it connects (and every 10 s), as it takes its consumer offsets and its
 * delivery progress of delayed and timer messages.
 *
 * <p>Replication is fast enough that an ASYNC_MASTER killed right after its acknowledgements has
 * rarely, if ever, an acknowledged message its slave lacks; what tells a SYNC_MASTER apart is its
 * SLAVE_NOT_AVAILABLE to a send while it has no slave.
 *
 * <p>Needs brokers this harness starts, so it is skipped against an external broker.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ReplicationIT {
    /**
     * Each test uses PORT + 20 * n (its master; its name server 6 above, as an embedded one would
     * be) and PORT + 20 * n + 10 (its slave).
     */
    static final int PORT = 23800;
    static final int QUEUES = 4;
    /** Master and slave must have the same shard count (and CommitLog segment size). */
    static final String SHARDS = "--shards=2";
    /** Messages sent to the ASYNC_MASTER. */
    static final int COUNT = 200;
    /** SEND_OKs from the SYNC_MASTER before it is killed. */
    static final int ACKED_BEFORE_KILL = 100;

    /** What the running test started, closed the last first after it. */
    private final Deque<AutoCloseable> started = new ArrayDeque<>();

    /** A name server, a master registered with it with the test's topic, and the master's slave. */
    record Pair(NameServerUnderTest namesrv, BrokerUnderTest master, BrokerUnderTest slave, String brokerName,
            DefaultMQAdminExt admin, List<MessageQueue> queues) {
    }

    /** What a test does on the master before its slave starts. */
    @FunctionalInterface
    interface BeforeSlave {
        void run(BrokerUnderTest master, List<MessageQueue> queues) throws Exception;
    }

    @BeforeEach
    void assumeStartable() {
        BrokerUnderTest.assumeStartable("replication between a master and a slave");
    }

    @AfterEach
    void closeStarted() throws Exception {
        Exception first = null;
        while (!started.isEmpty()) {
            try {
                started.pop().close();
            } catch (Exception e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    private <T extends AutoCloseable> T keep(T resource) {
        started.push(resource);
        return resource;
    }

    /**
     * Starts test {@code n}'s name server and master ({@code masterArgs} added), creates
     * {@code topic} on the master, then starts the slave and waits until the name server lists
     * both under the broker name.
     */
    Pair startPair(int n, String label, String topic, String... masterArgs) throws Exception {
        return startPair(n, label, topic, (master, queues) -> {
        }, masterArgs);
    }

    /** {@link #startPair(int, String, String, String...)}, running {@code beforeSlave} before the slave starts. */
    Pair startPair(int n, String label, String topic, BeforeSlave beforeSlave, String... masterArgs)
            throws Exception {
        return startPair(n, label, topic, beforeSlave, new String[0], masterArgs);
    }

    /** {@link #startPair(int, String, String, BeforeSlave, String...)}, the slave started with {@code slaveArgs} added. */
    Pair startPair(int n, String label, String topic, BeforeSlave beforeSlave, String[] slaveArgs,
            String... masterArgs) throws Exception {
        int base = PORT + 20 * n;
        String brokerName = "java-" + label;
        NameServerUnderTest namesrv = keep(NameServerUnderTest.start(label + "-namesrv", base + 6));
        String[] args = new String[masterArgs.length + 1];
        args[0] = SHARDS;
        System.arraycopy(masterArgs, 0, args, 1, masterArgs.length);
        BrokerUnderTest master = keep(BrokerUnderTest.start(label + "-master", brokerName, namesrv, base, args));
        Clients clients = keep(new Clients(() -> master));
        DefaultMQAdminExt admin = clients.startAdmin();
        List<MessageQueue> queues = clients.createTopic(admin, topic, QUEUES);
        beforeSlave.run(master, queues);
        String[] allSlaveArgs = new String[slaveArgs.length + 3];
        allSlaveArgs[0] = SHARDS;
        allSlaveArgs[1] = "--brokerRole=SLAVE";
        allSlaveArgs[2] = "--brokerId=1";
        System.arraycopy(slaveArgs, 0, allSlaveArgs, 3, slaveArgs.length);
        BrokerUnderTest slave = keep(BrokerUnderTest.start(label + "-slave", brokerName, namesrv, base + 10,
                allSlaveArgs));
        await("master and slave of " + brokerName + " registered with " + namesrv.addr(), () -> {
            Map<Long, String> addrs = brokerAddrs(admin, brokerName);
            return master.addr().equals(addrs.get(MixAll.MASTER_ID)) && slave.addr().equals(addrs.get(1L));
        }, () -> "broker addresses " + brokerAddrs(admin, brokerName) + "; logs " + master.logPath() + ", "
                + slave.logPath());
        return new Pair(namesrv, master, slave, brokerName, admin, queues);
    }

    /** The addresses the name server lists under {@code brokerName}, by broker id (empty if none). */
    static Map<Long, String> brokerAddrs(DefaultMQAdminExt admin, String brokerName) throws Exception {
        BrokerData data = admin.examineBrokerClusterInfo().getBrokerAddrTable().get(brokerName);
        return data == null ? Map.of() : new TreeMap<>(data.getBrokerAddrs());
    }

    /** GET_MAX_OFFSET of {@code queue} asked of the broker at {@code addr}. */
    static long maxOffsetAt(DefaultMQAdminExt admin, String addr, MessageQueue queue) throws Exception {
        return ItSupport.api(admin).getMaxOffset(addr, queue, ItSupport.ADMIN_TIMEOUT_MS);
    }

    /** Queue id: master's max offset / slave's max offset, for failure messages. */
    static String maxOffsets(Pair pair) {
        StringBuilder text = new StringBuilder();
        for (MessageQueue queue : pair.queues()) {
            text.append(queue.getQueueId()).append(": ");
            for (BrokerUnderTest broker : List.of(pair.master(), pair.slave())) {
                try {
                    text.append(maxOffsetAt(pair.admin(), broker.addr(), queue));
                } catch (Exception e) {
                    text.append(e.getClass().getSimpleName());
                }
                text.append(broker == pair.master() ? " (master) / " : " (slave); ");
            }
        }
        return text.toString();
    }

    /**
     * Waits until the slave's queues end where the master's do and hold {@code count} messages in
     * all (an ASYNC_MASTER answers before its slave has a message).
     */
    static void awaitSlaveHolds(Pair pair, long count) throws Exception {
        await("the slave's queues as long as the master's", () -> {
            long total = 0;
            for (MessageQueue queue : pair.queues()) {
                long master = maxOffsetAt(pair.admin(), pair.master().addr(), queue);
                if (maxOffsetAt(pair.admin(), pair.slave().addr(), queue) != master) {
                    return false;
                }
                total += master;
            }
            return total == count;
        }, () -> maxOffsets(pair));
    }

    /** Waits until the name server lists only the slave under the broker name (the master was killed). */
    static void awaitOnlyTheSlave(Pair pair) throws Exception {
        await("the name server dropping the killed master of " + pair.brokerName(),
                () -> brokerAddrs(pair.admin(), pair.brokerName()).equals(Map.of(1L, pair.slave().addr())),
                () -> "broker addresses " + brokerAddrs(pair.admin(), pair.brokerName()) + "; name server log "
                        + pair.namesrv().logPath());
    }

    /**
     * Starts a push consumer of a new group (CONSUME_FROM_FIRST_OFFSET) through the name server of
     * {@code pair} and waits until it received every key of {@code expected}.
     *
     * @return everything it received
     */
    ConcurrentLinkedQueue<MessageExt> consumeFromSlave(Pair pair, String topic, Set<String> expected)
            throws Exception {
        ConcurrentLinkedQueue<MessageExt> received = new ConcurrentLinkedQueue<>();
        Clients consumers = keep(new Clients(pair::slave));
        consumers.startPushConsumer(unique("repl-group"), "repl-consumer", topic, ItSupport.collectInto(received));
        ItSupport.awaitKeys("every message from the slave " + pair.slave().addr(), ItSupport.WAIT_MS, received,
                expected);
        return received;
    }

    /**
     * {@code mqadmin haStatus} of a caught-up pair: the master lists its slave in sync with nothing
     * behind, the slave names its master and holds as much as the master's logs.
     */
    static void assertHaStatus(Pair pair) throws Exception {
        DefaultMQAdminExt admin = pair.admin();
        await("the master reports its slave caught up", () -> {
            HARuntimeInfo info = admin.getBrokerHAStatus(pair.master().addr());
            return info.getInSyncSlaveNums() == 1 && info.getHaConnectionInfo().get(0).getDiff() == 0;
        }, () -> String.valueOf(admin.getBrokerHAStatus(pair.master().addr())));
        HARuntimeInfo master = admin.getBrokerHAStatus(pair.master().addr());
        assertTrue(master.isMaster());
        assertTrue(master.getMasterCommitLogMaxOffset() > 0, "the master's logs hold the messages");
        assertEquals(1, master.getHaConnectionInfo().size(), "slaves of the master");
        HARuntimeInfo.HAConnectionRuntimeInfo slaveSeen = master.getHaConnectionInfo().get(0);
        assertEquals(pair.slave().addr(), slaveSeen.getAddr());
        assertTrue(slaveSeen.isInSync());
        assertEquals(master.getMasterCommitLogMaxOffset(), slaveSeen.getSlaveAckOffset());

        HARuntimeInfo slave = admin.getBrokerHAStatus(pair.slave().addr());
        assertFalse(slave.isMaster());
        HARuntimeInfo.HAClientRuntimeInfo client = slave.getHaClientRuntimeInfo();
        assertEquals(pair.master().addr(), client.getMasterAddr());
        assertEquals(master.getMasterCommitLogMaxOffset(), client.getMaxOffset(), "the slave's logs");
        assertTrue(client.getLastReadTimestamp() > 0 && client.getLastWriteTimestamp() > 0, "times of " + client);
    }

    @Test
    void aConsumerReadsEveryMessageFromTheSlaveAfterTheMasterIsKilled() throws Exception {
        String topic = unique("repl");
        Pair pair = startPair(0, "repl-async", topic);
        DefaultMQProducer producer = keep(new Clients(pair::master)).startProducer(unique("repl-producer"));
        Map<String, Message> sent = new LinkedHashMap<>();
        Map<String, SendResult> acked = new LinkedHashMap<>();
        for (int i = 0; i < COUNT; i++) {
            Message message = message(topic, "TagRepl" + (i % 3), topic + "-key-" + i, "replicated body " + i);
            acked.put(message.getKeys(), ItSupport.sendOk(producer, message, "send " + i));
            sent.put(message.getKeys(), message);
        }
        awaitSlaveHolds(pair, COUNT);
        assertHaStatus(pair);

        pair.master().kill9();
        awaitOnlyTheSlave(pair);
        ConcurrentLinkedQueue<MessageExt> received = consumeFromSlave(pair, topic, sent.keySet());
        assertEquals(sent.keySet(), ItSupport.keys(received), "keys received from the slave");
        SendLoop.assertStored(sent, acked, received);
        // A slave whose master is gone still stops cleanly (exit status 0 within the bound).
        pair.slave().stop();
    }

    @Test
    void aSyncMasterAcknowledgesOnlyWhatItsSlaveHas() throws Exception {
        String topic = unique("repl-sync");
        Map<String, Message> attempted = new ConcurrentHashMap<>();
        AtomicReference<DefaultMQProducer> started = new AtomicReference<>();
        Pair pair = startPair(1, "repl-sync", topic, (master, queues) -> {
            DefaultMQProducer first = keep(new Clients(() -> master)).startProducer(unique("repl-sync-producer"));
            // One attempt per send: a retry inside the client would blur which attempt was acked.
            first.setRetryTimesWhenSendFailed(0);
            started.set(first);
            // Stored, but not acknowledged: no slave has it.
            Message lonely = message(topic, "TagLonely", topic + "-lonely", "sent before the slave started");
            attempted.put(lonely.getKeys(), lonely);
            SendResult result = first.send(lonely);
            assertEquals(SendStatus.SLAVE_NOT_AVAILABLE, result.getSendStatus(),
                    () -> "a SYNC_MASTER without a slave answered " + result);
        }, "--brokerRole=SYNC_MASTER");
        SendLoop loop = keep(SendLoop.start(started.get(), topic, "Sync"));
        // While the loop sends, both ends count the bytes of the stream (haStatus's
        // transferredByteInSecond: the last whole second's).
        await("the master and the slave counting the bytes replicated each second", () -> {
            HARuntimeInfo master = pair.admin().getBrokerHAStatus(pair.master().addr());
            HARuntimeInfo slave = pair.admin().getBrokerHAStatus(pair.slave().addr());
            return !master.getHaConnectionInfo().isEmpty()
                    && master.getHaConnectionInfo().get(0).getTransferredByteInSecond() > 0
                    && slave.getHaClientRuntimeInfo().getTransferredByteInSecond() > 0;
        }, () -> "master " + pair.admin().getBrokerHAStatus(pair.master().addr()) + ", slave "
                + pair.admin().getBrokerHAStatus(pair.slave().addr()));
        // SLAVE_NOT_AVAILABLE until the slave's first pull, FLUSH_SLAVE_TIMEOUT: other outcomes.
        loop.awaitAcked(ACKED_BEFORE_KILL, () -> maxOffsets(pair));
        // Right after the acknowledgements, no waiting for the slave: it must have them already.
        pair.master().kill9();
        loop.stop();
        awaitOnlyTheSlave(pair);

        // Sends that were not acknowledged may or may not have reached the slave.
        attempted.putAll(loop.attempted());
        ConcurrentLinkedQueue<MessageExt> received = consumeFromSlave(pair, topic, loop.acked().keySet());
        SendLoop.assertStored(attempted, loop.acked(), received);
    }

    @Test
    void aSlaveRefusesSends() throws Exception {
        String topic = unique("repl-refuse");
        Pair pair = startPair(2, "repl-refuse", topic);
        DefaultMQProducer producer = keep(new Clients(pair::master)).startProducer(unique("repl-refuse-producer"));
        Message message = message(topic, "TagRefused", topic + "-key-0", "sent to the slave");
        SendMessageRequestHeader header = new SendMessageRequestHeader();
        header.setProducerGroup(producer.getProducerGroup());
        header.setTopic(topic);
        header.setDefaultTopic(TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC);
        header.setDefaultTopicQueueNums(QUEUES);
        header.setQueueId(0);
        header.setSysFlag(0);
        header.setBornTimestamp(System.currentTimeMillis());
        header.setFlag(message.getFlag());
        header.setProperties(MessageDecoder.messageProperties2String(message.getProperties()));
        header.setReconsumeTimes(0);
        header.setBatch(false);
        MQClientAPIImpl api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        MQBrokerException refused = assertThrows(MQBrokerException.class,
                () -> api.sendMessage(pair.slave().addr(), pair.brokerName(), message, header,
                        ItSupport.SEND_TIMEOUT_MS, CommunicationMode.SYNC, null, null),
                "SEND_MESSAGE straight to the slave");
        assertEquals(ResponseCode.SERVICE_NOT_AVAILABLE, refused.getResponseCode(), () -> "answer: " + refused);

        // A message sent through the name server goes to the master, and on to the slave; the
        // refused one is stored on neither.
        Message accepted = message(topic, "TagAccepted", topic + "-key-1", "sent to the master");
        MessageQueue queue = ItSupport.sendOk(producer, accepted, "send to the master").getMessageQueue();
        await("the accepted message on the slave", () -> maxOffsetAt(pair.admin(), pair.slave().addr(), queue) == 1,
                () -> maxOffsets(pair));
        for (BrokerUnderTest broker : List.of(pair.master(), pair.slave())) {
            long total = 0;
            for (MessageQueue each : pair.queues()) {
                total += maxOffsetAt(pair.admin(), broker.addr(), each);
            }
            assertEquals(1, total, "messages stored on " + broker + ": " + maxOffsets(pair));
        }

        // mqadmin cleanUnusedTopic: a slave's topic table trails its master's, so it refuses;
        // the master cleans, and its configured topic keeps its message.
        MQClientException notOnASlave = assertThrows(MQClientException.class,
                () -> pair.admin().cleanUnusedTopicByAddr(pair.slave().addr()));
        assertEquals(ResponseCode.SYSTEM_ERROR, notOnASlave.getResponseCode(), notOnASlave.getMessage());
        assertTrue(pair.admin().cleanUnusedTopicByAddr(pair.master().addr()), "the master cleans");
        assertEquals(1, maxOffsetAt(pair.admin(), pair.master().addr(), queue), "the configured topic's message");
    }

    /** The first message of a raw pull answer (the client decodes them later, in PullAPIWrapper). */
    static MessageExt firstMessage(PullResultExt result) {
        List<MessageExt> messages = MessageDecoder.decodes(ByteBuffer.wrap(result.getMessageBinary()));
        assertFalse(messages.isEmpty(), () -> "no message in " + result);
        return messages.get(0);
    }

    /**
     * slaveReadEnable: with {@code accessMessageInMemoryMaxRatio=0} every consumer that has not
     * read the last message counts as having fallen behind, so the master suggests its slave
     * (the group's whichBrokerWhenConsumeSlowly, 1), and the slave keeps it until it has caught up,
     * when it sends it back to its online master at once (PULL_RETRY_IMMEDIATELY, not a held pull).
     * A push consumer follows the suggestions: part of what it reads comes from the slave.
     */
    @Test
    void aMasterWithSlaveReadEnabledSendsAConsumerThatFellBehindToItsSlave() throws Exception {
        String topic = unique("repl-read");
        String[] readArgs = {"--slaveReadEnable=true", "--accessMessageInMemoryMaxRatio=0"};
        Pair pair = startPair(3, "repl-read", topic, (master, queues) -> {
        }, readArgs, readArgs);
        DefaultMQProducer producer = keep(new Clients(pair::master)).startProducer(unique("repl-read-producer"));
        Map<String, Message> sent = new LinkedHashMap<>();
        for (int i = 0; i < COUNT; i++) {
            Message message = message(topic, "TagRead", topic + "-key-" + i, "read from either " + i);
            ItSupport.sendOk(producer, message, "send " + i);
            sent.put(message.getKeys(), message);
        }
        awaitSlaveHolds(pair, COUNT);

        MessageQueue queue = pair.queues().get(0);
        long end = maxOffsetAt(pair.admin(), pair.master().addr(), queue);
        assertTrue(end >= 2, () -> "messages in " + queue + ": " + end);
        String group = unique("repl-read-low");
        String master = pair.master().addr();
        String slave = pair.slave().addr();
        PullResultExt behindOnMaster = ItSupport.pullOne(pair.admin(), master, queue, group, 0);
        assertEquals(PullStatus.FOUND, behindOnMaster.getPullStatus(), behindOnMaster::toString);
        assertEquals(1L, behindOnMaster.getSuggestWhichBrokerId(), "the master sends a consumer behind to its slave");
        PullResultExt behindOnSlave = ItSupport.pullOne(pair.admin(), slave, queue, group, 0);
        assertEquals(PullStatus.FOUND, behindOnSlave.getPullStatus(), behindOnSlave::toString);
        assertEquals(firstMessage(behindOnMaster).getMsgId(), firstMessage(behindOnSlave).getMsgId(),
                "the same first message on both");
        assertEquals(1L, behindOnSlave.getSuggestWhichBrokerId(), "the slave keeps a consumer behind");
        PullResultExt caughtUpOnSlave = ItSupport.pullOne(pair.admin(), slave, queue, group, end);
        assertEquals(PullStatus.NO_MATCHED_MSG, caughtUpOnSlave.getPullStatus(),
                "PULL_RETRY_IMMEDIATELY: " + caughtUpOnSlave);
        assertEquals(MixAll.MASTER_ID, caughtUpOnSlave.getSuggestWhichBrokerId(), "back to the master");
        assertEquals(end, caughtUpOnSlave.getNextBeginOffset());
        PullResultExt caughtUpOnMaster = ItSupport.pullOne(pair.admin(), master, queue, group, end);
        assertEquals(PullStatus.NO_NEW_MSG, caughtUpOnMaster.getPullStatus(), caughtUpOnMaster::toString);
        assertEquals(MixAll.MASTER_ID, caughtUpOnMaster.getSuggestWhichBrokerId());

        String pushGroup = unique("repl-read-push");
        ConcurrentLinkedQueue<MessageExt> received = new ConcurrentLinkedQueue<>();
        keep(new Clients(pair::master)).startPushConsumer(pushGroup, "repl-read-consumer", topic,
                ItSupport.collectInto(received));
        ItSupport.awaitKeys("every message through master and slave", ItSupport.WAIT_MS, received, sent.keySet());
        assertEquals(sent.keySet(), ItSupport.keys(received), "keys received");
        String groupKey = topic + "@" + pushGroup;
        await("the slave's count of messages it gave the push consumer",
                () -> pair.admin().viewBrokerStatsData(slave, "GROUP_GET_NUMS", groupKey).getStatsMinute().getSum() > 0,
                () -> "GROUP_GET_NUMS " + groupKey + " on the slave: none");
    }

    /**
     * A slave does not move a consumer whose offset is past its queue's end (its queues may trail
     * the master's, Java's nextOffsetCorrection); the master moves it.
     */
    @Test
    void aSlaveLeavesAnOffsetPastItsQueueWhereItIs() throws Exception {
        String topic = unique("repl-offset");
        Pair pair = startPair(4, "repl-offset", topic);
        DefaultMQProducer producer = keep(new Clients(pair::master)).startProducer(unique("repl-offset-producer"));
        MessageQueue queue = ItSupport.sendOk(producer, message(topic, "TagOffset", topic + "-key-0", "one"),
                "send").getMessageQueue();
        await("the message on the slave", () -> maxOffsetAt(pair.admin(), pair.slave().addr(), queue) == 1,
                () -> maxOffsets(pair));
        String group = unique("repl-offset-group");
        PullResultExt onMaster = ItSupport.pullOne(pair.admin(), pair.master().addr(), queue, group, 5);
        assertEquals(PullStatus.OFFSET_ILLEGAL, onMaster.getPullStatus(), onMaster::toString);
        assertEquals(0, onMaster.getNextBeginOffset(), "the master moves it to its queue's start");
        // The master is online and the slave has no message there: it also sends the consumer back
        // (PULL_RETRY_IMMEDIATELY), without moving it.
        PullResultExt onSlave = ItSupport.pullOne(pair.admin(), pair.slave().addr(), queue, group, 5);
        assertEquals(PullStatus.NO_MATCHED_MSG, onSlave.getPullStatus(), onSlave::toString);
        assertEquals(5, onSlave.getNextBeginOffset(), "the slave leaves the offset");
        assertEquals(MixAll.MASTER_ID, onSlave.getSuggestWhichBrokerId());
        // Without its master the slave answers PULL_OFFSET_MOVED, still with the consumer's offset.
        pair.master().kill9();
        awaitOnlyTheSlave(pair);
        await("the slave seeing its master gone", () -> ItSupport.pullOne(pair.admin(), pair.slave().addr(), queue, group, 5)
                .getPullStatus() == PullStatus.OFFSET_ILLEGAL, () -> "pulls still redirected");
        assertEquals(5, ItSupport.pullOne(pair.admin(), pair.slave().addr(), queue, group, 5).getNextBeginOffset());
    }

    /** The messages the broker at {@code addr} holds in {@code queues}. */
    static long storedAt(DefaultMQAdminExt admin, String addr, List<MessageQueue> queues) throws Exception {
        long total = 0;
        for (MessageQueue queue : queues) {
            total += maxOffsetAt(admin, addr, queue);
        }
        return total;
    }

    /** GET_ALL_DELAY_OFFSET of the broker at {@code addr}: its delayOffset.json. */
    static String delayOffsets(DefaultMQAdminExt admin, String addr) throws Exception {
        RemotingCommand answer = ItSupport.api(admin).getRemotingClient().invokeSync(addr,
                RemotingCommand.createRequestCommand(RequestCode.GET_ALL_DELAY_OFFSET, null),
                ItSupport.ADMIN_TIMEOUT_MS);
        assertEquals(ResponseCode.SUCCESS, answer.getCode(), answer::toString);
        return new String(answer.getBody(), StandardCharsets.UTF_8);
    }

    /**
     * Sends {@code plain} messages and {@code delayed} delayed ones (levels 1 and 2 by turns) keyed
     * {@code topic-tag-i}, each acknowledged SEND_OK; returns their keys.
     */
    static Set<String> sendOk(DefaultMQProducer producer, String topic, String tag, int plain, int delayed)
            throws Exception {
        Set<String> keys = new TreeSet<>();
        for (int i = 0; i < plain + delayed; i++) {
            Message message = message(topic, tag, topic + "-" + tag + "-" + i, tag + " body " + i);
            if (i >= plain) {
                message.setDelayTimeLevel(1 + i % 2);
            }
            ItSupport.sendOk(producer, message, tag + " send " + i);
            keys.add(message.getKeys());
        }
        return keys;
    }

    /**
     * Classic RocketMQ's failover, done by an operator: the master is lost and its slave is
     * restarted on its store as the master (brokerId 0). A SYNC_MASTER acknowledged only what its
     * slave held, and the slave took its master's consumer offsets and its delivery progress of
     * delayed messages (every 10 s), so a consumer group goes on where it stopped: it gets what is
     * sent after the restart, nothing it had consumed before, and no delayed message twice.
     */
    @Test
    void aSlaveRestartedAsTheMasterGoesOnWhereItsMasterStopped() throws Exception {
        String topic = unique("repl-promote");
        String ladder = "--messageDelayLevel=1s 2s";
        Pair pair = startPair(5, "repl-promote", topic, (master, queues) -> {
        }, new String[] {ladder}, "--brokerRole=SYNC_MASTER", ladder);
        DefaultMQAdminExt admin = pair.admin();
        await("the master's slave in sync", () -> admin.getBrokerHAStatus(pair.master().addr()).getInSyncSlaveNums() == 1,
                () -> String.valueOf(admin.getBrokerHAStatus(pair.master().addr())));
        String group = unique("repl-promote-group");
        Clients before = keep(new Clients(pair::master));
        ConcurrentLinkedQueue<MessageExt> consumed = new ConcurrentLinkedQueue<>();
        before.startPushConsumer(group, "repl-promote-before", topic, ItSupport.collectInto(consumed));
        Set<String> sentBefore = sendOk(before.startProducer(unique("repl-promote-producer")), topic, "before", 20, 8);
        ItSupport.awaitKeys("every message before the failover", ItSupport.WAIT_MS, consumed, sentBefore);
        ItSupport.awaitCommitted(admin, group, pair.queues());
        before.close();
        long stored = ItSupport.storedCount(admin, pair.queues());
        assertEquals(sentBefore.size(), stored, "messages in the topic, the delayed ones delivered");

        // The slave takes the group's offsets and the delay levels' progress.
        String master = pair.master().addr();
        String slave = pair.slave().addr();
        await("the slave holding the master's offsets and delay progress", () -> {
            for (MessageQueue queue : pair.queues()) {
                if (ItSupport.committedOffsetAt(admin, slave, group, queue)
                        != ItSupport.committedOffsetAt(admin, master, group, queue)) {
                    return false;
                }
            }
            return delayOffsets(admin, slave).equals(delayOffsets(admin, master));
        }, () -> "delay offsets: master " + delayOffsets(admin, master) + ", slave " + delayOffsets(admin, slave));
        String progress = delayOffsets(admin, master);
        assertTrue(progress.matches("(?s).*1:\\d+.*2:\\d+.*"), () -> "both levels delivered: " + progress);

        pair.master().kill9();
        awaitOnlyTheSlave(pair);
        pair.slave().stop();
        pair.slave().restartAsMaster();
        await("the name server listing the restarted slave as the master",
                () -> brokerAddrs(admin, pair.brokerName()).equals(Map.of(MixAll.MASTER_ID, slave)),
                () -> "broker addresses " + brokerAddrs(admin, pair.brokerName()));
        assertEquals(stored, storedAt(admin, slave, pair.queues()), "messages kept");

        Clients after = keep(new Clients(pair::slave));
        ConcurrentLinkedQueue<MessageExt> received = new ConcurrentLinkedQueue<>();
        after.startPushConsumer(group, "repl-promote-after", topic, ItSupport.collectInto(received));
        Set<String> sentAfter = sendOk(after.startProducer(unique("repl-promote-producer")), topic, "after", 10, 4);
        ItSupport.awaitKeys("every message after the failover", ItSupport.WAIT_MS, received, sentAfter);
        // A delivery repeated, or an offset lost, would have come before these (due earlier,
        // stored earlier).
        assertEquals(sentAfter, ItSupport.keys(received), "keys the group received after the failover");
        assertEquals(stored + sentAfter.size(), storedAt(admin, slave, pair.queues()),
                "messages in the topic: none delivered twice");
    }
}
