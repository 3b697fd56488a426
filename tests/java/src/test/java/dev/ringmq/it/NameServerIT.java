package dev.ringmq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.DataVersion;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.body.RegisterBrokerBody;
import org.apache.rocketmq.remoting.protocol.body.TopicConfigAndMappingSerializeWrapper;
import org.apache.rocketmq.remoting.protocol.body.TopicConfigSerializeWrapper;
import org.apache.rocketmq.remoting.protocol.header.namesrv.RegisterBrokerRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * {@code ringmq namesrv} against the official Apache RocketMQ Java client (5.3.3).
 *
 * <p>Starts the binary named by the system property {@code ringmq.bin} on a port the kernel picks
 * ({@code --listen-port 0}; the port is read from the boot line, so there is no window in which
 * another process could take it), registers a fake broker with the client library's own
 * REGISTER_BROKER classes, and checks what a {@link DefaultMQProducer} sees. Without
 * {@code ringmq.bin} every test fails: a missing binary must not look like a pass.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class NameServerIT {
    static final String BOOT_PREFIX = "The Name Server boot success. serializeType=JSON, address ";
    static final String CLUSTER = "ItCluster";
    static final String BROKER_NAME = "broker-it";
    static final String BROKER_ADDR = "127.0.0.1:10911";
    static final String TOPIC = "ItOrdersTopic";
    static final int TOPIC_QUEUES = 4;
    /** A broker always registers several topics; Java refuses a first registration with one. */
    static final String OTHER_TOPIC = "ItAuditTopic";
    static final long CALL_TIMEOUT_MS = 5_000;

    static Process namesrv;
    static String namesrvAddr;
    static File kvConfigFile;
    /**
     * The fake broker's connection. It stays open for the whole class: a name server (Java's and
     * ours) drops the routes of a broker whose registering connection closes.
     */
    static NettyRemotingClient brokerClient;
    static DefaultMQProducer producer;

    @BeforeAll
    static void startNameServerAndRegisterBroker() throws Exception {
        ItSupport.configureClientLogging();
        String bin = System.getProperty("ringmq.bin");
        if (bin == null || bin.isEmpty()) {
            fail("system property ringmq.bin (path of the ringmq binary) is not set; "
                    + "run through scripts/java-tests.sh");
        }
        if (!new File(bin).canExecute()) {
            fail("ringmq.bin=" + bin + " is not an executable file");
        }
        File log = new File(ItSupport.targetDir(), "ringmq-namesrv.log");
        File kvDir = new File(ItSupport.targetDir(), "namesrv-it");
        if (kvDir.exists()) {
            for (File file : kvDir.listFiles()) {
                file.delete();
            }
        }
        kvConfigFile = new File(kvDir, "kvConfig.json");
        namesrv = new ProcessBuilder(bin, "namesrv", "--listen-port", "0", "--bind", "127.0.0.1",
                        "--kv-config-path", kvConfigFile.getPath())
                .redirectError(log)
                .start();
        BufferedReader stdout = new BufferedReader(
                new InputStreamReader(namesrv.getInputStream(), StandardCharsets.UTF_8));
        String line = CompletableFuture.supplyAsync(() -> {
            try {
                return stdout.readLine();
            } catch (Exception e) {
                return null;
            }
        }).get(15, TimeUnit.SECONDS);
        if (line == null || !line.startsWith(BOOT_PREFIX)) {
            fail("ringmq namesrv did not boot (line: " + line + "); see " + log.getAbsolutePath());
        }
        namesrvAddr = line.substring(BOOT_PREFIX.length()).trim();

        registerFakeBroker();

        producer = new DefaultMQProducer("ItProducerGroup");
        producer.setNamesrvAddr(namesrvAddr);
        producer.setInstanceName("ringmq-it-" + ProcessHandle.current().pid());
        producer.setSendMsgTimeout((int) CALL_TIMEOUT_MS);
        producer.start();
    }

    /** REGISTER_BROKER exactly as a Java broker builds it (BrokerOuterAPI.registerBrokerAll). */
    static void registerFakeBroker() throws Exception {
        brokerClient = new NettyRemotingClient(new NettyClientConfig());
        brokerClient.start();
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        table.put(TOPIC, new TopicConfig(TOPIC, TOPIC_QUEUES, TOPIC_QUEUES, 6));
        table.put(OTHER_TOPIC, new TopicConfig(OTHER_TOPIC, 2, 2, 6));
        // The 5.x body holds the subclass that adds static-topic mappings (left empty).
        TopicConfigAndMappingSerializeWrapper wrapper = new TopicConfigAndMappingSerializeWrapper();
        TopicConfigSerializeWrapper plain = wrapper;
        plain.setTopicConfigTable(table);
        plain.setDataVersion(new DataVersion());
        RegisterBrokerBody body = new RegisterBrokerBody();
        body.setTopicConfigSerializeWrapper(wrapper);
        body.setFilterServerList(new ArrayList<>());
        byte[] bytes = body.encode(false);

        RegisterBrokerRequestHeader header = new RegisterBrokerRequestHeader();
        header.setBrokerAddr(BROKER_ADDR);
        header.setBrokerId(0L);
        header.setBrokerName(BROKER_NAME);
        header.setClusterName(CLUSTER);
        header.setHaServerAddr("127.0.0.1:10912");
        header.setCompressed(false);
        header.setEnableActingMaster(false);
        header.setBodyCrc32(UtilAll.crc32(bytes));
        RemotingCommand request = RemotingCommand.createRequestCommand(RequestCode.REGISTER_BROKER, header);
        request.setBody(bytes);

        RemotingCommand response = brokerClient.invokeSync(namesrvAddr, request, CALL_TIMEOUT_MS);
        assertNotNull(response, "REGISTER_BROKER response");
        assertEquals(ResponseCode.SUCCESS, response.getCode(), response.getRemark());
    }

    @AfterAll
    static void stop() throws Exception {
        if (producer != null) {
            producer.shutdown();
        }
        if (brokerClient != null) {
            brokerClient.shutdown();
        }
        if (namesrv != null) {
            namesrv.destroy(); // SIGTERM
            boolean exited = namesrv.waitFor(15, TimeUnit.SECONDS);
            if (!exited) {
                namesrv.destroyForcibly();
                fail("ringmq namesrv did not exit within 15 s of SIGTERM");
            }
            assertEquals(0, namesrv.exitValue(), "exit status after SIGTERM");
        }
    }

    @Test
    void producerSeesExactlyTheRegisteredQueues() throws Exception {
        List<MessageQueue> queues = producer.fetchPublishMessageQueues(TOPIC);
        Set<MessageQueue> expected = new HashSet<>();
        for (int queueId = 0; queueId < TOPIC_QUEUES; queueId++) {
            expected.add(new MessageQueue(TOPIC, BROKER_NAME, queueId));
        }
        assertEquals(TOPIC_QUEUES, queues.size(), "queues: " + queues);
        assertEquals(expected, new HashSet<>(queues));
    }

    @Test
    void clusterInfoListsTheRegisteredBroker() throws Exception {
        ClusterInfo info = producer.getDefaultMQProducerImpl()
                .getMqClientFactory()
                .getMQClientAPIImpl()
                .getBrokerClusterInfo(CALL_TIMEOUT_MS);
        assertNotNull(info.getClusterAddrTable().get(CLUSTER), "cluster " + CLUSTER);
        assertEquals(Set.of(BROKER_NAME), info.getClusterAddrTable().get(CLUSTER));
        BrokerData broker = info.getBrokerAddrTable().get(BROKER_NAME);
        assertNotNull(broker, "broker " + BROKER_NAME);
        assertEquals(CLUSTER, broker.getCluster());
        assertEquals(BROKER_ADDR, broker.getBrokerAddrs().get(0L));
    }

    @Test
    void sendingToAnUnknownTopicFailsWithNoRouteInfo() {
        Message message = new Message("ItNoSuchTopic", "tag", "body".getBytes(StandardCharsets.UTF_8));
        MQClientException error = assertThrows(MQClientException.class, () -> producer.send(message));
        String text = error.getMessage();
        assertTrue(text != null && text.contains("No route info of this topic"), "message: " + text);
    }

    @Test
    void kvConfigFromTheAdminToolIsAnsweredOnceJavasWrapperCanReadItFromTheFile() throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(CALL_TIMEOUT_MS);
        admin.setNamesrvAddr(namesrvAddr);
        admin.setInstanceName("ringmq-it-kv-" + ProcessHandle.current().pid());
        admin.start();
        try {
            String namespace = "ItNamespace";
            admin.createAndUpdateKvConfig(namespace, "kept", "value-1");
            admin.createAndUpdateKvConfig(namespace, "dropped", "value-2");
            admin.deleteKvConfig(namespace, "dropped");
            assertEquals("value-1", admin.getKVConfig(namespace, "kept"));
            // Answered means written: the file as Java's KVConfigManager would load it.
            KvConfigFile file = RemotingSerializable.decode(
                    Files.readAllBytes(kvConfigFile.toPath()), KvConfigFile.class);
            assertNotNull(file.getConfigTable().get(namespace), "namespace in " + kvConfigFile);
            assertEquals("value-1", file.getConfigTable().get(namespace).get("kept"));
            assertFalse(file.getConfigTable().get(namespace).containsKey("dropped"),
                    "deleted key in " + kvConfigFile);
        } finally {
            admin.shutdown();
        }
    }

    /**
     * The shape of Java's {@code KVConfigSerializeWrapper} (in the rocketmq-namesrv module, which
     * the client does not bring), decoded the same way: a fastjson bean.
     */
    public static class KvConfigFile extends RemotingSerializable {
        private HashMap<String, HashMap<String, String>> configTable = new HashMap<>();

        public HashMap<String, HashMap<String, String>> getConfigTable() {
            return configTable;
        }

        public void setConfigTable(HashMap<String, HashMap<String, String>> configTable) {
            this.configTable = configTable;
        }
    }
}
