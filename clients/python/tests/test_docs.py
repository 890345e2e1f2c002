"""The client as documentation: every public method has annotated
parameters and a NumPy-style docstring with an example, the examples run
(doctest, against the real daemon), and the package ships py.typed (PEP
561) so type checkers read those annotations."""
import doctest
import inspect
import os
import typing

import numpy as np

import tessel
import tessel.array
import tessel.client
import tessel.job
import tessel.kinds
import tessel.region

PUBLIC = [tessel.Client, tessel.Array, tessel.Job, tessel.CompareTable, tessel.TesselExecutor,
          tessel.Region]


def public_methods():
    for cls in PUBLIC:
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_") and name != "__init__":
                continue
            # Future's and Executor's own methods that are not overridden
            # keep the standard library's signatures and docs.
            if fn.__module__ not in (
                    "tessel.client", "tessel.kinds", "tessel.job", "tessel.array",
                    "tessel.region"):
                continue
            yield f"{cls.__name__}.{name}", fn


def test_every_parameter_is_annotated():
    seen = []
    for name, fn in public_methods():
        hints = typing.get_type_hints(fn)  # every annotation resolves
        for p in list(inspect.signature(fn).parameters.values())[1:]:  # not self
            assert p.name in hints, f"{name}: parameter {p.name} has no annotation"
        assert "return" in hints, f"{name}: no return annotation"
        seen.append(name)
    for want in ("Client.geodesic_knn", "Client.geodesic_radius", "Client.geodesic_rowwise",
                 "Client.map", "Client.jobs", "Job.part", "Job.result", "Array.download"):
        assert want in seen


def test_documented_parameters_are_in_the_signature():
    """units, method, layout, axis, ddof: named parameters, not **kw."""
    sig = inspect.signature(tessel.Client.geodesic).parameters
    for p in ("units", "method", "layout", "ellipsoid", "dtype", "lat", "lon", "timeout_s"):
        assert p in sig and sig[p].kind != inspect.Parameter.VAR_KEYWORD
    assert not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in sig.values())
    for fn in (tessel.Client.reduce, tessel.Client.submit_reduce):
        assert {"axis", "ddof", "dtype"} <= set(inspect.signature(fn).parameters)
    for fn in (tessel.Client.geodesic_knn, tessel.Client.geodesic_radius,
               tessel.Client.geodesic_rowwise, tessel.Client.matmul):
        assert not any(p.kind == inspect.Parameter.VAR_KEYWORD
                       for p in inspect.signature(fn).parameters.values()), fn.__name__


def test_docstrings_are_numpy_style():
    for name, fn in public_methods():
        doc = inspect.getdoc(fn) or ""
        if name.endswith("__init__") or name.startswith("TesselExecutor."):
            continue  # the class docstring documents the constructor
        assert "Examples\n--------\n>>> " in doc, f"{name}: no Examples section"
        sig = inspect.signature(fn).parameters
        if len(sig) > 1:
            assert "Parameters\n----------\n" in doc, f"{name}: no Parameters section"
            for p in list(sig)[1:]:
                assert p.lstrip("*") in doc, f"{name}: parameter {p} undocumented"
        if inspect.signature(fn).return_annotation not in (None, "None"):
            assert "Returns\n-------\n" in doc, f"{name}: no Returns section"
    doc = inspect.getdoc(tessel.Client.geodesic_knn)
    for section in ("Parameters", "Returns", "Raises", "See Also", "Examples"):
        assert f"\n{section}\n{'-' * len(section)}\n" in doc
    assert "index : ndarray of int64, shape (n, k')" in doc


def test_examples_run(daemon):
    """Every docstring example, run against the daemon: docs that paste.
    ``sc`` is a same-host client (the regions' examples need one)."""
    c = tessel.Client(daemon.url, same_host=False)
    sc = tessel.Client(daemon.url, local_dir=daemon.local)
    g = {"c": c, "sc": sc, "np": np, "tessel": tessel, "url": daemon.url}
    try:
        try:
            import pandas  # noqa: F401
            needs_pandas = ()
        except ImportError:  # deps/ has python3-pandas: CI runs them all
            needs_pandas = ("tessel.client.CompareTable.to_frame",)
        runner = doctest.DocTestRunner(
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        for mod in (tessel.client, tessel.kinds, tessel.job, tessel.array, tessel.region):
            for t in doctest.DocTestFinder().find(mod, globs=dict(g)):
                if t.name not in needs_pandas:
                    runner.run(t)
        r = runner.summarize(verbose=False)
        assert r.failed == 0, f"{r.failed} docstring example(s) failed (see the captured stdout)"
        assert r.attempted >= 80
    finally:
        c.close()
        sc.close()


def test_py_typed_is_in_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(tessel.__file__), "py.typed"))
