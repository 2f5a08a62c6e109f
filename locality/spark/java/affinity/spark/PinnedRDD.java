package affinity.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.Partition;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;

import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.collection.JavaConverters;
import scala.reflect.ClassTag;

/**
 * An RDD that wraps its parent one to one and prefers, for partition i, the location string
 * {@code locations.get(i)}: {@code executor_<host>_<id>} (that executor, process-local) or a host
 * (node-local); an empty string is no preference.
 *
 * <p>Spark places the reduce tasks of a shuffle by where the map output is (host names only);
 * Python cannot choose the executor of a reduce partition. Wrapping the shuffled RDD gives the
 * partition its own preference, which the DAGScheduler asks before it walks to the parent, so
 * partition i (task i, by {@code repartitionById}) runs on the executor the job model names.
 * The locations are driver-only (transient): executors only compute.
 *
 * <p>One source for Spark 3.5 (Scala 2.12) and Spark 4 (Scala 2.13), compiled against the
 * installed pyspark's jars: {@code immutable.Seq} overrides 2.12's {@code collection.Seq}
 * covariantly, and {@code JavaConverters} is in both (deprecated in 2.13).
 */
public final class PinnedRDD<T> extends RDD<T> {
  private static final long serialVersionUID = 1L;

  private final transient List<String> locations;
  private final ClassTag<T> tag;

  public PinnedRDD(RDD<T> parent, List<String> locations) {
    super(parent, parent.elementClassTag());
    if (locations.size() != parent.getNumPartitions()) {
      throw new IllegalArgumentException(
          "PinnedRDD: " + locations.size() + " locations for " + parent.getNumPartitions()
              + " partitions");
    }
    this.tag = parent.elementClassTag();
    this.locations = new ArrayList<>(locations);
  }

  @Override
  public Partition[] getPartitions() {
    return firstParent(tag).partitions();
  }

  @Override
  public Iterator<T> compute(Partition split, TaskContext context) {
    return firstParent(tag).iterator(split, context);
  }

  @Override
  public Seq<String> getPreferredLocations(Partition split) {
    String location = locations == null ? null : locations.get(split.index());
    List<String> preferred =
        location == null || location.isEmpty() ? List.of() : List.of(location);
    return JavaConverters.asScalaBuffer(preferred).toList();
  }
}
