package dev.streamfold.peer.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.testing.PeerDriver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;

/** Dedup, the question projection and the thanks totals of the question feed. */
class FeedTest {
    private static final String IN = "question-feed-events";
    private static final String QUESTIONS = "question-read-models";
    private static final String THANKS = "answer-thanks";
    private static final String OTHER = "question-feed-other-events";

    private static String question(String id, String type, String question, int sequence) {
        return "{\"event_id\":\"" + id + "\",\"type\":\"" + type + "\",\"question_id\":\"" + question
                + "\",\"sequence\":" + sequence + ",\"title\":\"" + question + " title " + sequence
                + "\",\"author\":\"ada\"}";
    }

    private static List<JsonNode> values(List<TestRecord<String, String>> records) throws Exception {
        List<JsonNode> out = new ArrayList<>();
        for (TestRecord<String, String> r : records) {
            out.add(Json.MAPPER.readTree(r.value()));
        }
        return out;
    }

    @Test
    void dedup_drops_an_id_seen_within_its_retention_and_forgets_it_after() throws Exception {
        try (PeerDriver peer = PeerDriver.start("question-feed", "--retention", "10m")) {
            String viewed = "{\"event_id\":\"e-1\",\"type\":\"QuestionViewed\",\"question_id\":\"q1\"}";
            peer.send(IN, "q1", viewed);
            peer.advance(Duration.ofMinutes(6));
            peer.send(IN, "q1", viewed);
            assertEquals(1, peer.read(OTHER).size(), "the repeat 6 min later is dropped");
            // Repeats do not extend the retention: 10 min after the first.
            peer.advance(Duration.ofMinutes(4));
            peer.send(IN, "q1", viewed);
            assertEquals(1, peer.read(OTHER).size(), "forgotten 10 min after it was first seen");
            peer.send(IN, "q1", viewed);
            assertTrue(peer.read(OTHER).isEmpty(), "and remembered again from then");
        }
    }

    @Test
    void the_read_model_s_version_counts_the_events_applied_whatever_their_order() throws Exception {
        try (PeerDriver peer = PeerDriver.start("question-feed")) {
            // Keyed by anything: the projection re-keys by question_id.
            peer.send(IN, "x", question("e-3", "AnswerAdded", "q1", 3));
            peer.send(IN, "y", question("e-1", "QuestionCreated", "q1", 1));
            peer.send(IN, "z", question("e-2", "QuestionEdited", "q1", 2));
            peer.send(IN, "x", question("e-4", "AnswerAdded", "q1", 4));
            List<JsonNode> models = values(peer.read(QUESTIONS));
            assertEquals(4, models.size());
            assertEquals("{\"answers\":1,\"question_id\":\"q1\",\"version\":1}", models.get(0).toString());
            assertEquals("{\"title\":\"q1 title 1\",\"author\":\"ada\",\"is_deleted\":false,\"answers\":1,"
                    + "\"question_id\":\"q1\",\"version\":2}", models.get(1).toString());
            // The edit (sequence 2) re-folds in its place: title 2, before answer 3.
            assertEquals("{\"title\":\"q1 title 2\",\"author\":\"ada\",\"is_deleted\":false,\"answers\":1,"
                    + "\"question_id\":\"q1\",\"version\":3}", models.get(2).toString());
            assertEquals(4, models.get(3).get("version").intValue());
            assertEquals(2, models.get(3).get("answers").intValue());
        }
    }

    @Test
    void a_late_event_re_folds_from_the_last_snapshot_and_keeps_every_event() throws Exception {
        try (PeerDriver peer = PeerDriver.start("question-feed")) {
            peer.send(IN, "q", question("e-1", "QuestionCreated", "q", 1));
            // 120 answers, every other sequence number left for late ones:
            // snapshots at versions 50 and 100.
            for (int i = 0; i < 120; i++) {
                peer.send(IN, "q", question("a-" + i, "AnswerAdded", "q", 10 + 2 * i));
            }
            peer.send(IN, "q", question("e-late", "QuestionEdited", "q", 150));
            peer.send(IN, "q", question("e-later", "QuestionDeleted", "q", 230));
            peer.send(IN, "q", question("a-late", "AnswerAdded", "q", 231));
            List<JsonNode> models = values(peer.read(QUESTIONS));
            JsonNode last = models.get(models.size() - 1);
            assertEquals(124, last.get("version").intValue());
            assertEquals(121, last.get("answers").intValue());
            assertEquals("q title 150", last.get("title").textValue());
            assertEquals(true, last.get("is_deleted").booleanValue());
            // A duplicate id changes nothing and emits nothing.
            peer.advance(Duration.ofHours(7));
            peer.send(IN, "q", question("a-5", "AnswerAdded", "q", 20));
            assertTrue(peer.read(QUESTIONS).isEmpty());
        }
    }

    @Test
    void thanks_keep_the_newest_total_per_answer_with_growing_lamport_clocks() throws Exception {
        try (PeerDriver peer = PeerDriver.start("question-feed")) {
            String thanks = "{\"event_id\":\"t-%d\",\"type\":\"ThanksForAnswerGiven\",\"answer_id\":\"a1\","
                    + "\"totalThanks\":%d,\"sequence\":%d%s}";
            peer.send(IN, "a1", String.format(thanks, 2, 2, 2, ""));
            peer.send(IN, "a1", String.format(thanks, 1, 1, 1, ""));
            peer.send(IN, "a1", String.format(thanks, 3, 3, 3, ",\"lamport\":9"));
            List<JsonNode> totals = values(peer.read(THANKS));
            assertEquals(2, totals.size(), "the stale total 1 is dropped");
            assertEquals(1, totals.get(0).get("lamport").intValue());
            assertEquals("{\"event_id\":\"t-3\",\"type\":\"ThanksForAnswerGiven\",\"answer_id\":\"a1\","
                    + "\"totalThanks\":3,\"sequence\":3,\"lamport\":10}", totals.get(1).toString());
        }
    }
}
