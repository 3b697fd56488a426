package dev.ringmq.it;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Iterator;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Supplier;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.MessageListener;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The RocketMQ clients a test (or a test class, see {@link ItBroker}) started against one broker,
 * configured as {@link ItSupport} configures them, and shut down together by {@link #close()}:
 * the last started first, so that consumers go before the producers and the admin client they
 * were started after.
 *
 * <p>Use it with try-with-resources inside a test, or as an instance field closed in an
 * {@code @AfterEach} method for clients that must not outlive their test.
 */
class Clients implements AutoCloseable {
    /** One started client and how it is shut down. */
    private record Started(Object client, Runnable shutdown) {
    }

    private final Supplier<BrokerUnderTest> broker;
    private final Deque<Started> started = new ArrayDeque<>();

    /**
     * Clients of the broker {@code broker} supplies when a client starts (e.g. {@code it::broker}
     * of an {@link ItBroker}, in an instance field initializer); {@code null} only for
     * {@link ItBroker}, which overrides {@link #broker()}.
     */
    Clients(Supplier<BrokerUnderTest> broker) {
        this.broker = broker;
    }

    /** The broker these clients talk to. */
    BrokerUnderTest broker() {
        return broker.get();
    }

    /** Keeps {@code client} until {@link #close()} (or {@link #shutdown(Object)}), which calls {@code shutdown}. */
    synchronized <T> T keep(T client, Consumer<? super T> shutdown) {
        started.push(new Started(client, () -> shutdown.accept(client)));
        return client;
    }

    /** A started admin client ({@link ItSupport#startAdmin}). */
    DefaultMQAdminExt startAdmin() throws Exception {
        return keep(ItSupport.startAdmin(broker()), DefaultMQAdminExt::shutdown);
    }

    /** A started producer of {@code group} ({@link ItSupport#startProducer}). */
    DefaultMQProducer startProducer(String group) throws Exception {
        return keep(ItSupport.startProducer(broker(), group), DefaultMQProducer::shutdown);
    }

    /**
     * A started transactional producer of {@code group} whose local transactions and check-backs
     * {@code listener} answers ({@link ItSupport#transactionProducer}).
     */
    TransactionMQProducer startTransactionProducer(String group, String label, TransactionListener listener)
            throws Exception {
        TransactionMQProducer producer =
                keep(ItSupport.transactionProducer(broker(), group, label, listener), DefaultMQProducer::shutdown);
        producer.start();
        return producer;
    }

    /**
     * A push consumer of {@code group} ({@link ItSupport#pushConsumer}) that is subscribed to every
     * tag of {@code topic}, has {@code listener} (a {@code MessageListenerConcurrently} or
     * {@code MessageListenerOrderly}) and is started.
     */
    DefaultMQPushConsumer startPushConsumer(String group, String label, String topic, MessageListener listener)
            throws Exception {
        return startPushConsumer(group, label, topic, "*", listener, consumer -> {
        });
    }

    /**
     * A push consumer of {@code group} subscribed to {@code topic} with the tag expression
     * {@code expression}, configured further by {@code configure} (before it starts), with
     * {@code listener}, started.
     */
    DefaultMQPushConsumer startPushConsumer(String group, String label, String topic, String expression,
            MessageListener listener, Consumer<DefaultMQPushConsumer> configure) throws Exception {
        DefaultMQPushConsumer consumer = pushConsumer(group, label, listener);
        consumer.subscribe(topic, expression);
        configure.accept(consumer);
        consumer.start();
        return consumer;
    }

    /** A push consumer of {@code group} subscribed to {@code topic} with {@code selector}, started. */
    DefaultMQPushConsumer startPushConsumer(String group, String label, String topic, MessageSelector selector,
            MessageListener listener) throws Exception {
        DefaultMQPushConsumer consumer = pushConsumer(group, label, listener);
        consumer.subscribe(topic, selector);
        consumer.start();
        return consumer;
    }

    /** A push consumer of {@code group} with {@code listener}, kept but neither subscribed nor started. */
    DefaultMQPushConsumer pushConsumer(String group, String label, MessageListener listener) {
        DefaultMQPushConsumer consumer =
                keep(ItSupport.pushConsumer(broker(), group, label), DefaultMQPushConsumer::shutdown);
        if (listener instanceof MessageListenerOrderly orderly) {
            consumer.registerMessageListener(orderly);
        } else {
            consumer.registerMessageListener((MessageListenerConcurrently) listener);
        }
        return consumer;
    }

    /** Creates {@code topic} with {@code queues} queues through {@code admin} ({@link ItSupport#createTopic}). */
    List<MessageQueue> createTopic(DefaultMQAdminExt admin, String topic, int queues) throws Exception {
        return ItSupport.createTopic(admin, broker(), topic, queues);
    }

    /** Shuts {@code client} down now, if it is one of these, and forgets it. */
    void shutdown(Object client) {
        Started found = null;
        synchronized (this) {
            for (Iterator<Started> it = started.iterator(); it.hasNext(); ) {
                Started next = it.next();
                if (next.client() == client) {
                    it.remove();
                    found = next;
                    break;
                }
            }
        }
        if (found != null) {
            found.shutdown().run();
        }
    }

    /** Shuts every client down, the last started first; the object can be used again afterwards. */
    @Override
    public void close() {
        while (true) {
            Started next;
            synchronized (this) {
                next = started.poll();
            }
            if (next == null) {
                return;
            }
            next.shutdown().run();
        }
    }
}
