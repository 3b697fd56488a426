package dev.ringmq.it;

import static dev.ringmq.it.FeatureSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.IntPredicate;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * SQL92 property filters ({@link MessageSelector#bySql}, expression type SQL92, checked by the
 * broker with CHECK_CLIENT_CONFIG at consumer start): each of several consumer groups, one
 * expression each, receives exactly the messages whose user properties match it.
 *
 * <p>Message {@code i} (0..{@value #COUNT} - 1) carries {@code a = i}, {@code b = 'x'} for even and
 * {@code 'y'} for odd {@code i}, and {@code c = 'c<i>'} only when {@code i} is a multiple of 3; one
 * more message ({@value #COUNT}) has none of them, so comparisons with a missing property (NULL,
 * which matches nothing) are covered. Property values travel as strings; RocketMQ compares them
 * with numeric literals as numbers. The broker needs {@code enablePropertyFilter=true} (ringmq: the
 * option below; the Apache RocketMQ peer of scripts/peer.sh sets it).
 *
 * <p>"Exactly": the consumers hold all queues before the first send, and the count is taken once
 * every group's committed offsets reached the queues' max offsets (a filtered-out message moves
 * the offset too), after which nothing more can be delivered.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SqlFilterIT {
    static final int PORT = 24500;
    static final int QUEUES = 2;
    /** Messages with properties; one more without any follows them. */
    static final int COUNT = 12;

    /** One subscription and which message indexes it must receive. */
    record Case(String expression, IntPredicate matches) {
    }

    static final List<Case> CASES = List.of(
            new Case("a BETWEEN 3 AND 5 AND b = 'x'", i -> i < COUNT && i >= 3 && i <= 5 && i % 2 == 0),
            new Case("a > 8 OR b IN ('y', 'z') AND a < 4", i -> i < COUNT && (i > 8 || (i % 2 == 1 && i < 4))),
            new Case("c IS NULL AND a <= 4", i -> i < COUNT && i % 3 != 0 && i <= 4),
            new Case("NOT (b = 'x') AND c IS NOT NULL", i -> i < COUNT && i % 2 == 1 && i % 3 == 0),
            new Case("b = 'x' AND a NOT BETWEEN 2 AND 9", i -> i < COUNT && i % 2 == 0 && (i < 2 || i > 9)),
            new Case("a = 7 OR c = 'c6'", i -> i == 7 || i == 6),
            new Case("a <> 7 AND a >= 10", i -> i < COUNT && i >= 10),
            new Case("b IS NULL", i -> i == COUNT));

    @RegisterExtension
    static final ItBroker it = new ItBroker("sql-filter", PORT, "--enablePropertyFilter=true");
    static DefaultMQProducer producer;
    /** This test's consumers. */
    final Clients consumers = new Clients(it::broker);

    @BeforeAll
    static void start() throws Exception {
        producer = it.startProducer(unique("sql-producer"));
    }

    @AfterEach
    void shutdownConsumers() {
        consumers.close();
    }

    static String key(String topic, int i) {
        return topic + "-" + i;
    }

    @Test
    void eachSqlSubscriptionReceivesExactlyTheMatchingMessages() throws Exception {
        String topic = unique("sql");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        List<String> groups = new ArrayList<>();
        List<ConcurrentLinkedQueue<MessageExt>> received = new ArrayList<>();
        List<DefaultMQPushConsumer> started = new ArrayList<>();
        for (int n = 0; n < CASES.size(); n++) {
            String group = unique("sql-group-" + n);
            ConcurrentLinkedQueue<MessageExt> deliveries = new ConcurrentLinkedQueue<>();
            started.add(consumers.startPushConsumer(group, "sql-" + n, topic,
                    MessageSelector.bySql(CASES.get(n).expression()), ItSupport.collectInto(deliveries)));
            groups.add(group);
            received.add(deliveries);
        }
        for (DefaultMQPushConsumer consumer : started) {
            FeatureSupport.awaitOwned(consumer, topic, queues);
        }

        for (int i = 0; i <= COUNT; i++) {
            Message message = new Message(topic, "TagSql", key(topic, i),
                    ("sql body " + i).getBytes(StandardCharsets.UTF_8));
            if (i < COUNT) {
                message.putUserProperty("a", Integer.toString(i));
                message.putUserProperty("b", i % 2 == 0 ? "x" : "y");
                if (i % 3 == 0) {
                    message.putUserProperty("c", "c" + i);
                }
            }
            ItSupport.sendOk(producer, message, "send " + i);
        }

        for (String group : groups) {
            ItSupport.awaitCommitted(it.admin(), group, queues);
        }
        for (int n = 0; n < CASES.size(); n++) {
            Case c = CASES.get(n);
            Set<String> expected = IntStream.rangeClosed(0, COUNT).filter(c.matches()).mapToObj(i -> key(topic, i))
                    .collect(Collectors.toCollection(TreeSet::new));
            List<String> keys = received.get(n).stream().map(MessageExt::getKeys).sorted().toList();
            assertFalse(expected.isEmpty(), "case " + n + " must expect something");
            assertEquals(List.copyOf(expected), keys, "messages received for \"" + c.expression() + "\"");
            for (MessageExt message : received.get(n)) {
                assertEquals(topic, message.getTopic(), "topic of " + message.getKeys());
            }
        }
    }

    @Test
    void malformedSqlExpressionIsRejectedWhenTheConsumerStarts() throws Exception {
        String topic = unique("sql-bad");
        it.createTopic(topic, QUEUES);
        DefaultMQPushConsumer consumer = consumers.pushConsumer(unique("sql-bad-group"), "sql-bad",
                (MessageListenerConcurrently) (messages, context) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        consumer.subscribe(topic, MessageSelector.bySql("a > AND b = 'x'"));
        MQClientException error = assertThrows(MQClientException.class, consumer::start,
                "consumer start with a malformed SQL92 expression");
        System.out.println("SqlFilterIT: malformed expression rejected with: " + error.getMessage());
        // The broker's answer to CHECK_CLIENT_CONFIG, passed on by the client.
        assertEquals(ResponseCode.SUBSCRIPTION_PARSE_FAILED, error.getResponseCode(), "response code of the rejection");
        assertTrue(error.getErrorMessage() != null && !error.getErrorMessage().isBlank(), "the rejection says why");
    }
}
