"""The loop's stages, one module each, in the order a run takes them.

``warm_start`` (optional) → ``start_validation`` (optional, :mod:`.validation`) → per round ``config`` →
``data`` → ``train`` → ``validation`` → after the last round ``benchmark``. Each module's ``run`` writes the
stage's files and returns ``(paths, info[, status])`` for the ledger line; ``load`` rebuilds the round's
state from those files when a resumed run skips the stage. ``python -m envengineer.loop.stages evaluate``
is the worker a launched evaluation runs (:mod:`.__main__`).
"""
