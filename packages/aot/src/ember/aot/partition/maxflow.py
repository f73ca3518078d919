"""Maximum flow / minimum cut on a small directed graph (Dinic's algorithm).

Vertices are hashable names; capacities are ints, or :data:`INFINITE`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

INFINITE = float("inf")


class FlowNetwork:
    """A directed graph with edge capacities; :meth:`min_cut` solves it."""

    def __init__(self) -> None:
        self._index: dict[Hashable, int] = {}
        # edges as parallel lists; edge e and e ^ 1 are a pair (forward, reverse)
        self._to: list[int] = []
        self._cap: list[float] = []
        self._adj: list[list[int]] = []

    def vertex(self, name: Hashable) -> int:
        if name not in self._index:
            self._index[name] = len(self._adj)
            self._adj.append([])
        return self._index[name]

    def add_edge(self, u: Hashable, v: Hashable, capacity: float) -> None:
        """Add an edge ``u -> v`` (parallel edges add up)."""
        a, b = self.vertex(u), self.vertex(v)
        self._adj[a].append(len(self._to))
        self._to.append(b)
        self._cap.append(capacity)
        self._adj[b].append(len(self._to))
        self._to.append(a)
        self._cap.append(0)

    def min_cut(self, source: Hashable, sink: Hashable) -> tuple[float, set[Hashable]]:
        """Run max-flow; return the flow value and the source side of a minimum cut.

        Raises:
            ValueError: if the cut is infinite (an uncuttable path from source to sink).
        """
        s, t = self.vertex(source), self.vertex(sink)
        flow = 0.0
        while True:
            level = self._levels(s)
            if level[t] < 0:
                break
            cursor = [0] * len(self._adj)
            while True:
                pushed = self._augment(s, t, level, cursor)
                if pushed == 0:
                    break
                if pushed == INFINITE:
                    raise ValueError("the minimum cut is infinite: an uncuttable path "
                                     "joins source and sink")
                flow += pushed
        level = self._levels(s)
        names = {i: n for n, i in self._index.items()}
        return flow, {names[i] for i, lv in enumerate(level) if lv >= 0}

    def _levels(self, s: int) -> list[int]:
        level = [-1] * len(self._adj)
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self._adj[u]:
                if self._cap[e] > 0 and level[self._to[e]] < 0:
                    level[self._to[e]] = level[u] + 1
                    queue.append(self._to[e])
        return level

    def _augment(self, s: int, t: int, level: list[int], cursor: list[int]) -> float:
        """Find one augmenting path in the level graph (iterative DFS) and push flow."""
        path: list[int] = []  # edges from s to the current vertex
        u = s
        while True:
            if u == t:
                pushed = min(self._cap[e] for e in path)
                for e in path:
                    self._cap[e] -= pushed
                    self._cap[e ^ 1] += pushed
                return pushed
            advanced = False
            while cursor[u] < len(self._adj[u]):
                e = self._adj[u][cursor[u]]
                v = self._to[e]
                if self._cap[e] > 0 and level[v] == level[u] + 1:
                    path.append(e)
                    u = v
                    advanced = True
                    break
                cursor[u] += 1
            if advanced:
                continue
            if not path:
                return 0
            # dead end: retreat and skip the edge that led here
            level[u] = -1
            e = path.pop()
            u = self._to[e ^ 1]
            cursor[u] += 1
