package affinity.spark;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.readStream.format("affinity-kafka")}: Spark's own Kafka source
 * ({@code org.apache.spark.sql.kafka010.KafkaSourceProvider}, every option of {@code
 * format("kafka")}) whose micro-batch input partitions prefer the executor {@link
 * KafkaPlacement} names for their topic-partition ({@link PinnedStream}); with the option
 * {@code affinity.tasksPerPartition}, one input partition per affinity task instead.
 *
 * <p>Only public DataSource V2 interfaces: the provider, table, scan builder and scan delegate to
 * Kafka's; the micro-batch stream is wrapped. Kafka's classes are loaded by name when the source
 * is used (the connector jar on {@code spark.jars}), so this class loads without them (Spark
 * instantiates every registered source when it looks one up). Micro-batch reads only.
 */
public final class PinnedKafkaProvider implements TableProvider, DataSourceRegister {
  /** The format name ({@code META-INF/services} registers the class under it). */
  public static final String NAME = "affinity-kafka";

  static final String KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider";

  private TableProvider kafka;

  @Override
  public String shortName() {
    return NAME;
  }

  private synchronized TableProvider kafka() {
    if (kafka == null) {
      kafka = loadKafka();
    }
    return kafka;
  }

  static TableProvider loadKafka() {
    ClassLoader loader = Thread.currentThread().getContextClassLoader();
    if (loader == null) {
      loader = PinnedKafkaProvider.class.getClassLoader();
    }
    try {
      Class<?> provider = Class.forName(KAFKA_PROVIDER, true, loader);
      return (TableProvider) provider.getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException | LinkageError e) {
      throw new IllegalStateException(
          NAME + " delegates to Spark's Kafka source, which is not on the class path: add the "
              + "spark-sql-kafka-0-10 connector's jars to spark.jars (" + e + ")",
          e);
    }
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return kafka().inferSchema(options);
  }

  @Override
  public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
    return kafka().inferPartitioning(options);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return kafka().supportsExternalMetadata();
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    Table table = kafka().getTable(schema, partitioning, properties);
    if (!(table instanceof SupportsRead)) {
      throw new IllegalStateException(NAME + ": Kafka's table " + table + " cannot be read");
    }
    return new PinnedTable((SupportsRead) table);
  }

  /** Kafka's table, readable as a micro-batch stream only. */
  static final class PinnedTable implements SupportsRead {
    private final SupportsRead kafka;

    PinnedTable(SupportsRead kafka) {
      this.kafka = kafka;
    }

    @Override
    public String name() {
      return NAME + ":" + kafka.name();
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return kafka.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
      return kafka.capabilities().contains(TableCapability.MICRO_BATCH_READ)
          ? Set.of(TableCapability.MICRO_BATCH_READ)
          : Set.of();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      int factor = PinnedStream.tasksPerPartition(options.get(PinnedStream.TASKS_OPTION));
      int runBatches = PinnedStream.availableNowBatches(options.get(PinnedStream.RUN_OPTION));
      ScanBuilder builder = kafka.newScanBuilder(options);
      return () -> new PinnedScan(builder.build(), factor, runBatches);
    }
  }

  /** Kafka's scan, its micro-batch stream pinned. */
  static final class PinnedScan implements Scan {
    private final Scan kafka;
    private final int factor;
    private final int runBatches;

    PinnedScan(Scan kafka, int factor, int runBatches) {
      this.kafka = kafka;
      this.factor = factor;
      this.runBatches = runBatches;
    }

    @Override
    public StructType readSchema() {
      return kafka.readSchema();
    }

    @Override
    public String description() {
      return PinnedStream.MARK + kafka.description();
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return PinnedStream.wrap(kafka.toMicroBatchStream(checkpointLocation), factor, runBatches);
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return kafka.supportedCustomMetrics();
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
      return kafka.reportDriverMetrics();
    }
  }
}
