package dev.streamfold.peer.feed;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.RawJson;
import java.time.Duration;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorSupplier;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.WindowStoreIterator;

/**
 * streamfold's {@code dedup} operator: the first record with an id passes
 * unchanged; records with the same id within {@code retention} of it
 * (wall-clock time) are dropped and do not extend the retention; after
 * that the id is forgotten and its next record passes again. A record
 * without an id goes to the dead-letter topic.
 *
 * <p>The ids live in a RocksDB window store (with its changelog), each
 * id at the wall-clock time it was first seen: the usual Kafka Streams
 * deduplication. Ids are forgotten without any scan or timer: the store
 * drops whole time segments once they are older than the retention, and a
 * lookup only considers entries within it.
 */
public final class DedupProcessor implements FixedKeyProcessor<String, RawJson, RawJson> {
    private final DedupSpec spec;
    private final JsonPointer idPointer;
    private FixedKeyProcessorContext<String, RawJson> context;
    private WindowStore<String, Long> seen;

    DedupProcessor(DedupSpec spec) {
        this.spec = spec;
        this.idPointer = JsonPointer.compile(spec.idField());
    }

    /** The id field, retention and store of a dedup node. */
    public record DedupSpec(String node, String idField, long retentionMs) {
        public DedupSpec {
            if (retentionMs < 1) {
                throw new IllegalArgumentException("retention must be at least 1ms");
            }
        }

        String seenStore() {
            return node + "-seen";
        }
    }

    public static FixedKeyProcessorSupplier<String, RawJson, RawJson> supplier(DedupSpec spec) {
        return new FixedKeyProcessorSupplier<>() {
            @Override
            public FixedKeyProcessor<String, RawJson, RawJson> get() {
                return new DedupProcessor(spec);
            }

            @Override
            public Set<StoreBuilder<?>> stores() {
                Duration retention = Duration.ofMillis(spec.retentionMs());
                // Not cached: an id is written once (first wins), so a cache
                // would collapse nothing and only add a merge to every lookup.
                return Set.of(Stores.windowStoreBuilder(
                                Stores.persistentWindowStore(spec.seenStore(), retention, retention, false),
                                Serdes.String(),
                                Serdes.Long())
                        .withCachingDisabled());
            }
        };
    }

    @Override
    public void init(FixedKeyProcessorContext<String, RawJson> context) {
        this.context = context;
        this.seen = context.getStateStore(spec.seenStore());
    }

    @Override
    public void process(FixedKeyRecord<String, RawJson> record) {
        JsonNode idValue = record.value() == null ? null : Json.at(record.value().tree(), idPointer);
        if (idValue == null) {
            throw new BadRecord("id field " + spec.idField() + " is missing");
        }
        String id = Json.idText(idValue);
        long now = context.currentSystemTimeMs();
        // Seen within the retention: first seen after now - retention.
        try (WindowStoreIterator<Long> first = seen.fetch(id, now - spec.retentionMs() + 1, Long.MAX_VALUE)) {
            if (first.hasNext()) {
                return;
            }
        }
        seen.put(id, now, now);
        context.forward(record);
    }
}
