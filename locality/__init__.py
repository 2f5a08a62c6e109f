"""locality: where a processor is (LocationIdProviders) and how that becomes placement
(Spark preferred locations, Kubernetes executor pod templates).

May import ``metadata.model`` only; never ``groupers`` or ``coordinator``.
"""
