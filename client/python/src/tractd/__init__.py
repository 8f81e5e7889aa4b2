"""tractd: Python client of the tractd tractography daemon.

Three entry points:

- tractd.Client / Job / JobFailed: jobs as `tractd run` reads them, with
  inputs that may be local files, numpy arrays or nibabel images (standard
  library only; numpy, nibabel, dipy, trx-python and tqdm where used).
- tractd.cuslines: GPUStreamlines' tracker API (Tracker, the GPUTracker alias,
  ProbDirectionGetter, PttDirectionGetter, BootDirectionGetter) served by the
  daemon.
- tractd.dipy: DIPY's tracking functions (dipy.tracking.tracker) as jobs.

And tractd.nipype.Track, a nipype interface running a job (nipype extra).
"""
from ._client import Client, Job
from ._errors import JobFailed, TractdError
from ._http import default_socket

__all__ = ["Client", "Job", "JobFailed", "TractdError", "default_socket"]
__version__ = "0.1.0"
