package dev.streamfold.peer.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.app.Durations;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class JsonTest {
    private static JsonNode json(String text) throws Exception {
        return Json.MAPPER.readTree(text);
    }

    @Test
    void values_sort_as_streamfold_s_canonical_order() throws Exception {
        List<JsonNode> values = new ArrayList<>();
        for (String text : List.of("{\"a\":1}", "[1,2]", "[1]", "\"b\"", "\"a\"", "\"\uD83D\uDE00\"", "\"\uFFFD\"",
                "2.5", "2", "-3", "true", "false", "null")) {
            values.add(json(text));
        }
        values.sort(Json::compare);
        List<String> sorted = values.stream().map(JsonNode::toString).toList();
        // Strings by code point: U+FFFD before U+1F600, though UTF-16 sorts
        // the surrogate pair first.
        assertEquals(List.of("null", "false", "true", "-3", "2", "2.5", "\"a\"", "\"b\"", "\"\uFFFD\"",
                "\"\uD83D\uDE00\"", "[1]", "[1,2]", "{\"a\":1}"), sorted);
        assertEquals(0, Json.compare(json("{\"a\":1,\"b\":2}"), json("{\"b\":2,\"a\":1}")));
        assertEquals(0, Json.compare(json("1"), json("1.0")));
    }

    @Test
    void times_are_rfc_3339_in_milliseconds_and_ids_are_text() throws Exception {
        assertEquals("2025-01-01T00:00:00.000Z", Json.rfc3339Millis(1_735_689_600_000L));
        assertEquals("1970-01-01T00:00:00.000Z", Json.rfc3339Millis(-5));
        assertEquals("7", Json.idText(json("7")));
        assertEquals("7", Json.idText(json("\"7\"")));
        assertEquals("{\"a\":1}", Json.idText(json("{\"a\": 1}")));
    }

    @Test
    void trailing_text_is_not_json() {
        assertThrows(Exception.class, () -> JsonSerde.tree().deserializer().deserialize("t", "{} x".getBytes()));
    }

    @Test
    void durations_read_as_in_topologies() {
        assertEquals(250, Durations.parse("250ms"));
        assertEquals(90_000, Durations.parse("1m30s"));
        assertEquals(6 * 3_600_000, Durations.parse("6h"));
        assertEquals(null, Durations.parseOptional("off"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Durations.parse("5"));
        assertTrue(e.getMessage().contains("like \"5s\""));
    }
}
