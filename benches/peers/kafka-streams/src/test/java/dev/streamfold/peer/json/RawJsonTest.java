package dev.streamfold.peer.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.streamfold.peer.app.BadRecord;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class RawJsonTest {
    private static RawJson raw(String text) {
        return RawJson.serde().deserializer().deserialize("t", text.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void a_top_level_field_is_read_as_the_parsed_tree_would_read_it() {
        String text = "{\"metrics\":{\"account_id\":\"inner\"},\"account_id\":\"a1\",\"n\":[1,{\"x\":2}]}";
        assertEquals("a1", raw(text).field("account_id").textValue());
        assertEquals("[1,{\"x\":2}]", raw(text).field("n").toString());
        assertNull(raw(text).field("missing"));
        assertNull(raw("{\"account_id\":null}").field("account_id"));
        assertEquals("b", raw("{\"account_id\":\"a\",\"account_id\":\"b\"}").field("account_id").textValue());
        assertNull(raw("[1,2]").field("account_id"));
    }

    @Test
    void bytes_that_are_not_json_are_the_record_s_fault() {
        assertThrows(BadRecord.class, () -> raw("{not json").field("account_id"));
        assertThrows(BadRecord.class, () -> raw("{\"account_id\":\"a\"} tail").field("account_id"));
        assertThrows(BadRecord.class, () -> raw("").tree());
        assertThrows(BadRecord.class, () -> raw("{\"a\":").tree());
    }

    @Test
    void the_bytes_pass_through_unchanged() {
        byte[] bytes = "{ \"b\" : 1,\"a\":2 }".getBytes(StandardCharsets.UTF_8);
        RawJson value = RawJson.serde().deserializer().deserialize("t", bytes);
        value.tree();
        assertEquals(bytes, RawJson.serde().serializer().serialize("t", value));
    }
}
