package dev.streamfold.peer.fold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.testing.PeerDriver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeSet;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;

/** The fold's closing rules and output, with the wall clock driven by the test. */
class FoldTest {
    private static final String IN = "post-metric-updated";
    private static final String OUT = "account-metrics-folded";
    private static final String DLQ = "social-metrics-dlq";

    private static String event(String account, String post, String metric, int value) {
        return "{\"post_id\":\"" + post + "\",\"account_id\":\"" + account + "\",\"metrics\":{\"" + metric + "\":"
                + value + "}}";
    }

    private static List<JsonNode> values(List<TestRecord<String, String>> records) throws Exception {
        List<JsonNode> out = new ArrayList<>();
        for (TestRecord<String, String> r : records) {
            out.add(Json.MAPPER.readTree(r.value()));
        }
        return out;
    }

    @Test
    void a_key_quiet_for_quiet_for_closes_as_quiet_with_the_folded_event_streamfold_emits() throws Exception {
        try (PeerDriver peer = PeerDriver.start("fold", "--quiet-for", "5s", "--max-wait", "1m")) {
            // Keyed by post, as the publisher sends them: grouped by account.
            peer.send(IN, "post_1", event("account_1", "post_1", "likes", 10));
            peer.advance(Duration.ofSeconds(3));
            peer.send(IN, "post_2", event("account_1", "post_2", "shares", 2));
            peer.send(IN, "post_1", event("account_1", "post_1", "comments", 1));
            peer.advance(Duration.ofMillis(4_750));
            assertTrue(peer.read(OUT).isEmpty(), "quiet for 4.75 s only");
            peer.advance(Duration.ofMillis(250));

            List<TestRecord<String, String>> out = peer.read(OUT);
            assertEquals(1, out.size());
            assertEquals("account_1", out.get(0).key());
            assertEquals("{\"account_id\":\"account_1\",\"metrics\":[\"comments\",\"likes\",\"shares\"],"
                    + "\"posts\":[\"post_1\",\"post_2\"],\"folded_count\":3,"
                    + "\"first_event_at\":\"2025-01-01T00:00:00.000Z\",\"last_event_at\":\"2025-01-01T00:00:03.000Z\","
                    + "\"closed_by\":\"quiet\"}", out.get(0).value());
            // Timestamped when it closed: 3 s + 5 s quiet.
            assertEquals(PeerDriver.START.plusSeconds(8), out.get(0).getRecordTime());
            assertNoOpenFolds(peer);
        }
    }

    @Test
    void a_key_that_never_goes_quiet_closes_at_max_wait_after_its_first_event() throws Exception {
        try (PeerDriver peer = PeerDriver.start("fold", "--quiet-for", "5s", "--max-wait", "20s")) {
            for (int i = 0; i < 15; i++) {
                peer.send(IN, "account_9", event("account_9", "post_" + i, "views", i));
                peer.advance(Duration.ofSeconds(2));
            }
            List<JsonNode> folds = values(peer.read(OUT));
            assertEquals(1, folds.size(), "closed once by max_wait: " + folds);
            assertEquals("max_wait", folds.get(0).get("closed_by").textValue());
            // Events at 0, 2, ..., 18 s; the fold closed at 20 s.
            assertEquals(10, folds.get(0).get("folded_count").intValue());
            assertEquals("2025-01-01T00:00:18.000Z", folds.get(0).get("last_event_at").textValue());

            peer.advance(Duration.ofSeconds(10));
            folds = values(peer.read(OUT));
            assertEquals(1, folds.size());
            assertEquals("quiet", folds.get(0).get("closed_by").textValue());
            assertEquals(5, folds.get(0).get("folded_count").intValue());
            assertEquals("2025-01-01T00:00:20.000Z", folds.get(0).get("first_event_at").textValue());
        }
    }

    @Test
    void the_max_events_th_event_closes_its_fold_at_once_and_the_next_opens_another() throws Exception {
        try (PeerDriver peer = PeerDriver.start("fold", "--max-events", "3")) {
            for (int i = 0; i < 4; i++) {
                peer.send(IN, "account_2", event("account_2", "post_" + i, "likes", i));
            }
            List<TestRecord<String, String>> out = peer.read(OUT);
            assertEquals(1, out.size(), "no clock step needed");
            JsonNode fold = Json.MAPPER.readTree(out.get(0).value());
            assertEquals("max_events", fold.get("closed_by").textValue());
            assertEquals(3, fold.get("folded_count").intValue());
            assertEquals("[\"post_0\",\"post_1\",\"post_2\"]", fold.get("posts").toString());

            peer.advance(Duration.ofSeconds(6));
            fold = values(peer.read(OUT)).get(0);
            assertEquals("quiet", fold.get("closed_by").textValue());
            assertEquals("[\"post_3\"]", fold.get("posts").toString());
            assertNoOpenFolds(peer);
        }
    }

    @Test
    void without_a_time_rule_folds_close_only_by_max_events() throws Exception {
        try (PeerDriver peer = PeerDriver.start("fold", "--quiet-for", "off", "--max-wait", "off",
                "--max-events", "2")) {
            peer.send(IN, "a", event("a", "p1", "likes", 1));
            peer.advance(Duration.ofHours(1));
            assertTrue(peer.read(OUT).isEmpty());
            peer.send(IN, "a", event("a", "p2", "likes", 1));
            assertEquals("max_events", values(peer.read(OUT)).get(0).get("closed_by").textValue());
        }
    }

    /**
     * Many accounts, bursts and pauses: every event is in exactly one
     * folded event, and each fold's posts are exactly its events'.
     */
    @Test
    void every_event_is_folded_exactly_once() throws Exception {
        Random random = new Random(7);
        try (PeerDriver peer = PeerDriver.start("fold", "--quiet-for", "2s", "--max-wait", "10s",
                "--max-events", "7")) {
            Map<String, TreeSet<String>> sent = new HashMap<>();
            int events = 0;
            for (int i = 0; i < 2_000; i++) {
                String account = "account_" + random.nextInt(25);
                String post = "post_" + i;
                peer.send(IN, "k" + random.nextInt(5), event(account, post, "m" + random.nextInt(4), i));
                sent.computeIfAbsent(account, a -> new TreeSet<>()).add(post);
                events++;
                if (random.nextInt(20) == 0) {
                    peer.advance(Duration.ofMillis(250L * random.nextInt(12)));
                }
            }
            peer.advance(Duration.ofSeconds(11));
            Map<String, TreeSet<String>> folded = new HashMap<>();
            long count = 0;
            for (JsonNode fold : values(peer.read(OUT))) {
                count += fold.get("folded_count").longValue();
                assertTrue(fold.get("folded_count").intValue() <= 7);
                assertEquals(fold.get("folded_count").intValue(), fold.get("posts").size(), "one post per event");
                TreeSet<String> posts = folded.computeIfAbsent(fold.get("account_id").textValue(), a -> new TreeSet<>());
                for (JsonNode post : fold.get("posts")) {
                    assertTrue(posts.add(post.textValue()), "in one fold only: " + post);
                }
            }
            assertEquals(events, count);
            assertEquals(sent, folded);
            assertNoOpenFolds(peer);
        }
    }

    @Test
    void a_bad_event_goes_to_the_dead_letter_topic_and_changes_no_fold() throws Exception {
        try (PeerDriver peer = PeerDriver.start("fold")) {
            peer.send(IN, "a", event("account_1", "post_1", "likes", 1));
            peer.send(IN, "a", "{\"post_id\":\"post_2\",\"account_id\":\"account_1\",\"metrics\":\"likes\"}");
            peer.send(IN, "a", "{\"post_id\":\"post_3\",\"metrics\":{\"likes\":1}}");
            peer.advance(Duration.ofSeconds(6));

            List<TestRecord<String, String>> dead = peer.read(DLQ);
            assertEquals(2, dead.size());
            assertEquals("field /metrics must be an object for rule `key_union`, found a string", reason(dead.get(0)));
            assertEquals("key field /account_id is missing or null", reason(dead.get(1)));
            // The original record, as read from its topic.
            assertEquals("{\"post_id\":\"post_3\",\"metrics\":{\"likes\":1}}", dead.get(1).value());

            JsonNode fold = values(peer.read(OUT)).get(0);
            assertEquals(1, fold.get("folded_count").intValue());
            assertEquals("[\"likes\"]", fold.get("metrics").toString());
        }
    }

    private static String reason(TestRecord<String, String> deadLetter) {
        Header header = deadLetter.headers().lastHeader("__streams.errors.message");
        return header == null ? null : new String(header.value(), java.nio.charset.StandardCharsets.UTF_8);
    }

    /** A closed fold leaves nothing behind: no open fold, no timer. */
    private static void assertNoOpenFolds(PeerDriver peer) {
        for (String store : List.of("fold_account-open", "fold_account-timers")) {
            KeyValueStore<Object, Object> kv = peer.driver().getKeyValueStore(store);
            try (KeyValueIterator<Object, Object> all = kv.all()) {
                List<KeyValue<Object, Object>> left = new ArrayList<>();
                all.forEachRemaining(left::add);
                assertFalse(!left.isEmpty(), store + " still holds " + left);
            }
        }
    }
}
