package dev.streamfold.peer.fold;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.streamfold.peer.json.Json;
import java.nio.ByteBuffer;
import org.junit.jupiter.api.Test;

class OpenFoldSerdeTest {
    @Test
    void a_fold_reads_back_as_it_was_written() throws Exception {
        OpenFold fold = OpenFold.open(1_000, 900, 2);
        fold.touch(1_500, 1_400);
        fold.timer = 6_500L;
        MergeRule.KEY_UNION.merge(fold.acc.get(0), Json.MAPPER.readTree("{\"likes\":1,\"é\":2}"));
        MergeRule.SET.merge(fold.acc.get(1), Json.MAPPER.readTree("[\"post_1\",7,{\"a\":[1]},null,\"\"]"));

        OpenFold back = OpenFoldSerde.read(ByteBuffer.wrap(OpenFoldSerde.write(fold)));
        assertEquals(1_000, back.opened);
        assertEquals(1_500, back.touched);
        assertEquals(900, back.firstTs);
        assertEquals(1_400, back.lastTs);
        assertEquals(2, back.count);
        assertEquals(6_500L, back.timer);
        assertEquals("[\"likes\",\"é\"]", Json.MAPPER.valueToTree(back.acc.get(0).values()).toString());
        assertEquals("[null,7,\"\",\"post_1\",{\"a\":[1]}]", Json.MAPPER.valueToTree(back.acc.get(1).values()).toString());

        fold.timer = null;
        assertEquals(null, OpenFoldSerde.read(ByteBuffer.wrap(OpenFoldSerde.write(fold))).timer);
    }
}
