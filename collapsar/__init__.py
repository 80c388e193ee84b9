"""Collapsar's core: the experiment language and its math.

Owns the topology model (`model`), units (`units`), the YAML parser and its
validation (`parser`), the Kollaps XML importer (`kollaps_xml`), collapsing the
topology into end-to-end paths (`collapse`), the precomputed timeline
(`timeline`) and the `collapsar` command line (`cli`).

It does not touch the kernel, start processes or talk to Docker: those belong
to `collapsar.tcal`, `collapsar.manager` and `collapsar.deploy`, which all
read the same model from here.
"""

__version__ = "0.1.0"
