"""The client's exceptions, one per kind of answer a caller may want to catch.

Every error the server answers is JSON, {"error": {"code", "message",
"field", "position"}} (api/API.md "Errors"); `from_response` turns it into a
TesselError subclass chosen by HTTP status (and, for jobs that ended badly,
JobFailed / Canceled from the job's own `error`). Canceled is also a
concurrent.futures.CancelledError, so code written for futures catches it.
"""
import concurrent.futures
import json


class TesselError(Exception):
    """An error answered by the server (or a job that did not succeed).

    status: the HTTP status (0 when none, e.g. a job's own failure);
    code: the server's code ("invalid_argument", ...); field: the dotted
    path of the offending input or None; position: a character offset or
    element index or None; message: the server's words."""

    def __init__(self, message, status=0, code=None, field=None, position=None,
                 retry_after=None, job=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.position = position
        self.retry_after = retry_after
        self.job = job

    def __str__(self):
        where = f" [{self.field}]" if self.field else ""
        st = f"{self.status} " if self.status else ""
        return f"{st}{self.code or 'error'}{where}: {self.message}"


class InvalidArgument(TesselError):
    """400: a bad input; .field names it."""


class PermissionDenied(TesselError):
    """401/403."""


class NotFound(TesselError):
    """404: unknown job, array, route or file."""


class Conflict(TesselError):
    """409: e.g. cancel of a finished job, result of a job that failed."""


class PayloadTooLarge(TesselError):
    """413."""


class Unavailable(TesselError):
    """503 (no usable GPU, shutting down, busy) and connection failures."""


class TooManyRequests(Unavailable):
    """429, or 503 with Retry-After: .retry_after is the server's seconds."""


class JobFailed(TesselError):
    """A job that ended `failed`; .job is the job's JSON, .code its error code."""


class Canceled(TesselError, concurrent.futures.CancelledError):
    """A job that ended `canceled` (by this client or another)."""


_BY_STATUS = {400: InvalidArgument, 401: PermissionDenied, 403: PermissionDenied,
              404: NotFound, 409: Conflict, 413: PayloadTooLarge,
              429: TooManyRequests, 503: Unavailable}


def from_response(status, body, retry_after=None):
    """A TesselError for an HTTP error answer (body: bytes)."""
    err = {}
    try:
        err = json.loads(body.decode("utf-8", "replace")).get("error") or {}
    except (ValueError, AttributeError):
        err = {"message": body[:200].decode("utf-8", "replace") or f"HTTP {status}"}
    cls = _BY_STATUS.get(status, TesselError)
    if status == 503 and retry_after is not None:
        cls = TooManyRequests
    return cls(err.get("message", f"HTTP {status}"), status=status, code=err.get("code"),
               field=err.get("field"), position=err.get("position"), retry_after=retry_after)


def from_job(job):
    """JobFailed or Canceled for a job JSON that ended so."""
    err = job.get("error") or {}
    cls = Canceled if job.get("status") == "canceled" else JobFailed
    return cls(err.get("message", job.get("status", "failed")), status=0,
               code=err.get("code", job.get("status")), field=err.get("field"),
               position=err.get("position"), job=job)
