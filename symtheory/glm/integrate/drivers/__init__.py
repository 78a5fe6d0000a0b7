"""Numba drivers of the glm posterior rules: ordinary modules whose ``build(kern, jit)``
makes a model's drivers as closures over its packed kernel ``kern``
(:meth:`symtheory.core.codegen.Kernel.drivers`), cached per kernel.

* :mod:`.noise`      GaussianNoiseChannel (tensor, adaptive 1-D, Laplace-RQMC)
* :mod:`.reduced`    ReducedChannel (tensor rule over the free rows) and shared pieces
* :mod:`.posterior`  ReducedPosterior (prior rule, peak-following mixture)
* :mod:`.deep`       LaplaceQMCChannel (Laplace-centred RQMC over the free rows)
* :mod:`.mixture`    model-independent mixture and RQMC pieces
"""
