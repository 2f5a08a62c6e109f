"""locality: where a processor is (LocationIdProviders) and how that becomes placement
(Spark preferred locations, Kubernetes executor pod templates).

- :mod:`locality.base`: ``LocationError`` and the ``LocationIdProvider`` protocol;
- :mod:`locality.providers`: the ``host`` and ``env`` providers and ``get_location_provider``;
- :mod:`locality.kubernetes`: the ``kubernetes`` provider (``zone/node``);
- :mod:`locality.pod_template`: Kubernetes executor pod templates with node affinity;
- :mod:`locality.spark`: Spark executors, pinned stages and the executor-side provider, and a
  task's Kafka partition (:mod:`locality.spark.kafka`).

May import ``metadata.model`` only; never ``groupers`` or ``coordinator``.
"""
