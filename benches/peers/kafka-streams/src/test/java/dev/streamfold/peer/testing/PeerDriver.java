package dev.streamfold.peer.testing;

import dev.streamfold.peer.app.Options;
import dev.streamfold.peer.app.StreamsSettings;
import dev.streamfold.peer.feed.FeedTopology;
import dev.streamfold.peer.fold.FoldSpec;
import dev.streamfold.peer.fold.FoldTopology;
import dev.streamfold.peer.join.OrdersEnrichedTopology;
import dev.streamfold.peer.windows.PageViewsTopology;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Stream;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.test.TestRecord;

/**
 * One of the peer's applications in a {@link TopologyTestDriver}, with the
 * settings of a real run (exactly_once_v2, RocksDB stores through the
 * bounded config setter, transactional state stores) and a wall clock
 * that starts where streamfold's offline driver starts
 * ({@link #START}) and moves one punctuation tick at a time, as
 * streamfold's does. Records are written and read as JSON text.
 */
public final class PeerDriver implements AutoCloseable {
    /** streamfold's virtual epoch: 2025-01-01T00:00:00Z. */
    public static final Instant START = Instant.parse("2025-01-01T00:00:00Z");

    private final Options options;
    private final TopologyTestDriver driver;
    private final Path stateDir;
    private final Map<String, TestInputTopic<String, String>> inputs = new HashMap<>();
    private final Map<String, TestOutputTopic<String, String>> outputs = new HashMap<>();
    private Instant now = START;

    private PeerDriver(Options options, Topology topology, Path stateDir) {
        this.options = options;
        this.stateDir = stateDir;
        Properties props = StreamsSettings.of(options);
        this.driver = new TopologyTestDriver(topology, props, START);
    }

    /**
     * The application named by {@code args} (as on the command line),
     * with the topic names streamfold's topologies use by default.
     */
    public static PeerDriver start(String... args) {
        Path stateDir;
        try {
            Files.createDirectories(Path.of("target"));
            stateDir = Files.createTempDirectory(Path.of("target"), "test-state");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        List<String> all = new ArrayList<>(List.of(args));
        all.addAll(List.of("--state-dir", stateDir.toString(), "--application-id", "peer-test"));
        switch (args[0]) {
            case "fold" -> all.addAll(List.of("--input", "post-metric-updated", "--output", "account-metrics-folded",
                    "--dead-letter-topic", "social-metrics-dlq"));
            case "page-views" -> all.addAll(List.of("--input", "page-views", "--output", "page-views-per-5m",
                    "--dead-letter-topic", "page-views-dlq"));
            case "orders-enriched" -> all.addAll(List.of("--input", "orders", "--customers-topic", "customers",
                    "--output", "orders-enriched", "--dead-letter-topic", "orders-enriched-dlq"));
            default -> all.addAll(List.of("--input", "question-feed-events", "--questions-topic",
                    "question-read-models", "--thanks-topic", "answer-thanks", "--other-events-topic",
                    "question-feed-other-events", "--dead-letter-topic", "question-feed-dlq"));
        }
        Options o = Options.parse(all.toArray(String[]::new), Map.of());
        Topology topology = switch (o.app) {
            case FOLD -> FoldTopology.build(
                    FoldSpec.socialMetrics(o.quietForMs, o.maxWaitMs, o.maxEvents, o.punctuationMs), o.input, o.output);
            case QUESTION_FEED -> FeedTopology.build(new FeedTopology.Topics(o.input, o.questionsTopic, o.thanksTopic,
                    o.otherEventsTopic), o.retentionMs);
            case PAGE_VIEWS -> PageViewsTopology.build(o.input, o.output, o.windowMs, o.graceMs);
            case ORDERS_ENRICHED -> OrdersEnrichedTopology.build(o.input, o.customersTopic, o.output);
        };
        return new PeerDriver(o, topology, stateDir);
    }

    /** The topics the application writes, dead letters included. */
    public List<String> outputTopics() {
        return options.app == Options.App.QUESTION_FEED
                ? List.of(options.questionsTopic, options.thanksTopic, options.otherEventsTopic,
                        options.deadLetterTopic)
                : List.of(options.output, options.deadLetterTopic);
    }

    /** Sends {@code value} (JSON text, or any text; null: a tombstone) now, timestamped now. */
    public void send(String topic, String key, String value) {
        inputs.computeIfAbsent(topic, t -> driver.createInputTopic(t, new StringSerializer(), new StringSerializer()))
                .pipeInput(key, value, now);
    }

    /** The input topic of the application. */
    public String input() {
        return options.input;
    }

    /** Moves the wall clock forward by {@code by}, one punctuation tick at a time. */
    public void advance(Duration by) {
        Instant until = now.plus(by);
        Duration tick = Duration.ofMillis(options.punctuationMs);
        while (now.isBefore(until)) {
            Duration step = Duration.between(now, until).compareTo(tick) < 0 ? Duration.between(now, until) : tick;
            driver.advanceWallClockTime(step);
            now = now.plus(step);
        }
    }

    /** What {@code topic} received since the last read. */
    public List<TestRecord<String, String>> read(String topic) {
        return outputs.computeIfAbsent(topic,
                        t -> driver.createOutputTopic(t, new StringDeserializer(), new StringDeserializer()))
                .readRecordsToList();
    }

    /** The store of the running application, for looking at its state. */
    public TopologyTestDriver driver() {
        return driver;
    }

    @Override
    public void close() {
        driver.close();
        try (Stream<Path> files = Files.walk(stateDir)) {
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
