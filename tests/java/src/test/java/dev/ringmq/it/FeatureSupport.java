package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.await;

import java.util.HashSet;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * What the message-feature tests (delay, timer, transactions, dead letters, lookups, SQL92
 * filters) add to {@link ItSupport}: names of their own and waiting for a push consumer's
 * rebalance before the first send.
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
