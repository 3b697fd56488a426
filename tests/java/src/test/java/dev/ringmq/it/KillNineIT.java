package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Durability under SYNC_FLUSH: a producer thread sends synchronously in a loop, the broker is
 * killed with SIGKILL in the middle of it, restarted on the same store, and every message whose
 * send returned SEND_OK must be there (by key and msgId), with its content. Messages whose send
 * failed may or may not be there, and a send the client retried may be stored twice: neither is
 * an error.
 *
 * <p>Needs a broker this harness started, so it is skipped against an external broker.
 */
@Timeout(value = 150, unit = TimeUnit.SECONDS)
class KillNineIT {
    static final int PORT = 23700;
    static final int QUEUES = 4;
    /** SEND_OKs to collect before the kill. */
    static final int ACKED_BEFORE_KILL = 300;
    /** Upper bound of sends, so the loop ends even if the kill never lands. */
    static final int MAX_SENDS = 100_000;

    @RegisterExtension
    static final ItBroker it = new ItBroker("kill9", PORT, "--flushDiskType=SYNC_FLUSH");

    @Test
    void everyAcknowledgedSendSurvivesKillNine() throws Exception {
        it.broker().assumeControllable("kill -9 of the broker");
        String topic = unique("kill9");
        Map<String, SendResult> acked = new ConcurrentHashMap<>();
        Map<String, Message> attempted = new ConcurrentHashMap<>();
        AtomicInteger failures = new AtomicInteger();
        AtomicReference<Throwable> unexpected = new AtomicReference<>();
        AtomicBoolean stopSending = new AtomicBoolean();
        List<MessageQueue> queues;

        try (Clients clients = new Clients(it::broker)) {
            DefaultMQAdminExt admin = clients.startAdmin();
            DefaultMQProducer producer = clients.startProducer(unique("kill9-producer"));
            queues = clients.createTopic(admin, topic, QUEUES);
            // One attempt per send: a retry inside the client would blur which attempt was acked.
            producer.setRetryTimesWhenSendFailed(0);
            Thread sender = new Thread(() -> {
                for (int i = 0; i < MAX_SENDS && !stopSending.get(); i++) {
                    Message message = message(topic, "TagKill" + (i % 3), topic + "-key-" + i, "kill9 body " + i);
                    attempted.put(message.getKeys(), message);
                    try {
                        SendResult result = producer.send(message);
                        if (result.getSendStatus() == SendStatus.SEND_OK) {
                            acked.put(message.getKeys(), result);
                        } else {
                            failures.incrementAndGet();
                        }
                    } catch (Exception e) {
                        failures.incrementAndGet();
                    } catch (Throwable t) {
                        unexpected.set(t);
                        return;
                    }
                }
            }, "kill9-sender");
            sender.start();
            await(ACKED_BEFORE_KILL + " acknowledged sends", () -> acked.size() >= ACKED_BEFORE_KILL || !sender.isAlive(),
                    () -> acked.size() + " acked, " + failures.get() + " failed");
            it.broker().kill9();
            // The sender keeps trying against the dead broker until told to stop.
            stopSending.set(true);
            sender.join(TimeUnit.SECONDS.toMillis(60));
            assertFalse(sender.isAlive(), "the sender thread did not stop");
            assertNull(unexpected.get(), "sender thread error");
            assertTrue(acked.size() >= ACKED_BEFORE_KILL, "acked before the kill: " + acked.size());
        }

        it.broker().restart();
        try (Clients clients = new Clients(it::broker)) {
            DefaultMQAdminExt after = clients.startAdmin();
            ItSupport.awaitRoutes(after, "routes of " + topic + " after the restart", topic, QUEUES);
            List<MessageExt> stored = ItSupport.readAll(it.broker(), after, queues, -1);
            Map<String, List<MessageExt>> byKey = new HashMap<>();
            for (MessageExt message : stored) {
                byKey.computeIfAbsent(message.getKeys(), k -> new ArrayList<>()).add(message);
            }
            Set<String> missing = new TreeSet<>(acked.keySet());
            missing.removeAll(byKey.keySet());
            assertTrue(missing.isEmpty(), missing.size() + " of " + acked.size() + " acknowledged messages lost: "
                    + missing);
            for (Map.Entry<String, SendResult> entry : acked.entrySet()) {
                SendResult result = entry.getValue();
                Message original = attempted.get(entry.getKey());
                boolean atItsPlace = false;
                for (MessageExt message : byKey.get(entry.getKey())) {
                    assertEquals(result.getMsgId(), message.getMsgId(), "msgId of " + entry.getKey());
                    assertEquals(original.getTags(), message.getTags(), "tags of " + entry.getKey());
                    assertEquals(body(original), body(message), "body of " + entry.getKey());
                    atItsPlace |= message.getQueueId() == result.getMessageQueue().getQueueId()
                            && message.getQueueOffset() == result.getQueueOffset();
                }
                assertTrue(atItsPlace, entry.getKey() + " not at the queue/offset its SEND_OK named: " + result);
            }
            for (MessageExt message : stored) {
                assertNotNull(attempted.get(message.getKeys()), "stored message never sent: " + message);
            }
        }
    }
}
