package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Redelivery: a concurrent listener answers RECONSUME_LATER to the first delivery of every
 * message; the client sends it back (CONSUMER_SEND_MSG_BACK) to the group's {@code %RETRY%} topic
 * and the consumer receives it again with reconsumeTimes 1 and the original topic, key, tags, body
 * and msgId.
 *
 * <p>Nothing here asserts when the retry arrives. Like Apache RocketMQ, ringmq holds the first
 * retry for delay level 3 (10 s with the default {@code messageDelayLevel}) in
 * {@code SCHEDULE_TOPIC_XXXX} before it reaches the {@code %RETRY%} topic; the only bound is the
 * wait's deadline, {@link ItSupport#RETRY_WAIT_MS}.
 */
@Timeout(value = 150, unit = TimeUnit.SECONDS)
class RetryIT {
    static final int PORT = 23500;
    static final int QUEUES = 4;
    static final int COUNT = 12;

    @RegisterExtension
    static final ItBroker it = new ItBroker("retry", PORT);
    static DefaultMQProducer producer;

    @BeforeAll
    static void start() throws Exception {
        producer = it.startProducer(unique("retry-producer"));
    }

    @Test
    void reconsumeLaterRedeliversEachMessageOnceMore() throws Exception {
        String topic = unique("retry");
        String group = unique("retry-group");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        ConcurrentLinkedQueue<MessageExt> deliveries = new ConcurrentLinkedQueue<>();
        it.startPushConsumer(group, "retry", topic, "*", (MessageListenerConcurrently) (messages, context) -> {
            MessageExt message = messages.get(0);
            deliveries.add(message);
            return message.getReconsumeTimes() == 0
                    ? ConsumeConcurrentlyStatus.RECONSUME_LATER
                    : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        }, c -> c.setConsumeMessageBatchMaxSize(1));

        Map<String, Message> sent = new HashMap<>();
        Map<String, String> msgIds = new HashMap<>();
        for (int i = 0; i < COUNT; i++) {
            Message message = message(topic, "TagRetry" + (i % 2), topic + "-key-" + i, "retry body " + i);
            SendResult result = ItSupport.sendOk(producer, message, "send " + i);
            sent.put(message.getKeys(), message);
            msgIds.put(message.getKeys(), result.getMsgId());
        }

        await("a second delivery (reconsumeTimes 1) of every message", ItSupport.RETRY_WAIT_MS,
                () -> deliveries.stream().filter(m -> m.getReconsumeTimes() == 1).map(MessageExt::getKeys)
                        .collect(Collectors.toSet()).containsAll(sent.keySet()),
                () -> "deliveries (key:reconsumeTimes) " + deliveries.stream()
                        .map(m -> m.getKeys() + ":" + m.getReconsumeTimes()).toList());
        // The original queues' offsets move past every message once its first delivery was
        // settled (sent back counts as consumed there).
        ItSupport.awaitCommitted(it.admin(), group, queues);

        Map<String, List<Integer>> timesByKey = deliveries.stream().collect(Collectors.groupingBy(
                MessageExt::getKeys, Collectors.mapping(MessageExt::getReconsumeTimes, Collectors.toList())));
        assertEquals(sent.keySet(), timesByKey.keySet(), "keys delivered");
        for (Map.Entry<String, List<Integer>> entry : timesByKey.entrySet()) {
            assertEquals(List.of(0, 1), entry.getValue().stream().sorted().toList(),
                    "reconsumeTimes of the deliveries of " + entry.getKey());
        }
        for (MessageExt message : deliveries) {
            Message original = sent.get(message.getKeys());
            assertNotNull(original, "unknown key " + message.getKeys());
            assertEquals(topic, message.getTopic(), "topic of delivery " + message.getReconsumeTimes()
                    + " of " + message.getKeys());
            assertEquals(original.getTags(), message.getTags(), "tags of " + message.getKeys());
            assertEquals(body(original), body(message), "body of " + message.getKeys());
            assertEquals(msgIds.get(message.getKeys()), message.getMsgId(),
                    "msgId of delivery " + message.getReconsumeTimes() + " of " + message.getKeys());
        }
    }
}
