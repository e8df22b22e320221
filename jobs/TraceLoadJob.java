import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.locks.LockSupport;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.util.ParameterTool;

/**
 * foresail's load job: a source whose input rate follows a trace on wall-clock time, a keyed CPU-costly
 * operator whose capacity grows with the number of workers, and the backlog exposed as a gauge.
 *
 * <p>The trace is a {@code second|count} file: {@code count} records become due during second
 * {@code second} after the job's first start (a missing second repeats the previous count; after the
 * last line its count goes on). The file is re-read when it changes, so a test can program the load of
 * the seconds still to come. Records that are due but not yet emitted are the backlog, as records
 * produced to Kafka but not yet consumed would be: the source reports them as {@code pendingRecords}
 * (FLIP-33's name), the cumulative due count as {@code recordsDue} (Kafka's messages-in counter) and the
 * trace's current rate as {@code inputRatePerSecond} (the broker's messages-in rate: unlike a rate over
 * {@code recordsDue}, it has no jump when the source restarts).
 *
 * <p>The source runs at parallelism 1 (max parallelism 1): a reactive-mode rescale changes only the
 * keyed operator, whose per-record work makes the job CPU-bound. Emitted count and start time are
 * checkpointed, so a restart replays the records since the last checkpoint, as a Kafka source would.
 *
 * <p>Arguments: {@code --trace FILE} (required), {@code --work N} (hash rounds per record, default
 * 20000), {@code --keys K} (default 1024), {@code --topology single|chain} (default single),
 * {@code --max-behind-ms M}: the source keeps at most what falls due in M ms as its backlog and skips
 * the rest (counted as {@code skippedRecords}), as StreamBed's rate-limited sources abide by backpressure
 * instead of catching up later (a restart then replays at most that much); by default it keeps every due
 * record, as Kafka would.
 *
 * <p>{@code single}: source → keyed {@code burn} → discarding sink, chained where Flink can (two tasks).
 * {@code chain}: a multi-vertex job with chaining off, so every operator is its own vertex reporting its
 * own task metrics: source → (rebalance) {@code parse}, a cheap map of {@code work / 4} rounds that makes
 * each record a 256-byte event → (keyBy) {@code burn}, {@code work} rounds → {@code store}, a sink that waits {@code --sink-wait-us} µs per record
 * without using CPU, as a sink writing to an external store does. {@code --sink-wait-file FILE}, when
 * given, holds the wait in µs and is re-read once per second, so a test can move the bottleneck between
 * {@code burn} (CPU-bound) and {@code store} (sink-bound, CPU low) without restarting the job.
 */
public class TraceLoadJob {

    public static void main(String[] args) throws Exception {
        ParameterTool params = ParameterTool.fromArgs(args);
        String trace = params.getRequired("trace");
        int work = params.getInt("work", 20000);
        int keys = params.getInt("keys", 1024);
        String topology = params.get("topology", "single");

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        long maxBehindMs = params.getLong("max-behind-ms", -1L);
        DataStream<Long> source = env.addSource(new TraceSource(trace, maxBehindMs), "trace", Types.LONG)
                .setParallelism(1)
                .setMaxParallelism(1);
        if (topology.equals("single")) {
            source.keyBy(value -> value % keys, Types.LONG)
                    .map(new Burn(work))
                    .name("burn")
                    .setMaxParallelism(128)
                    .sinkTo(new DiscardingSink<>())
                    .name("discard");
        } else if (topology.equals("chain")) {
            env.disableOperatorChaining();
            long sinkWaitUs = params.getLong("sink-wait-us", 0L);
            String sinkWaitFile = params.get("sink-wait-file", null);
            source.rebalance()
                    .map(new Parse(work / 4), PrimitiveArrayTypeInfo.LONG_PRIMITIVE_ARRAY_TYPE_INFO)
                    .name("parse")
                    .setMaxParallelism(128)
                    .keyBy(event -> event[0] % keys, Types.LONG)
                    .map(new BurnEvent(work), PrimitiveArrayTypeInfo.LONG_PRIMITIVE_ARRAY_TYPE_INFO)
                    .name("burn")
                    .setMaxParallelism(128)
                    .sinkTo(new WaitingSink(sinkWaitUs, sinkWaitFile))
                    .name("store")
                    .setMaxParallelism(128);
        } else {
            throw new IllegalArgumentException("--topology must be single or chain, not " + topology);
        }
        env.execute("foresail-trace-load");
    }

    /** {@code rounds} rounds of a 64-bit LCG with a xor-shift: CPU work the JIT cannot remove. */
    static long hashRounds(long value, int rounds) {
        long x = value;
        for (int i = 0; i < rounds; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    /** Due records of a trace: prefix sums over per-second counts, read again when the file changes. */
    static final class Trace {
        private final Path path;
        private long modified = -1;
        private long checkedAtMs = 0;
        private long[] prefix = {0};
        private long last = 0;

        Trace(String path) {
            this.path = Paths.get(path);
        }

        /** Re-reads the file at most once per second, when its modification time changed. */
        synchronized void refresh(long nowMs) throws IOException {
            if (nowMs - checkedAtMs < 1000 && modified >= 0) {
                return;
            }
            checkedAtMs = nowMs;
            long stamp = Files.getLastModifiedTime(path).toMillis();
            if (stamp == modified) {
                return;
            }
            TreeMap<Integer, Long> counts = new TreeMap<>();
            for (String line : Files.readAllLines(path)) {
                String text = line.trim();
                if (text.isEmpty() || text.startsWith("#") || !text.contains("|")) {
                    continue;
                }
                String[] parts = text.split("\\|");
                counts.put(Integer.parseInt(parts[0].trim()), Math.round(Double.parseDouble(parts[1].trim())));
            }
            int end = counts.isEmpty() ? 0 : counts.lastKey() + 1;
            long[] sums = new long[end + 1];
            long current = 0;
            for (int second = 0; second < end; second++) {
                Long count = counts.get(second);
                current = count != null ? count : current;
                sums[second + 1] = sums[second] + current;
            }
            prefix = sums;
            last = current;
            modified = stamp;
        }

        /** The trace's rate (records/s) during second {@code seconds} after the start. */
        synchronized long rateAt(double seconds) {
            int whole = (int) Math.floor(Math.max(0, seconds));
            return whole >= prefix.length - 1 ? last : prefix[whole + 1] - prefix[whole];
        }

        /** Records due from the start until {@code seconds} later (fractional seconds count pro rata). */
        synchronized long dueAt(double seconds) {
            if (seconds <= 0) {
                return 0;
            }
            int whole = (int) Math.floor(seconds);
            double fraction = seconds - whole;
            int end = prefix.length - 1;
            if (whole >= end) {
                return prefix[end] + Math.round(last * (seconds - end));
            }
            long inSecond = prefix[whole + 1] - prefix[whole];
            return prefix[whole] + Math.round(inSecond * fraction);
        }
    }

    /** Emits the trace's records as they fall due; backpressure shows as a growing backlog. */
    static final class TraceSource extends RichSourceFunction<Long> implements CheckpointedFunction {
        private final String tracePath;
        private final long maxBehindMs;
        private transient Trace trace;
        private transient ListState<Long> checkpointed;
        private volatile boolean running = true;
        private volatile long emitted = 0;
        private volatile long startMs = -1;
        private volatile long skipped = 0;

        TraceSource(String tracePath, long maxBehindMs) {
            this.tracePath = tracePath;
            this.maxBehindMs = maxBehindMs;
        }

        @Override
        public void initializeState(FunctionInitializationContext context) throws Exception {
            checkpointed = context.getOperatorStateStore()
                    .getListState(new ListStateDescriptor<>("emitted-and-start", Types.LONG));
            List<Long> saved = new ArrayList<>();
            for (Long value : checkpointed.get()) {
                saved.add(value);
            }
            if (saved.size() == 2) {
                emitted = saved.get(0);
                startMs = saved.get(1);
            }
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) throws Exception {
            checkpointed.update(List.of(emitted, startMs));
        }

        @Override
        public void open(OpenContext context) throws Exception {
            trace = new Trace(tracePath);
            trace.refresh(System.currentTimeMillis());
            if (startMs < 0) {
                startMs = System.currentTimeMillis();
            }
            getRuntimeContext().getMetricGroup().gauge("pendingRecords", (Gauge<Long>) this::pending);
            getRuntimeContext().getMetricGroup().gauge("recordsDue", (Gauge<Long>) this::due);
            getRuntimeContext().getMetricGroup().gauge("inputRatePerSecond", (Gauge<Long>) this::rate);
            getRuntimeContext().getMetricGroup().gauge("traceStartMs", (Gauge<Long>) () -> startMs);
            getRuntimeContext().getMetricGroup().gauge("skippedRecords", (Gauge<Long>) () -> skipped);
            // the instant the metrics were read: a reader of Flink's cached metrics (the REST API) knows
            // which moment the source's counters describe
            getRuntimeContext().getMetricGroup().gauge("clockMs", (Gauge<Long>) System::currentTimeMillis);
        }

        private long due() {
            return trace.dueAt((System.currentTimeMillis() - startMs) / 1000.0);
        }

        private long rate() {
            return trace.rateAt((System.currentTimeMillis() - startMs) / 1000.0);
        }

        /** What the source keeps pending at most ({@code --max-behind-ms}); the rest it skips. */
        private long kept() {
            return maxBehindMs < 0 ? Long.MAX_VALUE : Math.max(1, rate() * maxBehindMs / 1000);
        }

        /** Due, not emitted, and kept: while a backpressured emit blocks, what falls due beyond the bound
         * is skipped as soon as the loop runs again, so it is not pending. */
        private long pending() {
            return Math.min(Math.max(0, due() - emitted), kept());
        }

        @Override
        public void run(SourceContext<Long> context) throws Exception {
            while (running) {
                long now = System.currentTimeMillis();
                trace.refresh(now);
                long behind = due() - emitted;
                long kept = kept();
                if (behind > kept) {
                    skipped += behind - kept;
                    emitted += behind - kept;
                    behind = kept;
                }
                if (behind <= 0) {
                    Thread.sleep(2);
                    continue;
                }
                for (long i = 0; i < Math.min(behind, 500) && running; i++) {
                    synchronized (context.getCheckpointLock()) {
                        context.collect(emitted);
                        emitted++;
                    }
                }
            }
        }

        @Override
        public void cancel() {
            running = false;
        }
    }

    /** Keyed, CPU-bound work per record (a counter per key keeps it stateful). */
    static final class Burn extends RichMapFunction<Long, Long> {
        private final int work;
        private transient ValueState<Long> seen;

        Burn(int work) {
            this.work = work;
        }

        @Override
        public void open(OpenContext context) {
            seen = getRuntimeContext().getState(new ValueStateDescriptor<>("seen", Types.LONG));
        }

        @Override
        public Long map(Long value) throws Exception {
            long x = hashRounds(value, work);
            Long count = seen.value();
            seen.update(count == null ? 1L : count + 1L);
            return x;
        }
    }

    /**
     * The chain's parse step: cheap, stateless CPU work that turns a record into a 256-byte event (its
     * number first). Events this size keep the data in flight between vertices small (16 per 4 KiB network
     * buffer), so a load step reaches the sink in seconds.
     */
    static final class Parse implements MapFunction<Long, long[]> {
        static final int EVENT_LONGS = 32;
        private final int work;

        Parse(int work) {
            this.work = work;
        }

        @Override
        public long[] map(Long value) {
            long[] event = new long[EVENT_LONGS];
            event[0] = value;
            event[1] = hashRounds(value, work);
            return event;
        }
    }

    /** The chain's keyed, CPU-bound step: {@link Burn}'s work and per-key counter on an event. */
    static final class BurnEvent extends RichMapFunction<long[], long[]> {
        private final int work;
        private transient ValueState<Long> seen;

        BurnEvent(int work) {
            this.work = work;
        }

        @Override
        public void open(OpenContext context) {
            seen = getRuntimeContext().getState(new ValueStateDescriptor<>("seen", Types.LONG));
        }

        @Override
        public long[] map(long[] event) throws Exception {
            event[2] = hashRounds(event[0], work);
            Long count = seen.value();
            seen.update(count == null ? 1L : count + 1L);
            return event;
        }
    }

    /** A sink bounded by a per-record wait (an external store's round trip): busy time, little CPU. */
    static final class WaitingSink implements Sink<long[]> {
        private final long waitUs;
        private final String waitFile;

        WaitingSink(long waitUs, String waitFile) {
            this.waitUs = waitUs;
            this.waitFile = waitFile;
        }

        @Override
        public SinkWriter<long[]> createWriter(WriterInitContext context) {
            WaitingWriter writer = new WaitingWriter(waitUs, waitFile);
            context.metricGroup().gauge("sinkWaitUs", (Gauge<Long>) () -> writer.waitNs / 1000);
            return writer;
        }
    }

    /**
     * Waits {@code waitNs} per record on average. Waits are owed and paid in parks of at least 1 ms, and an
     * overshoot is credited to the next records, so the sink's capacity is 10^9 / waitNs records/s per
     * subtask however coarse the OS timer is.
     */
    static final class WaitingWriter implements SinkWriter<long[]> {
        private final Path waitFile;
        private volatile long waitNs;
        private long owedNs = 0;
        private long checkedAtMs = 0;
        private long modified = -1;

        WaitingWriter(long waitUs, String waitFile) {
            this.waitNs = waitUs * 1000;
            this.waitFile = waitFile == null ? null : Paths.get(waitFile);
        }

        @Override
        public void write(long[] event, Context context) throws IOException {
            refresh();
            owedNs += waitNs;
            if (owedNs >= 1_000_000) {
                long started = System.nanoTime();
                LockSupport.parkNanos(owedNs);
                owedNs -= System.nanoTime() - started;
            }
        }

        private void refresh() throws IOException {
            long now = System.currentTimeMillis();
            if (waitFile == null || now - checkedAtMs < 1000) {
                return;
            }
            checkedAtMs = now;
            if (!Files.exists(waitFile)) {
                return;
            }
            long stamp = Files.getLastModifiedTime(waitFile).toMillis();
            if (stamp != modified) {
                modified = stamp;
                String text = Files.readString(waitFile).trim();
                waitNs = text.isEmpty() ? waitNs : Long.parseLong(text) * 1000;
                owedNs = 0;
            }
        }

        @Override
        public void flush(boolean endOfInput) {}

        @Override
        public void close() {}
    }
}
