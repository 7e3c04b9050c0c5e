package dev.streamfold.peer.fold;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.json.Json;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * A set of JSON values kept sorted in {@link Json#compare} order, without
 * repeats: the accumulator of {@link MergeRule#SET} and
 * {@link MergeRule#KEY_UNION}.
 */
public final class SortedValues {
    private final List<JsonNode> values;

    /** Takes {@code values}, already sorted and distinct. */
    public SortedValues(List<JsonNode> values) {
        this.values = values instanceof ArrayList<JsonNode> list ? list : new ArrayList<>(values);
    }

    public static SortedValues empty() {
        return new SortedValues(new ArrayList<>());
    }

    /**
     * Adds {@code value} unless present. A value after the last one is
     * appended after one comparison: ascending ids (sequence numbers,
     * time-ordered ids) are common, and a set of them is built in order.
     */
    public void insert(JsonNode value) {
        int n = values.size();
        if (n == 0) {
            values.add(value);
            return;
        }
        int last = Json.compare(values.get(n - 1), value);
        if (last < 0) {
            values.add(value);
            return;
        }
        if (last == 0) {
            return;
        }
        int at = Collections.binarySearch(values, value, Json::compare);
        if (at < 0) {
            values.add(-at - 1, value);
        }
    }

    public List<JsonNode> values() {
        return Collections.unmodifiableList(values);
    }
}
