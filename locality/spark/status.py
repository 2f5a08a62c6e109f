"""What Spark's status store says about an application, on the driver: the shuffle bytes its
stages wrote and read so far (:func:`shuffle_bytes`), the measure of "no shuffle" the tests and the
Kafka benchmark use."""

from __future__ import annotations

from typing import Any

__all__ = ["shuffle_bytes"]


def shuffle_bytes(sc: Any) -> int:
    """Shuffle bytes written and read by every stage of ``sc``'s application so far, once its
    listener bus has caught up."""
    jvm, context = sc._jvm, sc._jsc.sc()
    context.listenerBus().waitUntilEmpty()
    none = jvm.java.util.ArrayList()
    stages = context.statusStore().stageList(
        none, False, False, sc._gateway.new_array(jvm.double, 0), jvm.java.util.ArrayList()
    )
    total, found = 0, stages.iterator()
    while found.hasNext():
        stage = found.next()
        total += stage.shuffleWriteBytes() + stage.shuffleReadBytes()
    return int(total)
