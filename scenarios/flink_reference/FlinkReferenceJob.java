import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.locks.LockSupport;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.tuple.Tuple;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.runtime.metrics.DescriptiveStatisticsHistogram;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.DataStreamSink;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;

/**
 * shufflesim's reference job on real Flink: a generator source, stages with a modelled cost per
 * record (maps, keyed rolling reduces, filters, flat maps), a sink with its own cost, each behind the partitioner
 * the scenario's graph has; run in a MiniCluster.
 *
 * <p>Arguments are key=value pairs (scenarios/flink_reference/job_args.py writes them); keys with
 * a dot are Flink configuration options. The JVM ends when its standard input closes. Records are what shufflesim's fixed-width rows are on
 * the wire: a Long (8 B), Tuple2 of key and creation time (16 B), or Tuple3 with padding (20 B
 * and more). The sink records each record's latency (creation to the end of its cost, in
 * microseconds) in the histogram "latencyUs", as shufflesim's sinks measure it. With
 * warmUpRecords=N (N > 0) it first runs the same job bounded to N records, without costs, named
 * "<jobName> (JVM warm-up)", to its end.
 */
public class FlinkReferenceJob {

    /** Waits `nanos`: parks for most of it, spins the last 0.2 ms (parking alone overshoots). */
    static void spend(long nanos) {
        if (nanos <= 0) {
            return;
        }
        long end = System.nanoTime() + nanos;
        if (nanos > 200_000) {
            LockSupport.parkNanos(nanos - 200_000);
        }
        while (System.nanoTime() < end) {
            Thread.onSpinWait();
        }
    }

    /**
     * The stage: spends the cost on each record; a map, a rolling reduce, a filter keeping a random
     * `selectivity` fraction, or a flat map emitting `fanOut` copies.
     */
    static final class CostedStage<T> implements MapFunction<T, T>, ReduceFunction<T>, FilterFunction<T>,
            FlatMapFunction<T, T> {
        private final long costNanos;
        private final double selectivity;
        private final int fanOut;

        CostedStage(long costNanos, double selectivity, int fanOut) {
            this.costNanos = costNanos;
            this.selectivity = selectivity;
            this.fanOut = fanOut;
        }

        @Override
        public T map(T value) {
            spend(costNanos);
            return value;
        }

        @Override
        public T reduce(T previous, T value) {
            return map(value);
        }

        @Override
        public boolean filter(T value) {
            spend(costNanos);
            return ThreadLocalRandom.current().nextDouble() < selectivity;
        }

        @Override
        public void flatMap(T value, Collector<T> out) {
            spend(costNanos);
            for (int i = 0; i < fanOut; i++) {
                out.collect(value);
            }
        }
    }

    /** The sink: spends its cost on each record, then records the record's latency. */
    static final class CostedSink<T> implements Sink<T> {
        private final long costNanos;

        CostedSink(long costNanos) {
            this.costNanos = costNanos;
        }

        @Override
        public SinkWriter<T> createWriter(WriterInitContext context) {
            Histogram latency = context.metricGroup().histogram(
                    "latencyUs", new DescriptiveStatisticsHistogram(20_000));
            return new SinkWriter<T>() {
                @Override
                public void write(T value, Context writeContext) {
                    spend(costNanos);
                    if (value instanceof Tuple) {
                        Long created = ((Tuple) value).getField(1);
                        latency.update((System.nanoTime() - created) / 1000);
                    }
                }

                @Override
                public void flush(boolean endOfInput) {
                }

                @Override
                public void close() {
                }
            };
        }
    }

    /** The key of record i: uniform over `keys`, or key 0 with probability `hot`, else uniform over the others. */
    static long key(long i, int keys, double hot) {
        long h = i * 0x9E3779B97F4A7C15L;
        h ^= h >>> 31;
        h *= 0xBF58476D1CE4E5B9L;
        h ^= h >>> 29;
        if (hot < 0 || keys < 2) {
            return Math.floorMod(h, (long) keys);
        }
        boolean isHot = (h & 0xFFFFF) < (long) (hot * 0x100000);
        return isHot ? 0 : 1 + Math.floorMod(h >>> 20, (long) (keys - 1));
    }

    public static void main(String[] args) throws Exception {
        exitWithParent();
        Map<String, String> a = new HashMap<>();
        Configuration conf = new Configuration();
        for (String arg : args) {
            String[] kv = arg.split("=", 2);
            if (kv[0].contains(".")) {
                conf.setString(kv[0], kv[1]);
            } else {
                a.put(kv[0], kv[1]);
            }
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1, conf);
        long warmUpRecords = Long.parseLong(a.getOrDefault("warmUpRecords", "0"));
        if (warmUpRecords > 0) {
            // the same job, bounded and without costs, run to its end first: the JVM has then
            // loaded and compiled the code the job runs (its first Netty connection included)
            build(env, a, warmUpRecords, false);
            env.execute(a.get("jobName") + " (JVM warm-up)");
        }
        build(env, a, Long.MAX_VALUE, true);
        env.execute(a.get("jobName"));
    }

    /** The job of `count` records of the size asked for; with the stages' costs, or none. */
    static void build(StreamExecutionEnvironment env, Map<String, String> a, long count, boolean costed) {
        int size = Integer.parseInt(a.get("recordSize"));
        int keys = Integer.parseInt(a.get("keys"));
        double hot = Double.parseDouble(a.get("hotFraction"));
        if (size == 8) {
            build(env, a, i -> i, Types.LONG, count, costed);
        } else if (size == 16) {
            build(env, a, i -> Tuple2.of(key(i, keys, hot), System.nanoTime()), Types.TUPLE(Types.LONG, Types.LONG),
                    count, costed);
        } else {
            build(env, a, i -> Tuple3.of(key(i, keys, hot), System.nanoTime(), new byte[size - 20]),
                    Types.TUPLE(Types.LONG, Types.LONG, Types.PRIMITIVE_ARRAY(Types.BYTE)), count, costed);
        }
    }

    static <T> void build(StreamExecutionEnvironment env, Map<String, String> a, GeneratorFunction<Long, T> generator,
                          TypeInformation<T> type, long count, boolean costed) {
        int sourceParallelism = Integer.parseInt(a.get("sourceParallelism"));
        double rate = costed ? Double.parseDouble(a.get("rate")) : 0;
        // DataGeneratorSource shares its rate over the source's subtasks: ours is per subtask
        DataGeneratorSource<T> source = rate > 0
                ? new DataGeneratorSource<>(generator, count,
                        RateLimiterStrategy.perSecond(rate * sourceParallelism), type)
                : new DataGeneratorSource<>(generator, count, type);
        SingleOutputStreamOperator<T> records = env.fromSource(source, WatermarkStrategy.noWatermarks(),
                        a.get("sourceName"))
                .setParallelism(sourceParallelism)
                .slotSharingGroup(a.get("sourceSlotSharingGroup"));
        if (Boolean.parseBoolean(a.get("sourceDisableChaining"))) {
            records.disableChaining();
        }
        int stages = Integer.parseInt(a.get("stages"));
        for (int i = 0; i < stages; i++) {
            String stage = "stage" + i;
            long cost = costed ? Long.parseLong(a.get(stage + "CostNanos")) : 0;
            DataStream<T> input = partitioned(records, a.get(stage + "Partitioner"));
            String name = a.get(stage + "Name");
            int parallelism = Integer.parseInt(a.get(stage + "Parallelism"));
            String group = a.get(stage + "SlotSharingGroup");
            boolean unchained = Boolean.parseBoolean(a.get(stage + "DisableChaining"));
            String kind = a.get(stage + "Kind");
            if (kind.equals("sink")) {
                DataStreamSink<T> sink = input.sinkTo(new CostedSink<>(cost)).name(name).setParallelism(parallelism)
                        .slotSharingGroup(group);
                if (unchained) {
                    sink.disableChaining();
                }
                return;
            }
            CostedStage<T> function = new CostedStage<>(cost, Double.parseDouble(a.get(stage + "Selectivity")),
                    Integer.parseInt(a.get(stage + "FanOut")));
            records = switch (kind) {
                case "keyed_reduce" -> ((KeyedStream<T, Long>) input).reduce(function);
                case "filter" -> input.filter(function);
                case "flat_map" -> input.flatMap(function);
                default -> input.map(function);
            };
            records.returns(type).name(name).setParallelism(parallelism).slotSharingGroup(group);
            if (unchained) {
                records.disableChaining();
            }
        }
        throw new IllegalArgumentException("the last of the " + stages + " stages is not a sink");
    }

    /** `records` partitioned as the stage's input edge is: HASH keys them by the record's key. */
    static <T> DataStream<T> partitioned(DataStream<T> records, String partitioner) {
        return switch (partitioner) {
            case "REBALANCE" -> records.rebalance();
            case "RESCALE" -> records.rescale();
            case "FORWARD" -> records.forward();
            case "SHUFFLE" -> records.shuffle();
            case "BROADCAST" -> records.broadcast();
            case "HASH" -> records.keyBy(
                    value -> value instanceof Tuple ? ((Tuple) value).<Long>getField(0) : (Long) value, Types.LONG);
            default -> throw new IllegalArgumentException("partitioner " + partitioner);
        };
    }

    /** Ends the JVM when its standard input closes: the process that started it is gone. */
    static void exitWithParent() {
        Thread watchdog = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // nothing is sent: only the end of the stream matters
                }
            } catch (java.io.IOException e) {
                // a broken pipe ends the parent's side as well
            }
            Runtime.getRuntime().halt(1);
        }, "exit-with-parent");
        watchdog.setDaemon(true);
        watchdog.start();
    }
}
