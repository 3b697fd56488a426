package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;
import static dev.ringmq.it.ItSupport.body;
import static dev.ringmq.it.ItSupport.message;
import static dev.ringmq.it.ItSupport.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * RocketMQ's request-reply API: {@link DefaultMQProducer#request} sends a request message; a push
 * consumer answers each with {@link MessageUtil#createReplyMessage}, which a producer sends with
 * SEND_REPLY_MESSAGE(_V2); the broker pushes the reply to the requesting client
 * (PUSH_REPLY_MESSAGE_TO_CLIENT, the client named by the request's REPLY_TO_CLIENT property) and
 * stores it in {@code <cluster>_REPLY_TOPIC}. Each request gets its own reply (matched by the
 * CORRELATION_ID the client sets) through its {@link RequestCallback}.
 *
 * <p>Only the callback form is used: in the 5.3 client the synchronous {@code request(msg,
 * timeout)} returns as soon as the request is sent (its send callback counts the reply latch
 * down), so it times out unless the reply is faster than the send's answer, against any broker
 * (apache/rocketmq issue 9319).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class RequestReplyIT {
    static final int PORT = 25500;
    static final int QUEUES = 2;
    static final int COUNT = 6;
    static final long REQUEST_TIMEOUT_MS = 15_000;
    static final String REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC";

    @RegisterExtension
    static final ItBroker it = new ItBroker("request-reply", PORT);
    static DefaultMQProducer requester;
    static DefaultMQProducer replier;

    @BeforeAll
    static void start() throws Exception {
        requester = it.startProducer(unique("rr-requester"));
        replier = it.startProducer(unique("rr-replier"));
    }

    /** How many messages the reply topic holds. */
    static long repliesStored() throws Exception {
        return ItSupport.storedCount(it.admin(), ItSupport.queues(it.admin(), REPLY_TOPIC));
    }

    static String replyBody(String requestBody) {
        return "reply to " + requestBody;
    }

    @Test
    void everyRequestGetsItsOwnReplyPushedByTheBroker() throws Exception {
        String topic = unique("rr");
        List<MessageQueue> queues = it.createTopic(topic, QUEUES);
        DefaultMQPushConsumer responder = it.startPushConsumer(unique("rr-responder"), "rr-responder", topic,
                (MessageListenerConcurrently) (messages, context) -> {
                    for (MessageExt request : messages) {
                        try {
                            Message reply = MessageUtil.createReplyMessage(request,
                                    replyBody(body(request)).getBytes(StandardCharsets.UTF_8));
                            reply.putUserProperty("answered", request.getKeys());
                            replier.send(reply);
                        } catch (Exception e) {
                            System.err.println("RequestReplyIT: replying to " + request.getKeys() + " failed: " + e);
                            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                        }
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
        FeatureSupport.awaitOwned(responder, topic, queues);

        long storedBefore = repliesStored();
        Map<String, CompletableFuture<Message>> replies = new LinkedHashMap<>();
        Map<String, Message> requests = new LinkedHashMap<>();
        for (int i = 0; i < COUNT; i++) {
            String key = topic + "-" + i;
            CompletableFuture<Message> reply = new CompletableFuture<>();
            Message request = message(topic, "TagRequest", key, "request " + i);
            requester.request(request, new RequestCallback() {
                @Override
                public void onSuccess(Message message) {
                    // The 5.3 client also calls this, with null, when the request is sent.
                    if (message != null) {
                        reply.complete(message);
                    }
                }

                @Override
                public void onException(Throwable e) {
                    reply.completeExceptionally(e);
                }
            }, REQUEST_TIMEOUT_MS);
            replies.put(key, reply);
            requests.put(key, request);
        }
        for (int i = 0; i < COUNT; i++) {
            String key = topic + "-" + i;
            Message reply = replies.get(key).get(REQUEST_TIMEOUT_MS * 2, TimeUnit.MILLISECONDS);
            assertNotNull(reply, "reply to " + key);
            assertEquals(replyBody("request " + i), body(reply), "body of the reply to " + key);
            assertEquals(key, reply.getUserProperty("answered"), "the reply answers " + key);
            assertEquals(requests.get(key).getProperty(MessageConst.PROPERTY_CORRELATION_ID),
                    reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID), "correlation id of " + key);
            assertEquals(REPLY_TOPIC, reply.getTopic(), "topic of the reply to " + key);
        }

        // Every reply is also stored in the reply topic.
        await("the " + COUNT + " replies stored in " + REPLY_TOPIC, () -> repliesStored() - storedBefore >= COUNT,
                () -> "stored " + (repliesStored() - storedBefore));
        assertEquals(COUNT, repliesStored() - storedBefore,
                "stored copies of the replies (one each: a failed push would make the replier send again)");
    }
}
