package dev.streamfold.peer.check;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

/** {@code verify-feed}: the question feed's outputs against their input (see {@link Check}). */
final class VerifyFeed {
    private VerifyFeed() {}

    /**
     * Each distinct question event gives exactly one read model, whose
     * versions per question run 1, 2, ... with no gap or repeat; a
     * question's last read model counts its distinct AnswerAdded events;
     * each answer's thanks totals have growing sequences and Lamport clocks
     * 1, 2, ..., and end at the highest sequence sent.
     */
    static int run(String servers, Map<String, String> o) {
        Map<String, Set<String>> questionEvents = new HashMap<>();
        Map<String, Set<String>> answersAdded = new HashMap<>();
        Map<String, Long> highestThanks = new HashMap<>();
        Set<String> ids = new HashSet<>();
        int records = 0;
        int otherTypes = 0;
        for (Topics.Read r : Topics.readAll(servers, o.get("--input"))) {
            records++;
            JsonNode v = r.value();
            if (v == null || !v.path("event_id").isTextual()) {
                continue;
            }
            ids.add(v.get("event_id").textValue());
            String type = v.path("type").asText();
            if (type.equals("ThanksForAnswerGiven")) {
                highestThanks.merge(v.path("answer_id").asText(), v.path("sequence").asLong(), Math::max);
            } else if (Set.of("QuestionCreated", "QuestionEdited", "AnswerAdded", "QuestionDeleted").contains(type)) {
                String q = v.path("question_id").asText();
                questionEvents.computeIfAbsent(q, k -> new HashSet<>()).add(v.get("event_id").textValue());
                if (type.equals("AnswerAdded")) {
                    answersAdded.computeIfAbsent(q, k -> new HashSet<>()).add(v.get("event_id").textValue());
                }
            } else {
                otherTypes++;
            }
        }
        List<String> problems = new ArrayList<>();
        Map<String, List<JsonNode>> models = Topics.readAll(servers, o.get("--questions")).stream()
                .collect(Collectors.groupingBy(Topics.Read::key, LinkedHashMap::new,
                        Collectors.mapping(Topics.Read::value, Collectors.toList())));
        long readModels = 0;
        for (Map.Entry<String, Set<String>> e : questionEvents.entrySet()) {
            List<JsonNode> got = models.getOrDefault(e.getKey(), List.of());
            readModels += got.size();
            for (int i = 0; i < got.size(); i++) {
                if (got.get(i).path("version").asLong() != i + 1) {
                    problems.add(e.getKey() + ": read model " + i + " has version " + got.get(i).path("version"));
                    break;
                }
            }
            if (got.size() != e.getValue().size()) {
                problems.add(e.getKey() + ": " + e.getValue().size() + " distinct events, " + got.size() + " read models");
            } else if (got.get(got.size() - 1).path("answers").asLong(0)
                    != answersAdded.getOrDefault(e.getKey(), Set.of()).size()) {
                problems.add(e.getKey() + ": answers " + got.get(got.size() - 1).path("answers"));
            }
        }
        Map<String, List<JsonNode>> totals = Topics.readAll(servers, o.get("--thanks")).stream()
                .collect(Collectors.groupingBy(Topics.Read::key, LinkedHashMap::new,
                        Collectors.mapping(Topics.Read::value, Collectors.toList())));
        long thanks = 0;
        for (Map.Entry<String, Long> e : highestThanks.entrySet()) {
            List<JsonNode> got = totals.getOrDefault(e.getKey(), List.of());
            thanks += got.size();
            long sequence = Long.MIN_VALUE;
            for (int i = 0; i < got.size(); i++) {
                long s = got.get(i).path("sequence").asLong();
                if (s <= sequence || got.get(i).path("lamport").asLong() != i + 1) {
                    problems.add(e.getKey() + ": total " + i + " out of order: " + got.get(i));
                    break;
                }
                sequence = s;
            }
            if (got.isEmpty() || got.get(got.size() - 1).path("totalThanks").asLong() != e.getValue()) {
                problems.add(e.getKey() + ": the last total is not " + e.getValue());
            }
        }
        int other = Topics.readAll(servers, o.get("--other")).size();
        if (other != otherTypes) {
            problems.add(other + " other events out, " + otherTypes + " sent");
        }
        System.out.println("{\"records\":" + records + ",\"distinct_ids\":" + ids.size() + ",\"questions\":"
                + questionEvents.size() + ",\"read_models\":" + readModels + ",\"answers\":" + highestThanks.size()
                + ",\"thanks_totals\":" + thanks + ",\"other_events\":" + other + ",\"problems\":" + problems.size() + "}");
        problems.stream().limit(20).forEach(p -> System.err.println("problem: " + p));
        return problems.isEmpty() ? 0 : 1;
    }
}
