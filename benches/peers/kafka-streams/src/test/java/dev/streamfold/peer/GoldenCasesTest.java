package dev.streamfold.peer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.app.Durations;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.testing.PeerDriver;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * streamfold's own golden cases (tests/cases/social-metrics and
 * tests/cases/question-feed, the fixtures `streamfold test` checks) run
 * through the peer: the same input and clock steps must give the same
 * records, compared as streamfold's offline driver compares them (per key
 * in order; a topic without an expected file receives nothing), with the
 * values' JSON text equal field for field and in the same order.
 *
 * <p>Dead letters are compared by key and value, and by reason
 * (streamfold's {@code streamfold.dlq.reason} header, Kafka Streams'
 * {@code __streams.errors.message}) except for values that are not JSON
 * at all, which Jackson refuses in its own words.
 */
class GoldenCasesTest {
    private static final Path CASES = Path.of("../../../tests/cases");

    @TestFactory
    Stream<DynamicTest> social_metrics_cases_give_streamfold_s_folds() throws IOException {
        return cases("social-metrics", "fold");
    }

    @TestFactory
    Stream<DynamicTest> question_feed_cases_give_streamfold_s_read_models_and_totals() throws IOException {
        return cases("question-feed", "question-feed");
    }

    private static Stream<DynamicTest> cases(String topology, String app) throws IOException {
        Path dir = CASES.resolve(topology);
        assertTrue(Files.isDirectory(dir), "streamfold's cases at " + dir.toAbsolutePath());
        List<Path> cases;
        try (Stream<Path> list = Files.list(dir)) {
            cases = list.filter(Files::isDirectory).sorted().toList();
        }
        assertTrue(!cases.isEmpty(), "cases in " + dir);
        return cases.stream().map(c -> DynamicTest.dynamicTest(topology + "/" + c.getFileName(), () -> run(c, app)));
    }

    private static void run(Path dir, String app) throws IOException {
        try (PeerDriver peer = PeerDriver.start(app)) {
            for (String line : Files.readAllLines(dir.resolve("input.jsonl"), StandardCharsets.UTF_8)) {
                if (line.isBlank() || line.startsWith("#")) {
                    continue;
                }
                JsonNode step = Json.MAPPER.readTree(line);
                if (step.has("advance")) {
                    peer.advance(Duration.ofMillis(Durations.parse(step.get("advance").textValue())));
                    continue;
                }
                assertTrue(!step.has("timestamp") && !step.has("headers") && !step.has("raw_key"),
                        "a case feature this runner does not support: " + line);
                String key = step.get("key").textValue();
                String value = step.has("raw") ? step.get("raw").textValue() : step.get("value").toString();
                peer.send(step.get("topic").textValue(), key, value);
            }
            for (String topic : peer.outputTopics()) {
                Path file = dir.resolve("expected").resolve(topic + ".jsonl");
                List<JsonNode> expected = new ArrayList<>();
                if (Files.exists(file)) {
                    for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
                        if (!line.isBlank()) {
                            expected.add(Json.MAPPER.readTree(line));
                        }
                    }
                }
                compare(dir.getFileName() + ": " + topic, expected, peer.read(topic));
            }
        }
    }

    /** A dead letter of a source: a value its format could not decode. */
    private static boolean fromDecoding(JsonNode expected) {
        JsonNode node = expected.path("headers").path("streamfold.dlq.node");
        return List.of("feed_events", "post_metrics").contains(node.asText());
    }

    /** Per key, in order, as streamfold's offline driver compares. */
    private static void compare(String what, List<JsonNode> expected, List<TestRecord<String, String>> received) {
        Map<String, List<JsonNode>> wanted = new LinkedHashMap<>();
        for (JsonNode e : expected) {
            wanted.computeIfAbsent(e.get("key").asText(null), k -> new ArrayList<>()).add(e);
        }
        Map<String, List<TestRecord<String, String>>> got = new LinkedHashMap<>();
        for (TestRecord<String, String> r : received) {
            got.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r);
        }
        assertEquals(wanted.keySet(), got.keySet(), what + ": keys");
        for (Map.Entry<String, List<JsonNode>> entry : wanted.entrySet()) {
            List<JsonNode> want = entry.getValue();
            List<TestRecord<String, String>> have = got.get(entry.getKey());
            assertEquals(want.size(), have.size(), what + ": records of key " + entry.getKey() + ": " + have);
            for (int i = 0; i < want.size(); i++) {
                JsonNode e = want.get(i);
                TestRecord<String, String> r = have.get(i);
                String value = e.has("raw") ? e.get("raw").textValue() : e.get("value").toString();
                assertEquals(value, r.value(), what + ": key " + entry.getKey() + " record " + i);
                if (e.has("timestamp")) {
                    assertEquals(Instant.parse(e.get("timestamp").textValue()), r.getRecordTime(),
                            what + ": timestamp of key " + entry.getKey() + " record " + i);
                }
                JsonNode headers = e.get("headers");
                if (headers != null && headers.has("streamfold.dlq.reason") && !fromDecoding(e)) {
                    Header reason = r.headers().lastHeader("__streams.errors.message");
                    assertEquals(headers.get("streamfold.dlq.reason").textValue(),
                            reason == null ? null : new String(reason.value(), StandardCharsets.UTF_8),
                            what + ": dead-letter reason of key " + entry.getKey() + " record " + i);
                }
            }
        }
    }
}
