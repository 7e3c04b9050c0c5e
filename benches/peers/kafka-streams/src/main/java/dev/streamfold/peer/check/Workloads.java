package dev.streamfold.peer.check;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.json.Json;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The events `streamfold-loadgen produce` generates
 * (src/bin/streamfold-loadgen/workloads.rs), computed the same way, so the peer can
 * be checked without building streamfold.
 */
final class Workloads {
    /** Metric names of generated post-metric events (src/testkit/article.rs). */
    static final String[] METRICS = {"likes", "shares", "comments", "impressions", "saves", "views"};

    /** A record to send: its key and JSON value. */
    record Event(String key, ObjectNode value) {}

    private Workloads() {}

    /** The social-metrics article's six events, keyed by account. */
    static List<Event> article() {
        Object[][] rows = {
            {"post_1", "account_1", Map.of("likes", 10)},
            {"post_2", "account_1", Map.of("shares", 2)},
            {"post_3", "account_2", Map.of("likes", 3, "shares", 1)},
            {"post_4", "account_1", Map.of("comments", 5, "likes", 11)},
            {"post_5", "account_2", Map.of("likes", 4)},
            {"post_6", "account_1", Map.of("impressions", 120)},
        };
        List<Event> out = new ArrayList<>();
        for (Object[] row : rows) {
            ObjectNode value = Json.MAPPER.createObjectNode();
            value.put("post_id", (String) row[0]);
            value.put("account_id", (String) row[1]);
            ObjectNode metrics = value.putObject("metrics");
            @SuppressWarnings("unchecked")
            Map<String, Integer> m = (Map<String, Integer>) row[2];
            m.entrySet().stream().sorted(Map.Entry.comparingByKey()).forEach(e -> metrics.put(e.getKey(), e.getValue()));
            out.add(new Event((String) row[1], value));
        }
        return out;
    }

    /** Social-metrics event {@code i} of {@code accounts}, {@code run} in a row per account. */
    static Event socialMetrics(long i, long accounts, long run) {
        long account = (i / run) % accounts;
        String accountId = "account_" + account;
        ObjectNode value = Json.MAPPER.createObjectNode();
        value.put("post_id", "post_" + (1000 + i % 5000));
        value.put("account_id", accountId);
        value.putObject("metrics").put(METRICS[(int) (i % 6)], i % 97);
        return new Event(accountId, value);
    }

    /**
     * The question-feed generator: question events keyed by question, thanks
     * totals keyed by answer, with growing sequences per question and answer;
     * one event in ten is sent twice.
     */
    static final class QuestionFeed {
        private final Map<Long, Long> questions = new HashMap<>();
        private final Map<Long, Long> answers = new HashMap<>();

        /** Event {@code i} over {@code keys} questions and as many answers, and its copies. */
        Event event(long i, long keys, int[] copies) {
            long r = mix(i);
            String id = "event_" + i;
            copies[0] = Long.remainderUnsigned(r >>> 56, 10) == 0 ? 2 : 1;
            ObjectNode value = Json.MAPPER.createObjectNode();
            if (Long.remainderUnsigned(r, 10) < 6) {
                long question = Long.remainderUnsigned(r >>> 8, keys);
                long seq = questions.merge(question, 1L, Long::sum);
                long pick = Long.remainderUnsigned(r >>> 40, 10);
                String kind = seq == 1 ? "QuestionCreated"
                        : pick < 5 ? "QuestionEdited"
                        : pick < 9 ? "AnswerAdded"
                        : "QuestionDeleted";
                String q = "q" + question;
                value.put("event_id", id);
                value.put("type", kind);
                value.put("question_id", q);
                value.put("sequence", seq);
                value.put("title", q + " title " + seq);
                value.put("author", "author of " + q);
                return new Event(q, value);
            }
            long answer = Long.remainderUnsigned(r >>> 8, keys);
            long seq = answers.merge(answer, 1L, Long::sum);
            String a = "a" + answer;
            value.put("event_id", id);
            value.put("type", "ThanksForAnswerGiven");
            value.put("answer_id", a);
            value.put("totalThanks", seq);
            value.put("sequence", seq);
            return new Event(a, value);
        }
    }

    /** SplitMix64, as the loadgen's generators use it. */
    static long mix(long i) {
        long z = i + 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }
}
