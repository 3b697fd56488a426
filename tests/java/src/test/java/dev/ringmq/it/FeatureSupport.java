package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;

import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * What the message-feature tests (delay, timer, transactions, dead letters, lookups, SQL92
 * filters) add to {@link ItSupport}: names of their own, timestamped deliveries, and waiting for
 * a push consumer's rebalance before the first send.
 *
 * <p>Names start with {@code java6-} (not {@code java-} as {@link ItSupport#unique} makes them),
 * so that the topics and groups these tests leave on a shared broker (Apache RocketMQ run by
 * {@code scripts/peer.sh}) are told apart from the other suites'.
 */
final class FeatureSupport {
    private static final AtomicLong COUNTER = new AtomicLong();
    private static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);

    private FeatureSupport() {
    }

    /**
     * One delivery and when the listener saw it: {@link System#nanoTime()} for durations, and
     * {@link System#currentTimeMillis()} for "not before" checks of delayed messages, whose due
     * time the broker computes on its wall clock.
     */
    record Delivery(MessageExt message, long nanos, long wallMillis) {
    }

    /**
     * A concurrent listener that adds every delivered message to {@code sink}, stamped with the
     * moment the listener was called, and answers {@code status}.
     */
    static MessageListenerConcurrently recordInto(Collection<Delivery> sink, ConsumeConcurrentlyStatus status) {
        return (messages, context) -> {
            long now = System.nanoTime();
            long wall = System.currentTimeMillis();
            for (MessageExt message : messages) {
                sink.add(new Delivery(message, now, wall));
            }
            return status;
        };
    }

    /** The (single) keys of the delivered messages. */
    static Set<String> deliveredKeys(Collection<Delivery> deliveries) {
        return deliveries.stream().map(d -> d.message().getKeys()).collect(Collectors.toSet());
    }

    /** A topic or group name no other test run uses; every name starts with {@code java6-}. */
    static String unique(String what) {
        return "java6-" + what + "-" + RUN + "-" + COUNTER.incrementAndGet();
    }

    /**
     * Waits until {@code consumer} holds every one of {@code queues} (its rebalance is done), so
     * that a message sent afterwards is pulled by it without waiting for the next rebalance.
     */
    static void awaitOwned(DefaultMQPushConsumer consumer, String topic, List<MessageQueue> queues)
            throws Exception {
        await(consumer.getConsumerGroup() + " holding all " + queues.size() + " queues of " + topic,
                () -> ItSupport.ownedQueues(consumer, topic).containsAll(new HashSet<>(queues)),
                () -> "holds " + ItSupport.ownedQueues(consumer, topic));
    }

    /** Milliseconds elapsed between two {@link System#nanoTime()} readings. */
    static double millisBetween(long fromNanos, long toNanos) {
        return (toNanos - fromNanos) / (double) TimeUnit.MILLISECONDS.toNanos(1);
    }
}
