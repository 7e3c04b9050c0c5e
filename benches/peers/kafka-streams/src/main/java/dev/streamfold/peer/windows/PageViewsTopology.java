package dev.streamfold.peer.windows;

import dev.streamfold.peer.json.JsonSerde;
import dev.streamfold.peer.json.RawJson;
import java.time.Duration;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.WindowStore;

/**
 * topologies/page-views.yaml in the DSL: views timed by {@code /viewed_at}
 * and re-keyed by {@code /page} ({@link EventTime}) through the
 * repartition topic {@code <application.id>-views_per_page-repartition},
 * late views dead-lettered ({@link LateRecords}), then
 * {@code groupByKey().windowedBy(TimeWindows.ofSizeAndGrace(size, grace))
 * .emitStrategy(EmitStrategy.onWindowClose()).aggregate(...)}: each page's
 * window counted with its set of users in the window store
 * {@code views_per_page-windows}, emitted once, when it closes, as
 * streamfold emits it ({@link WindowOutput}).
 */
public final class PageViewsTopology {
    /** streamfold's node name, which names the repartition topic and the store. */
    static final String NODE = "views_per_page";

    private PageViewsTopology() {}

    public static Topology build(String inputTopic, String outputTopic, long sizeMs, long graceMs) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(inputTopic, Consumed.with(Serdes.String(), RawJson.serde()).withName("page_views"))
                .process(EventTime.supplier("viewed_at", "page"), Named.as(NODE + "-key_by"))
                .repartition(Repartitioned.<String, RawJson>as(NODE)
                        .withKeySerde(Serdes.String())
                        .withValueSerde(RawJson.serde()))
                .processValues(LateRecords.supplier(sizeMs, graceMs), Named.as(NODE + "-late"))
                .groupByKey(Grouped.with(Serdes.String(), RawJson.serde()))
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(sizeMs), Duration.ofMillis(graceMs)))
                .emitStrategy(EmitStrategy.onWindowClose())
                .aggregate(PageWindow::empty, (page, view, window) -> window.add(view.field("user")),
                        Named.as(NODE),
                        Materialized.<String, PageWindow, WindowStore<Bytes, byte[]>>as(NODE + "-windows")
                                .withKeySerde(Serdes.String())
                                .withValueSerde(PageWindow.serde()))
                .toStream(Named.as(NODE + "-closed"))
                .process(WindowOutput.supplier("page"), Named.as(NODE + "-output"))
                .to(outputTopic, Produced.with(Serdes.String(), JsonSerde.tree()).withName("views"));
        return builder.build();
    }
}
