"""State evolution: the matrix SE of multi-index models (:mod:`.state_evolution`), the
scalar spectral SE of matrix estimation (:mod:`.spectral`), the design of frozen
samples (:mod:`.sampling`) and generalization errors at an overlap (:mod:`.errors`)."""
