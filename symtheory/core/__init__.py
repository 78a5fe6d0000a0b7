"""Generic core: symbolic objects -> kernels, special functions, free probability,
algebraic spectral laws, quadrature and solvers.  Nothing model-specific lives here."""
