"""What this process may use of the machine it runs on, and how it starts worker processes.

The cores and threads a process may use, and every process pool, come from here: the generator's and
the benchmark build's pools (:func:`in_workers`), the sweep's lanes (``sweep.executors.LanesExecutor``)
and the scripts under ``benchmarks/``.

**Threads.** torch (OpenMP), MKL and OpenBLAS size their thread pools from :data:`THREAD_VARIABLES` when
they load, so a process's share is set in the environment it starts with (:func:`thread_env`). A
process's allowance (:func:`thread_allowance`) is ``OMP_NUM_THREADS`` when that is a positive whole number
(a lane sets it to its share), else the cores it may run on (:func:`usable_cpus`); lanes split the usable
cores evenly, at least one thread each (:func:`lane_threads`).

**Start method: spawn** (:data:`START_METHOD`). A pool's workers are fresh interpreters, not forks of
this process, because the pools run in processes that may have loaded torch: the loop builds its
validation sets and generates its rounds (``mapf.generator.generate_round``, ``mapf.benchmark.build_set``)
in its own process, where a CPU run's stages also train, and ``envengineer train --round`` generates after
checking its preset with TRL. A fork copies the parent's OpenMP and BLAS thread pools and locks
in whatever state they are in, a known cause of workers that hang or compute differently (Python 3.12
warns on a fork from a process with threads). A spawned worker computes from the job it was sent and
the modules it imports, nothing else of its parent's state.

Fork starts a worker faster, and nothing in the repo says it is needed: a spawned worker pays one import
of numpy and ``envengineer.mapf`` (0.4 s measured on the shared 2-core machine under load), once per pool
and in parallel over the workers, against a 4,000-board round's 4.4 s in one process and 2.3 s with 2 forked
workers (docs/benchmarks.md). At the smallest pooled round (``PARALLEL_FROM``, 1,000 boards) that start
takes most of the second worker's gain, so re-measure that threshold with ``bench_generate.py`` before
moving it. Spawn rather than forkserver: the same on every platform (macOS and Windows spawn already), no
server process that outlives the call, and a worker starts with this process's environment as it is when
the pool starts (a forkserver's children get the server's, which would lose the thread variables
``benchmarks/bench_grpo.py`` sets just before its lanes start). A job's function must pickle by
reference: a module-level function or a :func:`functools.partial` of one.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: The variables that size the thread pools of torch (OpenMP), MKL and OpenBLAS; each reads its own when
#: it loads, so they are set in the environment a process starts with.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

#: How every pool here starts its workers (the module docstring says why).
START_METHOD = "spawn"


def usable_cpus() -> int:
    """The cores this process may run on (``taskset`` and cpusets count; CPU quotas do not)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def thread_allowance() -> int:
    """The threads this process may keep busy: ``OMP_NUM_THREADS`` when it is a positive whole number
    (what a lane gets), else :func:`usable_cpus`."""
    allowance = os.environ.get("OMP_NUM_THREADS", "")
    return int(allowance) if allowance.isdigit() and int(allowance) > 0 else usable_cpus()


def lane_threads(lanes: int, cpus: int | None = None) -> int:
    """Threads of each of ``lanes`` processes side by side: the usable cores (``cpus``, default
    :func:`usable_cpus`) split evenly, at least one each.

    >>> lane_threads(2, cpus=8), lane_threads(3, cpus=2)
    (4, 1)
    """
    return max(1, (usable_cpus() if cpus is None else cpus) // max(1, lanes))


def thread_env(threads: int) -> dict[str, str]:
    """This process's environment with torch, MKL and OpenBLAS sized to ``threads`` threads.

    >>> thread_env(1)["OMP_NUM_THREADS"]
    '1'
    """
    return {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads))}


def pool_context() -> BaseContext:
    """The :mod:`multiprocessing` context every pool starts its workers with (:data:`START_METHOD`)."""
    return multiprocessing.get_context(START_METHOD)


def in_workers(
    fn: Callable[[T], R], jobs: Sequence[T], workers: int, weights: Sequence[float]
) -> Iterator[R]:
    """``fn`` of each job in ``workers`` processes, yielded in the jobs' order. The heaviest jobs start
    first, which keeps every worker busy to the end; an error cancels the jobs not yet started."""
    with ProcessPoolExecutor(max_workers=workers, mp_context=pool_context()) as pool:
        order = sorted(range(len(jobs)), key=lambda i: -weights[i])
        futures = {i: pool.submit(fn, jobs[i]) for i in order}
        try:
            for i in range(len(jobs)):
                yield futures[i].result()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
