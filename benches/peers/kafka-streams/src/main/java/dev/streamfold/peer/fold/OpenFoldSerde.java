package dev.streamfold.peer.fold;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.TextNode;
import dev.streamfold.peer.json.Json;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;

/**
 * An open fold in a compact binary form, for its store and changelog. The
 * record cache keeps values serialized, so a key's fold is written and
 * read back once per event: a format that costs little to write and read
 * matters more here than anywhere else in the peer.
 *
 * <pre>
 * version 1 (byte), opened, touched, first_ts, last_ts, count (longs),
 * timer (byte 0, or byte 1 and a long), fields (int), then per field
 * its values (int) and each value: byte 's' and a UTF-8 string, or
 * byte 'j' and any other JSON value as text; strings are an int length
 * and the bytes.
 * </pre>
 */
final class OpenFoldSerde implements Serde<OpenFold> {
    private static final byte VERSION = 1;

    @Override
    public Serializer<OpenFold> serializer() {
        return (topic, fold) -> fold == null ? null : write(fold);
    }

    @Override
    public Deserializer<OpenFold> deserializer() {
        return (topic, bytes) -> bytes == null ? null : read(ByteBuffer.wrap(bytes));
    }

    static byte[] write(OpenFold fold) {
        List<byte[]> texts = new ArrayList<>();
        int size = 1 + 5 * 8 + 1 + 8 + 4;
        for (SortedValues acc : fold.acc) {
            size += 4;
            for (JsonNode value : acc.values()) {
                byte[] text = (value.isTextual() ? value.textValue() : value.toString())
                        .getBytes(StandardCharsets.UTF_8);
                texts.add(text);
                size += 1 + 4 + text.length;
            }
        }
        ByteBuffer out = ByteBuffer.allocate(size);
        out.put(VERSION)
                .putLong(fold.opened)
                .putLong(fold.touched)
                .putLong(fold.firstTs)
                .putLong(fold.lastTs)
                .putLong(fold.count);
        if (fold.timer == null) {
            out.put((byte) 0);
        } else {
            out.put((byte) 1).putLong(fold.timer);
        }
        out.putInt(fold.acc.size());
        int next = 0;
        for (SortedValues acc : fold.acc) {
            out.putInt(acc.values().size());
            for (JsonNode value : acc.values()) {
                byte[] text = texts.get(next++);
                out.put(value.isTextual() ? (byte) 's' : (byte) 'j').putInt(text.length).put(text);
            }
        }
        return out.position() == size ? out.array() : java.util.Arrays.copyOf(out.array(), out.position());
    }

    static OpenFold read(ByteBuffer in) {
        if (in.get() != VERSION) {
            throw new SerializationException("unknown open fold format");
        }
        long opened = in.getLong();
        long touched = in.getLong();
        long firstTs = in.getLong();
        long lastTs = in.getLong();
        long count = in.getLong();
        Long timer = in.get() == 0 ? null : in.getLong();
        int fields = in.getInt();
        List<SortedValues> acc = new ArrayList<>(fields);
        for (int f = 0; f < fields; f++) {
            int n = in.getInt();
            List<JsonNode> values = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                byte tag = in.get();
                byte[] text = new byte[in.getInt()];
                in.get(text);
                String s = new String(text, StandardCharsets.UTF_8);
                values.add(tag == 's' ? TextNode.valueOf(s) : parse(s));
            }
            acc.add(new SortedValues(values));
        }
        return OpenFold.restore(opened, touched, firstTs, lastTs, count, timer, acc);
    }

    private static JsonNode parse(String text) {
        try {
            return Json.MAPPER.readTree(text);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
