"""Thresholds from the linearized state evolution: the operator (:mod:`.operator`) and
its expectation over ``y`` (:mod:`.expectations`), weak recovery
(:mod:`.weak_recovery`), the staircase (:mod:`.staircase`) and the grand staircase of
any depth (:mod:`.grand_staircase`)."""
