package dev.streamfold.peer.windows;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.streamfold.peer.testing.PeerDriver;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;

/**
 * The page-views peer against streamfold's cases (tests/cases/page-views):
 * the same windows, keys and values as text, late and untimed views
 * dead-lettered with streamfold's reasons. The cases close their last
 * windows with streamfold's {@code idle_advance}, which Kafka Streams has
 * not: here a view far ahead in event time closes them instead.
 */
class PageViewsTest {
    private static void view(PeerDriver peer, String key, String page, String user, String at) {
        peer.send("page-views", key, "{\"page\":\"" + page + "\",\"user\":\"" + user + "\",\"viewed_at\":\"" + at + "\"}");
    }

    @Test
    void five_minute_windows_close_with_their_grace() {
        try (PeerDriver peer = PeerDriver.start("page-views")) {
            view(peer, "v1", "/home", "u1", "2025-01-01T00:00:10Z");
            view(peer, "v2", "/home", "u2", "2025-01-01T00:01:00Z");
            view(peer, "v3", "/pricing", "u1", "2025-01-01T00:04:59.999Z");
            view(peer, "v4", "/home", "u1", "2025-01-01T00:05:30Z");
            // Within the first window's grace (stream time 00:05:30, it closes at 00:06).
            view(peer, "v5", "/home", "u3", "2025-01-01T00:04:00Z");
            view(peer, "v6", "/home", "u1", "2025-01-01T00:02:00Z");
            assertTrue(peer.read("page-views-per-5m").isEmpty(), "nothing closed yet");
            view(peer, "v7", "/elsewhere", "u9", "2025-01-01T01:00:00Z");

            List<TestRecord<String, String>> out = peer.read("page-views-per-5m");
            assertEquals(List.of(
                    "/home@2025-01-01T00:00:00.000Z/2025-01-01T00:05:00.000Z",
                    "/home@2025-01-01T00:05:00.000Z/2025-01-01T00:10:00.000Z",
                    "/pricing@2025-01-01T00:00:00.000Z/2025-01-01T00:05:00.000Z"),
                    out.stream().map(TestRecord::key).sorted().toList());
            String home = out.stream().filter(r -> r.key().startsWith("/home@2025-01-01T00:00")).findFirst()
                    .orElseThrow().value();
            assertEquals("{\"page\":\"/home\",\"users\":[\"u1\",\"u2\",\"u3\"],\"views\":4,"
                    + "\"window_end\":\"2025-01-01T00:05:00.000Z\",\"window_start\":\"2025-01-01T00:00:00.000Z\"}", home);
            // Timestamped with the window's latest view, as streamfold stamps it.
            assertEquals(Instant.parse("2025-01-01T00:04:00Z"), out.stream()
                    .filter(r -> r.key().startsWith("/home@2025-01-01T00:00")).findFirst().orElseThrow().getRecordTime());
            assertTrue(peer.read("page-views-dlq").isEmpty());
        }
    }

    @Test
    void late_and_untimed_views_are_dead_lettered_with_streamfold_s_reasons() {
        try (PeerDriver peer = PeerDriver.start("page-views")) {
            view(peer, "v1", "/home", "u1", "2025-01-01T00:00:10Z");
            view(peer, "v2", "/home", "u2", "2025-01-01T00:07:00Z");
            view(peer, "v3", "/home", "u3", "2025-01-01T00:03:00Z");
            peer.send("page-views", "v4", "{\"page\":\"/home\",\"user\":\"u4\"}");
            view(peer, "v5", "/elsewhere", "u9", "2025-01-01T01:00:00Z");

            List<String> values = peer.read("page-views-per-5m").stream().map(TestRecord::value).toList();
            assertEquals(List.of(
                    "{\"page\":\"/home\",\"users\":[\"u1\"],\"views\":1,\"window_end\":\"2025-01-01T00:05:00.000Z\","
                            + "\"window_start\":\"2025-01-01T00:00:00.000Z\"}",
                    "{\"page\":\"/home\",\"users\":[\"u2\"],\"views\":1,\"window_end\":\"2025-01-01T00:10:00.000Z\","
                            + "\"window_start\":\"2025-01-01T00:05:00.000Z\"}"), values);
            List<TestRecord<String, String>> dlq = peer.read("page-views-dlq");
            assertEquals(2, dlq.size());
            assertEquals(List.of(
                    "late record for key `/home`: its time 2025-01-01T00:03:00.000Z is 4m behind stream time "
                            + "2025-01-01T00:07:00.000Z, and its window closed at 2025-01-01T00:06:00.000Z (grace 1m)",
                    "timestamp field /viewed_at is missing or is neither epoch milliseconds nor an RFC 3339 time"),
                    dlq.stream().map(PageViewsTest::reason).sorted().toList());
        }
    }

    private static String reason(TestRecord<String, String> record) {
        Header header = record.headers().lastHeader("__streams.errors.message");
        return header == null ? null : new String(header.value(), StandardCharsets.UTF_8);
    }
}
