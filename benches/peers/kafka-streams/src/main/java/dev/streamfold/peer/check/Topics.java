package dev.streamfold.peer.check;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.app.Durations;
import dev.streamfold.peer.json.Json;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
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
 * Topics for the checks: produce the load generator's events to one, read
 * one read_committed from start to end, delete a run's topics.
 */
final class Topics {
    private Topics() {}

    static int produce(String servers, Map<String, String> o) throws Exception {
        String topic = o.get("--topic");
        int partitions = Integer.parseInt(o.getOrDefault("--partitions", "4"));
        Properties admin = new Properties();
        admin.put("bootstrap.servers", servers);
        try (Admin a = Admin.create(admin)) {
            a.createTopics(List.of(new NewTopic(topic, Optional.of(partitions), Optional.empty())))
                    .all().get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
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

    static int deleteTopics(String servers, String prefix) throws Exception {
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

    static int read(String servers, String topic) {
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
}
