package dev.streamfold.peer.join;

import dev.streamfold.peer.app.KeyBy;
import dev.streamfold.peer.json.JsonSerde;
import dev.streamfold.peer.json.RawJson;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * topologies/orders-enriched.yaml in the DSL: the customers topic read as
 * a table ({@code builder.table}, materialized in {@code enrich-table}
 * with its own changelog, as streamfold's join keeps its table), orders
 * re-keyed by {@code /customer_id} ({@code selectKey}) through the
 * repartition topic {@code <application.id>-enrich-repartition}, then
 * {@code leftJoin} with the table: every order goes out once, keyed by
 * its customer, with the profile the table holds when the order is
 * processed ({@link Enrich}).
 */
public final class OrdersEnrichedTopology {
    /** streamfold's node name, which names the repartition topic and the store. */
    static final String NODE = "enrich";

    private OrdersEnrichedTopology() {}

    public static Topology build(String ordersTopic, String customersTopic, String outputTopic) {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, RawJson> customers = builder.table(customersTopic,
                Consumed.with(Serdes.String(), RawJson.serde()).withName("customers"),
                Materialized.<String, RawJson, KeyValueStore<Bytes, byte[]>>as(NODE + "-table")
                        .withKeySerde(Serdes.String())
                        .withValueSerde(RawJson.serde()));
        builder.stream(ordersTopic, Consumed.with(Serdes.String(), RawJson.serde()).withName("orders"))
                .selectKey(new KeyBy("/customer_id"), Named.as(NODE + "-key_by"))
                .repartition(Repartitioned.<String, RawJson>as(NODE)
                        .withKeySerde(Serdes.String())
                        .withValueSerde(RawJson.serde()))
                .leftJoin(customers, new Enrich(),
                        Joined.with(Serdes.String(), RawJson.serde(), RawJson.serde()).withName(NODE))
                .to(outputTopic, Produced.with(Serdes.String(), JsonSerde.tree()).withName("enriched"));
        return builder.build();
    }
}
