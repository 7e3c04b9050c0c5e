package dev.streamfold.peer.check;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.app.Durations;
import dev.streamfold.peer.json.Json;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/** {@code verify-folds}: the peer's folds against their input (see {@link Check}). */
final class VerifyFolds {
    private VerifyFolds() {}

    /**
     * Every input event that has an account and a metrics object is in
     * exactly one fold of its account (when post ids are unique per
     * account: by post; always: by count); each fold's close reason agrees
     * with its times and count.
     */
    static int run(String servers, Map<String, String> o) {
        Long maxEvents = o.containsKey("--max-events") ? Long.parseLong(o.get("--max-events")) : null;
        Long quietFor = o.containsKey("--quiet-for") ? Durations.parse(o.get("--quiet-for")) : null;
        Long maxWait = o.containsKey("--max-wait") ? Durations.parse(o.get("--max-wait")) : null;
        Map<String, List<String>> sent = new TreeMap<>();
        Map<String, Set<String>> sentMetrics = new HashMap<>();
        int skipped = 0;
        for (Topics.Read r : Topics.readAll(servers, o.get("--input"))) {
            JsonNode v = r.value();
            if (v == null || !v.path("account_id").isTextual() || !v.path("metrics").isObject()) {
                skipped++;
                continue;
            }
            String account = v.get("account_id").textValue();
            sent.computeIfAbsent(account, a -> new ArrayList<>()).add(v.path("post_id").asText());
            v.get("metrics").fieldNames().forEachRemaining(m ->
                    sentMetrics.computeIfAbsent(account, a -> new TreeSet<>()).add(m));
        }
        List<String> problems = new ArrayList<>();
        Map<String, Long> folded = new TreeMap<>();
        Map<String, Set<String>> foldedPosts = new HashMap<>();
        Map<String, Integer> reasons = new TreeMap<>();
        int folds = 0;
        for (Topics.Read r : Topics.readAll(servers, o.get("--output"))) {
            folds++;
            JsonNode f = r.value();
            String account = f.path("account_id").asText();
            long count = f.path("folded_count").asLong();
            String closedBy = f.path("closed_by").asText();
            reasons.merge(closedBy, 1, Integer::sum);
            folded.merge(account, count, Long::sum);
            if (!account.equals(r.key())) {
                problems.add("fold keyed " + r.key() + " for account " + account);
            }
            long first = Instant.parse(f.path("first_event_at").asText()).toEpochMilli();
            long last = Instant.parse(f.path("last_event_at").asText()).toEpochMilli();
            switch (closedBy) {
                case "max_events" -> {
                    if (maxEvents == null || count != maxEvents) {
                        problems.add("closed by max_events with " + count + " events: " + f);
                    }
                }
                case "quiet" -> {
                    if (quietFor == null || r.timestamp() - last < quietFor) {
                        problems.add("closed as quiet " + (r.timestamp() - last) + " ms after its last event: " + f);
                    }
                }
                case "max_wait" -> {
                    if (maxWait == null || r.timestamp() - first < maxWait) {
                        problems.add("closed by max_wait " + (r.timestamp() - first) + " ms after its first event: " + f);
                    }
                }
                default -> problems.add("unknown close reason: " + f);
            }
            if (maxEvents != null && count > maxEvents) {
                problems.add("more than max_events: " + f);
            }
            Set<String> posts = foldedPosts.computeIfAbsent(account, a -> new TreeSet<>());
            boolean unique = sent.getOrDefault(account, List.of()).stream().distinct().count()
                    == sent.getOrDefault(account, List.of()).size();
            for (JsonNode post : f.path("posts")) {
                if (!posts.add(post.asText()) && unique) {
                    problems.add("post " + post.asText() + " of " + account + " in two folds");
                }
            }
            for (JsonNode metric : f.path("metrics")) {
                if (!sentMetrics.getOrDefault(account, Set.of()).contains(metric.asText())) {
                    problems.add("metric " + metric.asText() + " never sent for " + account);
                }
            }
        }
        long events = 0;
        for (Map.Entry<String, List<String>> e : sent.entrySet()) {
            events += e.getValue().size();
            if (folded.getOrDefault(e.getKey(), 0L) != e.getValue().size()) {
                problems.add(e.getKey() + ": " + e.getValue().size() + " events sent, "
                        + folded.getOrDefault(e.getKey(), 0L) + " folded");
            }
            if (!new TreeSet<>(e.getValue()).equals(foldedPosts.getOrDefault(e.getKey(), Set.of()))) {
                problems.add(e.getKey() + ": the folds' posts are not the posts sent");
            }
        }
        for (String account : folded.keySet()) {
            if (!sent.containsKey(account)) {
                problems.add("folds for " + account + ", which was never sent");
            }
        }
        System.out.println("{\"events\":" + events + ",\"not_foldable\":" + skipped + ",\"accounts\":" + sent.size()
                + ",\"folds\":" + folds + ",\"closed_by\":" + Json.MAPPER.valueToTree(reasons)
                + ",\"folding_ratio\":" + String.format("%.4f", events == 0 ? 0.0 : 1.0 - (double) folds / events)
                + ",\"problems\":" + problems.size() + "}");
        problems.stream().limit(20).forEach(p -> System.err.println("problem: " + p));
        return problems.isEmpty() ? 0 : 1;
    }
}
