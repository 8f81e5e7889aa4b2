"""tractd.Client and tractd.Job: the job flow of tractctl (submit, wait,
fetch, cancel, delete) as Python objects over proto/API.md. A job document
is the one `tractd run` reads; its inputs may also be arrays or images
(see _inputs). Results are streamed to files, or read into DIPY
StatefulTractogram / trx-python TrxFile objects without files the caller
must remove.
"""
import io
import json
import os
import sys
import time
import urllib.parse

from . import _inputs
from ._errors import JobFailed, TractdError
from ._http import Transport

POLL_SECONDS = 0.5
ENDED = ("done", "failed", "cancelled")
FORMATS = ("trk", "tck", "trx")


def _job_failed(job_id, doc):
    """JobFailed from a failed or cancelled job's document."""
    if doc.get("status") == "cancelled":
        return JobFailed("the job was cancelled", code="cancelled", job_id=job_id, job=doc)
    err = doc.get("error") or {}
    return JobFailed(err.get("message", "the job failed"), code=err.get("code"),
                     field=err.get("field") or None, job_id=job_id, job=doc)


class Client:
    """A connection to tractd.

    address: None for the default Unix socket, found as tractctl finds it
    ($TRACTD_SOCKET, else $XDG_RUNTIME_DIR/tractd.sock when it exists, else
    /run/tractd/tractd.sock); "unix:///path/to.sock" (or a plain path); or
    "http://host:port" (TCP, "https://" behind a TLS proxy). token / token_file:
    the bearer token for TCP (default $TRACTD_TOKEN); never sent on the socket,
    where the daemon knows you by your user id. timeout: seconds to connect and
    for each answer to begin (jobs themselves are waited for without a limit).
    """

    def __init__(self, address=None, token=None, token_file=None, timeout=30.0):
        self._transport = Transport(address, token, token_file, timeout)
        # Volume ids sent by this client (tests and callers can tell an upload
        # that was skipped because the daemon held the content).
        self.uploaded = []

    @property
    def address(self):
        return self._transport.address

    def device(self):
        """GET /v1/device: the GPU, the volume cache and the queue."""
        return self._transport.json("GET", "/v1/device")

    def jobs(self):
        """Your jobs (an admin's: everyone's), newest first, as Job objects."""
        doc = self._transport.json("GET", "/v1/jobs")
        return [Job(self, j["id"], j) for j in doc.get("jobs", [])]

    def job(self, job_id):
        """The Job of an id (checked: unknown ids raise TractdError 404)."""
        job = Job(self, job_id)
        job.status()
        return job

    def upload(self, value, field="volume", affine=None):
        """Makes sure the daemon holds value (a path, bytes, numpy array or
        nibabel image); returns its volume id. Sent only when HEAD says the
        daemon lacks it."""
        volume = _inputs.volume_of(field, value, os.getcwd(), affine)
        if volume is None:
            return value
        _inputs.ensure_uploaded(self._transport, volume, self.uploaded)
        return volume.id

    def submit(self, job, affine=None, base_dir=None):
        """Queues a job; returns its Job.

        job: a job document (dict; not modified) or the path of a job file.
        Its inputs, seeds.roi, seeds.points_file and the maps of
        seeds.interface and stopping may be volume ids, local paths (relative
        ones against the job file's directory, else base_dir or the working
        directory), numpy arrays, nibabel images or bytes; each is uploaded by
        content hash only when the daemon lacks it. Arrays are placed on
        affine, else on the affine of another input that is an image or a
        NIfTI file. seeds.points may be an (N, 3) array: it is sent as
        seeds.points_file (a float64 .npy upload), so that millions of points
        pass the daemon's max_request_bytes. output.path, which
        the daemon refuses, is taken out and kept as save()'s default.
        A job the daemon refuses raises JobFailed with the field at fault.
        """
        doc, base_dir = self._load(job, base_dir)
        output_path = None
        output = doc.get("output")
        if isinstance(output, dict) and isinstance(output.get("path"), str):
            output_path = os.path.join(base_dir, output.pop("path"))
        self._resolve_inputs(doc, base_dir, affine)
        try:
            answer = self._transport.json("POST", "/v1/jobs", doc)
        except TractdError as e:
            if e.status in (400, 422):
                raise JobFailed(e.message, status=e.status, code=e.code, field=e.field) from None
            raise
        return Job(self, answer["id"], answer, output_path=output_path)

    def track(self, job, output=None, progress=None, affine=None, base_dir=None):
        """submit + wait (+ save to output, or the job's output.path): the
        finished Job, or JobFailed."""
        handle = self.submit(job, affine=affine, base_dir=base_dir)
        try:
            handle.wait(progress=progress)
        except KeyboardInterrupt:
            handle.cancel()
            raise
        if output is not None or handle.output_path is not None:
            handle.save(output)
        return handle

    @staticmethod
    def _load(job, base_dir):
        if isinstance(job, (str, os.PathLike)):
            path = os.fspath(job)
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            return doc, base_dir or os.path.dirname(os.path.abspath(path))
        if not isinstance(job, dict):
            raise TypeError(f"job: a dict or the path of a job file, not {type(job).__name__}")
        # The sections changed here (inputs, seeds, output) are copied; the
        # caller's dict stays as it was, arrays and images are shared.
        return ({k: (dict(v) if isinstance(v, dict) else v) for k, v in job.items()},
                base_dir or os.getcwd())

    def _resolve_inputs(self, doc, base_dir, affine):
        seeds = doc.get("seeds")
        # Points as an array go as an uploaded .npy (seeds.points_file), not
        # in the document: exact, and not bounded by max_request_bytes.
        if isinstance(seeds, dict) and _inputs.is_array(seeds.get("points")):
            seeds[_inputs.POINTS_FILE] = seeds.pop("points")
        fields = _inputs.input_fields(doc)
        # Only arrays need a grid: files and volume ids are never opened here.
        if affine is None and any(_inputs.is_array(holder[key]) for _, holder, key in fields):
            for _, holder, key in fields:
                affine = _inputs.image_affine(holder[key], base_dir)
                if affine is not None:
                    break
        for field, holder, key in fields:
            volume = _inputs.volume_of(field, holder[key], base_dir, affine)
            if volume is not None:
                _inputs.ensure_uploaded(self._transport, volume, self.uploaded)
                holder[key] = volume.id


class Job:
    """A job on the daemon: id, and the last document read (info)."""

    def __init__(self, client, job_id, info=None, output_path=None):
        self.client = client
        self.id = job_id
        self.info = info or {}
        self.output_path = output_path

    def __repr__(self):
        return f"<tractd.Job {self.id} {self.info.get('status', '?')}>"

    @property
    def _path(self):
        return f"/v1/jobs/{urllib.parse.quote(self.id, safe='')}"

    def status(self):
        """GET /v1/jobs/ID: the job's document (status, progress, result...)."""
        self.info = self.client._transport.json("GET", self._path)
        return self.info

    def wait(self, progress=None, poll=POLL_SECONDS, timeout=None):
        """Waits until the job ends; returns self when done, raises JobFailed
        when it failed or was cancelled. progress: True for a tqdm bar of the
        seeds done (when tqdm is installed), a callable to receive each
        document polled, False for nothing; None: a bar when tqdm is there
        and standard error is a terminal. timeout: seconds, then TimeoutError."""
        bar, callback = _progress(progress)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                doc = self.status()
                if callback:
                    callback(doc)
                if bar is not None:
                    _draw(bar, doc)
                if doc.get("status") in ENDED:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"job {self.id} still {doc.get('status')} after {timeout} s")
                time.sleep(poll)
        finally:
            if bar is not None:
                bar.close()
        if doc["status"] != "done":
            raise _job_failed(self.id, doc)
        return self

    def cancel(self):
        """Cancels a queued or running job (a finished one is left alone)."""
        if self.status().get("status") in ENDED:
            return self.info
        self.info = self.client._transport.json("DELETE", self._path) or self.info
        return self.info

    def delete(self):
        """Deletes the job and its result (a running job is cancelled first)."""
        if self.status().get("status") not in ENDED:
            self.cancel()
        self.client._transport.request("DELETE", self._path)

    def _tractogram_path(self, format):
        if format is None:
            return self._path + "/tractogram"
        if format not in FORMATS:
            raise ValueError(f"format: one of {', '.join(FORMATS)}, not {format!r}")
        return f"{self._path}/tractogram?format={format}"

    def save(self, path=None, format=None):
        """Streams the tractogram to path (default: the job's output.path);
        format converts a finished result (trk, tck, trx). While a TRK or TCK
        job runs, this follows it to its end. Returns path."""
        path = path if path is not None else self.output_path
        if path is None:
            raise ValueError("path: none given and the job had no output.path")
        try:
            with open(path, "wb") as f:
                self.client._transport.stream_to(self._tractogram_path(format), f)
        except BaseException:
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        return path

    def read(self, format=None):
        """The tractogram's bytes."""
        sink = io.BytesIO()
        self.client._transport.stream_to(self._tractogram_path(format), sink)
        return sink.getvalue()

    def _own_format(self):
        return self.info.get("format") or self.status().get("format")

    def to_sft(self, reference=None):
        """The result as a DIPY StatefulTractogram (RAS+ mm), read from the
        TRK in memory. reference: an image for the sft (default: the TRK's
        header, which is the job's grid). Needs dipy."""
        from dipy.io.stateful_tractogram import Space, StatefulTractogram
        import nibabel
        fmt = None if self._own_format() == "trk" else "trk"
        trk = nibabel.streamlines.TrkFile.load(io.BytesIO(self.read(fmt)))
        return StatefulTractogram(trk.streamlines, reference if reference is not None else trk.header,
                                  Space.RASMM,
                                  data_per_streamline=trk.tractogram.data_per_streamline)

    def to_trx(self):
        """The result as a trx-python TrxFile (converted by the daemon when the
        job wrote another format). Its files live in trx's own temporary
        directory, removed by its close(), as trx.load does for a deflated
        TRX. Needs trx-python."""
        import zipfile
        from trx.io import get_trx_tmp_dir
        from trx.trx_file_memmap import load_from_directory
        fmt = None if self._own_format() == "trx" else "trx"
        data = self.read(fmt)
        tmp_dir = get_trx_tmp_dir()
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                zf.extractall(tmp_dir.name)
            trx = load_from_directory(tmp_dir.name)
        except BaseException:
            tmp_dir.cleanup()
            raise
        trx._uncompressed_folder_handle = tmp_dir
        return trx


def _progress(progress):
    """(tqdm bar or None, callback or None) for wait(progress=...)."""
    if callable(progress):
        return None, progress
    if progress is False:
        return None, None
    if progress is None and not sys.stderr.isatty():
        return None, None
    try:
        from tqdm import tqdm
    except ImportError:
        return None, None
    return tqdm(total=None, unit="seeds", desc="tracking"), None


def _draw(bar, doc):
    p = doc.get("progress") or {}
    total, done = p.get("seeds_total"), p.get("seeds_done")
    if total and bar.total != total:
        bar.total = total
    if done is not None and done > bar.n:
        bar.update(done - bar.n)
    stage = p.get("stage")
    if stage:
        bar.set_postfix_str(f"{stage} {int(100 * (p.get('stage_fraction') or 0))}%", refresh=False)
