package dev.streamfold.peer.check;

import java.util.HashMap;
import java.util.Map;

/**
 * Tools for checking the peer against a broker by hand (README.md, "How
 * it was checked"):
 *
 * <pre>
 * Check produce --bootstrap-servers S --topic T [--partitions 4]
 *     [--workload social-metrics|question-feed] [--events N] [--accounts A] [--from I]
 *     [--article] [--key-by-post] [--every D]
 *     [--raw TEXT --key K]
 * Check read --bootstrap-servers S --topic T
 * Check verify-folds --bootstrap-servers S --input T --output T [--max-events N]
 *     [--quiet-for D] [--max-wait D]
 * Check verify-feed --bootstrap-servers S --input T --questions T --thanks T --other T
 * Check wait-done --bootstrap-servers S --group G --topics T1,T2 [--timeout D]
 * Check delete-topics --bootstrap-servers S --prefix P
 * Check latency --bootstrap-servers S --input T --output T [--bursts 200]
 * </pre>
 *
 * {@code produce} sends what {@code streamfold-loadgen produce} sends (the
 * same events; {@code --key-by-post} keys post-metric events by post
 * instead of account, so the fold's re-key moves them; {@code --every}
 * spaces them out). {@code read} prints a topic as JSON lines, read
 * committed, from the start of every partition to its end. The two
 * {@code verify} commands read the input and outputs that way and check
 * the peer's results, printing a summary (exit status 1 on a mismatch).
 * {@code wait-done} waits until group G has committed every partition of
 * the topics to its end (the input, then the repartition topics) and
 * prints when that happened, timed from the first commit it saw: a
 * throughput figure for a run over a topic filled beforehand.
 * {@code delete-topics} deletes the topics whose names start with P (a
 * finished run's outputs and internal topics). {@code latency} measures a
 * running fold as the e2e benchmark measures streamfold ({@link Latency}).
 */
public final class Check {
    private Check() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: Check produce|read|verify-folds|verify-feed|wait-done|delete-topics|latency [options]");
            System.exit(2);
        }
        Map<String, String> o = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            String flag = args[i];
            boolean bool = flag.equals("--article") || flag.equals("--key-by-post");
            o.put(flag, bool ? "true" : args[++i]);
        }
        String servers = o.getOrDefault("--bootstrap-servers", "127.0.0.1:9092");
        int status = switch (args[0]) {
            case "produce" -> Topics.produce(servers, o);
            case "read" -> Topics.read(servers, o.get("--topic"));
            case "verify-folds" -> VerifyFolds.run(servers, o);
            case "verify-feed" -> VerifyFeed.run(servers, o);
            case "wait-done" -> WaitDone.run(servers, o);
            case "delete-topics" -> Topics.deleteTopics(servers, o.get("--prefix"));
            case "latency" -> Latency.run(servers, o);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        };
        System.exit(status);
    }
}
