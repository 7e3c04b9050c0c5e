package dev.streamfold.peer.feed;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.JsonSerde;
import dev.streamfold.peer.json.RawJson;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * streamfold's {@code projection} operator for the question read model:
 * each question's events are kept in order (by {@code /sequence}, ties by
 * event id) and folded by {@link QuestionRules} into the question; after
 * every applied event the read model is emitted: the question's fields,
 * {@code question_id} and {@code version}, the number of events applied.
 *
 * <ul>
 *   <li>an event whose id the question already applied is ignored;
 *   <li>an event older than the question's newest is put in its place and
 *       the question re-folded from the last snapshot before it, so the
 *       read model is the same whatever order the events arrived in;
 *   <li>{@code version} grows by one per applied event.
 * </ul>
 *
 * <p>State, as streamfold keeps it: {@code -entities} (the folded question,
 * its version and the position of its newest event; cached),
 * {@code -events} (the event log, keyed by question, order and id),
 * {@code -ids} (applied event ids) and {@code -snapshots} (the question
 * every {@code snapshotEvery} events). The last three are written once per
 * event and read back only for a duplicate or a late event, so they are not
 * cached.
 */
public final class ProjectionProcessor implements Processor<String, RawJson, String, JsonNode> {
    private final ProjectionSpec spec;
    private final JsonPointer eventId;
    private final JsonPointer eventName;
    private ProcessorContext<String, JsonNode> context;
    private KeyValueStore<String, Entity> entities;
    private KeyValueStore<Bytes, LoggedEvent> events;
    private KeyValueStore<Bytes, Long> ids;
    private KeyValueStore<Bytes, Snapshot> snapshots;

    ProjectionProcessor(ProjectionSpec spec) {
        this.spec = spec;
        this.eventId = JsonPointer.compile(spec.eventId());
        this.eventName = JsonPointer.compile(spec.eventName());
    }

    /**
     * A projection node: its name, the pointers to an event's id, name and
     * order value, the output fields of the entity id and version, and how
     * often a snapshot is kept.
     */
    public record ProjectionSpec(String node, String eventId, String eventName, String orderBy,
            String keyField, String versionField, long snapshotEvery) {}

    /** Where an event sits in its entity's history. */
    record Position(long order, String id) implements Comparable<Position> {
        @Override
        public int compareTo(Position other) {
            int byOrder = Long.compare(order, other.order);
            return byOrder != 0 ? byOrder : Json.compareText(id, other.id);
        }

        byte[] key(byte[] prefix) {
            return Order.positionKey(prefix, order, id);
        }
    }

    /** One entity as folded so far (the entity is null once deleted). */
    record Entity(JsonNode entity, long version, Position last) {}

    /** An event in an entity's log. */
    record LoggedEvent(String name, long timestamp, JsonNode event) {}

    /** The entity after the events up to a position. */
    record Snapshot(JsonNode entity, long version) {}

    public static ProcessorSupplier<String, RawJson, String, JsonNode> supplier(ProjectionSpec spec) {
        return new ProcessorSupplier<>() {
            @Override
            public Processor<String, RawJson, String, JsonNode> get() {
                return new ProjectionProcessor(spec);
            }

            @Override
            public Set<StoreBuilder<?>> stores() {
                return Set.of(
                        Stores.keyValueStoreBuilder(
                                        Stores.persistentKeyValueStore(spec.node() + "-entities"),
                                        Serdes.String(),
                                        JsonSerde.of(Entity.class))
                                .withCachingEnabled(),
                        Stores.keyValueStoreBuilder(
                                        Stores.persistentKeyValueStore(spec.node() + "-events"),
                                        Serdes.Bytes(),
                                        JsonSerde.of(LoggedEvent.class))
                                .withCachingDisabled(),
                        Stores.keyValueStoreBuilder(
                                        Stores.persistentKeyValueStore(spec.node() + "-ids"),
                                        Serdes.Bytes(),
                                        Serdes.Long())
                                .withCachingDisabled(),
                        Stores.keyValueStoreBuilder(
                                        Stores.persistentKeyValueStore(spec.node() + "-snapshots"),
                                        Serdes.Bytes(),
                                        JsonSerde.of(Snapshot.class))
                                .withCachingDisabled());
            }
        };
    }

    @Override
    public void init(ProcessorContext<String, JsonNode> context) {
        this.context = context;
        this.entities = context.getStateStore(spec.node() + "-entities");
        this.events = context.getStateStore(spec.node() + "-events");
        this.ids = context.getStateStore(spec.node() + "-ids");
        this.snapshots = context.getStateStore(spec.node() + "-snapshots");
    }

    @Override
    public void process(Record<String, RawJson> record) {
        String key = record.key();
        if (key == null) {
            throw new BadRecord("event has no entity id");
        }
        JsonNode value = record.value() == null ? null : record.value().tree();
        JsonNode idValue = Json.at(value, eventId);
        if (idValue == null) {
            throw new BadRecord("event id " + spec.eventId() + " is missing");
        }
        String id = Json.idText(idValue);
        JsonNode nameValue = Json.at(value, eventName);
        if (nameValue == null) {
            throw new BadRecord("event name " + spec.eventName() + " is missing");
        }
        if (!nameValue.isTextual()) {
            throw new BadRecord("event name " + spec.eventName() + " must be a string, found "
                    + Json.typeName(nameValue));
        }
        String name = nameValue.textValue();
        long order = Order.read(value, spec.orderBy());
        byte[] prefix = Order.entityPrefix(key);
        Bytes idKey = Bytes.wrap(Order.idKey(prefix, id));
        if (ids.get(idKey) != null) {
            return; // Applied already.
        }
        if (!QuestionRules.NAMES.contains(name)) {
            return; // No rule: dropped, as `on_unknown_event: drop`.
        }
        Position position = new Position(order, id);
        LoggedEvent event = new LoggedEvent(name, record.timestamp(), value);
        Entity current = entities.get(key);
        Entity next;
        if (current != null && position.compareTo(current.last()) < 0) {
            next = refold(prefix, position, event, current.last());
        } else {
            JsonNode before = current == null ? null : current.entity();
            JsonNode entity = QuestionRules.apply(name, before, event.event());
            long version = (current == null ? 0 : current.version()) + 1;
            if (snapshotDue(version)) {
                snapshots.put(Bytes.wrap(position.key(prefix)), new Snapshot(entity, version));
            }
            next = new Entity(entity, version, position);
        }
        ids.put(idKey, order);
        events.put(Bytes.wrap(position.key(prefix)), event);
        entities.put(key, next);
        context.forward(new Record<>(key, readModel(key, next), record.timestamp()));
    }

    /**
     * Re-folds the entity with {@code event} at {@code position}, before
     * its newest event ({@code last}, which stays the newest): from the
     * last snapshot before the late event, through every later event with
     * the late one in its place. The snapshots after that base lack the
     * late event: they are replaced.
     */
    private Entity refold(byte[] prefix, Position position, LoggedEvent event, Position last) {
        byte[] eventKey = position.key(prefix);
        Bytes base = null;
        JsonNode entity = null;
        long version = 0;
        try (KeyValueIterator<Bytes, Snapshot> it = snapshots.reverseRange(Bytes.wrap(prefix), Bytes.wrap(eventKey))) {
            while (it.hasNext()) {
                KeyValue<Bytes, Snapshot> found = it.next();
                if (Arrays.compareUnsigned(found.key.get(), eventKey) < 0) {
                    base = found.key;
                    entity = found.value.entity();
                    version = found.value.version();
                    break;
                }
            }
        }
        Bytes from = base != null ? base : Bytes.wrap(prefix);
        List<KeyValue<Bytes, LoggedEvent>> replay = new ArrayList<>();
        try (KeyValueIterator<Bytes, LoggedEvent> it = events.range(from, null)) {
            while (it.hasNext()) {
                KeyValue<Bytes, LoggedEvent> logged = it.next();
                if (!startsWith(logged.key.get(), prefix)) {
                    break;
                }
                if (base != null && logged.key.equals(base)) {
                    continue;
                }
                replay.add(logged);
            }
        }
        List<Bytes> stale = new ArrayList<>();
        try (KeyValueIterator<Bytes, Snapshot> it = snapshots.range(from, null)) {
            while (it.hasNext()) {
                Bytes snapshot = it.next().key;
                if (!startsWith(snapshot.get(), prefix)) {
                    break;
                }
                if (base == null || !snapshot.equals(base)) {
                    stale.add(snapshot);
                }
            }
        }
        int at = 0;
        while (at < replay.size() && Arrays.compareUnsigned(replay.get(at).key.get(), eventKey) < 0) {
            at++;
        }
        replay.add(at, KeyValue.pair(Bytes.wrap(eventKey), event));
        List<KeyValue<Bytes, Snapshot>> taken = new ArrayList<>();
        for (KeyValue<Bytes, LoggedEvent> logged : replay) {
            // Events whose rule no longer exists are skipped.
            if (!QuestionRules.NAMES.contains(logged.value.name())) {
                continue;
            }
            entity = QuestionRules.apply(logged.value.name(), entity, logged.value.event());
            version++;
            if (snapshotDue(version)) {
                taken.add(KeyValue.pair(logged.key, new Snapshot(entity, version)));
            }
        }
        for (Bytes snapshot : stale) {
            snapshots.delete(snapshot);
        }
        for (KeyValue<Bytes, Snapshot> snapshot : taken) {
            snapshots.put(snapshot.key, snapshot.value);
        }
        return new Entity(entity, version, last);
    }

    private boolean snapshotDue(long version) {
        return spec.snapshotEvery() > 0 && version % spec.snapshotEvery() == 0;
    }

    /** The entity's fields, then its id and version. */
    private ObjectNode readModel(String key, Entity entity) {
        ObjectNode out = entity.entity() instanceof ObjectNode fields
                ? fields.deepCopy()
                : Json.MAPPER.createObjectNode();
        out.put(spec.keyField(), key);
        out.put(spec.versionField(), entity.version());
        return out;
    }

    private static boolean startsWith(byte[] bytes, byte[] prefix) {
        return bytes.length >= prefix.length
                && Arrays.equals(bytes, 0, prefix.length, prefix, 0, prefix.length);
    }
}
