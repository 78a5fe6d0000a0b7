"""A tiny driver module and its helper for tests/core/test_cache.py: the keyed cache of driver
closures (:meth:`symtheory.core.codegen.Kernel.drivers`) without compiling real drivers."""
