import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
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
 * 20000), {@code --keys K} (default 1024).
 */
public class TraceLoadJob {

    public static void main(String[] args) throws Exception {
        ParameterTool params = ParameterTool.fromArgs(args);
        String trace = params.getRequired("trace");
        int work = params.getInt("work", 20000);
        int keys = params.getInt("keys", 1024);

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.addSource(new TraceSource(trace), "trace", Types.LONG)
                .setParallelism(1)
                .setMaxParallelism(1)
                .keyBy(value -> value % keys, Types.LONG)
                .map(new Burn(work))
                .name("burn")
                .setMaxParallelism(128)
                .sinkTo(new DiscardingSink<>())
                .name("discard");
        env.execute("foresail-trace-load");
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
        private transient Trace trace;
        private transient ListState<Long> checkpointed;
        private volatile boolean running = true;
        private volatile long emitted = 0;
        private volatile long startMs = -1;

        TraceSource(String tracePath) {
            this.tracePath = tracePath;
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
        }

        private long due() {
            return trace.dueAt((System.currentTimeMillis() - startMs) / 1000.0);
        }

        private long rate() {
            return trace.rateAt((System.currentTimeMillis() - startMs) / 1000.0);
        }

        private long pending() {
            return Math.max(0, due() - emitted);
        }

        @Override
        public void run(SourceContext<Long> context) throws Exception {
            while (running) {
                long now = System.currentTimeMillis();
                trace.refresh(now);
                long behind = due() - emitted;
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
            long x = value;
            for (int i = 0; i < work; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= x >>> 29;
            }
            Long count = seen.value();
            seen.update(count == null ? 1L : count + 1L);
            return x;
        }
    }
}
