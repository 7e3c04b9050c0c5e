package dev.streamfold.peer.check;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.json.Json;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * {@code latency}: the e2e benchmark's latency step (benches/e2e.rs) against
 * a running fold: bursts of 100 events for one new account each
 * ({@code max_events: 100} closes the fold at the burst's last event),
 * one burst every 20 ms; the latency is from the burst's last event (its
 * timestamp, the folded event's {@code last_event_at}) to the folded event
 * reaching a read_committed consumer. Prints the count, p50 and p99 in ms.
 */
final class Latency {
    private Latency() {}

    static int run(String servers, Map<String, String> o) throws Exception {
        String input = o.get("--input");
        String output = o.get("--output");
        int bursts = Integer.parseInt(o.getOrDefault("--bursts", "200"));
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, servers);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 10);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, servers);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        String run = Long.toString(System.currentTimeMillis());
        List<Double> latencies = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer =
                        new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
                KafkaProducer<byte[], byte[]> producer =
                        new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<TopicPartition> partitions = consumer.partitionsFor(output, Duration.ofSeconds(30)).stream()
                    .map(info -> new TopicPartition(output, info.partition()))
                    .toList();
            consumer.assign(partitions);
            consumer.seekToEnd(partitions);
            partitions.forEach(consumer::position);
            Thread sender = new Thread(() -> {
                for (int b = 0; b < bursts; b++) {
                    String account = "latency_" + run + "_" + b;
                    for (int i = 0; i < 100; i++) {
                        ObjectNode value = Json.MAPPER.createObjectNode();
                        value.put("post_id", "post_" + i);
                        value.put("account_id", account);
                        value.putObject("metrics").put("likes", i);
                        producer.send(new ProducerRecord<>(input, account.getBytes(StandardCharsets.UTF_8),
                                value.toString().getBytes(StandardCharsets.UTF_8)));
                    }
                    producer.flush();
                    try {
                        Thread.sleep(20);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "latency-sender");
            sender.start();
            long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(5);
            while (latencies.size() < bursts && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                    long received = System.currentTimeMillis();
                    JsonNode fold = Json.MAPPER.readTree(r.value());
                    if (fold.path("account_id").asText().startsWith("latency_" + run + "_")) {
                        long last = Instant.parse(fold.path("last_event_at").asText()).toEpochMilli();
                        latencies.add((double) (received - last));
                    }
                }
            }
            sender.join();
        }
        latencies.sort(Double::compare);
        if (latencies.isEmpty()) {
            System.err.println("no folded event arrived");
            return 1;
        }
        System.out.printf("{\"folds\":%d,\"p50_ms\":%.0f,\"p99_ms\":%.0f}%n", latencies.size(),
                percentile(latencies, 0.5), percentile(latencies, 0.99));
        return latencies.size() == bursts ? 0 : 1;
    }

    /** As benches/e2e.rs computes it: the nearest rank. */
    private static double percentile(List<Double> sorted, double p) {
        return sorted.get((int) Math.round((sorted.size() - 1) * p));
    }
}
