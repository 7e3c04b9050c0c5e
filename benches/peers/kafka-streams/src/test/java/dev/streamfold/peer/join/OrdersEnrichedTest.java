package dev.streamfold.peer.join;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.streamfold.peer.testing.PeerDriver;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;

/**
 * The orders-enriched peer against streamfold's case
 * tests/cases/orders-enriched/enrich and its tombstone: each order keyed
 * by its customer with the profile the table holds then, as text.
 */
class OrdersEnrichedTest {
    @Test
    void orders_carry_the_profile_their_customer_has_when_they_are_processed() {
        try (PeerDriver peer = PeerDriver.start("orders-enriched")) {
            peer.send("customers", "c-1", "{\"name\":\"Ada\",\"tier\":\"gold\",\"email\":\"ada@example.com\"}");
            peer.send("customers", "c-2", "{\"name\":\"Grace\",\"tier\":\"silver\"}");
            peer.advance(Duration.ofMillis(1));
            peer.send("orders", "o-1", "{\"order_id\":\"o-1\",\"customer_id\":\"c-1\",\"total\":30}");
            peer.send("orders", "o-2", "{\"order_id\":\"o-2\",\"customer_id\":\"c-2\",\"total\":12}");
            peer.advance(Duration.ofMillis(1));
            peer.send("customers", "c-1", "{\"name\":\"Ada\",\"tier\":\"platinum\"}");
            peer.advance(Duration.ofMillis(1));
            peer.send("orders", "o-3", "{\"order_id\":\"o-3\",\"customer_id\":\"c-1\",\"total\":99}");
            peer.send("orders", "o-4", "{\"order_id\":\"o-4\",\"customer_id\":\"c-3\",\"total\":5}");
            peer.advance(Duration.ofMillis(1));
            peer.send("customers", "c-2", null);
            peer.advance(Duration.ofMillis(1));
            peer.send("orders", "o-5", "{\"order_id\":\"o-5\",\"customer_id\":\"c-2\",\"total\":1}");

            List<String> out = peer.read("orders-enriched").stream().map(r -> r.key() + " " + r.value()).toList();
            assertEquals(List.of(
                    "c-1 {\"customer\":{\"name\":\"Ada\",\"tier\":\"gold\"},\"customer_id\":\"c-1\",\"order_id\":\"o-1\",\"total\":30}",
                    "c-2 {\"customer\":{\"name\":\"Grace\",\"tier\":\"silver\"},\"customer_id\":\"c-2\",\"order_id\":\"o-2\",\"total\":12}",
                    "c-1 {\"customer\":{\"name\":\"Ada\",\"tier\":\"platinum\"},\"customer_id\":\"c-1\",\"order_id\":\"o-3\",\"total\":99}",
                    "c-3 {\"customer\":null,\"customer_id\":\"c-3\",\"order_id\":\"o-4\",\"total\":5}",
                    "c-2 {\"customer\":null,\"customer_id\":\"c-2\",\"order_id\":\"o-5\",\"total\":1}"), out);
        }
    }

    @Test
    void an_order_without_its_customer_is_dead_lettered() {
        try (PeerDriver peer = PeerDriver.start("orders-enriched")) {
            peer.send("orders", "o-3", "{\"order_id\":\"o-3\",\"total\":7}");
            List<TestRecord<String, String>> dlq = peer.read("orders-enriched-dlq");
            assertEquals(1, dlq.size());
            assertEquals("{\"order_id\":\"o-3\",\"total\":7}", dlq.get(0).value());
            assertEquals(List.of(), peer.read("orders-enriched"));
        }
    }
}
