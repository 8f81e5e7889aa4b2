"""The exceptions of the package: the daemon's errors (proto/API.md, "code",
"field", "message") as Python exceptions."""


class TractdError(Exception):
    """An error answer of the daemon, or an answer the client cannot use.

    status: the HTTP status (None when there was no answer), code: the
    daemon's error code (e.g. "invalid_parameter"), field: the part of the
    job at fault (e.g. "tracking.max_angle") or None, message: why.
    """

    def __init__(self, message, status=None, code=None, field=None):
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class JobFailed(TractdError):
    """A job the daemon refused (HTTP 400/422: its document or an input is at
    fault) or that ended failed or cancelled. job_id is None when it was
    refused at submission; job is the daemon's last document of it."""

    def __init__(self, message, status=None, code=None, field=None, job_id=None, job=None):
        super().__init__(message, status=status, code=code, field=field)
        self.job_id = job_id
        self.job = job

    def __str__(self):
        where = f"job {self.job_id}: " if self.job_id else ""
        return f"{where}{super().__str__()} ({self.code})" if self.code else where + super().__str__()
