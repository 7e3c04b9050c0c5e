package dev.streamfold.peer.windows;

import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.RawJson;
import org.apache.kafka.streams.processor.api.ContextualFixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorSupplier;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * streamfold's {@code on_late: dead_letter} in front of a tumbling-window
 * aggregation: a record whose window has closed (its end plus the grace
 * is at or behind the task's stream time) goes to the dead-letter topic
 * with streamfold's reason, instead of being dropped with a log line as
 * the aggregation itself would drop it.
 *
 * <p>The rule is the aggregation's, {@code windowEnd + grace <=
 * streamTime}, over the same records in the same order (this processor
 * and the aggregation are in one sub-topology reading one repartition
 * topic), so it lets through exactly what the aggregation accepts. Stream
 * time is the task's, which Kafka Streams keeps in the committed offsets'
 * metadata: after a restart it resumes where it was, as streamfold's does
 * (the aggregation's own starts again from the first record it sees).
 */
public final class LateRecords extends ContextualFixedKeyProcessor<String, RawJson, RawJson> {
    private final long sizeMs;
    private final long graceMs;

    private LateRecords(long sizeMs, long graceMs) {
        this.sizeMs = sizeMs;
        this.graceMs = graceMs;
    }

    public static FixedKeyProcessorSupplier<String, RawJson, RawJson> supplier(long sizeMs, long graceMs) {
        return () -> new LateRecords(sizeMs, graceMs);
    }

    @Override
    public void process(FixedKeyRecord<String, RawJson> record) {
        long at = record.timestamp();
        long now = context().currentStreamTimeMs();
        long start = at - Math.floorMod(at, sizeMs);
        long closedAt = start + sizeMs + graceMs;
        if (closedAt <= now) {
            throw new BadRecord("late record for key `" + record.key() + "`: its time " + Json.rfc3339Millis(at)
                    + " is " + HumanDuration.format(now - at) + " behind stream time " + Json.rfc3339Millis(now)
                    + ", and its window closed at " + Json.rfc3339Millis(closedAt)
                    + " (grace " + HumanDuration.format(graceMs) + ")");
        }
        context().forward(record);
    }
}
