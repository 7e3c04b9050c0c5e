package dev.streamfold.peer.json;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.JsonNodeType;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * JSON as streamfold reads and writes it: one mapper, field lookup by JSON
 * pointer, the canonical order that sets and tie-breaks use, ids and keys
 * as text, and RFC 3339 times in milliseconds.
 */
public final class Json {
    /**
     * Compact output in insertion order (streamfold's serde_json keeps
     * insertion order too); a value followed by more text is refused, as
     * serde_json refuses it.
     */
    public static final ObjectMapper MAPPER = JsonMapper.builder()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .build();

    /** The last millisecond RFC 3339 can write: 9999-12-31T23:59:59.999Z. */
    private static final long LAST_RFC3339_MILLIS = 253_402_300_799_999L;

    private static final DateTimeFormatter RFC3339_MILLIS =
            DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

    private Json() {}

    /** The value at {@code pointer}, or null when it is missing or JSON null. */
    public static JsonNode at(JsonNode value, JsonPointer pointer) {
        if (value == null) {
            return null;
        }
        JsonNode found = value.at(pointer);
        return found.isMissingNode() || found.isNull() ? null : found;
    }

    /**
     * An id or key read from a value as the text stores and keys use:
     * strings as their text, anything else as compact JSON (so {@code 7}
     * and {@code "7"} are the same id).
     */
    public static String idText(JsonNode value) {
        return value.isTextual() ? value.textValue() : value.toString();
    }

    /**
     * {@code 2025-01-01T00:00:00.000Z} for epoch milliseconds, clamped to
     * what RFC 3339 can write.
     */
    public static String rfc3339Millis(long epochMillis) {
        long clamped = Math.max(0, Math.min(epochMillis, LAST_RFC3339_MILLIS));
        return RFC3339_MILLIS.format(Instant.ofEpochMilli(clamped));
    }

    /** "a string", "an object", ... for messages. */
    public static String typeName(JsonNode value) {
        return switch (value.getNodeType()) {
            case NULL, MISSING -> "null";
            case BOOLEAN -> "a boolean";
            case NUMBER -> "a number";
            case STRING, BINARY, POJO -> "a string";
            case ARRAY -> "an array";
            case OBJECT -> "an object";
        };
    }

    /** Strings in the order of their UTF-8 bytes (Unicode code points). */
    public static int compareText(String a, String b) {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
            int x = a.codePointAt(i);
            int y = b.codePointAt(j);
            if (x != y) {
                return Integer.compare(x, y);
            }
            i += Character.charCount(x);
            j += Character.charCount(y);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }

    /**
     * A total order on JSON values: null &lt; booleans &lt; numbers &lt;
     * strings &lt; arrays &lt; objects; numbers numerically, strings by
     * code point, arrays element-wise, objects by their sorted fields.
     * Sets and tie-breaks built on it agree whatever order values arrive
     * in.
     */
    public static int compare(JsonNode a, JsonNode b) {
        int ra = rank(a);
        int rb = rank(b);
        if (ra != rb) {
            return Integer.compare(ra, rb);
        }
        switch (a.getNodeType()) {
            case BOOLEAN:
                return Boolean.compare(a.booleanValue(), b.booleanValue());
            case NUMBER:
                return compareNumbers(a, b);
            case STRING:
                return compareText(a.textValue(), b.textValue());
            case ARRAY: {
                int n = Math.min(a.size(), b.size());
                for (int i = 0; i < n; i++) {
                    int order = compare(a.get(i), b.get(i));
                    if (order != 0) {
                        return order;
                    }
                }
                return Integer.compare(a.size(), b.size());
            }
            case OBJECT: {
                List<Map.Entry<String, JsonNode>> xs = sortedFields(a);
                List<Map.Entry<String, JsonNode>> ys = sortedFields(b);
                int n = Math.min(xs.size(), ys.size());
                for (int i = 0; i < n; i++) {
                    int order = compareText(xs.get(i).getKey(), ys.get(i).getKey());
                    if (order == 0) {
                        order = compare(xs.get(i).getValue(), ys.get(i).getValue());
                    }
                    if (order != 0) {
                        return order;
                    }
                }
                return Integer.compare(xs.size(), ys.size());
            }
            default:
                return 0;
        }
    }

    private static int compareNumbers(JsonNode a, JsonNode b) {
        boolean longs = a.isIntegralNumber() && b.isIntegralNumber();
        if (longs && a.canConvertToLong() && b.canConvertToLong()) {
            return Long.compare(a.longValue(), b.longValue());
        }
        if (longs) {
            return a.bigIntegerValue().compareTo(b.bigIntegerValue());
        }
        return Double.compare(a.doubleValue(), b.doubleValue());
    }

    private static List<Map.Entry<String, JsonNode>> sortedFields(JsonNode object) {
        List<Map.Entry<String, JsonNode>> fields = new ArrayList<>(object.size());
        for (Iterator<Map.Entry<String, JsonNode>> it = object.fields(); it.hasNext(); ) {
            fields.add(it.next());
        }
        fields.sort((x, y) -> compareText(x.getKey(), y.getKey()));
        return fields;
    }

    private static int rank(JsonNode value) {
        JsonNodeType type = value.getNodeType();
        return switch (type) {
            case NULL, MISSING -> 0;
            case BOOLEAN -> 1;
            case NUMBER -> 2;
            case STRING, BINARY, POJO -> 3;
            case ARRAY -> 4;
            case OBJECT -> 5;
        };
    }
}
