package dev.streamfold.peer.json;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectReader;
import dev.streamfold.peer.app.BadRecord;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;

/**
 * A record value as the bytes it was read as, parsed on first use. Records
 * that pass through a step unchanged (re-keyed into a repartition topic,
 * deduplicated, routed) are written back as those bytes, not serialized
 * again. Bytes that are not JSON are the record's fault: {@link #tree()}
 * throws {@link BadRecord}, which sends the record to the dead-letter
 * topic.
 */
public final class RawJson {
    /** Reads one value in the middle of a stream (more follows it). */
    private static final ObjectReader VALUE_IN_STREAM =
            Json.MAPPER.readerFor(JsonNode.class).without(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

    private final byte[] bytes;
    private JsonNode tree;

    private RawJson(byte[] bytes) {
        this.bytes = bytes;
    }

    /** The value as JSON, parsed once. */
    public JsonNode tree() {
        if (tree == null) {
            try {
                tree = Json.MAPPER.readTree(bytes);
                if (tree.isMissingNode()) {
                    throw new BadRecord("value is not valid JSON: it is empty");
                }
            } catch (JsonProcessingException e) {
                throw new BadRecord("value is not valid JSON: " + e.getOriginalMessage());
            } catch (IOException e) {
                throw new BadRecord("value is not valid JSON: " + e.getMessage());
            }
        }
        return tree;
    }

    /**
     * The value of the top-level field {@code name} (null when absent or
     * JSON null), read without building the whole tree: a step that only
     * re-keys a record reads one field of it. The rest of the object is
     * skipped, but still checked to be JSON; a repeated name counts its
     * last value, as the parsed tree does.
     */
    public JsonNode field(String name) {
        return fields(name)[0];
    }

    /**
     * The values of the top-level fields {@code names}, in that order
     * (null when absent or JSON null), read in one pass as
     * {@link #field} reads one.
     */
    public JsonNode[] fields(String... names) {
        JsonNode[] found = new JsonNode[names.length];
        if (tree != null) {
            for (int i = 0; i < names.length; i++) {
                found[i] = nonNull(tree.get(names[i]));
            }
            return found;
        }
        try (JsonParser parser = Json.MAPPER.createParser(bytes)) {
            if (parser.nextToken() != JsonToken.START_OBJECT) {
                for (int i = 0; i < names.length; i++) {
                    found[i] = nonNull(tree().get(names[i]));
                }
                return found;
            }
            for (JsonToken token = parser.nextToken(); token != JsonToken.END_OBJECT; token = parser.nextToken()) {
                String name = parser.currentName();
                parser.nextToken();
                int wanted = -1;
                for (int i = 0; i < names.length; i++) {
                    if (names[i].equals(name)) {
                        wanted = i;
                        break;
                    }
                }
                if (wanted >= 0) {
                    found[wanted] = VALUE_IN_STREAM.readValue(parser);
                } else {
                    parser.skipChildren();
                }
            }
            if (parser.nextToken() != null) {
                throw new BadRecord("value is not valid JSON: text after the value");
            }
        } catch (JsonProcessingException e) {
            throw new BadRecord("value is not valid JSON: " + e.getOriginalMessage());
        } catch (IOException e) {
            throw new BadRecord("value is not valid JSON: " + e.getMessage());
        }
        for (int i = 0; i < found.length; i++) {
            found[i] = nonNull(found[i]);
        }
        return found;
    }

    private static JsonNode nonNull(JsonNode value) {
        return value == null || value.isNull() ? null : value;
    }

    @Override
    public String toString() {
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** Bytes in, bytes out; a null value (a tombstone) stays null. */
    public static Serde<RawJson> serde() {
        return new Serde<>() {
            @Override
            public Serializer<RawJson> serializer() {
                return (topic, value) -> value == null ? null : value.bytes;
            }

            @Override
            public Deserializer<RawJson> deserializer() {
                return (topic, bytes) -> bytes == null ? null : new RawJson(bytes);
            }
        };
    }
}
