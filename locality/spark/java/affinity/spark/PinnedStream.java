package affinity.spark;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Kafka's {@link MicroBatchStream}, its input partitions pinned: a proxy that implements the
 * public streaming interfaces Kafka's stream implements ({@code SupportsAdmissionControl} for
 * {@code maxOffsetsPerTrigger}/{@code minOffsetsPerTrigger}, {@code SupportsTriggerAvailableNow},
 * {@code ReportsSourceMetrics}: exactly those, as the stream's Spark version has them) and
 * passes every call on, but two:
 *
 * <ul>
 *   <li>{@code planInputPartitions(start, end)}: each of Kafka's input partitions wrapped
 *       ({@link PinnedPartition}), preferring the location {@link KafkaPlacement} names for its
 *       topic-partition when the scheduler asks (none named: Kafka's own preference);
 *   <li>{@code createReaderFactory()}: Kafka's factory, given back Kafka's partitions.
 * </ul>
 *
 * With {@code tasksPerPartition} f (the source's option {@value #TASKS_OPTION}), the input
 * partitions are the affinity tasks' instead ({@link #group}): Kafka's input partitions of
 * partition number p (of every topic, every {@code minPartitions} split) in one, f copies of it,
 * copy b reading key bucket b only ({@link GroupedReader}), each placed on its own.
 *
 * <p>With {@code availableNowBatches} n (the option {@value #RUN_OPTION}), a {@code
 * Trigger.AvailableNow} run ends after n batches: once n distinct batches were planned since the
 * run began ({@code prepareForTriggerAvailableNow}), {@code latestOffset} answers the batch's
 * start (nothing new: Kafka's answer is still asked for its own bookkeeping), so Spark ends the
 * run; the next run reads on from there. A batch Spark runs again after a failure counts as
 * one. Other triggers are not limited.
 *
 * Offsets, the offset log, commit and latest offsets are all Kafka's. Real-time mode (Spark
 * 4.1's {@code SupportsRealTimeMode}) is not passed on: a micro-batch stream only.
 */
final class PinnedStream implements InvocationHandler {
  /** What the stream's and the scan's descriptions start with. */
  static final String MARK = "affinity-kafka ";

  private static final String STREAMING = "org.apache.spark.sql.connector.read.streaming";
  private static final String REAL_TIME = STREAMING + ".SupportsRealTimeMode";

  /**
   * The source's option that plans one input partition per affinity task (unset: one per
   * Kafka input partition): the SEP-32 elasticity factor f, a power of two, 1 without key
   * buckets.
   */
  static final String TASKS_OPTION = "affinity.tasksPerPartition";

  /**
   * The source's option ending a {@code Trigger.AvailableNow} run after that many batches (unset:
   * every batch up to the offsets latest when the run began, as Kafka's source does).
   */
  static final String RUN_OPTION = "affinity.availableNowBatches";

  private final MicroBatchStream kafka;
  private final int factor; // 0: Kafka's input partitions, one each
  private final int runBatches; // 0: no limit
  private boolean availableNow; // prepareForTriggerAvailableNow was called
  private final Set<String> plannedInRun = new LinkedHashSet<>(); // the run's batches' ends

  private PinnedStream(MicroBatchStream kafka, int factor, int runBatches) {
    this.kafka = kafka;
    this.factor = factor;
    this.runBatches = runBatches;
  }

  /** {@code value} of {@link #RUN_OPTION} checked (null: 0, no limit). */
  static int availableNowBatches(String value) {
    if (value == null) {
      return 0;
    }
    int batches;
    try {
      batches = Integer.parseInt(value.trim());
    } catch (NumberFormatException e) {
      batches = -1;
    }
    if (batches < 1) {
      throw new IllegalArgumentException(
          PinnedKafkaProvider.NAME + ": option " + RUN_OPTION + " must be an integer >= 1 "
              + "(the batches a Trigger.AvailableNow run takes), got '" + value + "'");
    }
    return batches;
  }

  /** {@code value} of {@link #TASKS_OPTION} checked (null: 0, not grouped). */
  static int tasksPerPartition(String value) {
    if (value == null) {
      return 0;
    }
    int factor;
    try {
      factor = Integer.parseInt(value.trim());
    } catch (NumberFormatException e) {
      factor = -1;
    }
    if (factor < 1 || (factor & (factor - 1)) != 0) {
      throw new IllegalArgumentException(
          PinnedKafkaProvider.NAME + ": option " + TASKS_OPTION + " must be a power of two >= 1 "
              + "(the job's elasticity factor), got '" + value + "'");
    }
    return factor;
  }

  static MicroBatchStream wrap(MicroBatchStream kafka, int factor, int runBatches) {
    Set<Class<?>> interfaces = new LinkedHashSet<>();
    interfaces.add(MicroBatchStream.class);
    collect(kafka.getClass(), interfaces);
    return (MicroBatchStream)
        Proxy.newProxyInstance(
            PinnedStream.class.getClassLoader(),
            interfaces.toArray(new Class<?>[0]),
            new PinnedStream(kafka, factor, runBatches));
  }

  /** The public streaming read interfaces of {@code type} and its superclasses. */
  private static void collect(Class<?> type, Set<Class<?>> into) {
    for (Class<?> c = type; c != null; c = c.getSuperclass()) {
      for (Class<?> i : c.getInterfaces()) {
        boolean streaming = i.getPackageName().equals(STREAMING);
        if (streaming && Modifier.isPublic(i.getModifiers()) && !i.getName().equals(REAL_TIME)) {
          into.add(i);
        }
      }
    }
  }

  @Override
  public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
    int arity = args == null ? 0 : args.length;
    switch (method.getName()) {
      case "equals":
        return arity == 1 && proxy == args[0];
      case "hashCode":
        return System.identityHashCode(proxy);
      case "toString":
        return MARK + kafka;
      case "planInputPartitions":
        if (arity == 2) {
          InputPartition[] planned = (InputPartition[]) call(method, args);
          countPlanned(args[1]);
          return factor == 0 ? pin(planned) : group(planned, factor);
        }
        break;
      case "prepareForTriggerAvailableNow":
        synchronized (this) {
          availableNow = true;
          plannedInRun.clear();
        }
        break;
      case "latestOffset":
        if (arity == 2 && runOver()) {
          call(method, args); // Kafka's own bookkeeping (its reportLatestOffset reads it)
          return args[0]; // the run has had its batches: nothing new until the next run
        }
        break;
      case "createReaderFactory":
        return new Factory((PartitionReaderFactory) call(method, args));
      default:
        break;
    }
    return call(method, args);
  }

  /** A batch planned, by its end offset (planned again for the same batch: counted once). */
  private synchronized void countPlanned(Object end) {
    if (availableNow && end != null) {
      plannedInRun.add(end instanceof Offset ? ((Offset) end).json() : String.valueOf(end));
    }
  }

  /** Whether this {@code Trigger.AvailableNow} run has had its {@link #RUN_OPTION} batches. */
  private synchronized boolean runOver() {
    return availableNow && runBatches > 0 && plannedInRun.size() >= runBatches;
  }

  private Object call(Method method, Object[] args) throws Throwable {
    try {
      return method.invoke(kafka, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  static InputPartition[] pin(InputPartition[] partitions) {
    InputPartition[] pinned = new InputPartition[partitions.length];
    for (int i = 0; i < partitions.length; i++) {
      String key = topicPartition(partitions[i]);
      pinned[i] =
          new PinnedPartition(
              new InputPartition[] {partitions[i]}, key, key + ":" + range(partitions[i]), 0, 1);
    }
    return pinned;
  }

  /**
   * The affinity tasks' input partitions: per Kafka partition number p (ascending), Kafka's input
   * partitions of p (every topic, every split) in one, {@code factor} copies of it, copy b keyed
   * {@link KafkaPlacement#groupKey}{@code (p, b, factor)}; its ranges are each topic-partition's,
   * its splits' merged ({@link #mergedRanges}).
   */
  static InputPartition[] group(InputPartition[] partitions, int factor) {
    Map<Integer, List<InputPartition>> byNumber = new TreeMap<>();
    for (InputPartition partition : partitions) {
      String key = topicPartition(partition);
      int number = Integer.parseInt(key.substring(key.lastIndexOf(':') + 1));
      byNumber.computeIfAbsent(number, n -> new ArrayList<>()).add(partition);
    }
    List<InputPartition> grouped = new ArrayList<>();
    for (Map.Entry<Integer, List<InputPartition>> entry : byNumber.entrySet()) {
      InputPartition[] members = entry.getValue().toArray(new InputPartition[0]);
      String ranges = mergedRanges(members);
      for (int bucket = 0; bucket < factor; bucket++) {
        String key = KafkaPlacement.groupKey(entry.getKey(), bucket, factor);
        grouped.add(new PinnedPartition(members, key, ranges, bucket, factor));
      }
    }
    return grouped.toArray(new InputPartition[0]);
  }

  /**
   * {@code topic:partition:from:until} of each topic-partition {@code members} read, comma
   * separated: the smallest {@code from} and largest {@code until} of its splits (Kafka splits a
   * topic-partition's range into adjoining ones).
   */
  static String mergedRanges(InputPartition[] members) {
    Map<String, long[]> merged = new LinkedHashMap<>();
    for (InputPartition member : members) {
      String[] range = range(member).split(":");
      long from = Long.parseLong(range[0]);
      long until = Long.parseLong(range[1]);
      merged.merge(
          topicPartition(member),
          new long[] {from, until},
          (a, b) -> new long[] {Math.min(a[0], b[0]), Math.max(a[1], b[1])});
    }
    List<String> ranges = new ArrayList<>();
    merged.forEach((key, r) -> ranges.add(key + ":" + r[0] + ":" + r[1]));
    return String.join(",", ranges);
  }

  /** {@code topic:partition} of one of Kafka's input partitions (its offset range's). */
  static String topicPartition(InputPartition partition) {
    try {
      Object range = partition.getClass().getMethod("offsetRange").invoke(partition);
      Object tp = range.getClass().getMethod("topicPartition").invoke(range);
      String topic = (String) tp.getClass().getMethod("topic").invoke(tp);
      int number = (Integer) tp.getClass().getMethod("partition").invoke(tp);
      return KafkaPlacement.key(topic, number);
    } catch (ReflectiveOperationException | ClassCastException e) {
      throw new IllegalStateException(
          PinnedKafkaProvider.NAME + ": not one of Kafka's input partitions: " + partition, e);
    }
  }

  /**
   * {@code from:until} of one of Kafka's input partitions: the offsets of the batch's records in
   * its topic-partition ({@code until} is the next batch's {@code from}).
   */
  static String range(InputPartition partition) {
    try {
      Object range = partition.getClass().getMethod("offsetRange").invoke(partition);
      long from = (Long) range.getClass().getMethod("fromOffset").invoke(range);
      long until = (Long) range.getClass().getMethod("untilOffset").invoke(range);
      return from + ":" + until;
    } catch (ReflectiveOperationException | ClassCastException e) {
      throw new IllegalStateException(
          PinnedKafkaProvider.NAME + ": not one of Kafka's input partitions: " + partition, e);
    }
  }

  /**
   * One of Kafka's input partitions ({@link #pin}: its key {@code topic:partition}), or an
   * affinity task's group of them ({@link #group}: its key {@link KafkaPlacement#groupKey}),
   * preferring the location {@link KafkaPlacement} names for its key when the scheduler asks (on
   * the driver, when a job over it is submitted: a placement set after the batch was planned,
   * e.g. in {@code foreachBatch}, still applies), else Kafka's own preference (its first
   * member's).
   */
  static final class PinnedPartition implements InputPartition {
    private static final long serialVersionUID = 1L;

    final InputPartition[] kafka;
    final String key;
    /** {@code topic:partition:from:until} of each topic-partition read, comma separated. */
    final String ranges;
    final int bucket;
    final int factor;

    PinnedPartition(InputPartition[] kafka, String key, String ranges, int bucket, int factor) {
      this.kafka = kafka;
      this.key = key;
      this.ranges = ranges;
      this.bucket = bucket;
      this.factor = factor;
    }

    /** Whether this is an affinity task's group ({@link #group}), not one Kafka partition. */
    boolean grouped() {
      return key.startsWith(KafkaPlacement.GROUP_MARK);
    }

    @Override
    public String[] preferredLocations() {
      String location = KafkaPlacement.locationOf(key);
      String[] locations =
          location == null || location.isEmpty()
              ? kafka[0].preferredLocations()
              : new String[] {location};
      KafkaPlacement.recordPlanned(key, locations.length == 0 ? "" : locations[0]);
      return locations;
    }

    @Override
    public String toString() {
      return "Pinned(" + key + ")" + java.util.Arrays.toString(kafka);
    }
  }

  /** Kafka's reader factory, given Kafka's own partitions back (a group's: one after another). */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    private final PartitionReaderFactory kafka;

    Factory(PartitionReaderFactory kafka) {
      this.kafka = kafka;
    }

    private static InputPartition unwrap(InputPartition partition) {
      return partition instanceof PinnedPartition
          ? ((PinnedPartition) partition).kafka[0]
          : partition;
    }

    private static boolean grouped(InputPartition partition) {
      return partition instanceof PinnedPartition && ((PinnedPartition) partition).grouped();
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      if (grouped(partition)) {
        PinnedPartition group = (PinnedPartition) partition;
        return new GroupedReader(kafka, group.kafka, group.bucket, group.factor);
      }
      return kafka.createReader(unwrap(partition));
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return kafka.createColumnarReader(unwrap(partition));
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return !grouped(partition) && kafka.supportColumnarReads(unwrap(partition));
    }
  }
}
