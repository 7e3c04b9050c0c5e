"""Quix Streams doing the social-metrics aggregation, for the e2e benchmark.

Run by `scripts/quix-peer.sh` (which installs Quix Streams into a venv) from
`cargo bench --bench e2e -- --peers quix`; not part of any test.

The workload is the peer's equivalent of `topologies/social-metrics.yaml`:
post-metric events keyed by account, a per-account 10 s tumbling window
(Kafka timestamps) reducing each window to the union of the metric names and
the set of post ids, emitted when the window closes, to an output topic,
under `processing_guarantee="exactly-once"` (Kafka transactions, RocksDB
state with changelog topics), committing every `--commit-interval`
seconds (Quix's default is 5; the benchmark gives every system the same
interval). Everything else is Quix's default.

Without `--limit` it runs until SIGTERM or SIGINT (the benchmark times it
from the group's commits, as it times the other systems), then commits
and exits 0. With `--limit` it processes the first that many records it
consumes (all partitions, interleaved as the consumer delivers them), then
stops; the time runs from its first record processed to the end of the
final checkpoint commit. Either way it prints one JSON line on stdout:
`{"records": N, "seconds": S, "rate": N/S, "processed_seconds": ..., "version": ...,
"peak_rss_kib": ...}`.
"""

import argparse
import json
import resource
import sys
import time

import quixstreams
from quixstreams import Application


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--commit-interval", type=float, default=5.0)
    args = parser.parse_args()

    app = Application(
        broker_address=args.bootstrap_servers,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    source = app.topic(args.topic, key_deserializer="str", value_deserializer="json")
    output = app.topic(args.output, value_serializer="json")
    # Quix copies the source topic's `retention.ms` to the changelog topics
    # it creates and fails when the broker's DescribeConfigs leaves it out
    # (nisshi reports only the configs a topic was created with): say
    # "infinite" as Kafka's default for a compacted topic would.
    source.broker_config.extra_config.setdefault("retention.ms", "-1")

    timing = {"first": None, "processed": None, "committed": None, "count": 0}

    def on_processed(topic, partition, offset):
        timing["count"] += 1
        if timing["first"] is None:
            timing["first"] = time.monotonic()
        if args.limit and timing["count"] == args.limit:
            timing["processed"] = time.monotonic()
            app.stop()

    app._on_message_processed = on_processed  # noqa: SLF001 (set after init: needs `app`)

    # The final commit after `stop()` is `commit_checkpoint(force=True)`;
    # time its end, not the consumer's close that follows.
    context = app._processing_context  # noqa: SLF001
    commit_checkpoint = context.commit_checkpoint

    def timed_commit(*a, **kw):
        result = commit_checkpoint(*a, **kw)
        if timing["processed"] is not None and kw.get("force"):
            timing["committed"] = time.monotonic()
        return result

    context.commit_checkpoint = timed_commit

    def initializer(value):
        return {"metrics": sorted(value["metrics"]), "posts": [value["post_id"]], "events": 1}

    def reducer(aggregate, value):
        metrics = aggregate["metrics"]
        for name in value["metrics"]:
            if name not in metrics:
                metrics.append(name)
        posts = aggregate["posts"]
        if value["post_id"] not in posts:
            posts.append(value["post_id"])
        aggregate["events"] += 1
        return aggregate

    sdf = app.dataframe(source)
    sdf = sdf.tumbling_window(duration_ms=10_000).reduce(reducer=reducer, initializer=initializer).final()
    sdf.to_topic(output)
    app.run()

    if args.limit and (timing["first"] is None or timing["processed"] is None):
        print(f"quix processed {timing['count']} records, fewer than {args.limit}", file=sys.stderr)
        return 1
    if timing["first"] is None:
        print(json.dumps({"records": 0, "version": quixstreams.__version__}))
        return 0
    if timing["processed"] is None:
        timing["processed"] = time.monotonic()
    end = timing["committed"] or time.monotonic()
    seconds = end - timing["first"]
    print(
        json.dumps(
            {
                "records": timing["count"],
                "seconds": seconds,
                "rate": timing["count"] / seconds,
                "processed_seconds": timing["processed"] - timing["first"],
                "version": quixstreams.__version__,
                # Linux reports ru_maxrss in KiB.
                "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
