package dev.streamfold.peer.fold;

import com.fasterxml.jackson.core.JsonPointer;
import dev.streamfold.peer.app.KeyBy;
import java.util.List;

/**
 * What a fold node does: group by {@code keyBy}, merge {@code fields}, and
 * close a key's fold after {@code quietForMs} without events, at
 * {@code maxWaitMs} after its first event, or at its {@code maxEvents}-th
 * event, whichever comes first (null: that rule is off). Timers are
 * checked every {@code punctuationMs} of wall-clock time.
 *
 * @param node the node's name: its store names, repartition topic and
 *     processor name start with it, as streamfold names them
 */
public record FoldSpec(
        String node,
        KeyBy keyBy,
        List<Field> fields,
        Long quietForMs,
        Long maxWaitMs,
        Long maxEvents,
        long punctuationMs) {

    /** One output field: its name, rule, and the JSON pointer it reads. */
    public record Field(String name, MergeRule rule, String from) {
        JsonPointer pointer() {
            return JsonPointer.compile(from);
        }
    }

    public FoldSpec {
        if (quietForMs == null && maxWaitMs == null && maxEvents == null) {
            throw new IllegalArgumentException(
                    "a fold needs a closing rule: set quiet_for, max_wait or max_events");
        }
        if (quietForMs != null && quietForMs < 1 || maxWaitMs != null && maxWaitMs < 1) {
            throw new IllegalArgumentException("quiet_for and max_wait must be at least 1ms");
        }
        if (maxEvents != null && maxEvents < 1) {
            throw new IllegalArgumentException("max_events must be at least 1");
        }
        if (quietForMs != null && maxWaitMs != null && maxWaitMs < quietForMs) {
            throw new IllegalArgumentException("max_wait (" + maxWaitMs + "ms) is shorter than quiet_for ("
                    + quietForMs + "ms), so folds would never close as quiet");
        }
        if (punctuationMs < 1) {
            throw new IllegalArgumentException("the punctuation interval must be at least 1ms");
        }
        fields = List.copyOf(fields);
    }

    /**
     * {@code fold_account} of topologies/social-metrics.yaml: post-metric
     * events grouped by {@code /account_id}, with the union of the metric
     * names and the set of post ids.
     */
    public static FoldSpec socialMetrics(Long quietForMs, Long maxWaitMs, Long maxEvents, long punctuationMs) {
        return new FoldSpec(
                "fold_account",
                new KeyBy("/account_id"),
                List.of(
                        new Field("metrics", MergeRule.KEY_UNION, "/metrics"),
                        new Field("posts", MergeRule.SET, "/post_id")),
                quietForMs,
                maxWaitMs,
                maxEvents,
                punctuationMs);
    }

    /** The output field carrying the group key ({@code account_id}). */
    public String keyField() {
        return keyBy.fieldName();
    }

    /** Open folds, by key. */
    public String openStore() {
        return node + "-open";
    }

    /** The timer index: one entry per open fold, ordered by deadline. */
    public String timersStore() {
        return node + "-timers";
    }

    /** Whether folds close by time (and so need the punctuator). */
    public boolean timed() {
        return quietForMs != null || maxWaitMs != null;
    }
}
