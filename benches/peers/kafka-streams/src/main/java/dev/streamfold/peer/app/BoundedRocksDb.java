package dev.streamfold.peer.app;

import java.util.List;
import java.util.Map;
import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.Cache;
import org.rocksdb.CompressionType;
import org.rocksdb.IndexType;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.WriteBufferManager;

/**
 * RocksDB memory bounded for the whole instance, as streamfold bounds it,
 * instead of per store: Kafka Streams opens one RocksDB per store, task
 * and (for window stores) time segment, each by default with its own
 * 50 MiB block cache and three 16 MiB memtables, so memory grows with the
 * number of partitions and stores. Here every store shares one LRU cache
 * and one write buffer manager (Kafka Streams' documented
 * "BoundedMemoryRocksDBConfig" pattern):
 *
 * <ul>
 *   <li>one cache of {@code block cache + write buffers} bytes (64 + 128
 *       MiB by default, streamfold's {@code state.block_cache} and
 *       {@code state.write_buffers}), with the memtables charged to it, so
 *       the total stays within it and blocks get at least the block cache
 *       share;
 *   <li>index and filter blocks charged to the cache too (high priority),
 *       partitioned behind a pinned top-level index, so a large store's
 *       filters are not evicted and re-read on every lookup;
 *   <li>no compression on levels 0 and 1 (rewritten soon), LZ4 below, as
 *       streamfold does; Kafka Streams' default is no compression at all.
 * </ul>
 *
 * Kafka Streams' own Bloom filter (10 bits a key) is kept. Sizes come from
 * the Streams properties {@value #BLOCK_CACHE_CONFIG} and
 * {@value #WRITE_BUFFERS_CONFIG}.
 */
public final class BoundedRocksDb implements RocksDBConfigSetter {
    public static final String BLOCK_CACHE_CONFIG = "peer.rocksdb.block.cache.bytes";
    public static final String WRITE_BUFFERS_CONFIG = "peer.rocksdb.write.buffers.bytes";
    static final long DEFAULT_BLOCK_CACHE = 64L << 20;
    static final long DEFAULT_WRITE_BUFFERS = 128L << 20;

    /** Share of the cache kept for index and filter blocks. */
    private static final double HIGH_PRIORITY_RATIO = 0.1;

    private static Cache cache;
    private static WriteBufferManager writeBuffers;

    /** The instance-wide cache and write buffer manager, made on first use. */
    private static synchronized void share(Map<String, Object> configs) {
        if (cache != null) {
            return;
        }
        long blockCache = size(configs, BLOCK_CACHE_CONFIG, DEFAULT_BLOCK_CACHE);
        long memtables = size(configs, WRITE_BUFFERS_CONFIG, DEFAULT_WRITE_BUFFERS);
        cache = new LRUCache(blockCache + memtables, -1, false, HIGH_PRIORITY_RATIO);
        // No stall: a writer over the budget flushes a memtable instead of
        // waiting.
        writeBuffers = new WriteBufferManager(memtables, cache, false);
    }

    private static long size(Map<String, Object> configs, String key, long otherwise) {
        Object value = configs.get(key);
        return value == null ? otherwise : Long.parseLong(value.toString());
    }

    @Override
    public void setConfig(String storeName, Options options, Map<String, Object> configs) {
        share(configs);
        BlockBasedTableConfig table = (BlockBasedTableConfig) options.tableFormatConfig();
        table.setBlockCache(cache);
        table.setCacheIndexAndFilterBlocks(true);
        table.setCacheIndexAndFilterBlocksWithHighPriority(true);
        table.setPinL0FilterAndIndexBlocksInCache(true);
        table.setIndexType(IndexType.kTwoLevelIndexSearch);
        table.setPartitionFilters(true);
        table.setMetadataBlockSize(4096);
        table.setPinTopLevelIndexAndFilter(true);
        options.setTableFormatConfig(table);
        options.setWriteBufferManager(writeBuffers);
        options.setCompressionPerLevel(List.of(
                CompressionType.NO_COMPRESSION,
                CompressionType.NO_COMPRESSION,
                CompressionType.LZ4_COMPRESSION,
                CompressionType.LZ4_COMPRESSION,
                CompressionType.LZ4_COMPRESSION,
                CompressionType.LZ4_COMPRESSION,
                CompressionType.LZ4_COMPRESSION));
    }

    @Override
    public void close(String storeName, Options options) {
        // The cache and write buffer manager are shared by every store and
        // live as long as the process: nothing to close per store.
    }
}
