package dev.streamfold.peer.join;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.streamfold.peer.app.BadRecord;
import dev.streamfold.peer.json.Json;
import dev.streamfold.peer.json.RawJson;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.streams.kstream.ValueJoiner;

/**
 * The join's {@code value}, jq's
 * {@code .orders + {customer: (.customers | if . then {name, tier} else null end)}}:
 * the order's fields with {@code customer} added (or replaced), the
 * customer's {@code name} and {@code tier} (null when missing), or null
 * when the table has no row for the customer. Fields sorted by name, as
 * streamfold writes its objects. A value jq could not evaluate (an order
 * that is not an object, a profile that is not one) is the record's
 * fault: dead-lettered.
 */
public final class Enrich implements ValueJoiner<RawJson, RawJson, JsonNode> {
    @Override
    public JsonNode apply(RawJson order, RawJson customer) {
        JsonNode fields = order.tree();
        if (!fields.isObject()) {
            throw new BadRecord("value expression failed: cannot add an object to " + Json.typeName(fields));
        }
        JsonNode profile = NullNode.getInstance();
        if (customer != null) {
            JsonNode row = customer.tree();
            if (row.isObject()) {
                ObjectNode picked = Json.MAPPER.createObjectNode();
                picked.set("name", row.hasNonNull("name") ? row.get("name") : NullNode.getInstance());
                picked.set("tier", row.hasNonNull("tier") ? row.get("tier") : NullNode.getInstance());
                profile = picked;
            } else if (!row.isNull() && !(row.isBoolean() && !row.booleanValue())) {
                throw new BadRecord("value expression failed: cannot index " + Json.typeName(row) + " with \"name\"");
            }
        }
        List<Map.Entry<String, JsonNode>> all = new ArrayList<>(fields.size() + 1);
        for (Iterator<Map.Entry<String, JsonNode>> it = fields.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> field = it.next();
            if (!field.getKey().equals("customer")) {
                all.add(field);
            }
        }
        all.add(Map.entry("customer", profile));
        all.sort((a, b) -> Json.compareText(a.getKey(), b.getKey()));
        ObjectNode out = Json.MAPPER.createObjectNode();
        for (Map.Entry<String, JsonNode> field : all) {
            out.set(field.getKey(), field.getValue());
        }
        return out;
    }
}
