package dev.ringmq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A standalone name server, {@code ringmq namesrv --listen-port P --bind 127.0.0.1
 * --kv-config-path target/ringmq-store-<test>/kvConfig.json}, for tests whose brokers register with
 * a name server that outlives them (a master killed while its slave serves on), see
 * {@link BrokerUnderTest#start(String, String, NameServerUnderTest, int, String...)}.
 *
 * <p>It is ready when its output holds the line {@code The Name Server boot success.
 * serializeType=JSON, address 127.0.0.1:P}; its stdout and stderr go to
 * {@code target/ringmq-<test>.log}. {@link #close()} stops it (SIGTERM, exit 0 within
 * {@value BrokerUnderTest#STOP_TIMEOUT_S} s) and deletes its directory. Only for processes this
 * harness starts: against an external broker, {@link #start} skips the calling test.
 */
final class NameServerUnderTest implements AutoCloseable {
    static final String BOOT_PREFIX = "The Name Server boot success. serializeType=JSON, address ";

    private final int port;
    private final String addr;
    private final File log;
    private final Path dir;
    private Process process;

    private NameServerUnderTest(String testName, int port) {
        this.port = port;
        this.addr = BrokerUnderTest.HOST + ":" + port;
        this.log = new File(ItSupport.targetDir(), "ringmq-" + testName + ".log");
        this.dir = new File(ItSupport.targetDir(), "ringmq-store-" + testName).toPath();
    }

    /**
     * Starts the name server of {@code testName} on {@code port} (plus the port offset, see
     * {@link ItSupport#port}) and waits for its boot line.
     */
    static NameServerUnderTest start(String testName, int port) throws Exception {
        BrokerUnderTest.assumeStartable("a standalone name server");
        ItSupport.configureClientLogging();
        NameServerUnderTest namesrv = new NameServerUnderTest(testName, ItSupport.port(port));
        namesrv.launch();
        return namesrv;
    }

    /** {@code 127.0.0.1:port}, as brokers and clients are given it. */
    String addr() {
        return addr;
    }

    /** The log, for failure messages. */
    String logPath() {
        return log.getPath();
    }

    private void launch() throws Exception {
        BrokerUnderTest.deleteRecursively(dir);
        Files.createDirectories(dir);
        Files.deleteIfExists(log.toPath());
        List<String> command = List.of(BrokerUnderTest.binary(), "namesrv",
                "--listen-port", Integer.toString(port), "--bind", BrokerUnderTest.HOST,
                "--kv-config-path", dir.resolve("kvConfig.json").toString());
        Files.writeString(log.toPath(), "==> " + String.join(" ", command) + System.lineSeparator(),
                StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        process = new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log))
                .start();
        BrokerUnderTest.killAtExit(process);
        String expected = BOOT_PREFIX + addr;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(BrokerUnderTest.BOOT_TIMEOUT_MS);
        while (!Files.readAllLines(log.toPath(), StandardCharsets.UTF_8).contains(expected)) {
            if (!process.isAlive()) {
                int status = process.exitValue();
                BrokerUnderTest.forget(process);
                process = null;
                fail("ringmq namesrv exited with status " + status + " before its boot line; see " + log);
            }
            if (System.nanoTime() > deadline) {
                close();
                fail("ringmq namesrv printed no '" + expected + "' line within " + BrokerUnderTest.BOOT_TIMEOUT_MS
                        + " ms; see " + log);
            }
            Thread.sleep(100);
        }
    }

    /**
     * Stops the name server (SIGTERM; SIGKILL if it is still there after
     * {@value BrokerUnderTest#STOP_TIMEOUT_S} s, which fails the test like a nonzero exit status)
     * and deletes its directory unless {@code ringmq.keepStores} is {@code true}; the log stays.
     */
    @Override
    public void close() throws Exception {
        Process p = process;
        process = null;
        if (p != null) {
            p.destroy();
            if (!p.waitFor(BrokerUnderTest.STOP_TIMEOUT_S, TimeUnit.SECONDS)) {
                BrokerUnderTest.killTree(p);
                fail("ringmq namesrv did not exit within " + BrokerUnderTest.STOP_TIMEOUT_S + " s of SIGTERM; see "
                        + log);
            }
            BrokerUnderTest.forget(p);
            assertEquals(0, p.exitValue(), "ringmq namesrv exit status after SIGTERM; see " + log);
        }
        if (!Boolean.getBoolean("ringmq.keepStores")) {
            try {
                BrokerUnderTest.deleteRecursively(dir);
            } catch (IOException e) {
                System.err.println("could not delete " + dir + ": " + e);
            }
        }
    }

    @Override
    public String toString() {
        return "ringmq namesrv on " + addr + " (" + log.getName() + ")";
    }
}
