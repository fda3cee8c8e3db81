"""Boards, agents and the JSON Lines instance format of MAPF-FrozenLake.

An instance is a square grid of frozen cells (``.``) and holes (``H``), ``k`` agents with distinct starts
and distinct goals, and (once solved) its exact optima. Coordinates are ``(row, col)`` with row 0 at the
top. The file format is JSON Lines, one instance per line::

    {"id": "2agents_3x3_000000", "size": 3, "num_agents": 2, "grid": ["...", ".H.", "..."],
     "starts": [[0, 0], [0, 2]], "goals": [[0, 2], [0, 0]], "hole_ratio": 0.111, "needs_wait": true,
     "optimal_soc": 6, "optimal_makespan": 4, "shortest_sum": 4, "seed": [7, 0, 0, 0]}

``optimal_soc``, ``optimal_makespan``, ``shortest_sum`` and ``needs_wait`` may be absent (or null) in a
file a user brings; ``envengineer solve`` fills them in. Unknown extra keys are kept in ``meta``.
``id`` is a string (an integer is read as its decimal text); a null, boolean, list or object id is refused,
never renamed. A file is strict JSON: ``NaN`` and ``Infinity`` anywhere on a line are refused when read
(write ``null`` or a number), so what ``save_instances`` writes back is always JSON.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envengineer.errors import InstanceFormatError

Cell = tuple[int, int]

FROZEN = "."
HOLE = "H"

#: The five actions and their (d_row, d_col) effect, in the order the prompt lists them.
MOVES: dict[str, Cell] = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1), "WAIT": (0, 0)}
ACTIONS: tuple[str, ...] = tuple(MOVES)

_KNOWN_KEYS = {
    "id", "size", "num_agents", "grid", "starts", "goals", "hole_ratio", "needs_wait",
    "optimal_soc", "optimal_makespan", "shortest_sum", "seed",
}  # fmt: skip


def agent_name(index: int) -> str:
    """The canonical name of agent ``index`` in prompts and answers.

    >>> agent_name(3)
    'A3'
    """
    return f"A{index}"


@dataclass(frozen=True)
class Instance:
    """One MAPF-FrozenLake board with its agents and, once solved, its exact optima.

    Attributes:
        id: Free-form identifier, unique within a file (the generator writes ``3agents_6x6_000042``).
        grid: The rows of the square grid, ``.`` for frozen and ``H`` for hole.
        starts: Start cell of each agent, ``(row, col)``.
        goals: Goal cell of each agent, ``(row, col)``.
        optimal_soc: Optimal sum of costs, or ``None`` when not solved yet.
        optimal_makespan: Optimal makespan, or ``None`` when not solved yet.
        shortest_sum: Sum of the agents' individual shortest-path lengths, or ``None``.
        seed: The seed tuple the generator drew this instance from (empty for user boards).
        meta: Extra fields carried through unchanged (e.g. the benchmark subset).
    """

    id: str
    grid: tuple[str, ...]
    starts: tuple[Cell, ...]
    goals: tuple[Cell, ...]
    optimal_soc: int | None = None
    optimal_makespan: int | None = None
    shortest_sum: int | None = None
    seed: tuple[int, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        _check_board(self.id, self.grid, self.starts, self.goals)

    # -- derived facts -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.grid)

    @property
    def num_agents(self) -> int:
        return len(self.starts)

    @property
    def hole_ratio(self) -> float:
        """Share of the grid's cells that are holes."""
        return sum(row.count(HOLE) for row in self.grid) / (self.size * self.size)

    @property
    def solved(self) -> bool:
        return self.optimal_soc is not None and self.optimal_makespan is not None

    @property
    def needs_wait(self) -> bool | None:
        """Whether the optimal SoC exceeds the sum of individual shortest paths (SPEC §2.2)."""
        if self.optimal_soc is None or self.shortest_sum is None:
            return None
        return self.optimal_soc > self.shortest_sum

    def is_free(self, cell: Cell) -> bool:
        """True when ``cell`` is inside the grid and frozen."""
        r, c = cell
        n = self.size
        return 0 <= r < n and 0 <= c < n and self.grid[r][c] == FROZEN

    def board_hash(self) -> str:
        """Canonical hash of grid, starts and goals: equal boards hash equal whatever their id or seed."""
        return board_hash(self.grid, self.starts, self.goals)

    def with_optimum(self, *, optimal_soc: int, optimal_makespan: int, shortest_sum: int) -> Instance:
        return replace(
            self, optimal_soc=optimal_soc, optimal_makespan=optimal_makespan, shortest_sum=shortest_sum
        )

    # -- (de)serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "size": self.size,
            "num_agents": self.num_agents,
            "grid": list(self.grid),
            "starts": [list(c) for c in self.starts],
            "goals": [list(c) for c in self.goals],
            "hole_ratio": round(self.hole_ratio, 6),
            "needs_wait": self.needs_wait,
            "optimal_soc": self.optimal_soc,
            "optimal_makespan": self.optimal_makespan,
            "shortest_sum": self.shortest_sum,
            "seed": list(self.seed),
        }
        d.update(self.meta)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "instance") -> Instance:
        """Build an instance from a parsed JSON object, with errors that name the bad field."""
        if not isinstance(d, dict):
            raise InstanceFormatError(f"{where}: expected a JSON object, got {type(d).__name__}")
        missing = [k for k in ("id", "grid", "starts", "goals") if k not in d]
        if missing:
            raise InstanceFormatError(f"{where}: missing required field(s) {missing}")
        if d["id"] is None or isinstance(d["id"], (bool, list, dict)):
            raise InstanceFormatError(
                f"{where}: 'id' is {json.dumps(d['id'])[:40]}; give every instance a string id"
            )
        grid = d["grid"]
        if not isinstance(grid, list) or not all(isinstance(r, str) for r in grid):
            raise InstanceFormatError(f"{where}: 'grid' must be a list of row strings like \"..H.\"")
        inst = cls(
            id=str(d["id"]),
            grid=tuple(grid),
            starts=_cells(d["starts"], "starts", where),
            goals=_cells(d["goals"], "goals", where),
            optimal_soc=_opt_int(d, "optimal_soc", where),
            optimal_makespan=_opt_int(d, "optimal_makespan", where),
            shortest_sum=_opt_int(d, "shortest_sum", where),
            seed=_seed(d.get("seed"), where),
            meta={k: v for k, v in d.items() if k not in _KNOWN_KEYS},
        )
        for key, value in (("size", inst.size), ("num_agents", inst.num_agents)):
            if key in d and d[key] != value:
                raise InstanceFormatError(f"{where}: '{key}' is {d[key]} but the board says {value}")
        return inst


def board_hash(grid: Iterable[str], starts: Iterable[Cell], goals: Iterable[Cell]) -> str:
    """SHA-256 of the canonical board text (grid rows, then start and goal cells in agent order).

    >>> board_hash(["..", ".."], [(0, 0)], [(1, 1)])[:12]
    'c1d8a33257ac'
    """
    text = "/".join(grid) + "|" + ";".join(f"{r},{c}" for r, c in starts) + "|"
    text += ";".join(f"{r},{c}" for r, c in goals)
    return hashlib.sha256(text.encode()).hexdigest()


def instances_digest(pairs: Iterable[Instance | tuple[str, str]]) -> str:
    """SHA-256 that names a set of instances by content: one line ``id<TAB>board hash`` per instance,
    sorted by id (a set scored in another order is the same set). Ids and boards both count: the same
    ids on other boards (benchmark v1 and v2 share every id) give another digest. Takes instances or
    ``(id, board hash)`` pairs.

    >>> g = ("..", "..")
    >>> a, b = Instance("a", g, ((0, 0),), ((1, 1),)), Instance("b", g, ((0, 1),), ((1, 0),))
    >>> instances_digest([a, b]) == instances_digest([b, a]) != instances_digest([a])
    True
    """
    rows = sorted(p if isinstance(p, tuple) else (p.id, p.board_hash()) for p in pairs)
    return hashlib.sha256("".join(f"{i}\t{h}\n" for i, h in rows).encode()).hexdigest()


def _check_board(
    where: str, grid: tuple[str, ...], starts: tuple[Cell, ...], goals: tuple[Cell, ...]
) -> None:
    n = len(grid)
    if n < 2:
        raise InstanceFormatError(f"{where}: the grid needs at least 2 rows, got {n}")
    for i, row in enumerate(grid):
        if len(row) != n:
            raise InstanceFormatError(
                f"{where}: the grid must be square; row {i} has {len(row)} cells, not {n}"
            )
        if set(row) - {FROZEN, HOLE}:
            raise InstanceFormatError(f"{where}: row {i} {row!r} may hold only '.' (frozen) and 'H' (hole)")
    if len(starts) != len(goals):
        raise InstanceFormatError(
            f"{where}: {len(starts)} starts but {len(goals)} goals; give one of each per agent"
        )
    if not starts:
        raise InstanceFormatError(f"{where}: an instance needs at least one agent")
    for label, cells in (("start", starts), ("goal", goals)):
        if len(set(cells)) != len(cells):
            raise InstanceFormatError(f"{where}: two agents share a {label} cell; {label}s must be distinct")
        for i, (r, c) in enumerate(cells):
            if not (0 <= r < n and 0 <= c < n):
                raise InstanceFormatError(
                    f"{where}: agent {i}'s {label} {(r, c)} is outside the {n}x{n} grid"
                )
            if grid[r][c] != FROZEN:
                raise InstanceFormatError(f"{where}: agent {i}'s {label} {(r, c)} is on a hole")
    for i, (s, g) in enumerate(zip(starts, goals, strict=True)):
        if s == g:
            raise InstanceFormatError(f"{where}: agent {i} starts on its own goal {s}; move the goal")


def _cells(value: Any, key: str, where: str) -> tuple[Cell, ...]:
    try:
        cells = tuple((int(r), int(c)) for r, c in value)
        if any(isinstance(x, bool) or float(x) != int(x) for pair in value for x in pair):
            raise ValueError
        return cells
    except (TypeError, ValueError, OverflowError):
        raise InstanceFormatError(f"{where}: '{key}' must be a list of [row, col] integer pairs") from None


def _opt_int(d: dict[str, Any], key: str, where: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InstanceFormatError(f"{where}: '{key}' must be a non-negative integer or null, got {v!r}")
    return v


def _seed(v: Any, where: str) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,)
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(v)
    raise InstanceFormatError(f"{where}: 'seed' must be an integer or a list of integers, got {v!r}")


# -- files -----------------------------------------------------------------------------------------------
def _open_text(path: Path, mode: str) -> io.TextIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8")


def iter_instances(path: str | Path) -> Iterator[Instance]:
    """Read instances from a JSON Lines file (``.jsonl`` or ``.jsonl.gz``), one per non-empty line.

    Every way a file can be wrong (missing, a directory, not UTF-8, not gzip data although named ``.gz``,
    truncated, a line that is not JSON, nested too deeply or holding a number too long to read) is an
    :class:`~envengineer.errors.InstanceFormatError` naming the file (and the line).
    """
    path = Path(path)
    if not path.exists():
        raise InstanceFormatError(f"{path}: no such file")
    if path.is_dir():
        raise InstanceFormatError(f"{path}: is a directory; give an instance file (.jsonl or .jsonl.gz)")
    lineno = 0
    try:
        with _open_text(path, "r") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                yield Instance.from_dict(_json_line(line, f"{path}:{lineno}"), where=f"{path}:{lineno}")
    except UnicodeDecodeError as exc:
        raise InstanceFormatError(
            f"{path}: not UTF-8 text (after line {lineno}, byte {exc.object[exc.start : exc.start + 1]!r}); "
            "save the file as UTF-8"
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InstanceFormatError(
            f"{path}: not a complete gzip file ({exc}); recreate it, or drop the .gz suffix of a plain file"
        ) from None
    except OSError as exc:
        raise InstanceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _json_line(line: str, where: str) -> Any:
    """One JSON value; malformed, too deeply nested or oversized numbers are one-line errors."""
    try:
        return json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InstanceFormatError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except InstanceFormatError as exc:  # NaN or Infinity
        raise InstanceFormatError(f"{where}: {exc}") from None
    except RecursionError:
        raise InstanceFormatError(f"{where}: JSON nested too deeply; an instance is a flat object") from None
    except ValueError as exc:  # e.g. an integer longer than Python's 4,300-digit limit
        raise InstanceFormatError(f"{where}: not a readable JSON value ({str(exc)[:80]})") from None


def _no_constant(name: str) -> Any:
    raise InstanceFormatError(f"{name} is not a JSON value; write null or a number")


def load_instances(path: str | Path) -> list[Instance]:
    """Read a whole instance file; ids must be unique."""
    instances = list(iter_instances(path))
    seen: set[str] = set()
    for inst in instances:
        if inst.id in seen:
            raise InstanceFormatError(f"{path}: instance id {inst.id!r} appears twice; ids must be unique")
        seen.add(inst.id)
    return instances


def save_instances(instances: Iterable[Instance], path: str | Path) -> Path:
    """Write instances as JSON Lines (gzip when the name ends in ``.gz``; written deterministically).

    The file is written next to its target and renamed into place, so a failed write leaves neither a
    partial file nor the temporary one behind.
    """
    path = Path(path)
    if path.is_dir():
        raise InstanceFormatError(
            f"{path}: is a directory; give a file name such as {path / 'instances.jsonl'}"
        )
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".gz":
            # mtime=0 and no file name in the header, so the bytes (and the hash) depend only on the content.
            with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
                for inst in instances:
                    gz.write((inst.to_json() + "\n").encode())
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                for inst in instances:
                    fh.write(inst.to_json() + "\n")
        tmp.replace(path)
    except OSError as exc:
        raise InstanceFormatError(f"{path}: cannot write the file ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path
