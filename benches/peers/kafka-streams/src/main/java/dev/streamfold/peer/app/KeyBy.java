package dev.streamfold.peer.app;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.RawJson;
import org.apache.kafka.streams.kstream.KeyValueMapper;

/**
 * streamfold's {@code key_by}: the record's new key is the value at a JSON
 * pointer, as text (strings as themselves, other values as compact JSON).
 * A record without it is the record's fault: it goes to the dead-letter
 * topic.
 */
public final class KeyBy implements KeyValueMapper<String, RawJson, String> {
    private final JsonPointer pointer;
    private final String text;
    /** The field name when the pointer names a top-level field, else null. */
    private final String topLevel;

    public KeyBy(String pointer) {
        this.pointer = JsonPointer.compile(pointer);
        this.text = pointer;
        this.topLevel = this.pointer.tail() != null && this.pointer.tail().matches()
                ? this.pointer.getMatchingProperty()
                : null;
    }

    /** The output field that carries the key: the pointer's last segment. */
    public String fieldName() {
        return pointer.last().getMatchingProperty();
    }

    @Override
    public String apply(String key, RawJson value) {
        JsonNode found = value == null ? null
                : topLevel != null ? value.field(topLevel)
                : Json.at(value.tree(), pointer);
        if (found == null) {
            throw new BadRecord("key field " + text + " is missing or null");
        }
        return Json.idText(found);
    }
}
