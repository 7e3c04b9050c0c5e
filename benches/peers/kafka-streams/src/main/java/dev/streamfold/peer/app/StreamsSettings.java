package dev.streamfold.peer.app;

import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler;

/**
 * The Kafka Streams properties of a run. README.md ("Tuning") says why
 * each is set; {@code -X} overrides any of them, except the processing
 * guarantee, which is always exactly_once_v2.
 */
public final class StreamsSettings {
    /** The record cache, for all threads: streamfold's {@code state.record_cache}. */
    static final long RECORD_CACHE_BYTES = 64L << 20;
    /**
     * How often a windowed aggregation that emits on window close looks for
     * closed windows, at most (an internal setting; 1 s of wall-clock time
     * by default).
     */
    static final String EMIT_INTERVAL = "__emit.interval.ms.kstreams.windowed.aggregation__";

    private StreamsSettings() {}

    public static Properties of(Options o) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, o.applicationId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, o.bootstrapServers);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, o.commitIntervalMs);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, o.threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, o.stateDir);

        // State: one bounded RocksDB budget and a record cache as large as
        // streamfold's. Transactional state stores stay off (README.md).
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, RECORD_CACHE_BYTES);
        p.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, BoundedRocksDb.class);
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, 0);

        // Bad records: skipped, logged and written to the dead-letter topic
        // in the same transaction, as streamfold dead-letters them. Values
        // are parsed by the processors (RawJson), so a value that is not
        // JSON is a processing error too.
        p.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_CLASS_CONFIG, LogAndContinueProcessingExceptionHandler.class);
        p.put(StreamsConfig.ERRORS_DEAD_LETTER_QUEUE_TOPIC_NAME_CONFIG, o.deadLetterTopic);
        // No global stores here; this opts in to Kafka 5.0's default.
        p.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_GLOBAL_ENABLED_CONFIG, true);

        // Producer: send while the commit interval runs instead of at its
        // end, in large batches, uncompressed (loopback, two cores).
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), 256 * 1024);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.COMPRESSION_TYPE_CONFIG), "none");

        // Consumer: answer a fetch as soon as there is data and wait at most
        // 100 ms for it (streamfold's fetch.wait.max.ms).
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MIN_BYTES_CONFIG), 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 100);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 2_000);

        // Windows closed by a record are emitted while that record is
        // processed, as streamfold emits them, instead of at the first
        // record a second later: the last windows of an input would
        // otherwise wait for a record that never comes. A window store is
        // still searched only when stream time crosses a window's close.
        if (o.app == Options.App.PAGE_VIEWS) {
            p.put(EMIT_INTERVAL, 0L);
        }

        p.putAll(o.overrides);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        return p;
    }
}
