package dev.streamfold.peer.app;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The topics a run needs besides Kafka Streams' internal ones (which it
 * creates itself), as streamfold handles them: wait for the input topics to
 * exist, then create the output and dead-letter topics that are missing,
 * with as many partitions as the input (compacted where streamfold's sink
 * says {@code compact: true}).
 */
public final class TopicSetup {
    private static final Logger LOG = LoggerFactory.getLogger(TopicSetup.class);

    /** An output topic and whether it is compacted. */
    public record Output(String topic, boolean compact) {}

    private TopicSetup() {}

    /** Returns the input's partition count once it exists. */
    public static int prepare(Options o, List<Output> outputs, Duration waitForInput)
            throws InterruptedException, ExecutionException, TimeoutException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, o.bootstrapServers);
        for (Map.Entry<String, String> e : o.overrides.entrySet()) {
            // Security and connection settings apply to the admin client too.
            if (AdminClientConfig.configNames().contains(e.getKey())) {
                props.put(e.getKey(), e.getValue());
            }
        }
        try (Admin admin = Admin.create(props)) {
            int partitions = waitFor(admin, o.input, waitForInput);
            for (String other : o.inputs()) {
                int found = waitFor(admin, other, waitForInput);
                if (found != partitions) {
                    // Kafka Streams would refuse to start; say why first.
                    throw new IllegalStateException("topic " + other + " has " + found + " partitions and "
                            + o.input + " " + partitions + ": a join's inputs must be co-partitioned");
                }
            }
            List<NewTopic> wanted = new ArrayList<>();
            for (Output out : outputs) {
                NewTopic topic = new NewTopic(out.topic(), Optional.of(partitions), Optional.empty());
                if (out.compact()) {
                    topic.configs(Map.of(TopicConfig.CLEANUP_POLICY_CONFIG, TopicConfig.CLEANUP_POLICY_COMPACT));
                }
                wanted.add(topic);
            }
            CreateTopicsResult created = admin.createTopics(wanted);
            for (Map.Entry<String, ? extends Future<Void>> e : created.values().entrySet()) {
                try {
                    e.getValue().get(30, TimeUnit.SECONDS);
                    LOG.info("Created topic {} ({} partitions).", e.getKey(), partitions);
                } catch (ExecutionException ex) {
                    if (!(ex.getCause() instanceof TopicExistsException)) {
                        throw ex;
                    }
                }
            }
            return partitions;
        }
    }

    private static int waitFor(Admin admin, String topic, Duration timeout)
            throws InterruptedException, ExecutionException, TimeoutException {
        long deadline = System.nanoTime() + timeout.toNanos();
        boolean told = false;
        while (true) {
            try {
                Map<String, TopicDescription> found =
                        admin.describeTopics(Set.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS);
                return found.get(topic).partitions().size();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                    throw e;
                }
            }
            if (System.nanoTime() > deadline) {
                throw new TimeoutException("input topic " + topic + " did not appear within " + timeout);
            }
            if (!told) {
                LOG.info("Waiting for input topic {} to exist.", topic);
                told = true;
            }
            Thread.sleep(500);
        }
    }
}
