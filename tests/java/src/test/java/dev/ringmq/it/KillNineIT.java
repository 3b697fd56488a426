package dev.ringmq.it;

import static dev.ringmq.it.ItSupport.unique;

import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Durability under SYNC_FLUSH: a producer thread sends synchronously in a loop, the broker is
 * killed with SIGKILL in the middle of it, restarted on the same store, and every message whose
 * send returned SEND_OK must be there (by key and msgId), with its content. Messages whose send
 * failed may or may not be there, and a send the client retried may be stored twice: neither is
 * an error.
 *
 * <p>Needs a broker this harness started, so it is skipped against an external broker.
 */
@Timeout(value = 150, unit = TimeUnit.SECONDS)
class KillNineIT {
    static final int PORT = 23700;
    static final int QUEUES = 4;
    /** SEND_OKs to collect before the kill. */
    static final int ACKED_BEFORE_KILL = 300;

    @RegisterExtension
    static final ItBroker it = new ItBroker("kill9", PORT, "--flushDiskType=SYNC_FLUSH");

    @Test
    void everyAcknowledgedSendSurvivesKillNine() throws Exception {
        it.broker().assumeControllable("kill -9 of the broker");
        String topic = unique("kill9");
        List<MessageQueue> queues;
        SendLoop loop;

        try (Clients clients = new Clients(it::broker)) {
            DefaultMQAdminExt admin = clients.startAdmin();
            DefaultMQProducer producer = clients.startProducer(unique("kill9-producer"));
            queues = clients.createTopic(admin, topic, QUEUES);
            // One attempt per send: a retry inside the client would blur which attempt was acked.
            producer.setRetryTimesWhenSendFailed(0);
            loop = SendLoop.start(producer, topic, "Kill");
            try {
                loop.awaitAcked(ACKED_BEFORE_KILL, () -> "broker log " + it.broker().logPath());
                it.broker().kill9();
            } finally {
                // The sender keeps trying against the dead broker until told to stop.
                loop.close();
            }
            loop.stop();
        }

        it.broker().restart();
        try (Clients clients = new Clients(it::broker)) {
            DefaultMQAdminExt after = clients.startAdmin();
            ItSupport.awaitRoutes(after, "routes of " + topic + " after the restart", topic, QUEUES);
            loop.assertStored(ItSupport.readAll(it.broker(), after, queues, -1));
        }
    }
}
