package dev.streamfold.peer.feed;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;

/** Order values and store key encodings the keyed feed operators share. */
final class Order {
    private Order() {}

    /**
     * The order value at {@code pointer}: an integer (a sequence, a
     * version, epoch milliseconds) or an RFC 3339 time (as epoch
     * milliseconds). A float with a fraction is refused: two producers
     * rounding differently would disagree on which event is newer.
     */
    static long read(JsonNode value, String pointer) {
        JsonNode found = Json.at(value, JsonPointer.compile(pointer));
        if (found == null) {
            throw new BadRecord("order field " + pointer + " is missing");
        }
        if (found.isIntegralNumber() && found.canConvertToLong()) {
            return found.longValue();
        }
        if (found.isFloatingPointNumber()) {
            double d = found.doubleValue();
            if (d == Math.rint(d) && d >= Long.MIN_VALUE && d <= Long.MAX_VALUE) {
                return (long) d;
            }
        }
        if (found.isTextual()) {
            try {
                return OffsetDateTime.parse(found.textValue()).toInstant().toEpochMilli();
            } catch (DateTimeParseException | ArithmeticException e) {
                // Falls through to the error below.
            }
        }
        throw new BadRecord("order field " + pointer + " must be an integer or an RFC 3339 time, found "
                + describe(found));
    }

    /** A short rendering of a value for messages: its JSON, cut at 60 bytes. */
    static String describe(JsonNode value) {
        String text = value.toString();
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        if (bytes.length <= 60) {
            return text;
        }
        int end = 57;
        while (end > 0 && (bytes[end] & 0xC0) == 0x80) {
            end--;
        }
        return new String(bytes, 0, end, StandardCharsets.UTF_8) + "...";
    }

    /**
     * The first part of a composite key: the entity id with its length in
     * front, so one entity's keys ({@code abc}) never share a prefix with
     * another's ({@code abcd}).
     */
    static byte[] entityPrefix(String entity) {
        byte[] text = entity.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(4 + text.length).putInt(text.length).put(text).array();
    }

    /** {@code prefix}, then {@code order} as 8 bytes in numeric byte order, then {@code id}. */
    static byte[] positionKey(byte[] prefix, long order, String id) {
        byte[] text = id.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(prefix.length + 8 + text.length)
                .put(prefix)
                .putLong(order ^ Long.MIN_VALUE)
                .put(text)
                .array();
    }

    /** {@code prefix}, then {@code id}. */
    static byte[] idKey(byte[] prefix, String id) {
        byte[] text = id.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(prefix.length + text.length).put(prefix).put(text).array();
    }
}
