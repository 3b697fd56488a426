package dev.ringmq.it;

import static dev.ringmq.it.FeatureSupport.deliveredKeys;
import static dev.ringmq.it.FeatureSupport.millisBetween;
import static dev.ringmq.it.FeatureSupport.recordInto;
import static dev.ringmq.it.FeatureSupport.unique;
import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import dev.ringmq.it.FeatureSupport.Delivery;

/**
 * kill -9 in the middle of delays and transactions (issue 6): with delayed messages (level 3,
 * 10 s), a timer message (+{@value #TIMER_DELAY_MS} ms) and an unresolved half message pending,
 * the broker is killed with SIGKILL and restarted on the same store. Afterwards every delayed and
 * timer message arrives, none before it was due, and none twice if it arrived after the restart;
 * the half message that the producer answered UNKNOW before the kill is checked back again and,
 * now answered COMMIT, arrives; the rolled back one never does.
 *
 * <p>At-least-once allowance: the two committed transactional messages may arrive more than once.
 * The one committed before the kill may have been delivered without its consumer offset reaching
 * the broker; and with {@code transactionTimeOut=1000} Apache RocketMQ 5.3.3 checks back halves
 * whose op record is still in its 3 s write batch, so it commits (and delivers) them again (10 to
 * 12 deliveries each in a run against tests/java/apache-as-ringmq.sh). The 1 s check-back is
 * needed here so that the unknown half message is checked before the kill and before anything is
 * due. Delivery times after a restart have no upper bound (the restart takes what it takes); the
 * lower bound is measured from the send call, as in {@link DelayIT}.
 *
 * <p>Needs a broker this harness started, so it is skipped against an external broker; checked
 * against the reference with {@code -Dringmq.bin=tests/java/apache-as-ringmq.sh}.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class FeatureKillNineIT {
    static final int PORT = 24600;
    static final int QUEUES = 2;
    static final int DELAYED = 3;
    /** Delay level of the delayed messages (10 s in the default ladder). */
    static final int DELAY_LEVEL = 3;
    static final long DELAY_MS = 10_000;
    static final long TIMER_DELAY_MS = 8_000;
    /** Wait, after the unknown half message arrived, during which the rolled back one must not. */
    static final long ROLLBACK_MARGIN_MS = 5_000;

    @RegisterExtension
    static final ItBroker it = new ItBroker("feature-kill9", PORT, "--flushDiskType=SYNC_FLUSH",
            "--transactionCheckInterval=1000", "--transactionTimeOut=1000");

    @Test
    void pendingDelaysAndTransactionsSurviveKillNine() throws Exception {
        it.broker().assumeControllable("kill -9 of the broker");
        String topic = unique("feature-kill9");
        ConcurrentLinkedQueue<Delivery> deliveries = new ConcurrentLinkedQueue<>();
        ConcurrentLinkedQueue<String> checked = new ConcurrentLinkedQueue<>();
        AtomicBoolean commitOnCheck = new AtomicBoolean();
        String commitKey = topic + "-tx-commit";
        String rollbackKey = topic + "-tx-rollback";
        String unknownKey = topic + "-tx-unknown";

        try (Clients clients = new Clients(it::broker)) {
            DefaultMQAdminExt admin = clients.startAdmin();
            TransactionMQProducer producer = clients.startTransactionProducer(unique("feature-kill9-producer"),
                    "feature-kill9-producer", new TransactionListener() {
                        @Override
                        public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                            return (LocalTransactionState) arg;
                        }

                        @Override
                        public LocalTransactionState checkLocalTransaction(MessageExt message) {
                            checked.add(message.getKeys());
                            if (message.getKeys().equals(rollbackKey)) {
                                return LocalTransactionState.ROLLBACK_MESSAGE;
                            }
                            if (message.getKeys().equals(unknownKey) && !commitOnCheck.get()) {
                                return LocalTransactionState.UNKNOW;
                            }
                            return LocalTransactionState.COMMIT_MESSAGE;
                        }
                    });
            List<MessageQueue> queues = clients.createTopic(admin, topic, QUEUES);
            DefaultMQPushConsumer consumer = clients.startPushConsumer(unique("feature-kill9-group"), "kill9", topic,
                    recordInto(deliveries, ConsumeConcurrentlyStatus.CONSUME_SUCCESS));
            FeatureSupport.awaitOwned(consumer, topic, queues);

            // Due times: key -> (send call in nanos, delay in ms, send call on the wall clock in ms).
            Map<String, long[]> due = new HashMap<>();
            Map<String, Message> sent = new HashMap<>();
            Map<String, String> msgIds = new HashMap<>();
            for (int i = 0; i < DELAYED; i++) {
                Message message = message(topic, "TagDelay", topic + "-delay-" + i, "delayed across kill -9 " + i);
                message.setDelayTimeLevel(DELAY_LEVEL);
                long calledWall = System.currentTimeMillis();
                long called = System.nanoTime();
                SendResult result = ItSupport.sendOk(producer, message, "send " + message.getKeys());
                due.put(message.getKeys(), new long[] {called, DELAY_MS, calledWall});
                sent.put(message.getKeys(), message);
                msgIds.put(message.getKeys(), result.getMsgId());
            }
            Message timer = message(topic, "TagTimer", topic + "-timer", "timer across kill -9");
            long timerCalledWall = System.currentTimeMillis();
            long timerCalled = System.nanoTime();
            timer.setDeliverTimeMs(timerCalledWall + TIMER_DELAY_MS);
            SendResult timerResult = ItSupport.sendOk(producer, timer, "send of the timer message");
            due.put(timer.getKeys(), new long[] {timerCalled, TIMER_DELAY_MS, timerCalledWall});
            sent.put(timer.getKeys(), timer);
            msgIds.put(timer.getKeys(), timerResult.getMsgId());
            for (Map.Entry<String, LocalTransactionState> step : List.of(
                    Map.entry(commitKey, LocalTransactionState.COMMIT_MESSAGE),
                    Map.entry(rollbackKey, LocalTransactionState.ROLLBACK_MESSAGE),
                    Map.entry(unknownKey, LocalTransactionState.UNKNOW))) {
                Message message = message(topic, "TagTx", step.getKey(),
                        "transaction across kill -9 " + step.getValue());
                SendResult result = producer.sendMessageInTransaction(message, step.getValue());
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), "half message " + step.getKey());
                sent.put(step.getKey(), message);
                msgIds.put(step.getKey(), result.getMsgId());
            }

            // The kill lands after the commit was delivered and the unknown one was checked at least
            // once (answered UNKNOW), and before any delayed message is due.
            await("delivery of " + commitKey + " and a check of " + unknownKey,
                    () -> deliveredKeys(deliveries).contains(commitKey) && checked.contains(unknownKey),
                    () -> "delivered " + deliveredKeys(deliveries) + ", checked " + checked);
            Set<String> beforeKill = deliveredKeys(deliveries);
            it.broker().kill9();
            commitOnCheck.set(true);
            it.broker().restart();

            Set<String> expected = new HashSet<>(due.keySet());
            expected.add(commitKey);
            expected.add(unknownKey);
            await("every delayed, timer and committed message after the restart",
                    DELAY_MS + ItSupport.RETRY_WAIT_MS, () -> deliveredKeys(deliveries).containsAll(expected),
                    () -> "delivered " + deliveredKeys(deliveries) + ", expected " + expected + ", checked " + checked);
            long margin = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ROLLBACK_MARGIN_MS);
            while (System.nanoTime() < margin && !deliveredKeys(deliveries).contains(rollbackKey)) {
                Thread.sleep(ItSupport.POLL_MS);
            }

            List<Delivery> seen = new ArrayList<>(deliveries);
            assertEquals(expected, deliveredKeys(seen), "keys delivered (the rolled back " + rollbackKey + " must not be)");
            Map<String, Long> counts = seen.stream()
                    .collect(Collectors.groupingBy(d -> d.message().getKeys(), Collectors.counting()));
            System.out.println("FeatureKillNineIT: deliveries per key " + counts + ", check-backs per key "
                    + checked.stream().collect(Collectors.groupingBy(k -> k, Collectors.counting())));
            for (String key : due.keySet()) {
                // The kill lands seconds before the first is due; were one delivered before it
                // anyway (a very slow check-back), its offset might not have been committed.
                if (beforeKill.contains(key)) {
                    System.out.println("FeatureKillNineIT: " + key + " was delivered before the kill");
                } else {
                    assertEquals(1L, counts.get(key), "deliveries of " + key + " (all after the restart)");
                }
                long[] when = due.get(key);
                Delivery first = seen.stream().filter(d -> d.message().getKeys().equals(key)).findFirst().orElseThrow();
                double since = millisBetween(when[0], first.nanos());
                // "Not before" on the wall clock, the broker's time base (DelayIT says why).
                long sinceWall = first.wallMillis() - when[2];
                System.out.printf("FeatureKillNineIT: %s due after %d ms, delivered %.0f ms (wall clock: %d ms)"
                        + " after the send call%n", key, when[1], since, sinceWall);
                assertTrue(sinceWall >= when[1], key + " delivered early: " + sinceWall + " ms on the wall clock after"
                        + " the send, due after " + when[1] + " ms");
            }
            for (Delivery delivery : seen) {
                MessageExt message = delivery.message();
                Message original = sent.get(message.getKeys());
                assertEquals(topic, message.getTopic(), "topic of " + message.getKeys());
                assertEquals(original.getTags(), message.getTags(), "tags of " + message.getKeys());
                assertEquals(body(original), body(message), "body of " + message.getKeys());
                assertEquals(msgIds.get(message.getKeys()), message.getMsgId(), "msgId of " + message.getKeys());
            }
        }
    }
}
