import numba


@numba.njit
def scale(v):
    return 2.0 * v
