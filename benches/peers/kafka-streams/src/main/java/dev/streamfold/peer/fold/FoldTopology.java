package dev.streamfold.peer.fold;

import dev.streamfold.peer.json.JsonSerde;
import dev.streamfold.peer.json.RawJson;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;

/**
 * topologies/social-metrics.yaml: post-metric events re-keyed by their
 * account ({@code key_by: /account_id}) through the repartition topic
 * {@code <application.id>-fold_account-repartition}, folded per account,
 * the folds written to the output topic.
 */
public final class FoldTopology {
    private FoldTopology() {}

    public static Topology build(FoldSpec spec, String inputTopic, String outputTopic) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(inputTopic, Consumed.with(Serdes.String(), RawJson.serde()).withName("post_metrics"))
                .selectKey(spec.keyBy(), Named.as(spec.node() + "-key_by"))
                .repartition(Repartitioned.<String, RawJson>as(spec.node())
                        .withKeySerde(Serdes.String())
                        .withValueSerde(RawJson.serde()))
                .process(FoldProcessor.supplier(spec), Named.as(spec.node()))
                .to(outputTopic, Produced.with(Serdes.String(), JsonSerde.tree()).withName("folded"));
        return builder.build();
    }
}
