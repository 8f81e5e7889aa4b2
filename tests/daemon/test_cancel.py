"""Cancelling jobs (DELETE /v1/jobs/{id}): a queued job at once, a running job
within a seed chunk (a few seconds on lavapipe), then deleting the cancelled
job. In a module of its own: a job that is not cancelled keeps the daemon's
only GPU worker busy for a minute and a half."""
import time

from .support import get_metrics, job_status, server_job, submit, wait_job, wait_running

# About 90 s of tracking on lavapipe (~0.45 ms a seed): long enough that the
# job is still running whenever the test cancels it.
LONG_SEEDS = 200000
# "status becomes cancelled within a few seconds".
CANCEL_WITHIN_S = 10


def test_cancel_queued_and_running(daemon, volumes, phantom):
    """A running job and one queued behind it: DELETE of the queued job answers
    202 with the job cancelled, and it never starts; DELETE of the running one
    answers 202 with a JOB whose status is cancelled, and GET shows it
    cancelled within a few seconds; its tractogram is then 409 conflict;
    jobs_total{status="cancelled"} counts both."""
    before = get_metrics(daemon.api).value('tractd_jobs_total{status="cancelled"}')
    running = submit(daemon.api, server_job(phantom, volumes, count=LONG_SEEDS, rng_seed=21))
    queued = submit(daemon.api, server_job(phantom, volumes, count=100, rng_seed=22))
    wait_running(daemon.api, running)
    assert job_status(daemon.api, queued)["status"] == "queued"

    r = daemon.api.request("DELETE", f"/v1/jobs/{queued}")
    assert r.status == 202, str(r)
    doc = r.json()
    assert doc["id"] == queued and doc["status"] == "cancelled", doc
    doc = job_status(daemon.api, queued)
    assert doc["status"] == "cancelled" and doc["started"] is None, doc
    assert doc["result"] is None and doc["error"] is None, doc

    time.sleep(0.5)
    t0 = time.monotonic()
    r = daemon.api.request("DELETE", f"/v1/jobs/{running}")
    assert r.status == 202, str(r)
    answer = r.json()
    assert answer["id"] == running, answer
    problems = []
    if answer["status"] != "cancelled":
        problems.append(f"DELETE of the running job answered status {answer['status']!r}, "
                        f"not 'cancelled': {answer}")
    try:
        doc = wait_job(daemon.api, running, timeout=CANCEL_WITHIN_S)
    except AssertionError as e:
        problems.append(f"not cancelled {CANCEL_WITHIN_S} s after DELETE: {e}\n"
                        f"log:\n{daemon.log(8)}")
        doc = None
    assert not problems, "\n".join(problems)
    took = time.monotonic() - t0
    assert doc["status"] == "cancelled", doc
    assert doc["result"] is None and doc["error"] is None, doc
    assert doc["finished"] is not None
    print(f"cancelled {took:.2f} s after DELETE, after "
          f"{doc['progress']['seeds_done']}/{doc['progress']['seeds_total']} seeds")

    r = daemon.api.get(f"/v1/jobs/{running}/tractogram")
    assert r.status == 409, str(r)
    assert r.error["code"] == "conflict"
    after = get_metrics(daemon.api).value('tractd_jobs_total{status="cancelled"}')
    assert after == before + 2


def test_delete_cancelled_job(daemon, volumes, phantom):
    """A cancelled job is a finished one: DELETE answers 204, then the job is 404."""
    job_id = submit(daemon.api, server_job(phantom, volumes, count=LONG_SEEDS, rng_seed=23))
    r = daemon.api.request("DELETE", f"/v1/jobs/{job_id}")
    assert r.status == 202, str(r)
    doc = wait_job(daemon.api, job_id, timeout=CANCEL_WITHIN_S)
    assert doc["status"] == "cancelled", doc
    r = daemon.api.request("DELETE", f"/v1/jobs/{job_id}")
    assert r.status == 204, str(r)
    r = daemon.api.get(f"/v1/jobs/{job_id}")
    assert r.status == 404, str(r)
    assert r.error["code"] == "not_found"


def test_delete_right_after_cancel_of_running_job(daemon, volumes, phantom):
    """A running job reads as cancelled as soon as DELETE answers, while the GPU
    worker still finishes its chunk: a second DELETE at once (204) must only
    unlist it (the worker frees it when it lets go: this sequence was a
    use-after-free), and the daemon then runs the next job normally."""
    running = submit(daemon.api, server_job(phantom, volumes, count=LONG_SEEDS, rng_seed=23))
    wait_running(daemon.api, running)
    assert daemon.api.request("DELETE", f"/v1/jobs/{running}").status == 202
    r = daemon.api.request("DELETE", f"/v1/jobs/{running}")
    assert r.status == 204, str(r)
    assert daemon.api.get(f"/v1/jobs/{running}").status == 404
    after = submit(daemon.api, server_job(phantom, volumes, count=100, rng_seed=24))
    doc = wait_job(daemon.api, after, timeout=60)
    assert doc["status"] == "done", f"{doc}\nlog:\n{daemon.log(8)}"
