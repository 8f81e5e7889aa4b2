"""Fixtures of the `tractd serve` integration tests.

Run with the system Python (pytest, nibabel, dipy), curl and
systemd-socket-activate on PATH:

    TRACTD=build/tractd TRACTCTL=build/tractctl /usr/bin/python3 -m pytest -q tests/daemon

TRACTD names the daemon (`tractd serve` is the same binary as `tractd run`),
TRACTCTL the client; the tests fail (never skip) when one is missing.

Each test module gets its own daemon (`daemon`): a temporary state dir, a Unix
socket in a short /tmp directory, a free TCP port on 127.0.0.1, `--set
log_level=debug` and its log in a file; the fixture waits until /healthz
answers on the socket and, at the end of the module, sends SIGTERM and asserts
exit code 0 within 30 s and that the socket file is gone. Tests that need a
daemon of their own configuration use `daemon_factory`, which stops (and
checks) every daemon it started at the end of the test.

The directory is a package so that this conftest does not shadow
tests/conftest.py (whose fixtures `tractd` and `phantom` are used here).
"""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from . import support
from .support import (References, running_daemon, start_daemon, upload_phantom)


@pytest.fixture(scope="session")
def pipeline_cache(tmp_path_factory):
    """One Vulkan pipeline cache for every daemon and reference run of the
    session (kept out of $HOME; saves the shader compilation per daemon)."""
    return tmp_path_factory.mktemp("pipelines") / "pipelines.bin"


@pytest.fixture(scope="session")
def tractctl():
    """Path of the client binary ($TRACTCTL). Fails when unset or missing."""
    path = os.environ.get("TRACTCTL")
    if not path:
        pytest.fail("TRACTCTL is not set: point it at the client binary, e.g. "
                    "TRACTCTL=build/tractctl (these tests never skip without it)", pytrace=False)
    path = str(Path(path).resolve())
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"TRACTCTL={path} is not an executable file", pytrace=False)
    return path


@pytest.fixture(scope="session", autouse=True)
def _session_setup():
    """curl must be there; sockets, state dirs and daemon logs go to one short
    directory under /tmp, removed at the end of the session."""
    if not shutil.which("curl"):
        pytest.fail("curl is not installed: the daemon tests talk HTTP with it", pytrace=False)
    base = tempfile.mkdtemp(prefix="tractd-tests-", dir="/tmp")
    support.SHORT_BASE = base
    yield
    support.SHORT_BASE = None
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(tractd, pipeline_cache):
    """A daemon of the default configuration for the whole module (Unix socket
    and TCP). Checked at teardown: SIGTERM -> exit 0 within 30 s, socket gone."""
    with running_daemon(tractd, pipeline_cache=pipeline_cache) as d:
        yield d


@pytest.fixture
def daemon_factory(tractd, pipeline_cache):
    """start(**kw) -> Daemon with a configuration of the test's own (see
    support.start_daemon); every daemon started is stopped and checked at the
    end of the test unless the test stopped it."""
    started = []

    def start(**kw):
        kw.setdefault("pipeline_cache", pipeline_cache)
        d = start_daemon(tractd, **kw)
        started.append(d)
        return d

    yield start
    errors = []
    for d in started:
        if d.stopped:
            continue
        try:
            d.stop()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n\n".join(errors)


@pytest.fixture(scope="module")
def volumes(daemon, phantom):
    """The phantom's odf, fa and seed ROI uploaded to the module's daemon:
    {"odf": id, "stop_map": id, "roi": id}."""
    return upload_phantom(daemon.api, phantom)


@pytest.fixture(scope="session")
def references(tractd, tmp_path_factory, pipeline_cache):
    """`tractd run` results of local-path jobs, each computed once per session."""
    return References(tractd, tmp_path_factory.mktemp("references"), pipeline_cache)
