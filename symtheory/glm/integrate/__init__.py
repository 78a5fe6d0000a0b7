"""Integration that follows the integrand: what SymPy establishes about a link
(:mod:`.link_structure`), exact orthant mixtures (:mod:`.orthant_mixture`), reduced
posteriors and the peak-following rule (:mod:`.reduced_posterior`), Laplace-centred
randomized QMC (:mod:`.laplace_qmc`), projected expectations (:mod:`.projected`) and
the Numba drivers of these rules.  Elementary rules (Gauss-Hermite, Gauss-Legendre,
tanh-sinh, scrambled Sobol points) live in :mod:`symtheory.core.quadrature`."""
