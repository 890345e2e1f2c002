"""tessel.Array: an array kept on the server (POST /v1/arrays), and the
conversion of a NumPy array to what the server takes.

An Array is a handle: its id, dtype and shape as the server answered them;
the data stays on the server until download() reads it (streamed into a new
array or the caller's out=) or delete() removes it. It is usable as any
job's input, so data uploaded once serves many jobs. _wire_array is the one
place that decides which arrays are sent from their own buffer
(C-contiguous, native-endian float64/float32) and which are converted first
(Fortran order, strided views, big-endian, integers, bools): the server
refuses Fortran and big-endian .npy.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import errors


class Array:
    """An array kept on the server, usable as any job's input.

    Made by `Client.upload`, `Client.array` or `Client.arrays`, never
    directly.

    Attributes
    ----------
    id : str
        The server's id (``a_...``).
    dtype : numpy.dtype
        float64 or float32.
    shape : tuple of int
    info : dict
        The server's JSON for the array (``id``, ``dtype``, ``shape``,
        ``bytes``, ``created``, ...).

    Examples
    --------
    >>> a = c.upload(np.arange(4.0))
    >>> a.dtype, a.shape
    (dtype('float64'), (4,))
    >>> c.map("x*2", x=a)
    array([0., 2., 4., 6.])
    """

    def __init__(self, client: Any, info: Dict[str, Any]) -> None:
        self.client = client
        self.info = info
        self.id: str = info["id"]
        self.dtype: np.dtype = np.dtype(info["dtype"])
        self.shape: Tuple[int, ...] = tuple(info["shape"])

    def __repr__(self) -> str:
        return f"<tessel.Array {self.id} {self.dtype} {self.shape}>"

    def download(self, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The array's data, read from the server.

        Parameters
        ----------
        out : ndarray, optional
            An array of the same shape and dtype to read into (no new
            allocation); returned.

        Returns
        -------
        ndarray

        Raises
        ------
        NotFound
            The array was deleted.

        Examples
        --------
        >>> a = c.upload([1.0, 2.0])
        >>> a.download()
        array([1., 2.])
        """
        return self.client._t.download_npy(f"/v1/arrays/{self.id}/data", out)

    def delete(self) -> None:
        """Remove the array from the server.

        Raises
        ------
        NotFound
            It is already gone.
        Conflict
            A queued or running job still reads it.

        Examples
        --------
        >>> a = c.upload([7.0, 8.0, 9.0])
        >>> a.delete()
        """
        self.client._t.request("DELETE", f"/v1/arrays/{self.id}")


def _wire_array(a: Any) -> np.ndarray:
    """a as the server takes it: C-contiguous, native, float64 or float32."""
    a = np.asarray(a)
    if a.dtype.kind == "f" and a.dtype.itemsize in (4, 8):
        want = a.dtype.newbyteorder("=")
    elif a.dtype.kind in "biuf":
        want = np.dtype(np.float64)
    else:
        raise errors.InvalidArgument(f"an array of {a.dtype} is not numbers", code="invalid_argument")
    if a.dtype != want or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=want)
    return a
