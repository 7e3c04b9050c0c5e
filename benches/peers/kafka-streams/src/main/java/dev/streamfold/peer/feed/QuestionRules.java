package dev.streamfold.peer.feed;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.BooleanNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import java.util.Set;

/**
 * The {@code project_question} rules of topologies/question-feed.yaml, one
 * per event name, written in Java. Each takes the entity ({@code {}}
 * before its first event) and the event, and gives the new entity, with
 * jq's meaning of the expression in the topology:
 *
 * <pre>
 * QuestionCreated: . + {title: $event.title, author: $event.author, is_deleted: (.is_deleted // false)}
 * QuestionEdited:  .title = $event.title
 * AnswerAdded:     .answers += 1
 * QuestionDeleted: .is_deleted = true
 * </pre>
 *
 * Fields keep their place when set again and new ones go last, as jq
 * (and streamfold's read model) orders them.
 */
final class QuestionRules {
    /** The event names with a rule. */
    static final Set<String> NAMES = Set.of("QuestionCreated", "QuestionEdited", "AnswerAdded", "QuestionDeleted");

    private QuestionRules() {}

    /**
     * The entity after {@code event} named {@code name} (which has a rule).
     * {@code entity} is not changed: the result is a new object.
     */
    static ObjectNode apply(String name, JsonNode entity, JsonNode event) {
        ObjectNode next = entity instanceof ObjectNode object ? object.deepCopy() : Json.MAPPER.createObjectNode();
        switch (name) {
            case "QuestionCreated" -> {
                // `.is_deleted // false`: the entity's value unless it is
                // null or false.
                JsonNode deleted = next.get("is_deleted");
                boolean keep = deleted != null && !deleted.isNull()
                        && !(deleted.isBoolean() && !deleted.booleanValue());
                next.set("title", field(event, "title"));
                next.set("author", field(event, "author"));
                next.set("is_deleted", keep ? deleted : BooleanNode.FALSE);
            }
            case "QuestionEdited" -> next.set("title", field(event, "title"));
            case "AnswerAdded" -> {
                JsonNode answers = next.get("answers");
                if (answers == null || answers.isNull()) {
                    next.put("answers", 1);
                } else if (answers.isIntegralNumber() && answers.canConvertToLong()
                        && answers.longValue() != Long.MAX_VALUE) {
                    next.put("answers", answers.longValue() + 1);
                } else if (answers.isNumber()) {
                    next.put("answers", answers.doubleValue() + 1);
                } else {
                    throw new BadRecord("rule `AnswerAdded` failed: cannot add " + Json.typeName(answers)
                            + " and a number");
                }
            }
            case "QuestionDeleted" -> next.set("is_deleted", BooleanNode.TRUE);
            default -> throw new IllegalArgumentException("no rule for event `" + name + "`");
        }
        return next;
    }

    /** {@code $event.<name>}: the field, or null when absent. */
    private static JsonNode field(JsonNode event, String name) {
        JsonNode value = event == null ? null : event.get(name);
        return value == null ? NullNode.getInstance() : value;
    }
}
