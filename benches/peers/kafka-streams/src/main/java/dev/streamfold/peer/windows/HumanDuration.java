package dev.streamfold.peer.windows;

/**
 * Durations written as streamfold writes them in messages (the humantime
 * crate's format): {@code 4m}, {@code 1h 30m}, {@code 2days 3h}, {@code 0s}.
 */
final class HumanDuration {
    private static final long DAY = 86_400_000L;
    /** humantime's year and month: 365.25 and 30.44 days. */
    private static final long YEAR = 31_557_600_000L;
    private static final long MONTH = 2_630_016_000L;

    private HumanDuration() {}

    static String format(long millis) {
        if (millis <= 0) {
            return "0s";
        }
        StringBuilder out = new StringBuilder();
        long left = millis;
        left = plural(out, left, YEAR, "year");
        left = plural(out, left, MONTH, "month");
        left = plural(out, left, DAY, "day");
        left = unit(out, left, 3_600_000L, "h");
        left = unit(out, left, 60_000L, "m");
        left = unit(out, left, 1_000L, "s");
        unit(out, left, 1L, "ms");
        return out.toString();
    }

    private static long plural(StringBuilder out, long left, long size, String name) {
        long n = left / size;
        if (n > 0) {
            separate(out).append(n).append(name).append(n > 1 ? "s" : "");
        }
        return left % size;
    }

    private static long unit(StringBuilder out, long left, long size, String name) {
        long n = left / size;
        if (n > 0) {
            separate(out).append(n).append(name);
        }
        return left % size;
    }

    private static StringBuilder separate(StringBuilder out) {
        return out.isEmpty() ? out : out.append(' ');
    }
}
