"""Identity checks a declared channel must pass before it is used: ``g_out`` against
an independent derivative of ``log Z_out``, normalization, Nishimori, tower
(:mod:`.scalar`), and multi-index channels against a brute-force quadrature
(:mod:`.multi_index`); symbolic rewrites at random points (:mod:`.symbolic`)."""
