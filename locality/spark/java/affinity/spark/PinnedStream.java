package affinity.spark;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.util.LinkedHashSet;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
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
 * Offsets, the offset log, commit and latest offsets are all Kafka's. Real-time mode (Spark
 * 4.1's {@code SupportsRealTimeMode}) is not passed on: a micro-batch stream only.
 */
final class PinnedStream implements InvocationHandler {
  /** What the stream's and the scan's descriptions start with. */
  static final String MARK = "affinity-kafka ";

  private static final String STREAMING = "org.apache.spark.sql.connector.read.streaming";
  private static final String REAL_TIME = STREAMING + ".SupportsRealTimeMode";

  private final MicroBatchStream kafka;

  private PinnedStream(MicroBatchStream kafka) {
    this.kafka = kafka;
  }

  static MicroBatchStream wrap(MicroBatchStream kafka) {
    Set<Class<?>> interfaces = new LinkedHashSet<>();
    interfaces.add(MicroBatchStream.class);
    collect(kafka.getClass(), interfaces);
    return (MicroBatchStream)
        Proxy.newProxyInstance(
            PinnedStream.class.getClassLoader(),
            interfaces.toArray(new Class<?>[0]),
            new PinnedStream(kafka));
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
          return pin((InputPartition[]) call(method, args));
        }
        break;
      case "createReaderFactory":
        return new Factory((PartitionReaderFactory) call(method, args));
      default:
        break;
    }
    return call(method, args);
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
      pinned[i] =
          new PinnedPartition(partitions[i], topicPartition(partitions[i]), range(partitions[i]));
    }
    return pinned;
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
   * One of Kafka's input partitions, preferring the location {@link KafkaPlacement} names for its
   * topic-partition when the scheduler asks (on the driver, when a job over it is submitted: a
   * placement set after the batch was planned, e.g. in {@code foreachBatch}, still applies), else
   * Kafka's own preference.
   */
  static final class PinnedPartition implements InputPartition {
    private static final long serialVersionUID = 1L;

    final InputPartition kafka;
    final String key;
    final String range;

    PinnedPartition(InputPartition kafka, String key, String range) {
      this.kafka = kafka;
      this.key = key;
      this.range = range;
    }

    @Override
    public String[] preferredLocations() {
      String location = KafkaPlacement.locationOf(key);
      String[] locations =
          location == null || location.isEmpty()
              ? kafka.preferredLocations()
              : new String[] {location};
      KafkaPlacement.recordPlanned(key, locations.length == 0 ? "" : locations[0]);
      return locations;
    }

    @Override
    public String toString() {
      return "Pinned(" + key + ")[" + kafka + "]";
    }
  }

  /** Kafka's reader factory, given Kafka's own partitions back. */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    private final PartitionReaderFactory kafka;

    Factory(PartitionReaderFactory kafka) {
      this.kafka = kafka;
    }

    private static InputPartition unwrap(InputPartition partition) {
      return partition instanceof PinnedPartition ? ((PinnedPartition) partition).kafka : partition;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return kafka.createReader(unwrap(partition));
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return kafka.createColumnarReader(unwrap(partition));
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return kafka.supportColumnarReads(unwrap(partition));
    }
  }
}
