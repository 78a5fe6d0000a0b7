"""Generalized approximate message passing (:mod:`.engine`; tokens: :mod:`.tokens`)."""
