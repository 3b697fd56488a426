package dev.ringmq.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.junit.jupiter.api.Assumptions;

/**
 * The broker a test class talks to.
 *
 * <p>By default this is the ringmq binary named by the system property {@code ringmq.bin}, started
 * as {@code ringmq broker --listenPort=P --namesrvListenPort=Q --storePathRootDir=<fresh dir>
 * --brokerIP1=127.0.0.1 --brokerName=NAME [--KEY=VALUE...]} with its embedded name server on
 * {@code 127.0.0.1:Q}. It is ready when its output holds the line RocketMQ's own broker prints,
 * {@code The broker[NAME, 127.0.0.1:P] boot success. serializeType=JSON and name server is ...}.
 * Its stdout and stderr go to {@code target/ringmq-<test>.log} (appended to on a restart); the
 * store is {@code target/ringmq-store-<test>}, deleted by {@link #close()}.
 *
 * <p>With the system property {@code ringmq.external.namesrv=HOST:PORT} nothing is started: the
 * tests use the broker(s) registered with that name server (for instance Apache RocketMQ 5.3.3 run
 * by {@code scripts/peer.sh apache-rocketmq start}), and {@link #stop()}, {@link #kill9()} and
 * {@link #restart()} skip the calling test through a JUnit assumption, since another party owns
 * that broker.
 *
 * <p>A broker may also register with a {@link NameServerUnderTest} instead of running its own name
 * server ({@code --namesrvAddr=HOST:PORT} in place of {@code --namesrvListenPort}), under a name it
 * shares with other brokers (a master and its slave): {@link #start(String, String,
 * NameServerUnderTest, int, String...)}.
 *
 * <p>Without either property every test fails: a missing binary must not look like a pass.
 */
final class BrokerUnderTest implements AutoCloseable {
    /** Bound on the wait for the boot line (first start, restart, restart after kill -9). */
    static final long BOOT_TIMEOUT_MS = 60_000;
    /** Bound on the wait for the process to exit after SIGTERM. */
    static final long STOP_TIMEOUT_S = 30;
    /** Bound on the wait for the process to disappear after SIGKILL. */
    static final long KILL_TIMEOUT_S = 10;
    static final String HOST = "127.0.0.1";
    /** Brokers still running, killed when the test JVM exits (e.g. on Surefire's fork timeout). */
    private static final Set<Process> LIVE = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> LIVE.forEach(BrokerUnderTest::killTree),
                "ringmq-broker-reaper"));
    }

    private final String testName;
    private final String brokerName;
    private final int listenPort;
    private final int namesrvPort;
    /** The name server the broker registers with; {@code null}: its embedded one on namesrvPort. */
    private final String registersWith;
    private final String external;
    private final List<String> command;
    private final File log;
    private final Path storeDir;
    private Process process;

    private BrokerUnderTest(String testName, String brokerName, String registersWith, int listenPort,
            List<String> extraArgs) throws IOException {
        this.testName = testName;
        this.brokerName = brokerName;
        this.listenPort = listenPort;
        // Leaves listenPort - 2 (RocketMQ's fast port) and listenPort + 1 (its HA port) alone.
        this.namesrvPort = listenPort + 6;
        this.registersWith = registersWith;
        this.external = externalNamesrv();
        this.log = new File(ItSupport.targetDir(), "ringmq-" + testName + ".log");
        this.storeDir = new File(ItSupport.targetDir(), "ringmq-store-" + testName).toPath();
        this.command = new ArrayList<>();
        if (external == null) {
            command.add(binary());
            command.add("broker");
            command.add("--listenPort=" + listenPort);
            if (registersWith == null) {
                command.add("--namesrvListenPort=" + namesrvPort);
            } else {
                command.add("--namesrvAddr=" + registersWith);
            }
            command.add("--storePathRootDir=" + storeDir);
            command.add("--brokerIP1=" + HOST);
            command.add("--brokerName=" + brokerName);
            // 64 MiB segments instead of 1 GiB: every test class gets a fresh store per shard,
            // and a suite run must not need tens of GiB of disk.
            command.add("--mapedFileSizeCommitLog=67108864");
            command.addAll(extraArgs);
        }
    }

    /**
     * Starts the broker for {@code testName} on {@code listenPort} (plus the port offset, see
     * {@link ItSupport#port}; its name server 6 above) with a fresh store, or attaches to the
     * external one.
     *
     * @param extraArgs further {@code --KEY=VALUE} options
     */
    static BrokerUnderTest start(String testName, int listenPort, String... extraArgs) throws Exception {
        ItSupport.configureClientLogging();
        return launchFresh(new BrokerUnderTest(testName, "java-" + testName, null, ItSupport.port(listenPort),
                List.of(extraArgs)));
    }

    /**
     * Starts broker {@code brokerName} (not derived from {@code testName}: a master and its slave
     * share it) for {@code testName} on {@code listenPort} (plus the port offset) with a fresh store,
     * registered with {@code namesrv} and without a name server of its own. Only for brokers this
     * harness starts (see {@link #assumeStartable}).
     *
     * @param extraArgs further {@code --KEY=VALUE} options (e.g. {@code --brokerRole=SLAVE})
     */
    static BrokerUnderTest start(String testName, String brokerName, NameServerUnderTest namesrv, int listenPort,
            String... extraArgs) throws Exception {
        assumeStartable("a broker registered with a name server of the harness");
        ItSupport.configureClientLogging();
        return launchFresh(new BrokerUnderTest(testName, brokerName, namesrv.addr(), ItSupport.port(listenPort),
                List.of(extraArgs)));
    }

    /** Starts {@code broker} on a fresh store and log, unless it is external. */
    private static BrokerUnderTest launchFresh(BrokerUnderTest broker) throws Exception {
        if (!broker.isExternal()) {
            deleteRecursively(broker.storeDir);
            Files.createDirectories(broker.storeDir);
            Files.deleteIfExists(broker.log.toPath());
            broker.launch();
        }
        return broker;
    }

    /** True when the tests run against a broker this harness did not start. */
    boolean isExternal() {
        return external != null;
    }

    /** The name server address clients are given. */
    String namesrvAddr() {
        if (external != null) {
            return external;
        }
        return registersWith != null ? registersWith : HOST + ":" + namesrvPort;
    }

    /** The broker's own address ({@code 127.0.0.1:listenPort}), e.g. for requests to a slave. */
    String addr() {
        if (external != null) {
            fail("the address of an external broker is the name server's to tell");
        }
        return HOST + ":" + listenPort;
    }

    /** The test log of the started broker, for failure messages. */
    String logPath() {
        return external != null ? "(external broker at " + external + ")" : log.getPath();
    }

    /**
     * Skips the calling test (JUnit assumption) when the tests run against an external broker:
     * for tests that start brokers (and name servers) of their own.
     */
    static void assumeStartable(String what) {
        String ext = externalNamesrv();
        Assumptions.assumeTrue(ext == null, () -> what + " needs processes this harness starts; the tests run "
                + "against the broker(s) of ringmq.external.namesrv=" + ext);
    }

    /** The system property {@code ringmq.external.namesrv}, or {@code null} when not given. */
    private static String externalNamesrv() {
        String ext = System.getProperty("ringmq.external.namesrv");
        return ext == null || ext.isBlank() ? null : ext.trim();
    }

    /** The ringmq binary (system property {@code ringmq.bin}); fails the test when there is none. */
    static String binary() {
        String bin = System.getProperty("ringmq.bin");
        if (bin == null || bin.isEmpty()) {
            fail("system property ringmq.bin (path of the ringmq binary) is not set and "
                    + "ringmq.external.namesrv is not given; run through scripts/java-tests.sh");
        }
        if (!new File(bin).canExecute()) {
            fail("ringmq.bin=" + bin + " is not an executable file");
        }
        return bin;
    }

    /** Skips the calling test (JUnit assumption) when the broker is external. */
    void assumeControllable(String what) {
        Assumptions.assumeFalse(isExternal(), () -> what + " needs a broker this harness started; "
                + "ringmq.external.namesrv=" + external + " belongs to someone else, so it is "
                + "neither stopped, killed nor restarted");
    }

    /** SIGTERM; the broker must exit with status 0 within {@value #STOP_TIMEOUT_S} s. */
    void stop() throws Exception {
        assumeControllable("stopping the broker");
        Process p = requireRunning();
        p.destroy();
        if (!p.waitFor(STOP_TIMEOUT_S, TimeUnit.SECONDS)) {
            killTree(p);
            fail("broker did not exit within " + STOP_TIMEOUT_S + " s of SIGTERM; see " + log);
        }
        LIVE.remove(p);
        process = null;
        assertEquals(0, p.exitValue(), "broker exit status after SIGTERM; see " + log);
    }

    /** SIGKILL, no chance to flush or clean up; waits until the process is gone. */
    void kill9() throws Exception {
        assumeControllable("kill -9 of the broker");
        Process p = requireRunning();
        killTree(p);
        process = null;
    }

    /** Starts the broker again with the same store directory, ports and options. */
    void restart() throws Exception {
        assumeControllable("restarting the broker");
        if (process != null) {
            fail("restart() while the broker still runs; stop() or kill9() it first");
        }
        launch();
    }

    /**
     * Starts a stopped slave again on its store as the master of its broker name: without its
     * {@code --brokerRole} and {@code --brokerId}, so an ASYNC_MASTER with brokerId 0, at the same
     * address. What an operator of classic master/slave RocketMQ does after losing the master.
     */
    void restartAsMaster() throws Exception {
        assumeControllable("restarting a slave as the master");
        if (process != null) {
            fail("restartAsMaster() while the broker still runs; stop() it first");
        }
        command.removeIf(arg -> arg.startsWith("--brokerRole=") || arg.startsWith("--brokerId="));
        launch();
    }

    /**
     * Stops a broker that still runs (SIGTERM, then SIGKILL) and deletes its store (a ringmq
     * store preallocates its files, about 1 GiB per shard), unless the system property
     * {@code ringmq.keepStores} is {@code true}; the log stays. Never fails the test.
     */
    @Override
    public void close() {
        terminate();
        if (!isExternal() && !Boolean.getBoolean("ringmq.keepStores")) {
            try {
                deleteRecursively(storeDir);
            } catch (IOException e) {
                System.err.println("could not delete " + storeDir + ": " + e);
            }
        }
    }

    /** SIGTERM, then SIGKILL after {@value #STOP_TIMEOUT_S} s, if the broker still runs. */
    private void terminate() {
        Process p = process;
        process = null;
        if (p != null) {
            p.destroy();
            try {
                if (p.waitFor(STOP_TIMEOUT_S, TimeUnit.SECONDS)) {
                    LIVE.remove(p);
                } else {
                    killTree(p);
                }
            } catch (InterruptedException e) {
                killTree(p);
                Thread.currentThread().interrupt();
            }
        }
    }

    private Process requireRunning() {
        if (process == null) {
            fail("the broker is not running");
        }
        return process;
    }

    private void launch() throws Exception {
        try (var writer = Files.newBufferedWriter(log.toPath(), StandardCharsets.UTF_8,
                java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND)) {
            writer.write("==> " + String.join(" ", command) + System.lineSeparator());
        }
        long from = log.length();
        process = new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log))
                .start();
        LIVE.add(process);
        String prefix = "The broker[" + brokerName + ", " + HOST + ":" + listenPort
                + "] boot success. serializeType=JSON and name server is ";
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(BOOT_TIMEOUT_MS);
        while (true) {
            if (logHasLine(from, prefix)) {
                return;
            }
            if (!process.isAlive()) {
                int status = process.exitValue();
                LIVE.remove(process);
                process = null;
                fail("ringmq broker exited with status " + status + " before its boot line; see " + log);
            }
            if (System.nanoTime() > deadline) {
                terminate();
                fail("ringmq broker printed no '" + prefix + "...' line within " + BOOT_TIMEOUT_MS
                        + " ms; see " + log);
            }
            Thread.sleep(100);
        }
    }

    private boolean logHasLine(long from, String prefix) throws IOException {
        try (RandomAccessFile file = new RandomAccessFile(log, "r")) {
            long length = file.length();
            if (length <= from) {
                return false;
            }
            byte[] bytes = new byte[(int) Math.min(length - from, 16 << 20)];
            file.seek(from);
            file.readFully(bytes);
            for (String line : new String(bytes, StandardCharsets.UTF_8).split("\n")) {
                if (line.startsWith(prefix)) {
                    return true;
                }
            }
            return false;
        }
    }

    /**
     * Kills {@code p} and anything it started when the test JVM exits, unless {@link #killTree}
     * or {@link #forget} comes first (for the other processes the harness starts).
     */
    static void killAtExit(Process p) {
        LIVE.add(p);
    }

    /** Forgets a {@link #killAtExit} process that exited. */
    static void forget(Process p) {
        LIVE.remove(p);
    }

    /** SIGKILL to the process and anything it started; waits for each to disappear. */
    static void killTree(Process p) {
        LIVE.remove(p);
        List<ProcessHandle> all = new ArrayList<>();
        p.toHandle().descendants().forEach(all::add);
        all.add(p.toHandle());
        for (ProcessHandle handle : all) {
            handle.destroyForcibly();
        }
        for (ProcessHandle handle : all) {
            try {
                handle.onExit().get(KILL_TIMEOUT_S, TimeUnit.SECONDS);
            } catch (Exception e) {
                throw new AssertionError("process " + handle.pid() + " survived SIGKILL", e);
            }
        }
    }

    static void deleteRecursively(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(dir)) {
            for (Path path : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(path);
            }
        }
    }

    @Override
    public String toString() {
        return external != null ? "external broker via " + external
                : "ringmq broker " + brokerName + " on " + HOST + ":" + listenPort + " (" + testName + ")";
    }
}
