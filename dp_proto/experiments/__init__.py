"""Experiments: config schemas (nested dicts of defaults) and the runners behind the
command line, built on the algorithms and their Lightning adapters.

``.config``      the one loader: defaults <- YAML file <- ``key.sub=value`` overrides
``.data``        the data section: sources, public-bounds scaling of private runs
``.lvq``         ``dp-proto train``: (DP) GLVQ/GMLVQ/LGMLVQ with Lightning and TensorBoard
``.anonymizer``  ``dp-proto anonymize``: the adversarial anonymizer, evaluated on held-out records
``.llp``         ``dp-proto llp``: learning from label proportions over the SCATS sensor network
``.svdd``        ``dp-proto svdd``: the (private) SVDD equilibrium-point classifier on one split
"""

from dp_proto.experiments.config import merge_config, read_config

__all__ = ["merge_config", "read_config"]
