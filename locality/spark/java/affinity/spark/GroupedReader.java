package affinity.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/**
 * The reader of a grouped input partition ({@link PinnedStream.PinnedPartition} of an affinity
 * task): Kafka's readers of its members (partition p of every topic, every {@code minPartitions}
 * split) one after the other, keeping, with SEP-32 factor {@code f > 1}, only the records of key
 * bucket {@code b}: {@code stable_hash(key) mod f == b}, the hash of Python's {@code
 * groupers.keys.stable_hash} ({@link #bucket}). Kafka's row has the key (binary, null for a
 * record without one) in column 0 and the offset in column 4.
 */
public final class GroupedReader implements PartitionReader<InternalRow> {
  private static final int KEY = 0;
  private static final int OFFSET = 4;

  private final PartitionReaderFactory kafka;
  private final InputPartition[] members;
  private final int bucket;
  private final int factor;
  private final Map<String, Long> finished = new LinkedHashMap<>();
  private int next;
  private PartitionReader<InternalRow> current;

  GroupedReader(PartitionReaderFactory kafka, InputPartition[] members, int bucket, int factor) {
    this.kafka = kafka;
    this.members = members;
    this.bucket = bucket;
    this.factor = factor;
  }

  /**
   * The SEP-32 key bucket of a Kafka record: MurmurHash3 (x86, 32 bit, seed 0) of {@code "b"} and
   * the key's bytes, or for a record without a key of {@code "i"} and its offset's decimal digits
   * (Python's {@code stable_hash(bytes)} / {@code stable_hash(None, offset=...)}), unsigned, mod
   * {@code factor} (a power of two).
   */
  public static int bucket(byte[] key, long offset, int factor) {
    byte[] encoded;
    if (key == null) {
      byte[] digits = Long.toString(offset).getBytes(StandardCharsets.US_ASCII);
      encoded = new byte[digits.length + 1];
      encoded[0] = 'i';
      System.arraycopy(digits, 0, encoded, 1, digits.length);
    } else {
      encoded = new byte[key.length + 1];
      encoded[0] = 'b';
      System.arraycopy(key, 0, encoded, 1, key.length);
    }
    return (int) ((KeyHash.murmur3(encoded) & 0xffffffffL) % factor);
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (current == null) {
        if (next == members.length) {
          return false;
        }
        current = kafka.createReader(members[next++]);
      }
      while (current.next()) {
        if (factor <= 1 || kept(current.get())) {
          return true;
        }
      }
      closeCurrent();
    }
  }

  private boolean kept(InternalRow row) {
    byte[] key = row.isNullAt(KEY) ? null : row.getBinary(KEY);
    return bucket(key, row.getLong(OFFSET), factor) == bucket;
  }

  @Override
  public InternalRow get() {
    return current.get();
  }

  private void closeCurrent() throws IOException {
    for (CustomTaskMetric metric : current.currentMetricsValues()) {
      finished.merge(metric.name(), metric.value(), Long::sum);
    }
    PartitionReader<InternalRow> done = current;
    current = null;
    done.close();
  }

  /** Kafka's task metrics, summed over the members read so far. */
  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    Map<String, Long> sums = new LinkedHashMap<>(finished);
    if (current != null) {
      for (CustomTaskMetric metric : current.currentMetricsValues()) {
        sums.merge(metric.name(), metric.value(), Long::sum);
      }
    }
    return sums.entrySet().stream()
        .map(e -> metric(e.getKey(), e.getValue()))
        .toArray(CustomTaskMetric[]::new);
  }

  private static CustomTaskMetric metric(String name, long value) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return value;
      }
    };
  }

  @Override
  public void close() throws IOException {
    if (current != null) {
      closeCurrent();
    }
  }
}
