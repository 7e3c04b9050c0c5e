package dev.streamfold.peer.check;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.app.Durations;
import dev.streamfold.peer.json.Json;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Tools for checking the peer against a broker by hand (README.md, "How
 * it was checked"):
 *
 * <pre>
 * Check produce --bootstrap-servers S --topic T [--partitions 4]
 *     [--workload social-metrics|question-feed] [--events N] [--accounts A] [--from I]
 *     [--article] [--key-by-post] [--every D]
 *     [--raw TEXT --key K]
 * Check read --bootstrap-servers S --topic T
 * Check verify-folds --bootstrap-servers S --input T --output T [--max-events N]
 *     [--quiet-for D] [--max-wait D]
 * Check verify-feed --bootstrap-servers S --input T --questions T --thanks T --other T
 * Check wait-done --bootstrap-servers S --group G --topics T1,T2 [--timeout D]
 * Check delete-topics --bootstrap-servers S --prefix P
 * </pre>
 *
 * {@code produce} sends what {@code streamfold-loadgen produce} sends (the
 * same events; {@code --key-by-post} keys post-metric events by post
 * instead of account, so the fold's re-key moves them; {@code --every}
 * spaces them out). {@code read} prints a topic as JSON lines, read
 * committed, from the start of every partition to its end. The two
 * {@code verify} commands read the input and outputs that way and check
 * the peer's results, printing a summary (exit status 1 on a mismatch).
 * {@code wait-done} waits until group G has committed every partition of
 * the topics to its end (the input, then the repartition topics) and
 * prints when that happened, timed from the first commit it saw: a
 * throughput figure for a run over a topic filled beforehand.
 * {@code delete-topics} deletes the topics whose names start with P (a
 * finished run's outputs and internal topics).
 */
public final class Check {
    private Check() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: Check produce|read|verify-folds|verify-feed [options] (see the class docs)");
            System.exit(2);
        }
        Map<String, String> o = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            String flag = args[i];
            boolean bool = flag.equals("--article") || flag.equals("--key-by-post");
            o.put(flag, bool ? "true" : args[++i]);
        }
        String servers = o.getOrDefault("--bootstrap-servers", "127.0.0.1:9092");
        int status = switch (args[0]) {
            case "produce" -> produce(servers, o);
            case "read" -> read(servers, o.get("--topic"));
            case "verify-folds" -> verifyFolds(servers, o);
            case "verify-feed" -> verifyFeed(servers, o);
            case "wait-done" -> waitDone(servers, o);
            case "delete-topics" -> deleteTopics(servers, o.get("--prefix"));
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        };
        System.exit(status);
    }

    private static int produce(String servers, Map<String, String> o) throws Exception {
        String topic = o.get("--topic");
        int partitions = Integer.parseInt(o.getOrDefault("--partitions", "4"));
        Properties admin = new Properties();
        admin.put("bootstrap.servers", servers);
        try (Admin a = Admin.create(admin)) {
            a.createTopics(List.of(new NewTopic(topic, Optional.of(partitions), Optional.empty())))
                    .all().get(30, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, servers);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 20);
        long every = o.containsKey("--every") ? Durations.parse(o.get("--every")) : 0;
        long sent = 0;
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (o.containsKey("--raw")) {
                producer.send(new ProducerRecord<>(topic, bytes(o.get("--key")), bytes(o.get("--raw")))).get();
                System.err.println("produced 1 raw record to " + topic);
                return 0;
            }
            List<Workloads.Event> events = new ArrayList<>();
            if (o.containsKey("--article")) {
                events.addAll(Workloads.article());
            }
            long n = Long.parseLong(o.getOrDefault("--events", "0"));
            long from = Long.parseLong(o.getOrDefault("--from", "0"));
            long keys = Long.parseLong(o.getOrDefault("--accounts", "1000"));
            boolean feed = o.getOrDefault("--workload", "social-metrics").equals("question-feed");
            Workloads.QuestionFeed generator = new Workloads.QuestionFeed();
            int[] copies = {1};
            for (long i = 0; i < from + n; i++) {
                Workloads.Event e = feed ? generator.event(i, keys, copies) : Workloads.socialMetrics(i, keys, 1);
                if (i < from) {
                    continue; // Advances the generator's sequences only.
                }
                for (int c = 0; c < copies[0]; c++) {
                    events.add(e);
                }
            }
            boolean byPost = o.containsKey("--key-by-post");
            for (Workloads.Event e : events) {
                String key = byPost && e.value().has("post_id") ? e.value().get("post_id").textValue() : e.key();
                producer.send(new ProducerRecord<>(topic, bytes(key), Json.MAPPER.writeValueAsBytes(e.value())));
                sent++;
                if (every > 0) {
                    producer.flush();
                    Thread.sleep(every);
                }
            }
            producer.flush();
        }
        System.err.println("produced " + sent + " records to " + topic);
        return 0;
    }

    private static int waitDone(String servers, Map<String, String> o) throws Exception {
        List<String> topics = List.of(o.get("--topics").split(","));
        long timeout = Durations.parse(o.getOrDefault("--timeout", "30m"));
        Properties props = new Properties();
        props.put("bootstrap.servers", servers);
        try (Admin admin = Admin.create(props)) {
            long started = System.nanoTime();
            Long firstCommit = null;
            long lastCommitted = -1;
            while (System.nanoTime() - started < TimeUnit.MILLISECONDS.toNanos(timeout)) {
                Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(o.get("--group")).partitionsToOffsetAndMetadata().get();
                Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> latest = new HashMap<>();
                Map<String, org.apache.kafka.clients.admin.TopicDescription> described;
                try {
                    described = admin.describeTopics(topics).allTopicNames().get();
                } catch (java.util.concurrent.ExecutionException e) {
                    // A repartition topic the application has not created yet.
                    Thread.sleep(100);
                    continue;
                }
                for (var description : described.values()) {
                    description.partitions().forEach(p -> latest.put(new TopicPartition(description.name(), p.partition()),
                            org.apache.kafka.clients.admin.OffsetSpec.latest()));
                }
                var ends = admin.listOffsets(latest, new org.apache.kafka.clients.admin.ListOffsetsOptions(
                        org.apache.kafka.common.IsolationLevel.READ_COMMITTED)).all().get();
                long done = 0;
                boolean all = true;
                for (TopicPartition tp : latest.keySet()) {
                    var c = committed.get(tp);
                    long at = c == null ? 0 : c.offset();
                    done += at;
                    all &= at >= ends.get(tp).offset();
                }
                long now = System.nanoTime();
                if (firstCommit == null && done > 0) {
                    firstCommit = now;
                }
                if (all && done > 0 && done == lastCommitted) {
                    double seconds = (now - firstCommit) / 1e9;
                    System.out.println("{\"committed\":" + done + ",\"seconds_from_first_commit\":"
                            + String.format("%.2f", seconds) + "}");
                    return 0;
                }
                lastCommitted = done;
                Thread.sleep(100);
            }
        }
        System.err.println("not done within " + o.getOrDefault("--timeout", "30m"));
        return 1;
    }

    private static int deleteTopics(String servers, String prefix) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", servers);
        try (Admin admin = Admin.create(props)) {
            List<String> topics = admin.listTopics().names().get().stream()
                    .filter(t -> t.startsWith(prefix)).sorted().toList();
            admin.deleteTopics(topics).all().get(60, TimeUnit.SECONDS);
            System.err.println("deleted " + topics.size() + " topics: " + topics);
        }
        return 0;
    }

    private static byte[] bytes(String text) {
        return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
    }

    /** A record as read: key, value (JSON, or the text when it is not), timestamp. */
    record Read(String key, JsonNode value, String text, long timestamp, int partition,
            Map<String, String> headers) {}

    /** Every committed record of {@code topic}, partition by partition, in offset order. */
    static List<Read> readAll(String servers, String topic) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, servers);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        List<Read> out = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic, Duration.ofSeconds(30)).stream()
                    .map(info -> new TopicPartition(topic, info.partition()))
                    .sorted((a, b) -> Integer.compare(a.partition(), b.partition()))
                    .toList();
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            // Under read_committed, the end offsets are the last stable offsets.
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(topic + ": the end was not reached within 60 s");
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    String text = r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8);
                    JsonNode value;
                    try {
                        value = text == null ? null : Json.MAPPER.readTree(text);
                    } catch (Exception e) {
                        value = null;
                    }
                    Map<String, String> headers = new LinkedHashMap<>();
                    r.headers().forEach(h -> headers.put(h.key(), new String(h.value(), StandardCharsets.UTF_8)));
                    out.add(new Read(r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8),
                            value, text, r.timestamp(), r.partition(), headers));
                }
            }
        }
        return out;
    }

    private static int read(String servers, String topic) {
        for (Read r : readAll(servers, topic)) {
            ObjectNode line = Json.MAPPER.createObjectNode();
            line.put("key", r.key());
            if (r.value() != null) {
                line.set("value", r.value());
            } else {
                line.put("raw", r.text());
            }
            line.put("timestamp", Instant.ofEpochMilli(r.timestamp()).toString());
            line.put("partition", r.partition());
            if (!r.headers().isEmpty()) {
                ObjectNode headers = line.putObject("headers");
                r.headers().forEach((k, v) -> {
                    if (!k.equals("__streams.errors.stacktrace")) {
                        headers.put(k, v);
                    }
                });
            }
            System.out.println(line);
        }
        return 0;
    }

    /**
     * Every input event that has an account and a metrics object is in
     * exactly one fold of its account (when post ids are unique per
     * account: by post; always: by count); each fold's close reason agrees
     * with its times and count.
     */
    private static int verifyFolds(String servers, Map<String, String> o) {
        Long maxEvents = o.containsKey("--max-events") ? Long.parseLong(o.get("--max-events")) : null;
        Long quietFor = o.containsKey("--quiet-for") ? Durations.parse(o.get("--quiet-for")) : null;
        Long maxWait = o.containsKey("--max-wait") ? Durations.parse(o.get("--max-wait")) : null;
        Map<String, List<String>> sent = new TreeMap<>();
        Map<String, Set<String>> sentMetrics = new HashMap<>();
        int skipped = 0;
        for (Read r : readAll(servers, o.get("--input"))) {
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
        for (Read r : readAll(servers, o.get("--output"))) {
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

    /**
     * Each distinct question event gives exactly one read model, whose
     * versions per question run 1, 2, ... with no gap or repeat; a
     * question's last read model counts its distinct AnswerAdded events;
     * each answer's thanks totals have growing sequences and Lamport clocks
     * 1, 2, ..., and end at the highest sequence sent.
     */
    private static int verifyFeed(String servers, Map<String, String> o) {
        Map<String, Set<String>> questionEvents = new HashMap<>();
        Map<String, Set<String>> answersAdded = new HashMap<>();
        Map<String, Long> highestThanks = new HashMap<>();
        Set<String> ids = new java.util.HashSet<>();
        int records = 0;
        int otherTypes = 0;
        for (Read r : readAll(servers, o.get("--input"))) {
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
                questionEvents.computeIfAbsent(q, k -> new java.util.HashSet<>()).add(v.get("event_id").textValue());
                if (type.equals("AnswerAdded")) {
                    answersAdded.computeIfAbsent(q, k -> new java.util.HashSet<>()).add(v.get("event_id").textValue());
                }
            } else {
                otherTypes++;
            }
        }
        List<String> problems = new ArrayList<>();
        Map<String, List<JsonNode>> models = readAll(servers, o.get("--questions")).stream()
                .collect(Collectors.groupingBy(Read::key, LinkedHashMap::new,
                        Collectors.mapping(Read::value, Collectors.toList())));
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
        Map<String, List<JsonNode>> totals = readAll(servers, o.get("--thanks")).stream()
                .collect(Collectors.groupingBy(Read::key, LinkedHashMap::new,
                        Collectors.mapping(Read::value, Collectors.toList())));
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
        int other = readAll(servers, o.get("--other")).size();
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
