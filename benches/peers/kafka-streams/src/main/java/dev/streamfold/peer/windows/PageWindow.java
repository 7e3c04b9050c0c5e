package dev.streamfold.peer.windows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.TextNode;
import dev.streamfold.peer.fold.MergeRule;
import dev.streamfold.peer.fold.SortedValues;
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
 * One page's window as the aggregation keeps it: the views counted
 * ({@code views: {rule: count}}) and the sorted set of their users
 * ({@code users: {rule: set, from: /user}}). The window's bounds are in
 * the store's key, its latest record time in the store's timestamp.
 */
public final class PageWindow {
    long views;
    final SortedValues users;

    private PageWindow(long views, SortedValues users) {
        this.views = views;
        this.users = users;
    }

    /** The aggregation's initializer. */
    public static PageWindow empty() {
        return new PageWindow(0, SortedValues.empty());
    }

    /** Merges one view, whose {@code /user} is {@code user} (null: it has none). */
    public PageWindow add(JsonNode user) {
        views++;
        MergeRule.SET.merge(users, user);
        return this;
    }

    /**
     * A compact binary form for the window store and its changelog (the
     * record cache keeps values serialized, so a window is written and
     * read once per view):
     *
     * <pre>
     * version 1 (byte), views (long), users (int), then each user: byte 's'
     * and a UTF-8 string, or byte 'j' and any other JSON value as text;
     * strings are an int length and the bytes.
     * </pre>
     */
    public static Serde<PageWindow> serde() {
        return new Serde<>() {
            @Override
            public Serializer<PageWindow> serializer() {
                return (topic, window) -> window == null ? null : write(window);
            }

            @Override
            public Deserializer<PageWindow> deserializer() {
                return (topic, bytes) -> bytes == null ? null : read(ByteBuffer.wrap(bytes));
            }
        };
    }

    private static final byte VERSION = 1;

    static byte[] write(PageWindow window) {
        List<JsonNode> values = window.users.values();
        byte[][] texts = new byte[values.size()][];
        int size = 1 + 8 + 4;
        for (int i = 0; i < texts.length; i++) {
            JsonNode value = values.get(i);
            texts[i] = (value.isTextual() ? value.textValue() : value.toString()).getBytes(StandardCharsets.UTF_8);
            size += 1 + 4 + texts[i].length;
        }
        ByteBuffer out = ByteBuffer.allocate(size);
        out.put(VERSION).putLong(window.views).putInt(texts.length);
        for (int i = 0; i < texts.length; i++) {
            out.put(values.get(i).isTextual() ? (byte) 's' : (byte) 'j').putInt(texts[i].length).put(texts[i]);
        }
        return out.array();
    }

    static PageWindow read(ByteBuffer in) {
        if (in.get() != VERSION) {
            throw new SerializationException("unknown page window format");
        }
        long views = in.getLong();
        int n = in.getInt();
        List<JsonNode> users = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            byte tag = in.get();
            byte[] text = new byte[in.getInt()];
            in.get(text);
            String s = new String(text, StandardCharsets.UTF_8);
            users.add(tag == 's' ? TextNode.valueOf(s) : parse(s));
        }
        return new PageWindow(views, new SortedValues(users));
    }

    private static JsonNode parse(String text) {
        try {
            return Json.MAPPER.readTree(text);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
