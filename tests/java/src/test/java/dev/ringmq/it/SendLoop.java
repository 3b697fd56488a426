package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A thread that sends synchronously to one topic, message after message, until it is stopped
 * (the tests that kill a broker under load). It remembers every message it tried and the
 * SEND_OK of each acknowledged one; any other answer or exception is counted by name. Message
 * {@code i} has key {@code <topic>-key-<i>}, tags {@code Tag<label><i % 3>} and body
 * {@code "<label> body <i>"}.
 *
 * <p>What a kill may leave behind, and {@link #assertStored} accepts: a message whose send failed
 * may or may not be stored, and one the client retried may be stored twice. What it must not: an
 * acknowledged message missing, or not at the broker, queue and offset its SEND_OK named.
 */
final class SendLoop implements AutoCloseable {
    /** Upper bound of sends, so the loop ends even if the test never stops it. */
    static final int MAX_SENDS = 100_000;
    /** How long {@link #stop} waits for the thread (a send in flight may wait for its timeout). */
    static final long JOIN_MS = 60_000;

    private final Map<String, Message> attempted = new ConcurrentHashMap<>();
    private final Map<String, SendResult> acked = new ConcurrentHashMap<>();
    private final Map<String, Integer> outcomes = new ConcurrentHashMap<>();
    private final AtomicReference<Throwable> unexpected = new AtomicReference<>();
    private final AtomicBoolean stopping = new AtomicBoolean();
    private final Thread thread;

    private SendLoop(DefaultMQProducer producer, String topic, String label) {
        thread = new Thread(() -> {
            for (int i = 0; i < MAX_SENDS && !stopping.get(); i++) {
                Message message = message(topic, "Tag" + label + (i % 3), topic + "-key-" + i, label + " body " + i);
                attempted.put(message.getKeys(), message);
                try {
                    SendResult result = producer.send(message);
                    if (result.getSendStatus() == SendStatus.SEND_OK) {
                        acked.put(message.getKeys(), result);
                    } else {
                        outcomes.merge(result.getSendStatus().name(), 1, Integer::sum);
                    }
                } catch (Exception e) {
                    outcomes.merge(e.getClass().getSimpleName(), 1, Integer::sum);
                } catch (Throwable t) {
                    unexpected.set(t);
                    return;
                }
            }
        }, label + "-sender");
    }

    /** Starts sending {@code topic}'s messages through {@code producer}; {@code label} names them. */
    static SendLoop start(DefaultMQProducer producer, String topic, String label) {
        SendLoop loop = new SendLoop(producer, topic, label);
        loop.thread.start();
        return loop;
    }

    /**
     * Waits until at least {@code count} sends were acknowledged (or the loop ended);
     * {@code detail} adds to the failure message.
     */
    void awaitAcked(int count, ItSupport.Detail detail) throws Exception {
        await(count + " acknowledged sends", () -> acked.size() >= count || !thread.isAlive(),
                () -> acked.size() + " acked, other outcomes " + outcomes + "; " + detail.get());
        assertTrue(acked.size() >= count, () -> "the send loop ended after " + acked.size() + " acknowledged sends"
                + ", other outcomes " + outcomes + (unexpected.get() == null ? "" : ", error " + unexpected.get()));
    }

    /** Stops sending and waits for the thread, which must end without an error. */
    void stop() throws InterruptedException {
        stopping.set(true);
        thread.join(JOIN_MS);
        assertFalse(thread.isAlive(), "the sender thread did not stop within " + JOIN_MS + " ms");
        assertNull(unexpected.get(), "sender thread error");
    }

    /** Stops sending (without the checks of {@link #stop}); for cleanup after a failure. */
    @Override
    public void close() throws InterruptedException {
        stopping.set(true);
        thread.join(JOIN_MS);
    }

    /** The messages tried so far, by key (a live view). */
    Map<String, Message> attempted() {
        return attempted;
    }

    /** The messages acknowledged so far, by key (a live view). */
    Map<String, SendResult> acked() {
        return acked;
    }

    /** Answers other than SEND_OK, and exceptions, by name: how many of each (a live view). */
    Map<String, Integer> outcomes() {
        return outcomes;
    }

    /** The number {@code i} of the loop's message with key {@code key} ({@code <topic>-key-<i>}). */
    static int number(String key) {
        return Integer.parseInt(key.substring(key.lastIndexOf('-') + 1));
    }

    /** {@link #assertStored(Map, Map, Collection)} with what this loop sent. */
    void assertStored(Collection<MessageExt> stored) {
        assertStored(attempted, acked, stored);
    }

    /**
     * Checks what a broker (or several) holds after sends that may have failed: every message of
     * {@code acked} is in {@code stored}, one copy of it at the broker, queue and offset of its
     * SEND_OK and every copy with its msgId; every stored message was one of {@code attempted},
     * with its tags and body.
     */
    static void assertStored(Map<String, Message> attempted, Map<String, SendResult> acked,
            Collection<MessageExt> stored) {
        Map<String, List<MessageExt>> byKey = new HashMap<>();
        for (MessageExt message : stored) {
            Message original = attempted.get(message.getKeys());
            assertNotNull(original, "stored message never sent: " + message);
            assertEquals(original.getTags(), message.getTags(), "tags of " + message.getKeys());
            assertEquals(body(original), body(message), "body of " + message.getKeys());
            byKey.computeIfAbsent(message.getKeys(), k -> new ArrayList<>()).add(message);
        }
        Set<String> missing = new TreeSet<>(acked.keySet());
        missing.removeAll(byKey.keySet());
        assertTrue(missing.isEmpty(), missing.size() + " of " + acked.size() + " acknowledged messages lost: "
                + missing);
        Set<String> elsewhere = new TreeSet<>();
        for (Map.Entry<String, SendResult> entry : acked.entrySet()) {
            SendResult result = entry.getValue();
            boolean atItsPlace = false;
            for (MessageExt message : byKey.get(entry.getKey())) {
                assertEquals(result.getMsgId(), message.getMsgId(), "msgId of " + entry.getKey());
                atItsPlace |= message.getBrokerName().equals(result.getMessageQueue().getBrokerName())
                        && message.getQueueId() == result.getMessageQueue().getQueueId()
                        && message.getQueueOffset() == result.getQueueOffset();
            }
            if (!atItsPlace) {
                elsewhere.add(entry.getKey() + " (SEND_OK " + result.getMessageQueue() + " offset "
                        + result.getQueueOffset() + ")");
            }
        }
        assertTrue(elsewhere.isEmpty(), "acknowledged messages not at the place their SEND_OK named: " + elsewhere);
    }
}
