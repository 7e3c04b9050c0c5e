package dev.streamfold.peer;

import dev.streamfold.peer.app.Options;
import dev.streamfold.peer.app.StreamsSettings;
import dev.streamfold.peer.app.TopicSetup;
import dev.streamfold.peer.app.TopicSetup.Output;
import dev.streamfold.peer.feed.FeedTopology;
import dev.streamfold.peer.fold.FoldSpec;
import dev.streamfold.peer.fold.FoldTopology;
import dev.streamfold.peer.join.OrdersEnrichedTopology;
import dev.streamfold.peer.windows.PageViewsTopology;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs one of the peer's applications until SIGTERM or SIGINT, then closes
 * Kafka Streams (committing what was processed, leaving the group) within
 * {@link #CLOSE_TIMEOUT}.
 *
 * <p>stdout carries only status lines, one each, for whoever drives the
 * peer (logs go to stderr):
 *
 * <pre>
 * started app=fold application.id=... input=... outputs=...
 * running app=fold application.id=...      (tasks assigned and restored: processing)
 * stopped app=fold clean=true               (exit status 0; 1 if not clean)
 * </pre>
 */
public final class Main {
    private static final Logger LOG = LoggerFactory.getLogger(Main.class);
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(30);
    /** How long to wait for the input topic, as streamfold's {@code wait_for_sources}. */
    static final Duration INPUT_WAIT = Duration.ofMinutes(10);

    private Main() {}

    public static void main(String[] args) throws Exception {
        Options options;
        try {
            options = Options.parse(args, System.getenv());
        } catch (IllegalArgumentException e) {
            if (e.getMessage() != null && !e.getMessage().isEmpty()) {
                System.err.println("error: " + e.getMessage());
            }
            System.err.print(Options.USAGE);
            System.exit(2);
            return;
        }
        System.exit(run(options));
    }

    private static int run(Options o) throws Exception {
        Topology topology;
        List<Output> outputs;
        switch (o.app) {
            case FOLD -> {
                FoldSpec spec = FoldSpec.socialMetrics(o.quietForMs, o.maxWaitMs, o.maxEvents, o.punctuationMs);
                topology = FoldTopology.build(spec, o.input, o.output);
                outputs = List.of(new Output(o.output, false), new Output(o.deadLetterTopic, false));
            }
            case QUESTION_FEED -> {
                topology = FeedTopology.build(
                        new FeedTopology.Topics(o.input, o.questionsTopic, o.thanksTopic, o.otherEventsTopic),
                        o.retentionMs);
                outputs = List.of(
                        new Output(o.questionsTopic, true),
                        new Output(o.thanksTopic, true),
                        new Output(o.otherEventsTopic, false),
                        new Output(o.deadLetterTopic, false));
            }
            case PAGE_VIEWS -> {
                topology = PageViewsTopology.build(o.input, o.output, o.windowMs, o.graceMs);
                outputs = List.of(new Output(o.output, false), new Output(o.deadLetterTopic, false));
            }
            case ORDERS_ENRICHED -> {
                topology = OrdersEnrichedTopology.build(o.input, o.customersTopic, o.output);
                outputs = List.of(new Output(o.output, false), new Output(o.deadLetterTopic, false));
            }
            default -> throw new IllegalStateException();
        }
        String described = "app=" + o.app.name().toLowerCase().replace('_', '-')
                + " application.id=" + o.applicationId;
        TopicSetup.prepare(o, outputs, INPUT_WAIT);
        LOG.info("{}", topology.describe());

        KafkaStreams streams = new KafkaStreams(topology, StreamsSettings.of(o));
        CountDownLatch stop = new CountDownLatch(1);
        CountDownLatch closed = new CountDownLatch(1);
        AtomicInteger exitStatus = new AtomicInteger(0);
        AtomicBoolean failed = new AtomicBoolean();
        AtomicBoolean running = new AtomicBoolean();
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && running.compareAndSet(false, true)) {
                status("running " + described);
            }
            if (now == KafkaStreams.State.PENDING_ERROR || now == KafkaStreams.State.ERROR) {
                failed.set(true);
                stop.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            LOG.error("A stream thread failed; stopping.", e);
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        // SIGTERM and SIGINT: stop processing and close; the hook holds the
        // JVM until the close is done, then exits with its status.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.countDown();
            try {
                closed.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            Runtime.getRuntime().halt(exitStatus.get());
        }, "peer-shutdown"));

        streams.start();
        status("started " + described + " input=" + String.join(",", o.inputs()) + " outputs="
                + String.join(",", outputs.stream().map(Output::topic).toList())
                + " threads=" + o.threads + " commit.interval.ms=" + o.commitIntervalMs);
        stop.await();

        boolean clean = streams.close(CloseOptions.timeout(CLOSE_TIMEOUT)
                .withGroupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP));
        clean = clean && !failed.get();
        exitStatus.set(clean ? 0 : 1);
        status("stopped " + described + " clean=" + clean);
        closed.countDown();
        return exitStatus.get();
    }

    private static void status(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
