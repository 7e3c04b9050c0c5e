package dev.streamfold.peer.fold;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.RawJson;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * streamfold's {@code fold} operator on the Processor API: each event is
 * merged into its key's open fold (a RocksDB key-value store with a
 * changelog); a wall-clock punctuator closes the folds whose key has been
 * quiet for {@code quiet_for} or whose first event is {@code max_wait}
 * old, and the {@code max_events}-th event closes its fold at once. A
 * closed fold is emitted, keyed by the group key and timestamped with the
 * wall-clock time it closed, and removed from the store; the key's next
 * event opens a new fold.
 *
 * <p>Emitted value, fields in this order:
 * {@code {"account_id", "metrics", "posts", "folded_count",
 * "first_event_at", "last_event_at", "closed_by"}}, with {@code closed_by}
 * one of {@code quiet}, {@code max_wait}, {@code max_events}.
 *
 * <p>Timers: each open fold has one entry in a second store, the timer
 * index, keyed by (deadline, key) so that a punctuation reads only what is
 * due, in deadline order, instead of scanning every open fold. The entry
 * is armed at the fold's earliest possible close; when it comes due and
 * the key has seen events since, it is moved to the new deadline instead
 * of closing the fold, so a busy key costs one index write per quiet
 * period, not one per event.
 */
public final class FoldProcessor implements Processor<String, RawJson, String, JsonNode> {
    /**
     * Timers handled in one punctuation at most, so a backlog of due folds
     * (after a pause) keeps each transaction bounded; the rest are due at
     * the next punctuation.
     */
    static final int TIMERS_PER_PUNCTUATION = 10_000;

    private static final byte[] ARMED = new byte[0];

    private final FoldSpec spec;
    private final List<JsonPointer> pointers;
    private ProcessorContext<String, JsonNode> context;
    private KeyValueStore<String, OpenFold> open;
    private KeyValueStore<Bytes, byte[]> timers;

    FoldProcessor(FoldSpec spec) {
        this.spec = spec;
        this.pointers = spec.fields().stream().map(FoldSpec.Field::pointer).toList();
    }

    /** The processor with the two stores it declares (connected by Kafka Streams). */
    public static ProcessorSupplier<String, RawJson, String, JsonNode> supplier(FoldSpec spec) {
        return new ProcessorSupplier<>() {
            @Override
            public Processor<String, RawJson, String, JsonNode> get() {
                return new FoldProcessor(spec);
            }

            @Override
            public Set<StoreBuilder<?>> stores() {
                // Both cached: within a commit interval, a key's many events
                // and its timer's re-arming collapse into one RocksDB write
                // and one changelog record each.
                StoreBuilder<KeyValueStore<String, OpenFold>> open = Stores.keyValueStoreBuilder(
                                Stores.persistentKeyValueStore(spec.openStore()),
                                Serdes.String(),
                                new OpenFoldSerde())
                        .withCachingEnabled();
                StoreBuilder<KeyValueStore<Bytes, byte[]>> timers = Stores.keyValueStoreBuilder(
                                Stores.persistentKeyValueStore(spec.timersStore()),
                                Serdes.Bytes(),
                                Serdes.ByteArray())
                        .withCachingEnabled();
                return Set.of(open, timers);
            }
        };
    }

    @Override
    public void init(ProcessorContext<String, JsonNode> context) {
        this.context = context;
        this.open = context.getStateStore(spec.openStore());
        this.timers = context.getStateStore(spec.timersStore());
        if (spec.timed()) {
            context.schedule(Duration.ofMillis(spec.punctuationMs()), PunctuationType.WALL_CLOCK_TIME, this::punctuate);
        }
    }

    @Override
    public void process(Record<String, RawJson> record) {
        String key = record.key();
        if (key == null) {
            throw new BadRecord("record has no key to fold by");
        }
        JsonNode event = record.value() == null ? null : record.value().tree();
        // Read and check every field first, so a bad event changes nothing.
        List<FoldSpec.Field> fields = spec.fields();
        JsonNode[] values = new JsonNode[fields.size()];
        for (int i = 0; i < values.length; i++) {
            JsonNode value = Json.at(event, pointers.get(i));
            if (value != null) {
                fields.get(i).rule().check(fields.get(i).from(), value);
            }
            values[i] = value;
        }
        long now = context.currentSystemTimeMs();
        long timestamp = record.timestamp();

        OpenFold fold = open.get(key);
        Long arm = null;
        if (fold == null) {
            fold = OpenFold.open(now, timestamp, values.length);
            // A fold that closes on its first event needs no timer.
            boolean closesNow = spec.maxEvents() != null && spec.maxEvents() <= 1;
            if (spec.timed() && !closesNow) {
                fold.timer = deadline(fold).at;
                arm = fold.timer;
            }
        } else {
            fold.touch(now, timestamp);
        }
        for (int i = 0; i < values.length; i++) {
            fields.get(i).rule().merge(fold.acc.get(i), values[i]);
        }

        if (spec.maxEvents() != null && fold.count >= spec.maxEvents()) {
            open.delete(key);
            if (fold.timer != null) {
                timers.delete(timerKey(fold.timer, key));
            }
            emit(key, fold, "max_events", now);
        } else {
            open.put(key, fold);
            if (arm != null) {
                timers.put(timerKey(arm, key), ARMED);
            }
        }
    }

    /** Closes the folds whose deadline has come, moves the others' timers. */
    private void punctuate(long now) {
        // Collected first and handled after the iterator is closed, as the
        // handling writes to the store being iterated. The range's upper
        // bound (inclusive) sorts after every entry due by now.
        List<Bytes> due = new ArrayList<>();
        try (KeyValueIterator<Bytes, byte[]> it = timers.range(null, timerKey(saturatingAdd(now, 1), ""))) {
            while (it.hasNext() && due.size() < TIMERS_PER_PUNCTUATION) {
                Bytes entry = it.next().key;
                if (deadlineOf(entry) > now) {
                    break;
                }
                due.add(entry);
            }
        }
        for (Bytes entry : due) {
            timers.delete(entry);
            long at = deadlineOf(entry);
            String key = keyOf(entry);
            OpenFold fold = open.get(key);
            // Gone (closed by max_events) or re-armed elsewhere: a stale entry.
            if (fold == null || !Objects.equals(fold.timer, at)) {
                continue;
            }
            Deadline next = deadline(fold);
            if (next.at <= now) {
                open.delete(key);
                emit(key, fold, next.closedBy, now);
            } else {
                // Events arrived since the timer was armed: wait for the new
                // deadline instead of closing.
                fold.timer = next.at;
                open.put(key, fold);
                timers.put(timerKey(next.at, key), ARMED);
            }
        }
    }

    private record Deadline(long at, String closedBy) {}

    /** When {@code fold} may close at the earliest, and by which rule. */
    private Deadline deadline(OpenFold fold) {
        Deadline quiet = spec.quietForMs() == null ? null
                : new Deadline(saturatingAdd(fold.touched, spec.quietForMs()), "quiet");
        Deadline wait = spec.maxWaitMs() == null ? null
                : new Deadline(saturatingAdd(fold.opened, spec.maxWaitMs()), "max_wait");
        if (quiet == null) {
            return wait;
        }
        if (wait == null) {
            return quiet;
        }
        return quiet.at <= wait.at ? quiet : wait;
    }

    private void emit(String key, OpenFold fold, String closedBy, long now) {
        ObjectNode value = Json.MAPPER.createObjectNode();
        value.put(spec.keyField(), key);
        List<FoldSpec.Field> fields = spec.fields();
        for (int i = 0; i < fields.size(); i++) {
            ArrayNode values = value.putArray(fields.get(i).name());
            values.addAll(fold.acc.get(i).values());
        }
        value.put("folded_count", fold.count);
        value.put("first_event_at", Json.rfc3339Millis(fold.firstTs));
        value.put("last_event_at", Json.rfc3339Millis(fold.lastTs));
        value.put("closed_by", closedBy);
        context.forward(new Record<>(key, value, now));
    }

    /**
     * The timer index key: the deadline as 8 bytes whose byte order is
     * numeric order, then the group key's UTF-8 bytes.
     */
    static Bytes timerKey(long at, String key) {
        byte[] text = key.getBytes(StandardCharsets.UTF_8);
        return Bytes.wrap(ByteBuffer.allocate(8 + text.length)
                .putLong(at ^ Long.MIN_VALUE)
                .put(text)
                .array());
    }

    static long deadlineOf(Bytes entry) {
        return ByteBuffer.wrap(entry.get()).getLong() ^ Long.MIN_VALUE;
    }

    static String keyOf(Bytes entry) {
        byte[] bytes = entry.get();
        return new String(bytes, 8, bytes.length - 8, StandardCharsets.UTF_8);
    }

    private static long saturatingAdd(long a, long b) {
        long sum = a + b;
        return ((a ^ sum) & (b ^ sum)) < 0 ? (a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE) : sum;
    }
}
