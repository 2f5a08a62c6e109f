package affinity.spark;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;

/**
 * The key hash of {@code stateful_foreach_batch}, computed on the executors: exactly Python's
 * {@code groupers.keys.stable_hash(key_text(values))}, i.e. MurmurHash3 (x86, 32 bit, seed 0) of
 * {@code "s"} followed by the key's canonical JSON text ({@code json.dumps(list, separators=(",",
 * ":"))}, ASCII-escaped as Python does), as an unsigned value in a long.
 *
 * <p>Registered as a SQL function over {@code struct(<key columns>)}. Key values may be strings,
 * booleans, integers of any width, floats and doubles (written as Python's {@code repr}: the
 * shortest digits that read back to the same double) and nulls (NaN counts as null, as
 * pandas does).
 */
public final class KeyHash implements UDF1<Row, Long> {
  private static final long serialVersionUID = 1L;

  @Override
  public Long call(Row key) {
    StringBuilder text = new StringBuilder(48);
    text.append("s[");
    for (int i = 0; i < key.length(); i++) {
      if (i > 0) {
        text.append(',');
      }
      appendValue(text, key.get(i));
    }
    text.append(']');
    return murmur3(text.toString().getBytes(StandardCharsets.ISO_8859_1)) & 0xffffffffL;
  }

  /** The key's canonical JSON text, as Python's {@code key_text} (tests compare the two). */
  public static String keyText(Object[] values) {
    StringBuilder text = new StringBuilder(48);
    text.append('[');
    for (int i = 0; i < values.length; i++) {
      if (i > 0) {
        text.append(',');
      }
      appendValue(text, values[i]);
    }
    return text.append(']').toString();
  }

  static void appendValue(StringBuilder out, Object value) {
    if (value == null) {
      out.append("null");
    } else if (value instanceof String) {
      appendString(out, (String) value);
    } else if (value instanceof Boolean) {
      out.append(((Boolean) value) ? "true" : "false");
    } else if (value instanceof Long || value instanceof Integer || value instanceof Short
        || value instanceof Byte) {
      out.append(((Number) value).longValue());
    } else if (value instanceof Double || value instanceof Float) {
      appendDouble(out, ((Number) value).doubleValue());
    } else {
      throw new IllegalArgumentException(
          "stateful_foreach_batch: a key value of type " + value.getClass().getName()
              + " cannot be hashed (keys may be strings, booleans, integers, floats)");
    }
  }

  /** Python's {@code json.dumps(str)} with {@code ensure_ascii=True}. */
  static void appendString(StringBuilder out, String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '\\': out.append("\\\\"); break;
        case '"': out.append("\\\""); break;
        case '\b': out.append("\\b"); break;
        case '\f': out.append("\\f"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        default:
          if (c < 0x20 || c >= 0x7f) {
            String hex = Integer.toHexString(c);
            out.append("\\u");
            for (int pad = hex.length(); pad < 4; pad++) {
              out.append('0');
            }
            out.append(hex);
          } else {
            out.append(c);
          }
      }
    }
    out.append('"');
  }

  static void appendDouble(StringBuilder out, double d) {
    if (Double.isNaN(d)) {
      out.append("null"); // pandas reads NaN as a missing value (to_python gives None)
    } else if (Double.isInfinite(d)) {
      out.append(d > 0 ? "Infinity" : "-Infinity");
    } else {
      out.append(pythonRepr(d));
    }
  }

  /** Python's {@code repr(float)}: the shortest round-trip digits, in Python's layout. */
  public static String pythonRepr(double d) {
    if (d == 0.0) {
      return (1.0 / d < 0) ? "-0.0" : "0.0";
    }
    BigDecimal shortest = shortest(d);
    String digits = shortest.unscaledValue().abs().toString();
    int decpt = digits.length() - shortest.scale(); // d = 0.<digits> x 10^decpt
    StringBuilder out = new StringBuilder(32);
    if (d < 0) {
      out.append('-');
    }
    if (decpt <= -4 || decpt > 16) {
      out.append(digits.charAt(0));
      if (digits.length() > 1) {
        out.append('.').append(digits, 1, digits.length());
      }
      int exponent = decpt - 1;
      out.append('e').append(exponent < 0 ? '-' : '+');
      int magnitude = Math.abs(exponent);
      if (magnitude < 10) {
        out.append('0');
      }
      out.append(magnitude);
    } else if (decpt <= 0) {
      out.append("0.");
      for (int i = 0; i < -decpt; i++) {
        out.append('0');
      }
      out.append(digits);
    } else if (decpt >= digits.length()) {
      out.append(digits);
      for (int i = digits.length(); i < decpt; i++) {
        out.append('0');
      }
      out.append(".0");
    } else {
      out.append(digits, 0, decpt).append('.').append(digits, decpt, digits.length());
    }
    return out.toString();
  }

  /**
   * The decimal with the fewest significant digits that reads back as {@code d}; of two such
   * with as many digits, the one nearer to {@code d} (on a tie, the even last digit). Trailing
   * zeros stripped.
   */
  static BigDecimal shortest(double d) {
    BigDecimal exact = new BigDecimal(d);
    for (int precision = 1; precision <= 17; precision++) {
      BigDecimal down = exact.round(new MathContext(precision, RoundingMode.DOWN));
      BigDecimal up = exact.round(new MathContext(precision, RoundingMode.UP));
      boolean downOk = down.doubleValue() == d;
      boolean upOk = up.doubleValue() == d;
      if (downOk || upOk) {
        BigDecimal chosen;
        if (downOk && upOk) {
          chosen = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
        } else {
          chosen = downOk ? down : up;
        }
        return chosen.stripTrailingZeros();
      }
    }
    return exact.round(MathContext.DECIMAL64).stripTrailingZeros();
  }

  /** MurmurHash3_x86_32, seed 0, as {@code groupers.keys.murmur3_32}. */
  static int murmur3(byte[] data) {
    final int c1 = 0xcc9e2d51;
    final int c2 = 0x1b873593;
    int h = 0;
    int length = data.length;
    int end = length - (length % 4);
    for (int i = 0; i < end; i += 4) {
      int k = (data[i] & 0xff) | ((data[i + 1] & 0xff) << 8) | ((data[i + 2] & 0xff) << 16)
          | ((data[i + 3] & 0xff) << 24);
      k *= c1;
      k = Integer.rotateLeft(k, 15);
      k *= c2;
      h ^= k;
      h = Integer.rotateLeft(h, 13);
      h = h * 5 + 0xe6546b64;
    }
    int k = 0;
    switch (length & 3) {
      case 3: k ^= (data[end + 2] & 0xff) << 16; // fall through
      case 2: k ^= (data[end + 1] & 0xff) << 8; // fall through
      case 1:
        k ^= data[end] & 0xff;
        k *= c1;
        k = Integer.rotateLeft(k, 15);
        k *= c2;
        h ^= k;
        break;
      default:
        break;
    }
    h ^= length;
    h ^= h >>> 16;
    h *= 0x85ebca6b;
    h ^= h >>> 13;
    h *= 0xc2b2ae35;
    h ^= h >>> 16;
    return h;
  }
}
