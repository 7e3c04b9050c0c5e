package dev.streamfold.peer.windows;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.RawJson;
import java.time.OffsetDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import org.apache.kafka.streams.processor.api.ContextualProcessor;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;

/**
 * A source's {@code timestamp: /field} and a node's {@code key_by: /field}
 * in one step, before the repartition topic: the record's time becomes the
 * field's (epoch milliseconds, or an RFC 3339 time), its key the key
 * field's text, both read in one pass over the value. A record without a
 * readable time or key goes to the dead-letter topic with streamfold's
 * reason.
 *
 * <p>Kafka Streams' own way to take event time from a value is a
 * {@code TimestampExtractor}, which cannot dead-letter a record (it can
 * only fail the thread or drop the record); the time set here is the
 * record's timestamp in the repartition topic, which is what the window
 * downstream reads, so the windows see the same times either way.
 */
public final class EventTime extends ContextualProcessor<String, RawJson, String, RawJson> {
    private final String timeField;
    private final String keyField;

    private EventTime(String timeField, String keyField) {
        this.timeField = timeField;
        this.keyField = keyField;
    }

    /** Times from the top-level field {@code timeField}, keys from {@code keyField}. */
    public static ProcessorSupplier<String, RawJson, String, RawJson> supplier(String timeField, String keyField) {
        return () -> new EventTime(timeField, keyField);
    }

    @Override
    public void process(Record<String, RawJson> record) {
        if (record.value() == null) {
            throw new BadRecord("timestamp field /" + timeField
                    + " is missing or is neither epoch milliseconds nor an RFC 3339 time");
        }
        JsonNode[] found = record.value().fields(timeField, keyField);
        Long at = millis(found[0]);
        if (at == null) {
            throw new BadRecord("timestamp field /" + timeField
                    + " is missing or is neither epoch milliseconds nor an RFC 3339 time");
        }
        if (found[1] == null) {
            throw new BadRecord("key field /" + keyField + " is missing or null");
        }
        context().forward(record.withKey(Json.idText(found[1])).withTimestamp(at));
    }

    /** A time as streamfold reads one: epoch milliseconds or an RFC 3339 string; null if neither. */
    static Long millis(JsonNode value) {
        if (value == null) {
            return null;
        }
        if (value.isNumber()) {
            return value.isIntegralNumber() && value.canConvertToLong() ? value.longValue() : (long) value.doubleValue();
        }
        if (value.isTextual()) {
            try {
                return OffsetDateTime.parse(value.textValue(), DateTimeFormatter.ISO_OFFSET_DATE_TIME)
                        .toInstant().toEpochMilli();
            } catch (DateTimeParseException e) {
                return null;
            }
        }
        return null;
    }
}
