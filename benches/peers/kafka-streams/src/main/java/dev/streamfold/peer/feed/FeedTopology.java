package dev.streamfold.peer.feed;

import com.fasterxml.jackson.databind.JsonNode;
import dev.streamfold.peer.app.KeyBy;
import dev.streamfold.peer.feed.DedupProcessor.DedupSpec;
import dev.streamfold.peer.feed.OrderedProcessor.OrderedSpec;
import dev.streamfold.peer.feed.ProjectionProcessor.ProjectionSpec;
import dev.streamfold.peer.json.JsonSerde;
import dev.streamfold.peer.json.RawJson;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;

/**
 * topologies/question-feed.yaml: feed events deduplicated by event id
 * (per partition, as the producer keys an event and its retries alike),
 * then routed by type (the first matching route):
 *
 * <ul>
 *   <li>question events are re-keyed by {@code /question_id} through
 *       {@code <application.id>-project_question-repartition} and projected
 *       into the question read model;
 *   <li>{@code ThanksForAnswerGiven} events are re-keyed by
 *       {@code /answer_id} through
 *       {@code <application.id>-thanks_totals-repartition} and ordered
 *       into the newest thanks total per answer;
 *   <li>other events go, deduplicated and unchanged, to their own topic.
 * </ul>
 */
public final class FeedTopology {
    /** The node names and options of topologies/question-feed.yaml. */
    static final String QUESTION_ID = "/question_id";
    static final String ANSWER_ID = "/answer_id";
    static final Set<String> QUESTION_EVENTS = QuestionRules.NAMES;
    static final String THANKS_EVENT = "ThanksForAnswerGiven";

    private FeedTopology() {}

    /** Where the feed's records come from and go. */
    public record Topics(String events, String questions, String thanks, String otherEvents) {}

    public static Topology build(Topics topics, long retentionMs) {
        Produced<String, JsonNode> produced = Produced.with(Serdes.String(), JsonSerde.tree());
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(topics.events(), Consumed.with(Serdes.String(), RawJson.serde()).withName("feed_events"))
                .processValues(
                        DedupProcessor.supplier(new DedupSpec("dedup_events", "/event_id", retentionMs)),
                        Named.as("dedup_events"))
                .split(Named.as("by_type-"))
                .branch((key, value) -> QUESTION_EVENTS.contains(type(value)), Branched.withConsumer(questions -> questions
                        .selectKey(new KeyBy(QUESTION_ID), Named.as("project_question-key_by"))
                        .repartition(Repartitioned.<String, RawJson>as("project_question")
                                .withKeySerde(Serdes.String())
                                .withValueSerde(RawJson.serde()))
                        .process(ProjectionProcessor.supplier(new ProjectionSpec(
                                        "project_question", "/event_id", "/type", "/sequence",
                                        "question_id", "version", 50)),
                                Named.as("project_question"))
                        .to(topics.questions(), produced.withName("question_read_models")), "questions"))
                .branch((key, value) -> THANKS_EVENT.equals(type(value)), Branched.withConsumer(thanks -> thanks
                        .selectKey(new KeyBy(ANSWER_ID), Named.as("thanks_totals-key_by"))
                        .repartition(Repartitioned.<String, RawJson>as("thanks_totals")
                                .withKeySerde(Serdes.String())
                                .withValueSerde(RawJson.serde()))
                        .process(OrderedProcessor.supplier(new OrderedSpec(
                                        "thanks_totals", "/sequence", "/event_id", "lamport")),
                                Named.as("thanks_totals"))
                        .to(topics.thanks(), produced.withName("answer_thanks")), "thanks"))
                .defaultBranch(Branched.withConsumer(other -> other
                        .to(topics.otherEvents(), Produced.with(Serdes.String(), RawJson.serde())
                                .withName("other_events")), "other"));
        return builder.build();
    }

    /** The event's {@code type} when it is a string, else null (no route). */
    private static String type(RawJson value) {
        JsonNode type = value == null ? null : value.tree().get("type");
        return type != null && type.isTextual() ? type.textValue() : null;
    }
}
