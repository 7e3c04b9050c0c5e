package dev.streamfold.peer.windows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.json.Json;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.ContextualProcessor;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;

/**
 * A closed window as streamfold's {@code window} operator emits it: keyed
 * {@code <key>@<window_start>/<window_end>} (RFC 3339, milliseconds), so
 * the default partitioner spreads one key's windows over the partitions
 * as streamfold's sinks do; the value's fields in streamfold's order (its
 * JSON objects keep their keys sorted): the key field, {@code users},
 * {@code views}, {@code window_end} (exclusive), {@code window_start}. The
 * record time is the window's latest view time, as the aggregation
 * forwards it (and as streamfold stamps it).
 */
public final class WindowOutput extends ContextualProcessor<Windowed<String>, PageWindow, String, JsonNode> {
    private final String keyField;

    private WindowOutput(String keyField) {
        this.keyField = keyField;
    }

    public static ProcessorSupplier<Windowed<String>, PageWindow, String, JsonNode> supplier(String keyField) {
        return () -> new WindowOutput(keyField);
    }

    @Override
    public void process(Record<Windowed<String>, PageWindow> record) {
        String start = Json.rfc3339Millis(record.key().window().start());
        String end = Json.rfc3339Millis(record.key().window().end());
        PageWindow window = record.value();
        ObjectNode value = Json.MAPPER.createObjectNode();
        // streamfold's fields are sorted by name; "page" sorts first.
        value.put(keyField, record.key().key());
        value.putArray("users").addAll(window.users.values());
        value.put("views", window.views);
        value.put("window_end", end);
        value.put("window_start", start);
        context().forward(record.withKey(record.key().key() + "@" + start + "/" + end).withValue((JsonNode) value));
    }
}
