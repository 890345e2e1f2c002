"""The Client's methods per job kind: map, reduce, matmul, geodesic and its
neighbour queries (kNN, radius, row-wise), each as submit_X (returns a Job
at once) and X (waits and returns NumPy arrays).

Every parameter the server takes for a kind is a named, annotated parameter
here, so help(), IDEs and type checkers see what a kind takes (API.md "Job
kinds" is the reference for their meaning). The only **kwargs left are the
named inputs of map and reduce (x=..., y=...: the expression's own names).
The submit options (priority, timeout_s, label, request_id, output) are
keyword-only on every method and documented once (_OPTS), spliced into each
docstring by _doc. Kinds is a mixin: Client (client.py) supplies submit(),
max_wait and the transport; this module holds no state of its own.

The examples in the docstrings run as doctests against a real tesseld
(tests/test_docs.py), with `c` a Client and `np` NumPy.
"""
from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple, Union)

import numpy as np

from . import errors
from .array import Array
from .job import Job

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from typing import Protocol

    class DataFrameLike(Protocol):
        columns: Any

        def to_numpy(self, dtype: Any = None) -> np.ndarray: ...
else:
    DataFrameLike = Any

#: Any array input: a NumPy array or what numpy.asarray takes (a list, a
#: scalar), a tessel.Array kept on the server, a tessel.Job (its result,
#: chained on the server), or a raw API value ({"random": ...}, {"range":
#: ...}, {"file": ...}).
ArrayLike = Union[np.ndarray, Array, Job, Mapping[str, Any], Sequence[Any], float]
#: Geodesic points: an (n, 2) [lat, lon] array, a list of (lat, lon) pairs,
#: a DataFrame (columns named by lat= / lon=), or any ArrayLike above.
PointsLike = Union[ArrayLike, DataFrameLike]
#: What output= takes: None (a same-host file when there is one), False
#: (keep the result on the server), or a path the server writes.
Output = Union[None, bool, str]

_OPTS = """priority : int, optional
        0 to 9, higher runs first (FIFO within a priority); default 5.
    timeout_s : float, optional
        The job fails with ``deadline_exceeded`` past this many seconds.
    label : str, optional
        A free text kept with the job (the dashboard and ``c.jobs`` show it).
    request_id : str, optional
        Idempotency key: the same request_id submitted twice is one job.
        Default: a new random one.
    output : None, False or str, optional
        None: a same-host output file when the client found one
        (``Client.local_dir``), else the server keeps the result; False:
        the server keeps it; a path: the server writes the .npy there."""

_BACKEND = """backend : {"auto", "serial", "cpu", "cuda", "compare"}, optional
        Where it runs; "auto" lets the server's cost model choose."""

_PROGRESS = """progress : bool, optional
        Show a tqdm progress bar while waiting (a warning when tqdm is
        missing)."""

_WAIT = """wait : float, optional
        Seconds the server may hold the submit until the job ends (at most
        the Client's max_wait); 0 answers at once."""

_POINTS = """points : array_like, shape (n, 2)
        [lat, lon] in degrees: an array, a list of (lat, lon) pairs, a
        DataFrame with the columns named by `lat` and `lon`, a tessel.Array
        or a Job."""

_TARGETS = """targets : array_like, shape (m, 2), optional
        The candidates, as `points`; default the points themselves (a point
        is never its own neighbour)."""

_GEO = """method : {"karney", "vincenty", "haversine"}, optional
        Karney 2013 (default, within 15 nm of GeographicLib), Vincenty (NaN
        where it does not converge) or haversine on a sphere of `radius_m`.
    units : {"m", "km"}, optional
        The unit of every distance in and out (also `r` and `within`).
    ellipsoid : {"WGS84", "GRS80"} or dict, optional
        Or {"a": metres, "f": flattening}; default WGS84.
    radius_m : float, optional
        The sphere's radius for "haversine"; default 6371008.8.
    dtype : {"float64", "float32"}, optional
        The distances' dtype; default float64.
    lat, lon : str, optional
        The column names when `points` / `targets` are DataFrames."""


def _doc(fn):
    """Fill the shared parameter texts into fn's NumPy-style docstring."""
    shared = {k: v.replace("\n", "\n    ") for k, v in (
        ("opts", _OPTS), ("backend", _BACKEND), ("progress", _PROGRESS), ("wait", _WAIT),
        ("points", _POINTS), ("targets", _TARGETS), ("geo", _GEO))}  # their lines sit 4 deeper in a method
    fn.__doc__ = fn.__doc__.format(**shared)
    return fn


class Kinds:
    """The per-kind methods of tessel.Client (a mixin; see client.py)."""

    # Supplied by Client.
    max_wait: float

    def submit(self, kind: str, **kw: Any) -> Job:  # pragma: no cover - Client's
        raise NotImplementedError

    def _w(self, progress: bool) -> float:
        return 0 if progress else self.max_wait

    # -- map ------------------------------------------------------------------
    @_doc
    def submit_map(self, expr: str, backend: str = "auto", dtype: Optional[str] = None,
                   inputs: Optional[Mapping[str, ArrayLike]] = None, *,
                   priority: Optional[int] = None, timeout_s: Optional[float] = None,
                   label: Optional[str] = None, request_id: Optional[str] = None,
                   output: Output = None, wait: float = 0.0, **named: ArrayLike) -> Job:
        """Submit a map job and return at once; see `Client.map`.

        Parameters
        ----------
        expr : str
            The elementwise expression (API.md "map").
        {backend}
        dtype : {{"float64", "float32"}}, optional
            The dtype computed in and returned; default NumPy's promotion
            of the inputs: float32 when every array input is float32
            (numbers take the arrays' dtype), else float64.
        inputs : dict of str to array_like, optional
            Inputs by name, for names that clash with a parameter here.
        {opts}
        {wait}
        **named : array_like
            The expression's inputs by name (x=..., y=...).

        Returns
        -------
        Job
            A concurrent.futures.Future; ``.result()`` is the array.

        Examples
        --------
        >>> j = c.submit_map("sqrt(x)", x=[1.0, 4.0, 9.0])
        >>> j.result()
        array([1., 2., 3.])
        """
        return self.submit("map", backend=backend, expr=expr, dtype=dtype,
                           inputs=dict(inputs or {}, **named), priority=priority,
                           timeout_s=timeout_s, label=label, request_id=request_id,
                           output=output, wait=wait)

    @_doc
    def map(self, expr: str, backend: str = "auto", dtype: Optional[str] = None,
            inputs: Optional[Mapping[str, ArrayLike]] = None, *, progress: bool = False,
            priority: Optional[int] = None, timeout_s: Optional[float] = None,
            label: Optional[str] = None, request_id: Optional[str] = None,
            output: Output = None, **named: ArrayLike) -> np.ndarray:
        """Evaluate an elementwise expression over arrays, with NumPy broadcasting.

        Parameters
        ----------
        expr : str
            The expression: numbers, the input names, ``+ - * / % **``,
            comparisons, ``and or not``, ``where(c, a, b)``, the functions
            ``abs sqrt exp log sin cos ... hypot fmod`` and the constants
            ``pi e`` (API.md "map" lists them). Every name must be an
            input and every input must be used.
        {backend}
        dtype : {{"float64", "float32"}}, optional
            The dtype computed in and returned; default NumPy's promotion
            of the inputs: float32 when every array input is float32
            (numbers take the arrays' dtype), else float64.
        inputs : dict of str to array_like, optional
            Inputs by name, for names that clash with a parameter here
            (``inputs={{"label": a}}``).
        {progress}
        {opts}
        **named : array_like
            The expression's inputs by name (x=..., y=...).

        Returns
        -------
        ndarray
            The broadcast shape of the inputs.

        Raises
        ------
        InvalidArgument
            A bad expression (``.field`` "params.expr", ``.position`` the
            character), an unknown or unused input, shapes that do not
            broadcast.
        JobFailed
            The job failed while running (``.code``, ``.job``).

        See Also
        --------
        submit_map : the same, returning a Job at once.

        Examples
        --------
        >>> c.map("x**2 + 2*x + 1", x=np.arange(4.0))
        array([ 1.,  4.,  9., 16.])
        >>> c.map("hypot(x, y)", x=[3.0, 5.0], y=[[4.0], [12.0]])
        array([[ 5.        ,  6.40312424],
               [12.36931688, 13.        ]])
        """
        return self.submit_map(expr, backend, dtype, inputs, priority=priority,
                               timeout_s=timeout_s, label=label, request_id=request_id,
                               output=output, wait=self._w(progress),
                               **named).result(progress=progress)

    # -- reduce -----------------------------------------------------------------
    @_doc
    def submit_reduce(self, op: str, expr: Optional[str] = None, backend: str = "auto",
                      axis: Optional[int] = None, ddof: Optional[int] = None,
                      dtype: Optional[str] = None,
                      inputs: Optional[Mapping[str, ArrayLike]] = None, *,
                      priority: Optional[int] = None, timeout_s: Optional[float] = None,
                      label: Optional[str] = None, request_id: Optional[str] = None,
                      output: Output = None, wait: float = 0.0, **named: ArrayLike) -> Job:
        """Submit a reduce job and return at once; see `Client.reduce`.

        Parameters
        ----------
        op : str
            ``sum mean min max prod var std argmin argmax norm``.
        expr : str, optional
            Reduced expression; default the single input's name.
        {backend}
        axis : int, optional
            The axis reduced (negative counts from the end); None: all.
        ddof : int, optional
            Delta degrees of freedom of var / std; default 0.
        dtype : {{"float64", "float32"}}, optional
        inputs : dict of str to array_like, optional
        {opts}
        {wait}
        **named : array_like
            The expression's inputs by name.

        Returns
        -------
        Job

        Examples
        --------
        >>> c.submit_reduce("max", x=[3.0, 9.0, 4.0]).result()
        array(9.)
        """
        return self.submit("reduce", backend=backend, op=op, expr=expr, axis=axis, ddof=ddof,
                           dtype=dtype, inputs=dict(inputs or {}, **named), priority=priority,
                           timeout_s=timeout_s, label=label, request_id=request_id,
                           output=output, wait=wait)

    @_doc
    def reduce(self, op: str, expr: Optional[str] = None, backend: str = "auto",
               axis: Optional[int] = None, ddof: Optional[int] = None,
               dtype: Optional[str] = None, inputs: Optional[Mapping[str, ArrayLike]] = None, *,
               progress: bool = False, priority: Optional[int] = None,
               timeout_s: Optional[float] = None, label: Optional[str] = None,
               request_id: Optional[str] = None, output: Output = None,
               **named: ArrayLike) -> Union[np.ndarray, np.generic]:
        """Reduce an expression of arrays to one value, or one per row/column.

        Parameters
        ----------
        op : {{"sum", "mean", "min", "max", "prod", "var", "std", "argmin", "argmax", "norm"}}
            The reduction; ``norm`` is the Euclidean norm, ``argmin`` /
            ``argmax`` the first index.
        expr : str, optional
            The expression reduced (the language of `map`); default the
            single input's name.
        {backend}
        axis : int, optional
            The axis reduced (negative counts from the end); None (the
            default) reduces everything.
        ddof : int, optional
            Delta degrees of freedom of ``var`` and ``std``; default 0, as
            NumPy's.
        dtype : {{"float64", "float32"}}, optional
            The dtype computed in and returned; default NumPy's promotion
            of the inputs: float32 when every array input is float32
            (numbers take the arrays' dtype), else float64.
        inputs : dict of str to array_like, optional
            Inputs by name, for names that clash with a parameter here.
        {progress}
        {opts}
        **named : array_like
            The expression's inputs by name.

        Returns
        -------
        ndarray or NumPy scalar
            The input's shape without `axis`; with axis None a NumPy scalar
            (``np.float64``, ``np.float32``, ``np.int64``), as ``np.sum``
            and ``np.argmax`` give. The dtype is NumPy's: the inputs'
            promotion (float32 stays float32), int64 for argmin / argmax.

        Raises
        ------
        InvalidArgument
            An unknown op, a bad expression, an axis out of range, min /
            max / argmin / argmax of an empty axis.

        Examples
        --------
        >>> c.reduce("sum", "x**2", x=np.arange(6.0).reshape(2, 3), axis=1)
        array([ 5., 50.])
        >>> s = c.reduce("std", x=[1.0, 2.0, 3.0, 4.0], ddof=1)
        >>> type(s).__name__, round(float(s), 8)
        ('float64', 1.29099445)
        >>> i = c.reduce("argmax", x=np.array([3.0, 9.0, 1.0], dtype=np.float32))
        >>> type(i).__name__, int(i)
        ('int64', 1)
        """
        r = self.submit_reduce(op, expr, backend, axis, ddof, dtype, inputs,
                               priority=priority, timeout_s=timeout_s, label=label,
                               request_id=request_id, output=output,
                               wait=self._w(progress), **named).result(progress=progress)
        # np.sum(x) is a NumPy scalar, not a 0-d array: so is a full reduce
        return r[()] if axis is None and isinstance(r, np.ndarray) and r.ndim == 0 else r

    # -- matmul -----------------------------------------------------------------
    @_doc
    def submit_matmul(self, a: ArrayLike, b: ArrayLike, bias: Optional[ArrayLike] = None,
                      backend: str = "auto", transpose_a: Optional[bool] = None,
                      transpose_b: Optional[bool] = None, dtype: Optional[str] = None, *,
                      priority: Optional[int] = None, timeout_s: Optional[float] = None,
                      label: Optional[str] = None, request_id: Optional[str] = None,
                      output: Output = None, wait: float = 0.0) -> Job:
        """Submit a matmul job and return at once; see `Client.matmul`.

        Parameters
        ----------
        a, b : array_like
        bias : array_like, optional
        {backend}
        transpose_a, transpose_b : bool, optional
        dtype : {{"float64", "float32"}}, optional
        {opts}
        {wait}

        Returns
        -------
        Job

        Examples
        --------
        >>> c.submit_matmul([[1.0, 2.0]], [[3.0], [4.0]]).result()
        array([[11.]])
        """
        return self.submit("matmul", backend=backend, a=a, b=b, bias=bias, transpose_a=transpose_a,
                           transpose_b=transpose_b, dtype=dtype, priority=priority,
                           timeout_s=timeout_s, label=label, request_id=request_id,
                           output=output, wait=wait)

    @_doc
    def matmul(self, a: ArrayLike, b: ArrayLike, bias: Optional[ArrayLike] = None,
               backend: str = "auto", transpose_a: Optional[bool] = None,
               transpose_b: Optional[bool] = None, dtype: Optional[str] = None, *,
               progress: bool = False, priority: Optional[int] = None,
               timeout_s: Optional[float] = None, label: Optional[str] = None,
               request_id: Optional[str] = None, output: Output = None) -> np.ndarray:
        """Matrix product plus bias: ``a @ b + bias``.

        Parameters
        ----------
        a : array_like, shape (m, k)
        b : array_like, shape (k, n) or (k,)
            A 1-D `b` is a column and gives a result of shape (m,).
        bias : array_like, optional
            Broadcast to the result: a scalar, (n,), (m, 1) or (m, n).
        {backend}
        transpose_a, transpose_b : bool, optional
            Use the transpose of `a` / `b` (not copied on the client).
        dtype : {{"float64", "float32"}}, optional
            The dtype computed in and returned; default NumPy's promotion
            of the inputs: float32 when every array input is float32
            (numbers take the arrays' dtype), else float64.
        {progress}
        {opts}

        Returns
        -------
        ndarray, shape (m, n) or (m,)

        Raises
        ------
        InvalidArgument
            Shapes that do not fit (the message names both).

        Examples
        --------
        >>> W = np.array([[1.0, 2.0], [3.0, 4.0]])
        >>> c.matmul(W, [1.0, 1.0], bias=0.5)
        array([3.5, 7.5])
        """
        return self.submit_matmul(a, b, bias, backend, transpose_a, transpose_b, dtype,
                                  priority=priority, timeout_s=timeout_s, label=label,
                                  request_id=request_id, output=output,
                                  wait=self._w(progress)).result(progress=progress)

    # -- geodesic ------------------------------------------------------------------
    @_doc
    def submit_geodesic(self, points: PointsLike, targets: Optional[PointsLike] = None,
                        method: str = "karney", units: str = "m", layout: Optional[str] = None,
                        ellipsoid: Union[None, str, Dict[str, float]] = None,
                        radius_m: Optional[float] = None, dtype: Optional[str] = None,
                        backend: str = "auto", lat: str = "lat", lon: str = "lon",
                        query: Optional[Dict[str, Any]] = None, *,
                        priority: Optional[int] = None, timeout_s: Optional[float] = None,
                        label: Optional[str] = None, request_id: Optional[str] = None,
                        output: Output = None, wait: float = 0.0) -> Job:
        """Submit a geodesic job (a matrix or a query) and return at once.

        Parameters
        ----------
        {points}
        {targets}
        {geo}
        layout : {{"square", "condensed"}}, optional
            The matrix's layout; default "square"; refused with a query.
        {backend}
        query : dict, optional
            ``{{"knn": {{"k": 10}}}}``, ``{{"radius": {{"r": 5000}}}}`` or
            ``{{"rowwise": {{"op": "argmin"}}}}`` (API.md "params.query"). A
            knn or radius result has several parts, never written to a
            same-host file: read them with `Job.part` / `Job.parts`.
        {opts}
        {wait}

        Returns
        -------
        Job

        See Also
        --------
        geodesic, geodesic_knn, geodesic_radius, geodesic_rowwise

        Examples
        --------
        >>> j = c.submit_geodesic([(0, 0), (0, 1), (0, 3)], query={{"knn": {{"k": 1}}}}, units="km")
        >>> j.result(); j.part_names
        array(...)
        ['distance', 'index']
        >>> j.part("index")
        array([[1],
               [0],
               [1]])
        """
        # Several parts: no output file takes them; a region does (a kNN's
        # size is known here), so the client's region pool is used then.
        if query is not None and ("knn" in query or "radius" in query) and output is None \
                and not ("knn" in query and self._regions_on()):
            output = False
        return self.submit("geodesic", backend=backend,
                           points=_points(points, lat, lon, "params.points"),
                           targets=None if targets is None else _points(targets, lat, lon,
                                                                        "params.targets"),
                           method=method, units=units, layout=layout, ellipsoid=ellipsoid,
                           radius_m=radius_m, dtype=dtype, query=query, priority=priority,
                           timeout_s=timeout_s, label=label, request_id=request_id,
                           output=output, wait=wait)

    def _geo(self, points, targets, query, progress, geo):
        """A geodesic job submitted with the blocking methods' arguments."""
        return self.submit_geodesic(points, targets, query=query, wait=self._w(progress), **geo)

    @_doc
    def geodesic(self, points: PointsLike, targets: Optional[PointsLike] = None,
                 backend: str = "auto", *, progress: bool = False, method: str = "karney",
                 units: str = "m", layout: Optional[str] = None,
                 ellipsoid: Union[None, str, Dict[str, float]] = None,
                 radius_m: Optional[float] = None, dtype: Optional[str] = None,
                 lat: str = "lat", lon: str = "lon", priority: Optional[int] = None,
                 timeout_s: Optional[float] = None, label: Optional[str] = None,
                 request_id: Optional[str] = None, output: Output = None) -> np.ndarray:
        """Distances between every pair of points on the ellipsoid.

        Parameters
        ----------
        {points}
        {targets}
        {backend}
        {progress}
        {geo}
        layout : {{"square", "condensed"}}, optional
            "square" (default): (n, n) or (n, m); "condensed": the
            n(n-1)/2 upper-triangle values in SciPy ``pdist`` order
            (without targets only).
        {opts}

        Returns
        -------
        ndarray, shape (n, n), (n, m) or (n*(n-1)//2,)
            Without targets symmetric with a zero diagonal.

        Raises
        ------
        InvalidArgument
            A latitude outside [-90, 90] (a swapped pair; ``.position`` the
            row), a non-finite value, a shape other than (n, 2), a
            DataFrame without the `lat` / `lon` columns.

        See Also
        --------
        geodesic_knn : the k nearest, without the matrix.
        geodesic_radius : the pairs within a distance.
        geodesic_rowwise : one value per point.

        Examples
        --------
        >>> cities = [(48.8566, 2.3522), (51.5074, -0.1278), (40.7128, -74.0060)]
        >>> c.geodesic(cities, units="km").round(1)
        array([[   0. ,  343.9, 5852.9],
               [ 343.9,    0. , 5585.2],
               [5852.9, 5585.2,    0. ]])
        """
        geo = dict(backend=backend, method=method, units=units, layout=layout,
                   ellipsoid=ellipsoid, radius_m=radius_m, dtype=dtype, lat=lat, lon=lon,
                   priority=priority, timeout_s=timeout_s, label=label, request_id=request_id,
                   output=output)
        return self._geo(points, targets, None, progress, geo).result(progress=progress)

    @_doc
    def geodesic_knn(self, points: PointsLike, k: int, targets: Optional[PointsLike] = None,
                     backend: str = "auto", *, progress: bool = False, method: str = "karney",
                     units: str = "m", ellipsoid: Union[None, str, Dict[str, float]] = None,
                     radius_m: Optional[float] = None, dtype: Optional[str] = None,
                     lat: str = "lat", lon: str = "lon", priority: Optional[int] = None,
                     timeout_s: Optional[float] = None, label: Optional[str] = None,
                     request_id: Optional[str] = None) -> Tuple[np.ndarray, np.ndarray]:
        """The k nearest neighbours of each point on the ellipsoid, without the matrix.

        Exact: the distances are the elements the full matrix would hold
        (same method, units and dtype); the search is pruned on the server
        (a k-d tree on the CPU, sorted tiles on the GPU), so it costs a few
        dozen pairs per point instead of m.

        Parameters
        ----------
        {points}
        k : int
            Neighbours per point, 1 to 1024; cut to the candidates there
            are (k' = min(k, m), or n - 1 without targets).
        {targets}
        {backend}
        {progress}
        {geo}
        priority, timeout_s, label, request_id : optional
            As in `submit_geodesic`.

        Returns
        -------
        distance : ndarray, shape (n, k')
            Each row ascending, in `units` and `dtype`.
        index : ndarray of int64, shape (n, k')
            The neighbours' rows in `targets` (or `points`); ties go to the
            smaller index.

        Raises
        ------
        InvalidArgument
            `k` outside 1..1024 (``.field`` "params.query.knn.k"), or bad
            points as in `geodesic`.

        See Also
        --------
        geodesic_radius, geodesic_rowwise
        Job.part : the parts of a submitted query job.

        Examples
        --------
        >>> cities = [(48.8566, 2.3522), (51.5074, -0.1278), (40.7128, -74.0060),
        ...           (50.8503, 4.3517)]
        >>> distance, index = c.geodesic_knn(cities, k=2, units="km")
        >>> index
        array([[3, 1],
               [3, 0],
               [1, 0],
               [0, 1]])
        >>> distance.round(1)
        array([[ 264.3,  343.9],
               [ 321.6,  343.9],
               [5585.2, 5852.9],
               [ 264.3,  321.6]])
        """
        geo = dict(backend=backend, method=method, units=units, ellipsoid=ellipsoid,
                   radius_m=radius_m, dtype=dtype, lat=lat, lon=lon, priority=priority,
                   timeout_s=timeout_s, label=label, request_id=request_id)
        job = self._geo(points, targets, {"knn": {"k": int(k)}}, progress, geo)
        job.wait(progress=progress)
        return job.part("distance"), job.part("index")

    @_doc
    def geodesic_radius(self, points: PointsLike, r: float,
                        targets: Optional[PointsLike] = None, max_pairs: Optional[int] = None,
                        backend: str = "auto", *, progress: bool = False,
                        method: str = "karney", units: str = "m",
                        ellipsoid: Union[None, str, Dict[str, float]] = None,
                        radius_m: Optional[float] = None, dtype: Optional[str] = None,
                        lat: str = "lat", lon: str = "lon", priority: Optional[int] = None,
                        timeout_s: Optional[float] = None, label: Optional[str] = None,
                        request_id: Optional[str] = None
                        ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every pair of points within a distance of each other, without the matrix.

        Parameters
        ----------
        {points}
        r : float
            The distance, in `units` (>= 0); a pair at exactly r is in.
        {targets}
        max_pairs : int, optional
            The most pairs the job may find; more fails the job
            (``resource_exhausted``, field "params.query.radius.max_pairs").
            Default: 10**8 or what the server's result limit allows.
        {backend}
        {progress}
        {geo}
        priority, timeout_s, label, request_id : optional
            As in `submit_geodesic`.

        Returns
        -------
        i : ndarray of int64, shape (P,)
            Rows of `points`.
        j : ndarray of int64, shape (P,)
            Rows of `targets`; without targets each pair once, i < j.
        distance : ndarray, shape (P,)
            In `units`; pairs sorted by (i, j).

        Raises
        ------
        InvalidArgument
            A negative or non-numeric `r`, `max_pairs` < 1.
        JobFailed
            More than `max_pairs` pairs (``.code`` "resource_exhausted").

        Examples
        --------
        >>> cities = [(48.8566, 2.3522), (51.5074, -0.1278), (40.7128, -74.0060),
        ...           (50.8503, 4.3517)]
        >>> i, j, d = c.geodesic_radius(cities, 330, units="km")
        >>> list(zip(i.tolist(), j.tolist())), d.round(1)
        ([(0, 3), (1, 3)], array([264.3, 321.6]))
        """
        q: Dict[str, Any] = {"r": r}
        if max_pairs is not None:
            q["max_pairs"] = int(max_pairs)
        geo = dict(backend=backend, method=method, units=units, ellipsoid=ellipsoid,
                   radius_m=radius_m, dtype=dtype, lat=lat, lon=lon, priority=priority,
                   timeout_s=timeout_s, label=label, request_id=request_id)
        job = self._geo(points, targets, {"radius": q}, progress, geo)
        job.wait(progress=progress)
        return job.part("i"), job.part("j"), job.part("distance")

    @_doc
    def geodesic_rowwise(self, points: PointsLike, op: str,
                         targets: Optional[PointsLike] = None, within: Optional[float] = None,
                         backend: str = "auto", *, progress: bool = False,
                         method: str = "karney", units: str = "m",
                         ellipsoid: Union[None, str, Dict[str, float]] = None,
                         radius_m: Optional[float] = None, dtype: Optional[str] = None,
                         lat: str = "lat", lon: str = "lon", priority: Optional[int] = None,
                         timeout_s: Optional[float] = None, label: Optional[str] = None,
                         request_id: Optional[str] = None, output: Output = None) -> np.ndarray:
        """One value per point over its distances to the targets, without the matrix.

        Parameters
        ----------
        {points}
        op : {{"min", "argmin", "max", "argmax", "mean", "sum", "count"}}
            The reduction over each point's candidates.
        {targets}
        within : float, optional
            Only the candidates at most this far (in `units`, >= 0).
        {backend}
        {progress}
        {geo}
        {opts}

        Returns
        -------
        ndarray, shape (n,)
            min / max / mean / sum in `dtype`; argmin / argmax (the smallest
            index among equals) and count int64. With no candidate: min,
            max, mean NaN; argmin, argmax -1; sum and count 0.

        Raises
        ------
        InvalidArgument
            An unknown op (``.field`` "params.query.rowwise.op"), a
            negative `within`.

        Examples
        --------
        >>> cities = [(48.8566, 2.3522), (51.5074, -0.1278), (40.7128, -74.0060),
        ...           (50.8503, 4.3517)]
        >>> c.geodesic_rowwise(cities, "argmin")
        array([3, 3, 1, 0])
        >>> c.geodesic_rowwise(cities, "count", within=400, units="km")
        array([2, 2, 0, 2])
        """
        q: Dict[str, Any] = {"op": op}
        if within is not None:
            q["within"] = within
        geo = dict(backend=backend, method=method, units=units, ellipsoid=ellipsoid,
                   radius_m=radius_m, dtype=dtype, lat=lat, lon=lon, priority=priority,
                   timeout_s=timeout_s, label=label, request_id=request_id, output=output)
        return self._geo(points, targets, {"rowwise": q}, progress, geo).result(progress=progress)


def _points(p: Any, lat: str, lon: str, field: str) -> Any:
    """An (n, 2) [lat, lon] value from an array, a list of pairs or a DataFrame."""
    if isinstance(p, (Array, Job, dict)):
        return p
    if hasattr(p, "columns") and hasattr(p, "to_numpy"):  # a pandas DataFrame
        cols = list(p.columns)
        missing = [c for c in (lat, lon) if c not in cols]
        if missing:
            raise errors.InvalidArgument(
                f"the DataFrame has no column {missing[0]!r} (it has {cols}); name the "
                f"latitude and longitude columns with lat= and lon=",
                code="invalid_argument", field=field)
        return np.column_stack([p[lat].to_numpy(dtype=np.float64), p[lon].to_numpy(dtype=np.float64)])
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != 2:
        raise errors.InvalidArgument(f"expected (n, 2) [lat, lon] points, got shape {a.shape}",
                                     code="invalid_argument", field=field)
    return a
