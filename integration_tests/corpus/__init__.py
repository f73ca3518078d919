"""The capture corpus: small programs (functions and modules) with example-input
factories, each a :class:`CorpusCase`. ``CASES`` lists them all; each topic lives in
its own module and registers its cases with :func:`case`."""

from corpus import (  # noqa: F401 - importing registers the cases
    conv,
    embedding,
    inplace,
    integer,
    mlp,
    outputs,
    random_ops,
    transformer,
    views,
)
from corpus.case import CASES, CorpusCase, case

__all__ = ["CASES", "CorpusCase", "case"]
