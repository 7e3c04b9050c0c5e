package dev.streamfold.peer.app;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The peer's command line. Settings that must match streamfold's run
 * (servers, commit interval, fold parameters) also come from the
 * variables streamfold's topologies read; topic names and the application
 * id come only from arguments, so the peer never shares a consumer group
 * or an output topic with a streamfold run by accident.
 */
public final class Options {
    public static final String USAGE = """
            usage: kafka-streams-peer.sh fold|question-feed|page-views|orders-enriched [options]

              fold             topologies/social-metrics.yaml: post-metric events folded per account
              question-feed    topologies/question-feed.yaml: dedup, question projection, thanks totals
              page-views       topologies/page-views.yaml: views per page and 5-minute window, on close
              orders-enriched  topologies/orders-enriched.yaml: orders left-joined with a customers table

            options (environment variable, default):
              --bootstrap-servers S     (KAFKA_BOOTSTRAP_SERVERS, 127.0.0.1:9092)
              --application-id ID       (kafka-streams-<topology>, e.g. kafka-streams-social-metrics);
                                        also the consumer group and the internal topics' prefix
              --input TOPIC             (post-metric-updated | question-feed-events | page-views | orders)
              --output TOPIC            fold: the folded events (kafka-streams-account-metrics-folded);
                                        page-views: the windows (kafka-streams-page-views-per-5m);
                                        orders-enriched: the joined orders (kafka-streams-orders-enriched)
              --customers-topic TOPIC   orders-enriched: the customers table (customers)
              --questions-topic TOPIC   question-feed: read models (kafka-streams-question-read-models)
              --thanks-topic TOPIC      question-feed: thanks totals (kafka-streams-answer-thanks)
              --other-events-topic T    question-feed: other events (kafka-streams-question-feed-other-events)
              --dead-letter-topic TOPIC (kafka-streams-<topology>-dlq)
              --commit-interval D       (STREAMFOLD_COMMIT_INTERVAL, 100ms)
              --threads N               stream threads (the number of cores)
              --state-dir DIR           (./kafka-streams-state)
              --quiet-for D             fold (FOLD_QUIET_FOR, 5s; "off" disables)
              --max-wait D              fold (FOLD_MAX_WAIT, 1m; "off" disables)
              --max-events N            fold (FOLD_MAX_EVENTS, 100; "off" disables)
              --punctuation-interval D  how often fold timers are checked (250ms)
              --retention D             question-feed: how long dedup remembers an id (6h)
              --window D                page-views: the tumbling window (PAGE_VIEWS_WINDOW, 5m)
              --grace D                 page-views: how long a window takes late views (PAGE_VIEWS_GRACE, 1m)
              -X key=value              any Kafka Streams, consumer or producer property, applied last

            Durations: 250ms, 5s, 1m, 1m30s, 6h.
            """;

    /** The applications. */
    public enum App {
        FOLD("social-metrics"),
        QUESTION_FEED("question-feed"),
        PAGE_VIEWS("page-views"),
        ORDERS_ENRICHED("orders-enriched");

        /** The topology it mirrors (topologies/&lt;name&gt;.yaml). */
        public final String topology;

        App(String topology) {
            this.topology = topology;
        }
    }

    public App app;
    public String bootstrapServers;
    public String applicationId;
    public String input;
    public String output;
    public String questionsTopic;
    public String thanksTopic;
    public String otherEventsTopic;
    public String deadLetterTopic;
    public String customersTopic;
    public long commitIntervalMs;
    public int threads;
    public String stateDir;
    public Long quietForMs;
    public Long maxWaitMs;
    public Long maxEvents;
    public long punctuationMs;
    public long retentionMs;
    public long windowMs;
    public long graceMs;
    /** {@code -X} properties, in the order given. */
    public final Map<String, String> overrides = new LinkedHashMap<>();

    private Options() {}

    /** Parses {@code args}, with {@code env} for what arguments leave out. */
    public static Options parse(String[] args, Map<String, String> env) {
        if (args.length == 0) {
            throw new IllegalArgumentException(
                    "name the application: fold, question-feed, page-views or orders-enriched");
        }
        if (args[0].equals("-h") || args[0].equals("--help")) {
            throw new IllegalArgumentException("");
        }
        Options o = new Options();
        o.app = switch (args[0]) {
            case "fold" -> App.FOLD;
            case "question-feed" -> App.QUESTION_FEED;
            case "page-views" -> App.PAGE_VIEWS;
            case "orders-enriched" -> App.ORDERS_ENRICHED;
            default -> throw new IllegalArgumentException("unknown application `" + args[0]
                    + "`: expected fold, question-feed, page-views or orders-enriched");
        };
        o.bootstrapServers = env.getOrDefault("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092");
        o.applicationId = "kafka-streams-" + o.app.topology;
        o.input = switch (o.app) {
            case FOLD -> "post-metric-updated";
            case QUESTION_FEED -> "question-feed-events";
            case PAGE_VIEWS -> "page-views";
            case ORDERS_ENRICHED -> "orders";
        };
        o.output = switch (o.app) {
            case PAGE_VIEWS -> "kafka-streams-page-views-per-5m";
            case ORDERS_ENRICHED -> "kafka-streams-orders-enriched";
            default -> "kafka-streams-account-metrics-folded";
        };
        o.customersTopic = "customers";
        o.questionsTopic = "kafka-streams-question-read-models";
        o.thanksTopic = "kafka-streams-answer-thanks";
        o.otherEventsTopic = "kafka-streams-question-feed-other-events";
        o.deadLetterTopic = "kafka-streams-" + o.app.topology + "-dlq";
        o.commitIntervalMs = Durations.parse(env.getOrDefault("STREAMFOLD_COMMIT_INTERVAL", "100ms"));
        o.threads = Runtime.getRuntime().availableProcessors();
        o.stateDir = "./kafka-streams-state";
        o.quietForMs = Durations.parseOptional(env.getOrDefault("FOLD_QUIET_FOR", "5s"));
        o.maxWaitMs = Durations.parseOptional(env.getOrDefault("FOLD_MAX_WAIT", "1m"));
        o.maxEvents = count(env.getOrDefault("FOLD_MAX_EVENTS", "100"));
        o.punctuationMs = 250;
        o.retentionMs = Durations.parse("6h");
        o.windowMs = Durations.parse(env.getOrDefault("PAGE_VIEWS_WINDOW", "5m"));
        o.graceMs = Durations.parse(env.getOrDefault("PAGE_VIEWS_GRACE", "1m"));

        for (int i = 1; i < args.length; i++) {
            String flag = args[i];
            if (flag.equals("-h") || flag.equals("--help")) {
                throw new IllegalArgumentException("");
            }
            if (i + 1 >= args.length) {
                throw new IllegalArgumentException(flag + " needs a value");
            }
            String value = args[++i];
            switch (flag) {
                case "--bootstrap-servers" -> o.bootstrapServers = value;
                case "--application-id" -> o.applicationId = value;
                case "--input" -> o.input = value;
                case "--output" -> o.output = value;
                case "--questions-topic" -> o.questionsTopic = value;
                case "--thanks-topic" -> o.thanksTopic = value;
                case "--other-events-topic" -> o.otherEventsTopic = value;
                case "--dead-letter-topic" -> o.deadLetterTopic = value;
                case "--customers-topic" -> o.customersTopic = value;
                case "--commit-interval" -> o.commitIntervalMs = Durations.parse(value);
                case "--threads" -> o.threads = Integer.parseInt(value);
                case "--state-dir" -> o.stateDir = value;
                case "--quiet-for" -> o.quietForMs = Durations.parseOptional(value);
                case "--max-wait" -> o.maxWaitMs = Durations.parseOptional(value);
                case "--max-events" -> o.maxEvents = count(value);
                case "--punctuation-interval" -> o.punctuationMs = Durations.parse(value);
                case "--retention" -> o.retentionMs = Durations.parse(value);
                case "--window" -> o.windowMs = Durations.parse(value);
                case "--grace" -> o.graceMs = Durations.parse(value);
                case "-X", "--config" -> {
                    int eq = value.indexOf('=');
                    if (eq <= 0) {
                        throw new IllegalArgumentException("expected key=value after " + flag + ", found `" + value + "`");
                    }
                    o.overrides.put(value.substring(0, eq), value.substring(eq + 1));
                }
                default -> throw new IllegalArgumentException("unknown option " + flag);
            }
        }
        if (o.threads < 1) {
            throw new IllegalArgumentException("--threads must be at least 1");
        }
        if (o.windowMs < 1) {
            throw new IllegalArgumentException("--window must be at least 1ms");
        }
        if (o.commitIntervalMs < 1 || o.punctuationMs < 1) {
            throw new IllegalArgumentException("--commit-interval and --punctuation-interval must be at least 1ms");
        }
        return o;
    }

    /** The topics the application reads, which must exist before it starts. */
    public java.util.List<String> inputs() {
        return app == App.ORDERS_ENRICHED ? java.util.List.of(input, customersTopic) : java.util.List.of(input);
    }

    private static Long count(String text) {
        if (text.trim().equals("off")) {
            return null;
        }
        long n = Long.parseLong(text.trim());
        if (n < 1) {
            throw new IllegalArgumentException("--max-events must be at least 1, found " + n);
        }
        return n;
    }
}
