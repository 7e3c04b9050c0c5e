package dev.streamfold.peer.feed;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.JsonSerde;
import dev.streamfold.peer.json.RawJson;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * streamfold's {@code ordered} operator for the thanks totals: per key the
 * update with the highest order value ({@code /sequence}, ties broken by
 * {@code /event_id} in JSON order) is kept and emitted when it changes;
 * an update that is not newer is stale and dropped. Outputs carry the
 * key's Lamport clock in {@code lamport}: {@code max(local, seen) + 1},
 * where {@code seen} is the clock the update carries in the same field (0
 * when absent).
 *
 * <p>State: {@code -latest}, per key the newest update, its order value
 * and the clock (cached, with its changelog).
 */
public final class OrderedProcessor implements Processor<String, RawJson, String, JsonNode> {
    private final OrderedSpec spec;
    private final JsonPointer tieBreak;
    private ProcessorContext<String, JsonNode> context;
    private KeyValueStore<String, Latest> latest;

    OrderedProcessor(OrderedSpec spec) {
        this.spec = spec;
        this.tieBreak = JsonPointer.compile(spec.tieBreak());
    }

    /** An ordered node: its name, order and tie-break pointers, and clock field. */
    public record OrderedSpec(String node, String orderBy, String tieBreak, String lamportField) {
        String latestStore() {
            return node + "-latest";
        }
    }

    /** Which update wrote the state: its order value and tie-break. */
    record Version(long order, JsonNode tie) {
        int compareTo(Version other) {
            int byOrder = Long.compare(order, other.order);
            return byOrder != 0 ? byOrder : Json.compare(tieOrNull(), other.tieOrNull());
        }

        private JsonNode tieOrNull() {
            return tie == null ? NullNode.getInstance() : tie;
        }
    }

    /** The newest state of one key, and the key's Lamport clock. */
    record Latest(Version version, JsonNode value, long clock) {}

    public static ProcessorSupplier<String, RawJson, String, JsonNode> supplier(OrderedSpec spec) {
        return new ProcessorSupplier<>() {
            @Override
            public Processor<String, RawJson, String, JsonNode> get() {
                return new OrderedProcessor(spec);
            }

            @Override
            public Set<StoreBuilder<?>> stores() {
                return Set.of(Stores.keyValueStoreBuilder(
                                Stores.persistentKeyValueStore(spec.latestStore()),
                                Serdes.String(),
                                JsonSerde.of(Latest.class))
                        .withCachingEnabled());
            }
        };
    }

    @Override
    public void init(ProcessorContext<String, JsonNode> context) {
        this.context = context;
        this.latest = context.getStateStore(spec.latestStore());
    }

    @Override
    public void process(Record<String, RawJson> record) {
        String key = record.key();
        if (key == null) {
            throw new BadRecord("record has no key to order by");
        }
        JsonNode value = record.value() == null ? null : record.value().tree();
        Version version = new Version(Order.read(value, spec.orderBy()), Json.at(value, tieBreak));
        long seen = seenClock(value);
        Latest current = latest.get(key);
        if (current != null && version.compareTo(current.version()) <= 0) {
            return; // Stale: not newer than what the key holds.
        }
        if (!(value instanceof ObjectNode update)) {
            throw new BadRecord("cannot stamp the Lamport clock into field `" + spec.lamportField() + "` of "
                    + (value == null ? "null" : Json.typeName(value)) + ": updates must be objects");
        }
        ObjectNode state = update.deepCopy();
        state.remove(spec.lamportField());
        long clock = Math.max(current == null ? 0 : current.clock(), seen) + 1;
        ObjectNode out = state.deepCopy();
        out.put(spec.lamportField(), clock);
        latest.put(key, new Latest(version, state, clock));
        context.forward(record.withValue((JsonNode) out));
    }

    /** The clock the update carries, 0 when it carries none. */
    private long seenClock(JsonNode value) {
        JsonNode clock = value == null ? null : value.get(spec.lamportField());
        if (clock == null || clock.isNull()) {
            return 0;
        }
        if (clock.isIntegralNumber() && clock.canConvertToLong() && clock.longValue() >= 0) {
            return clock.longValue();
        }
        throw new BadRecord("Lamport clock in field `" + spec.lamportField()
                + "` must be a non-negative integer, found " + Order.describe(clock));
    }
}
