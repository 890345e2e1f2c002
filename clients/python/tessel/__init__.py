"""tessel — the Python client of the Tessel compute service.

    import numpy as np, tessel
    c = tessel.Client()                      # $TESSEL_URL or http://127.0.0.1:8080
    y = c.map("x**2 + 2*x + 1", x=np.arange(10.0))
    j = c.submit_map("sin(x)", x=y)          # a concurrent.futures.Future
    z = c.reduce("sum", "x", x=j, axis=None) # chained on the server

The modules: client (Client, the executor), kinds (the per-kind methods),
array (Array), region (Region: registered shared-memory regions and the
client's pool of them), job (Job, the waiter thread), transport (HTTP and .npy
streaming), errors, cli. Typed (PEP 561: py.typed ships with the package);
help(tessel.Client.geodesic_knn) and the like read as NumPy's docs.
"""
from .client import Array, Client, CompareTable, TesselExecutor
from .errors import (Canceled, Conflict, InvalidArgument, JobFailed, NotFound, PayloadTooLarge,
                     PermissionDenied, TesselError, TooManyRequests, Unavailable)
from .job import Job
from .region import Region

__version__ = "0.1.0"
__all__ = ["Client", "Array", "Job", "Region", "CompareTable", "TesselExecutor", "TesselError",
           "InvalidArgument", "PermissionDenied", "NotFound", "Conflict", "PayloadTooLarge",
           "Unavailable", "TooManyRequests", "JobFailed", "Canceled"]
