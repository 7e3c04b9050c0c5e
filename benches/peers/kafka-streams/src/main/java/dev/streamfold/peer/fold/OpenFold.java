package dev.streamfold.peer.fold;

import java.util.ArrayList;
import java.util.List;

/**
 * One key's open fold, as stored ({@link OpenFoldSerde}). Clock times are
 * wall-clock milliseconds; the record times are the folded events' Kafka
 * timestamps.
 */
final class OpenFold {
    /** Clock time of the first event: {@code max_wait} counts from here. */
    long opened;
    /** Clock time of the latest event: {@code quiet_for} counts from here. */
    long touched;
    /** Record time of the earliest and latest events. */
    long firstTs;
    long lastTs;
    long count;
    /** Deadline of the timer armed for this fold (null: none). */
    Long timer;
    /** One accumulator per output field, in declaration order. */
    List<SortedValues> acc;

    private OpenFold() {}

    /** A fold opened by an event at clock time {@code now}, record time {@code ts}. */
    static OpenFold open(long now, long ts, int fields) {
        OpenFold fold = new OpenFold();
        fold.opened = now;
        fold.touched = now;
        fold.firstTs = ts;
        fold.lastTs = ts;
        fold.count = 1;
        fold.acc = new ArrayList<>(fields);
        for (int i = 0; i < fields; i++) {
            fold.acc.add(SortedValues.empty());
        }
        return fold;
    }

    /** A fold as read back from its store. */
    static OpenFold restore(long opened, long touched, long firstTs, long lastTs, long count, Long timer,
            List<SortedValues> acc) {
        OpenFold fold = new OpenFold();
        fold.opened = opened;
        fold.touched = touched;
        fold.firstTs = firstTs;
        fold.lastTs = lastTs;
        fold.count = count;
        fold.timer = timer;
        fold.acc = acc;
        return fold;
    }

    /** Counts one more event, at clock time {@code now}, record time {@code ts}. */
    void touch(long now, long ts) {
        touched = Math.max(touched, now);
        firstTs = Math.min(firstTs, ts);
        lastTs = Math.max(lastTs, ts);
        count++;
    }
}
