package affinity.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.Dependency;
import org.apache.spark.OneToOneDependency;
import org.apache.spark.Partition;
import org.apache.spark.rdd.RDD;

import scala.collection.Seq;

/**
 * The driver's placement of Kafka partitions: {@code topic:partition} to the location string its
 * Spark task prefers ({@code executor_<host>_<id>} or a host). The pinned Kafka source
 * ({@link PinnedKafkaProvider}) reads it each time it plans a micro-batch's input partitions;
 * Python sets it through py4j before the batch ({@link #set}). One map per driver JVM: a
 * topic-partition read by two queries of one application is placed the same for both.
 *
 * <p>It also keeps, per topic-partition, the location the source last planned, so a driver can
 * check what the scheduler was asked for ({@link #planned}).
 */
public final class KafkaPlacement {
  private static final Map<String, String> LOCATIONS = new ConcurrentHashMap<>();
  private static final Map<String, String> PLANNED = new ConcurrentHashMap<>();

  private KafkaPlacement() {}

  /** The key of a topic-partition: {@code topic:partition} (a Kafka topic name has no ':'). */
  public static String key(String topic, int partition) {
    return topic + ":" + partition;
  }

  /** What an affinity task's group key starts with (no Kafka topic name has an '@'). */
  public static final String GROUP_MARK = "@";

  /**
   * The key of an affinity task's input partition (the source's {@code
   * affinity.tasksPerPartition} option): {@code @p:b:f}, partition number p of every topic,
   * key bucket b of elasticity factor f.
   */
  public static String groupKey(int partition, int bucket, int factor) {
    return GROUP_MARK + partition + ":" + bucket + ":" + factor;
  }

  /** Replace the placement of the topic-partitions in {@code locations} (others are kept). */
  public static void set(Map<String, String> locations) {
    LOCATIONS.putAll(locations);
  }

  /** Forget every placement (the source's own preference applies again). */
  public static void clear() {
    LOCATIONS.clear();
    PLANNED.clear();
  }

  /** A copy of the placement. */
  public static Map<String, String> get() {
    return Map.copyOf(LOCATIONS);
  }

  /**
   * Where the scheduler was last told each topic-partition's input partition prefers to run (""
   * when nowhere).
   */
  public static Map<String, String> planned() {
    return Map.copyOf(PLANNED);
  }

  /**
   * The topic-partition ({@code topic:partition}) of each partition of {@code rdd}, when {@code
   * rdd} is the pinned Kafka source's input partitions under one-to-one steps only (a
   * micro-batch's DataFrame in {@code foreachBatch}, a projection or {@code mapInArrow} of it);
   * null otherwise (another source, a shuffle, a union). An entry is null for a partition that
   * holds no one of the source's partitions or several.
   */
  public static String[] partitionKeys(RDD<?> rdd) {
    return partitionFacts(rdd, false);
  }

  /**
   * As {@link #partitionKeys}, each entry {@code topic:partition:from:until}: the offsets of the
   * records the partition reads in the batch; an affinity task's group (key {@link #groupKey})
   * has one such range per topic-partition it reads, comma separated.
   */
  public static String[] partitionRanges(RDD<?> rdd) {
    return partitionFacts(rdd, true);
  }

  private static String[] partitionFacts(RDD<?> rdd, boolean ranges) {
    RDD<?> at = rdd;
    while (true) {
      String[] keys = keysOf(at.partitions(), ranges);
      if (keys != null) {
        return keys;
      }
      Seq<Dependency<?>> parents = at.dependencies();
      if (parents.size() != 1 || !(parents.head() instanceof OneToOneDependency)) {
        return null;
      }
      at = parents.head().rdd();
    }
  }

  /** The input partitions a data source RDD's partition holds: Spark 4.x has {@code
   * inputPartition()} (an Option), 3.5 {@code inputPartitions()} (a Seq). */
  private static final String[] HOLDERS = {"inputPartition", "inputPartitions"};

  private static String[] keysOf(Partition[] partitions, boolean ranges) {
    String[] keys = new String[partitions.length];
    boolean found = false;
    for (int i = 0; i < partitions.length; i++) {
      List<String> held = new ArrayList<>();
      for (String holder : HOLDERS) {
        try {
          Object holds = partitions[i].getClass().getMethod(holder).invoke(partitions[i]);
          collectKeys(holds, held, ranges);
        } catch (ReflectiveOperationException e) {
          // not a data source RDD's partition, or not this Spark version's accessor
        }
      }
      found |= !held.isEmpty();
      keys[i] = held.size() == 1 ? held.get(0) : null;
    }
    return found ? keys : null;
  }

  private static void collectKeys(Object held, List<String> into, boolean ranges) {
    if (held instanceof PinnedStream.PinnedPartition) {
      PinnedStream.PinnedPartition pinned = (PinnedStream.PinnedPartition) held;
      into.add(ranges ? pinned.ranges : pinned.key);
    } else if (held instanceof scala.Option) {
      scala.Option<?> option = (scala.Option<?>) held;
      if (option.isDefined()) {
        collectKeys(option.get(), into, ranges);
      }
    } else if (held instanceof scala.collection.Iterable) {
      scala.collection.Iterator<?> items = ((scala.collection.Iterable<?>) held).iterator();
      while (items.hasNext()) {
        collectKeys(items.next(), into, ranges);
      }
    }
  }

  static String locationOf(String key) {
    return LOCATIONS.get(key);
  }

  static void recordPlanned(String key, String location) {
    PLANNED.put(key, location == null ? "" : location);
  }
}
