package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A producer's fault tolerance against the name server's routes: two brokers of one cluster
 * ({@code brokerName}s a and b, both SYNC_FLUSH) register with one standalone {@code ringmq
 * namesrv} and serve the same topic. A producer with the client's default retries (two more
 * attempts, on another broker) sends in a loop, with {@code sendLatencyFaultEnable} off (the
 * client's default: the retries alone route around a dead broker until the route drops it) and
 * on (the failed broker is avoided for a while after a failure); broker a is killed with SIGKILL
 * in the middle of it. The sends go on through b: the one in flight at the kill may fail, every
 * later one is acknowledged by b. Then a restarts on its store, and every acknowledged message is
 * found at the broker, queue and offset its SEND_OK named.
 *
 * <p>Needs brokers this harness starts, so it is skipped against an external broker.
 */
@Timeout(value = 150, unit = TimeUnit.SECONDS)
class FailoverIT {
    /** The name server on PORT + 6, broker a on PORT, broker b on PORT + 10. */
    static final int PORT = 24700;
    static final int QUEUES = 4;
    /** SEND_OKs before broker a is killed. */
    static final int ACKED_BEFORE_KILL = 200;
    /** SEND_OKs after the kill. */
    static final int ACKED_AFTER_KILL = 300;
    /**
     * Sends that may fail because of the kill: the loop has one send in flight, and a send whose
     * attempt on a is lost with the connection is not retried by the client when the loss takes
     * its whole timeout.
     */
    static final int FAILURES_ALLOWED = 1;

    private NameServerUnderTest namesrv;
    private BrokerUnderTest a;
    private BrokerUnderTest b;

    @BeforeEach
    void assumeStartable() {
        BrokerUnderTest.assumeStartable("two brokers and a name server");
    }

    @AfterEach
    void closeStarted() {
        for (AutoCloseable started : new AutoCloseable[] {b, a, namesrv}) {
            if (started != null) {
                try {
                    started.close();
                } catch (Exception e) {
                    System.err.println("closing " + started + ": " + e);
                }
            }
        }
    }

    /** The brokers the name server lists: broker name to master address (empty map if none). */
    static Map<String, String> masters(DefaultMQAdminExt admin) throws Exception {
        Map<String, String> result = new TreeMap<>();
        for (BrokerData data : admin.examineBrokerClusterInfo().getBrokerAddrTable().values()) {
            String master = data.getBrokerAddrs().get(MixAll.MASTER_ID);
            if (master != null) {
                result.put(data.getBrokerName(), master);
            }
        }
        return result;
    }

    @ParameterizedTest(name = "sendLatencyFaultEnable={0}")
    @ValueSource(booleans = {false, true})
    void aProducerGoesOnThroughTheOtherBrokerWhenOneIsKilled(boolean latencyFaultEnable) throws Exception {
        namesrv = NameServerUnderTest.start("failover-namesrv", PORT + 6);
        a = BrokerUnderTest.start("failover-a", "java-failover-a", namesrv, PORT, "--flushDiskType=SYNC_FLUSH");
        b = BrokerUnderTest.start("failover-b", "java-failover-b", namesrv, PORT + 10,
                "--flushDiskType=SYNC_FLUSH");
        String topic = unique("failover");
        List<MessageQueue> queues;
        SendLoop loop;
        try (Clients clients = new Clients(() -> b)) {
            DefaultMQAdminExt admin = clients.startAdmin();
            Map<String, String> both = Map.of("java-failover-a", a.addr(), "java-failover-b", b.addr());
            await("both brokers registered with " + namesrv.addr(), () -> masters(admin).equals(both),
                    () -> "masters " + masters(admin));
            queues = clients.createTopic(admin, topic, QUEUES);
            assertEquals(2 * QUEUES, queues.size(), "queues routed: " + queues);

            DefaultMQProducer producer = clients.startProducer(unique("failover-producer"));
            producer.setSendLatencyFaultEnable(latencyFaultEnable);
            loop = SendLoop.start(producer, topic, "Failover");
            // Sends numbered from this on started after a was gone; the one before may have been in
            // flight at the kill.
            int firstAfter;
            try {
                loop.awaitAcked(ACKED_BEFORE_KILL, () -> "logs " + a.logPath() + ", " + b.logPath());
                a.kill9();
                firstAfter = loop.attempted().size();
                loop.awaitAcked(loop.acked().size() + ACKED_AFTER_KILL,
                        () -> "name server lists " + masters(admin) + "; log of b " + b.logPath());
            } finally {
                loop.close();
            }
            loop.stop();

            Map<String, Integer> before = byBroker(loop.acked(), 0, firstAfter - 1);
            Map<String, Integer> after = byBroker(loop.acked(), firstAfter, Integer.MAX_VALUE);
            assertEquals(Set.of("java-failover-a", "java-failover-b"), before.keySet(),
                    "brokers acknowledging before the kill: " + before);
            assertEquals(Set.of("java-failover-b"), after.keySet(),
                    "brokers acknowledging after the kill: " + after);
            System.out.println("FailoverIT (sendLatencyFaultEnable=" + latencyFaultEnable + "): acknowledged before the kill " + before + ", after " + after
                    + ", failed sends " + loop.outcomes());
            int failed = loop.outcomes().values().stream().mapToInt(Integer::intValue).sum();
            assertTrue(failed <= FAILURES_ALLOWED, "failed sends " + loop.outcomes() + " with " + after
                    + " acknowledged after the kill");
        }

        a.restart();
        try (Clients clients = new Clients(() -> b)) {
            DefaultMQAdminExt admin = clients.startAdmin();
            ItSupport.awaitRoutes(admin, "routes of " + topic + " after a's restart", topic, 2 * QUEUES);
            loop.assertStored(ItSupport.readAll(a, admin, queues, -1));
        }
    }

    /** Acknowledgements of the loop's sends numbered {@code from} (inclusive) to {@code to} (exclusive), by broker name. */
    static Map<String, Integer> byBroker(Map<String, SendResult> acked, int from, int to) {
        Map<String, Integer> counts = new TreeMap<>();
        acked.forEach((key, sendResult) -> {
            int number = SendLoop.number(key);
            if (number >= from && number < to) {
                counts.merge(sendResult.getMessageQueue().getBrokerName(), 1, Integer::sum);
            }
        });
        return counts;
    }
}
