package dev.streamfold.peer.check;

import dev.streamfold.peer.app.Durations;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

/** {@code wait-done}: waits until a group has committed its topics to their ends (see {@link Check}). */
final class WaitDone {
    private WaitDone() {}

    static int run(String servers, Map<String, String> o) throws Exception {
        List<String> topics = List.of(o.get("--topics").split(","));
        long timeout = Durations.parse(o.getOrDefault("--timeout", "30m"));
        Properties props = new Properties();
        props.put("bootstrap.servers", servers);
        try (Admin admin = Admin.create(props)) {
            long started = System.nanoTime();
            Long firstCommit = null;
            long lastCommitted = -1;
            while (System.nanoTime() - started < TimeUnit.MILLISECONDS.toNanos(timeout)) {
                Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(o.get("--group")).partitionsToOffsetAndMetadata().get();
                Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
                Map<String, TopicDescription> described;
                try {
                    described = admin.describeTopics(topics).allTopicNames().get();
                } catch (ExecutionException e) {
                    // A repartition topic the application has not created yet.
                    Thread.sleep(100);
                    continue;
                }
                for (var description : described.values()) {
                    description.partitions().forEach(p -> latest.put(new TopicPartition(description.name(), p.partition()),
                            OffsetSpec.latest()));
                }
                var ends = admin.listOffsets(latest, new ListOffsetsOptions(
                        IsolationLevel.READ_COMMITTED)).all().get();
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
}
