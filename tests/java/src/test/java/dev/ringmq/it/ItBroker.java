package dev.ringmq.it;

import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.List;

import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A test class's broker and the clients it starts, as a JUnit extension. Registered in a static
 * field ({@code @RegisterExtension static final ItBroker it = new ItBroker("orderly", PORT);}),
 * it starts the {@link BrokerUnderTest} before the class's {@code @BeforeAll} methods run and,
 * after its {@code @AfterAll} methods, shuts down every client started through it (the last one
 * first, see {@link Clients}) and then closes the broker (which deletes its store).
 *
 * <p>The admin client is started on the first call of {@link #admin()}, so a class that never
 * asks for it (the kill -9 tests, which start their own around the kill) has none.
 */
final class ItBroker extends Clients implements BeforeAllCallback, AfterAllCallback {
    private final String testName;
    private final int port;
    private final String[] extraArgs;
    private BrokerUnderTest broker;
    private DefaultMQAdminExt admin;

    /** The broker of test {@code testName} on {@code port} (see {@link BrokerUnderTest#start}); nothing starts yet. */
    ItBroker(String testName, int port, String... extraArgs) {
        super(null);
        this.testName = testName;
        this.port = port;
        this.extraArgs = extraArgs.clone();
    }

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        broker = BrokerUnderTest.start(testName, port, extraArgs);
    }

    @Override
    public void afterAll(ExtensionContext context) {
        try {
            close();
        } finally {
            admin = null;
            if (broker != null) {
                broker.close();
            }
        }
    }

    /** The started broker. */
    @Override
    BrokerUnderTest broker() {
        assertNotNull(broker, "the broker of " + testName + " is not started (is the ItBroker field static?)");
        return broker;
    }

    /** The class's admin client, started on the first call (a failed start fails the test). */
    synchronized DefaultMQAdminExt admin() {
        if (admin == null) {
            try {
                admin = startAdmin();
            } catch (Exception e) {
                throw new AssertionError("admin client for " + broker() + " did not start", e);
            }
        }
        return admin;
    }

    /** Every message stored in {@code queues} ({@link ItSupport#readAll} through {@link #admin()}). */
    List<MessageExt> readAll(List<MessageQueue> queues, long expected) throws Exception {
        return ItSupport.readAll(broker(), admin(), queues, expected);
    }

    /** Creates {@code topic} with {@code queues} queues through {@link #admin()} ({@link ItSupport#createTopic}). */
    List<MessageQueue> createTopic(String topic, int queues) throws Exception {
        return createTopic(admin(), topic, queues);
    }
}
