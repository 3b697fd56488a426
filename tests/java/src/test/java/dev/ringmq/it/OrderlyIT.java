package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;

import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Ordered messages: a producer picks the queue by order id with a {@link MessageQueueSelector},
 * and a push consumer with a {@link MessageListenerOrderly} (which locks its queues on the broker,
 * LOCK_BATCH_MQ) sees every order's steps in the order they were sent, exactly once.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class OrderlyIT {
    static final int PORT = 23400;
    static final int QUEUES = 4;
    static final int ORDERS = 8;
    static final int STEPS = 12;

    @RegisterExtension
    static final ItBroker it = new ItBroker("orderly", PORT);
    static DefaultMQProducer producer;

    @BeforeAll
    static void start() throws Exception {
        producer = it.startProducer(unique("orderly-producer"));
    }

    @Test
    void everyOrderArrivesInSendOrder() throws Exception {
        String topic = unique("orderly");
        String group = unique("orderly-group");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);

        Map<Integer, List<MessageExt>> received = new ConcurrentHashMap<>();
        it.startPushConsumer(group, "orderly", topic, (MessageListenerOrderly) (messages, context) -> {
            for (MessageExt message : messages) {
                int order = Integer.parseInt(message.getUserProperty("orderId"));
                received.computeIfAbsent(order, o -> Collections.synchronizedList(new ArrayList<>()))
                        .add(message);
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });

        MessageQueueSelector byOrder = (mqs, message, arg) -> mqs.get((Integer) arg % mqs.size());
        Map<Integer, Integer> queueOfOrder = new TreeMap<>();
        // Interleaved: step 0 of every order, then step 1 of every order, ...
        for (int step = 0; step < STEPS; step++) {
            for (int order = 0; order < ORDERS; order++) {
                Message message = message(topic, "TagOrder", topic + "-order-" + order + "-step-" + step,
                        "order " + order + " step " + step);
                message.putUserProperty("orderId", Integer.toString(order));
                message.putUserProperty("step", Integer.toString(step));
                SendResult result = producer.send(message, byOrder, order);
                assertEquals(SendStatus.SEND_OK, result.getSendStatus(), message.getKeys());
                Integer previous = queueOfOrder.put(order, result.getMessageQueue().getQueueId());
                if (previous != null) {
                    assertEquals(previous, result.getMessageQueue().getQueueId(), "queue of order " + order);
                }
            }
        }

        await("every step of every order consumed", () -> {
            int total = 0;
            for (List<MessageExt> list : received.values()) {
                total += list.size();
            }
            return total >= ORDERS * STEPS;
        }, () -> "received " + received);
        ItSupport.awaitCommitted(it.admin(), group, queues);

        assertEquals(ORDERS, received.size(), "orders seen");
        List<Integer> expectedSteps = IntStream.range(0, STEPS).boxed().toList();
        for (int order = 0; order < ORDERS; order++) {
            List<MessageExt> list = received.get(order);
            List<Integer> steps = list.stream().map(m -> Integer.parseInt(m.getUserProperty("step"))).toList();
            assertEquals(expectedSteps, steps, "steps of order " + order + " in arrival order");
            long lastOffset = -1;
            for (int step = 0; step < STEPS; step++) {
                MessageExt message = list.get(step);
                assertEquals(topic + "-order-" + order + "-step-" + step, message.getKeys());
                assertEquals("order " + order + " step " + step, body(message));
                assertEquals("TagOrder", message.getTags());
                assertEquals(queueOfOrder.get(order).intValue(), message.getQueueId(), "queue of order " + order);
                assertEquals(order % QUEUES, message.getQueueId(), "queue chosen by the selector");
                assertTrue(message.getQueueOffset() > lastOffset, "offsets increase within order " + order);
                lastOffset = message.getQueueOffset();
            }
        }
    }
}
