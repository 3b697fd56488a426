package dev.ringmq.it;

import static dev.ringmq.it.FeatureSupport.millisBetween;
import static dev.ringmq.it.FeatureSupport.recordInto;
import static dev.ringmq.it.FeatureSupport.unique;
import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import dev.ringmq.it.FeatureSupport.Delivery;

/**
 * Dead letters: a push consumer with {@code maxReconsumeTimes} {@value #MAX_RECONSUME_TIMES} that
 * answers RECONSUME_LATER to every delivery gets the message {@value #MAX_RECONSUME_TIMES} + 1
 * times (reconsumeTimes 0, 1, 2); the third CONSUMER_SEND_MSG_BACK moves it to
 * {@code %DLQ%<group>}, a topic of one queue that the broker creates readable and writable, where
 * a reader finds it with its topic (RETRY_TOPIC property), key, tags, body and msgId.
 *
 * <p>Retry spacing follows the delay ladder: both brokers hold retry n for delay level 2 + n of
 * the default ladder (10 s, then 30 s). The test asserts the lower bound only (a retry never
 * comes before its level's delay after the delivery it retries, with {@value #EARLY_SLACK_MS} ms
 * for millisecond store timestamps) and logs the spacing; it asserts no upper bound. The wait for
 * the dead letter is {@value #DLQ_WAIT_MS} ms, enough for the 40 s.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class DeadLetterIT {
    static final int PORT = 24300;
    static final int QUEUES = 2;
    /** Delays of levels 3 and 4 of RocketMQ's default messageDelayLevel. */
    static final long[] LADDER_MS = {10_000, 30_000};
    /** Allowance for millisecond store timestamps when checking that a retry is not early. */
    static final long EARLY_SLACK_MS = 5;
    /** The consumer's maxReconsumeTimes. */
    static final int MAX_RECONSUME_TIMES = 2;
    /** Bound on the wait for the dead letter (Apache RocketMQ: 10 s + 30 s of retry delays). */
    static final long DLQ_WAIT_MS = 90_000;
    /** Queues of a DLQ topic (RocketMQ's DLQ_NUMS_PER_GROUP). */
    static final int DLQ_QUEUES = 1;

    @RegisterExtension
    static final ItBroker it = new ItBroker("dead-letter", PORT);
    static DefaultMQProducer producer;

    @BeforeAll
    static void start() throws Exception {
        producer = it.startProducer(unique("dlq-producer"));
    }

    @Test
    void messageFailedMoreThanMaxReconsumeTimesLandsInTheDeadLetterQueue() throws Exception {
        String topic = unique("dlq");
        String group = unique("dlq-group");
        String dlqTopic = MixAll.getDLQTopic(group);
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        ConcurrentLinkedQueue<Delivery> deliveries = new ConcurrentLinkedQueue<>();
        DefaultMQPushConsumer consumer = it.startPushConsumer(group, "dlq", topic, "*",
                recordInto(deliveries, ConsumeConcurrentlyStatus.RECONSUME_LATER), c -> {
                    c.setConsumeMessageBatchMaxSize(1);
                    c.setMaxReconsumeTimes(MAX_RECONSUME_TIMES);
                });
        FeatureSupport.awaitOwned(consumer, topic, queues);

        Message message = message(topic, "TagDlq", topic + "-key", "dead letter body");
        message.putUserProperty("dlqCase", "always-fails");
        SendResult result = ItSupport.sendOk(producer, message, "send");

        List<MessageQueue> dlqQueues = new ArrayList<>();
        await("route of " + dlqTopic, DLQ_WAIT_MS, () -> {
            dlqQueues.clear();
            dlqQueues.addAll(ItSupport.queues(it.admin(), dlqTopic));
            return !dlqQueues.isEmpty();
        }, () -> "deliveries (reconsumeTimes) " + deliveries.stream()
                .map(d -> d.message().getReconsumeTimes()).toList());
        List<MessageExt> dead = it.readAll(dlqQueues, 1);

        List<Delivery> seen = new ArrayList<>(deliveries);
        for (int i = 1; i < seen.size(); i++) {
            System.out.printf("DeadLetterIT: delivery %d (reconsumeTimes %d) %.0f ms after the previous one%n", i,
                    seen.get(i).message().getReconsumeTimes(), millisBetween(seen.get(i - 1).nanos(),
                            seen.get(i).nanos()));
        }
        assertEquals(List.of(0, 1, 2), seen.stream().map(d -> d.message().getReconsumeTimes()).sorted().toList(),
                "reconsumeTimes of the deliveries (maxReconsumeTimes " + MAX_RECONSUME_TIMES + ")");
        seen.sort(java.util.Comparator.comparingInt(d -> d.message().getReconsumeTimes()));
        for (int i = 1; i < seen.size(); i++) {
            // Retry i is held for delay level 2 + i of the default ladder: 10 s, then 30 s.
            long ladderMs = LADDER_MS[i - 1];
            // On the wall clock, the broker's time base (DelayIT says why not the monotonic one).
            long spacing = seen.get(i).wallMillis() - seen.get(i - 1).wallMillis();
            assertTrue(spacing >= ladderMs - EARLY_SLACK_MS, "retry " + i + " came " + spacing
                    + " ms on the wall clock after the delivery it retries, before its delay level's " + ladderMs
                    + " ms");
        }
        for (Delivery delivery : seen) {
            MessageExt m = delivery.message();
            assertEquals(topic, m.getTopic(), "topic of delivery " + m.getReconsumeTimes());
            assertEquals(message.getKeys(), m.getKeys(), "key of delivery " + m.getReconsumeTimes());
            assertEquals(result.getMsgId(), m.getMsgId(), "msgId of delivery " + m.getReconsumeTimes());
        }

        assertEquals(1, dead.size(), "messages in " + dlqTopic);
        MessageExt letter = dead.get(0);
        assertEquals(dlqTopic, letter.getTopic(), "topic of the dead letter");
        assertEquals(topic, letter.getProperty(MessageConst.PROPERTY_RETRY_TOPIC), "RETRY_TOPIC of the dead letter");
        assertEquals(message.getKeys(), letter.getKeys(), "key of the dead letter");
        assertEquals(message.getTags(), letter.getTags(), "tags of the dead letter");
        assertEquals(body(message), body(letter), "body of the dead letter");
        assertEquals("always-fails", letter.getUserProperty("dlqCase"), "user property of the dead letter");
        assertEquals(result.getMsgId(), letter.getMsgId(), "msgId (UNIQ_KEY) of the dead letter");

        TopicRouteData route = it.admin().examineTopicRouteInfo(dlqTopic);
        assertEquals(1, route.getQueueDatas().size(), "brokers holding " + dlqTopic);
        QueueData data = route.getQueueDatas().get(0);
        assertEquals(DLQ_QUEUES, data.getReadQueueNums(), "read queues of " + dlqTopic);
        assertEquals(DLQ_QUEUES, data.getWriteQueueNums(), "write queues of " + dlqTopic);
        assertEquals(PermName.PERM_READ | PermName.PERM_WRITE, data.getPerm(), "permissions of " + dlqTopic);
        // Nothing more once it is dead.
        assertEquals(MAX_RECONSUME_TIMES + 1, deliveries.size(), "deliveries to the failing consumer");
    }
}
