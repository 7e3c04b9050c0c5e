package dev.streamfold.peer.fold;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.TextNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import java.util.Iterator;

/**
 * How a folded field merges the events' values, as streamfold's fold
 * operator does. The social-metrics topology uses the two rules here; both
 * keep a sorted set of JSON values ({@link SortedValues}).
 */
public enum MergeRule {
    /** Sorted union of the values; an array value contributes its items. */
    SET("set"),
    /** Sorted union of an object value's field names. */
    KEY_UNION("key_union");

    private final String name;

    MergeRule(String name) {
        this.name = name;
    }

    /**
     * Refuses a value this rule cannot merge, before anything changes.
     * {@code value} is present and not null.
     */
    void check(String pointer, JsonNode value) {
        if (this == KEY_UNION && !value.isObject()) {
            throw new BadRecord("field " + pointer + " must be an object for rule `" + name
                    + "`, found " + Json.typeName(value));
        }
    }

    /** Merges one event's value (null: the event lacks the field). */
    public void merge(SortedValues acc, JsonNode value) {
        if (value == null) {
            return;
        }
        switch (this) {
            case SET -> {
                if (value.isArray()) {
                    for (JsonNode item : value) {
                        acc.insert(item);
                    }
                } else {
                    acc.insert(value);
                }
            }
            case KEY_UNION -> {
                for (Iterator<String> names = value.fieldNames(); names.hasNext(); ) {
                    acc.insert(TextNode.valueOf(names.next()));
                }
            }
        }
    }
}
