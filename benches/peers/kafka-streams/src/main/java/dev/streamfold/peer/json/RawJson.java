package dev.streamfold.peer.json;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
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
