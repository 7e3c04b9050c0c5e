package dev.streamfold.peer.json;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.ObjectWriter;
import java.io.IOException;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;

/**
 * A serde of JSON values: records as {@link JsonNode} trees, and the state
 * stores' values as the classes that hold them. A null value (a tombstone)
 * stays null; bytes that are not JSON fail to deserialize, which sends
 * the record to the deserialization exception handler (the dead-letter
 * topic).
 */
public final class JsonSerde<T> implements Serde<T> {
    private final ObjectWriter writer;
    private final ObjectReader reader;

    private JsonSerde(Class<T> type) {
        this.writer = Json.MAPPER.writerFor(type);
        this.reader = Json.MAPPER.readerFor(type);
    }

    /** Record values: any JSON. */
    public static JsonSerde<JsonNode> tree() {
        return new JsonSerde<>(JsonNode.class);
    }

    /** State values of {@code type}, as JSON (readable in the changelog). */
    public static <T> JsonSerde<T> of(Class<T> type) {
        return new JsonSerde<>(type);
    }

    @Override
    public Serializer<T> serializer() {
        return (topic, value) -> {
            if (value == null) {
                return null;
            }
            try {
                return writer.writeValueAsBytes(value);
            } catch (IOException e) {
                throw new SerializationException("cannot write JSON: " + e.getMessage(), e);
            }
        };
    }

    @Override
    public Deserializer<T> deserializer() {
        return (topic, bytes) -> {
            if (bytes == null) {
                return null;
            }
            try {
                return reader.readValue(bytes);
            } catch (IOException e) {
                throw new SerializationException("value is not valid JSON: " + (e instanceof com.fasterxml.jackson.core.JsonProcessingException j ? j.getOriginalMessage() : e.getMessage()), e);
            }
        };
    }
}
