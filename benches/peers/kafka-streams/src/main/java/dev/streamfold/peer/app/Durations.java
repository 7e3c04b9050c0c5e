package dev.streamfold.peer.app;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Durations written as streamfold's topologies write them: {@code 250ms}, {@code 5s}, {@code 1m30s}, {@code 6h}. */
public final class Durations {
    private static final Pattern WHOLE = Pattern.compile("(?:\\d+(?:ms|s|m|h|d))+");
    private static final Pattern PART = Pattern.compile("(\\d+)(ms|s|m|h|d)");

    private Durations() {}

    /** Milliseconds of {@code text}; "off" is null: the rule is off. */
    public static Long parseOptional(String text) {
        return text.trim().equals("off") ? null : parse(text);
    }

    public static long parse(String text) {
        String compact = text.replace(" ", "");
        if (!WHOLE.matcher(compact).matches()) {
            throw new IllegalArgumentException(
                    "expected a duration like \"5s\", \"250ms\" or \"1m30s\", found \"" + text + "\"");
        }
        long total = 0;
        for (Matcher m = PART.matcher(compact); m.find(); ) {
            long n = Long.parseLong(m.group(1));
            total += switch (m.group(2)) {
                case "ms" -> n;
                case "s" -> n * 1_000;
                case "m" -> n * 60_000;
                case "h" -> n * 3_600_000;
                default -> n * 86_400_000;
            };
        }
        return total;
    }
}
