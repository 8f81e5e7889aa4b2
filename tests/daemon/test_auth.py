"""A shared server (issue 8): identities, ownership and per-user limits.

On the Unix socket the daemon knows its peer by uid (SO_PEERCRED); the tests
run as root (as in CI) and run curl as other uids to be other users. On TCP a
client is the name of its bearer token (tokens_file). Each user sees, fetches
and cancels only their own jobs and volumes (others' answer 404 like unknown
ones); root, members of admin_group and admin tokens see all. Also: TCP
refuses to start without tokens and listens on loopback by default; the
per-user queue limit; fair scheduling between users; max_seeds_per_job.
"""
import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

from .support import (JOB_ENDED, TEST_TOKEN, Endpoint, daemon_env, free_port, job_status,
                      server_job, short_tmpdir, submit, upload_phantom, wait_job,
                      wait_running, write_tokens)

# Users without passwd entries but nobody: "nobody" and "uid:N" owners.
NOBODY = 65534
OTHER = 23456
# A job that keeps the GPU worker busy until it is cancelled (see test_cancel).
LONG_SEEDS = 200000

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="runs curl as other uids (setuid): needs root")


def _open_socket(d):
    """Lets every user connect to the daemon's socket (the daemon makes it
    0660 in a directory of its own; a real setup grants a group)."""
    for parent in (d.sock.parent, d.sock.parent.parent):   # and the session's base
        if str(parent).startswith("/tmp/"):
            os.chmod(parent, 0o755)
    os.chmod(d.sock, 0o666)


def _error(r, status, code):
    assert r.status == status, str(r)
    assert r.error["code"] == code, str(r)
    return r.error


def _tcp_listeners(port):
    """Local addresses (hex, as /proc/net/tcp{,6} has them) listening on port."""
    found = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            addr, hexport = fields[1].rsplit(":", 1)
            if int(hexport, 16) == port and fields[3] == "0A":   # LISTEN
                found.append(addr)
    return found


def _serve(tractd, tmp, *args):
    """Runs `tractd serve` expecting it to refuse to start: (code, stderr)."""
    p = subprocess.run([tractd, "serve", "--state-dir", str(tmp / "state"),
                        "--listen-unix", str(tmp / "s.sock"), *args],
                       capture_output=True, text=True, timeout=60, env=daemon_env())
    return p.returncode, p.stderr


# --------------------------------------------------------------------------- TCP tokens

def test_tcp_needs_a_valid_token(daemon_factory):
    """On TCP: no Authorization -> 401 unauthorized with `WWW-Authenticate:
    Bearer`; a wrong token (or scheme) -> 401 with error="invalid_token";
    the tokens file's token -> 200. Unknown routes too are 401 without a
    token (nothing is told). The Unix socket needs no token."""
    d = daemon_factory()
    none, wrong = d.tcp.with_token(None), d.tcp.with_token("not-the-token-0123456789")
    for path in ("/healthz", "/v1/jobs", "/v1/device", "/no/such/route"):
        r = none.get(path)
        _error(r, 401, "unauthorized")
        assert r.headers.get("www-authenticate", "").startswith("Bearer"), r.headers
        r = wrong.get(path)
        _error(r, 401, "unauthorized")
        assert 'error="invalid_token"' in r.headers.get("www-authenticate", ""), r.headers
    r = none.request("GET", "/healthz", headers=[f"Authorization: Basic {TEST_TOKEN}"])
    _error(r, 401, "unauthorized")
    # A prefix of the token, or the token with more after it, is not the token.
    for bad in (TEST_TOKEN[:-1], TEST_TOKEN + "x"):
        _error(d.tcp.with_token(bad).get("/healthz"), 401, "unauthorized")
    _error(none.post_json("/v1/jobs", {}), 401, "unauthorized")
    assert d.tcp.get("/healthz").status == 200
    assert d.tcp.get("/v1/jobs").status == 200
    assert d.unix.get("/v1/jobs").status == 200


def test_tcp_refuses_to_start_without_good_tokens(tractd):
    """TCP without tokens_file, with a tokens file that group or others may
    read, one that is malformed (FILE:LINE), empty, or with a token of two
    names: `tractd serve` exits non-zero before listening, saying why."""
    tmp = short_tmpdir()
    port = str(free_port())
    code, err = _serve(tractd, tmp, "--listen-tcp", port)
    assert code != 0 and "tokens_file" in err and "listen_tcp" in err, err

    tokens = write_tokens(tmp / "tokens", mode=0o640)
    code, err = _serve(tractd, tmp, "--listen-tcp", port, "--set", f"tokens_file={tokens}")
    assert code != 0 and "chmod 600" in err and str(tokens) in err, err

    cases = {
        "alice\n": ":1: expected 'NAME TOKEN [admin]'",
        "# c\n\nalice short\n": ":3: the token of alice must be 16 to 512",
        "alice 0123456789abcdef root\n": ":1: the third word may only be 'admin'",
        "al/ce 0123456789abcdef\n": ":1: NAME must be",
        "..x 0123456789abcdef\n": ":1: NAME must be",
        "a 0123456789abcdef\nb 0123456789abcdef\n": ":2: the token of b is also a's",
        "# only a comment\n": "has no tokens",
    }
    for text, want in cases.items():
        write_tokens(tokens, text)
        code, err = _serve(tractd, tmp, "--listen-tcp", port, "--set", f"tokens_file={tokens}")
        assert code != 0 and want in err, (text, err)
        assert "0123456789abcdef" not in err, f"a token leaked into the message: {err}"
    # The Unix socket alone needs no tokens (checked by every other test).


def test_tcp_defaults_to_loopback(daemon_factory):
    """--listen-tcp PORT listens on 127.0.0.1 only."""
    tmp = short_tmpdir()
    port = free_port()
    d = daemon_factory(tcp=False, sock_dir=tmp,
                       extra_args=["--listen-tcp", str(port), "--set",
                                   f"tokens_file={write_tokens(tmp / 'tokens')}"])
    assert _tcp_listeners(port) == ["0100007F"], _tcp_listeners(port)
    assert Endpoint(port=port, token=TEST_TOKEN).get("/healthz").status == 200


def test_tractctl_token(daemon_factory, tractctl, tmp_path):
    """tractctl --server needs a token: without one it exits 3 saying so;
    --token, --token-file and $TRACTD_TOKEN work; a token with --socket is a
    usage error (2)."""
    d = daemon_factory()
    server = ["--server", f"http://127.0.0.1:{d.port}"]
    env = daemon_env()
    env.pop("TRACTD_TOKEN", None)

    def ctl(*args, extra_env=None):
        return subprocess.run([tractctl, *args], capture_output=True, text=True, timeout=60,
                              env={**env, **(extra_env or {})})

    p = ctl(*server, "list")
    assert p.returncode == 3 and "token" in p.stderr, p.stderr
    assert ctl(*server, "--token", TEST_TOKEN, "list").returncode == 0
    token_file = tmp_path / "token"
    token_file.write_text(TEST_TOKEN + "\n")
    assert ctl(*server, "--token-file", str(token_file), "list").returncode == 0
    assert ctl(*server, "list", extra_env={"TRACTD_TOKEN": TEST_TOKEN}).returncode == 0
    assert ctl(*server, "--token", "wrong-token-0123456789", "list").returncode == 3
    assert ctl("--socket", str(d.sock), "--token", TEST_TOKEN, "list").returncode == 2
    assert "--token" in ctl("--help").stdout


# --------------------------------------------------------------------------- ownership

@needs_root
def test_users_see_only_their_own_jobs_and_volumes(daemon_factory, phantom, tmp_path):
    """Two users on the Unix socket (uids 65534 and 23456) and root: each
    user's job is listed, shown, fetched and cancelled by them; the other
    user gets 404 not_found for GET, tractogram and DELETE of it, exactly as
    for an unknown id, and does not list it; root (admin) sees both. A
    volume uploaded by one user only is unknown to the other (HEAD/GET 404,
    a job naming it 422 unknown_volume)."""
    d = daemon_factory(tcp=False)
    _open_socket(d)
    a, b, root = d.unix.as_user(NOBODY), d.unix.as_user(OTHER), d.unix
    ids_a, ids_b = upload_phantom(a, phantom), upload_phantom(b, phantom)
    job_a = submit(a, server_job(phantom, ids_a, count=200, rng_seed=1))
    job_b = submit(b, server_job(phantom, ids_b, count=200, rng_seed=2))
    for ep, job in ((a, job_a), (b, job_b)):
        assert wait_job(ep, job)["status"] == "done"
    unknown = "j-0123456789abcdef"

    for me, mine, theirs, name in ((a, job_a, job_b, "nobody"),
                                   (b, job_b, job_a, f"uid:{OTHER}")):
        listed = [j["id"] for j in me.get_json("/v1/jobs")["jobs"]]
        assert listed == [mine], listed
        assert me.get_json(f"/v1/jobs/{mine}")["owner"] == name
        assert me.get(f"/v1/jobs/{mine}/tractogram").status == 200
        for path in (f"/v1/jobs/{theirs}", f"/v1/jobs/{theirs}/tractogram"):
            err = _error(me.get(path), 404, "not_found")
            unknown_err = _error(me.get(path.replace(theirs, unknown)), 404, "not_found")
            assert err["message"].replace(theirs, unknown) == unknown_err["message"]
        _error(me.request("DELETE", f"/v1/jobs/{theirs}"), 404, "not_found")
    listed = {j["id"] for j in root.get_json("/v1/jobs")["jobs"]}
    assert listed == {job_a, job_b}, listed
    assert root.get(f"/v1/jobs/{job_a}/tractogram").status == 200
    # Nothing was deleted by the other user's DELETE; the owner's works.
    assert a.request("DELETE", f"/v1/jobs/{job_a}").status == 204
    assert b.get(f"/v1/jobs/{job_b}").status == 200

    private = tmp_path / "private.txt"
    private.write_text("1 2 3\n4 5 6\n")
    r = a.upload(private)
    assert r.status == 201, str(r)
    vid = r.json()["id"]
    assert a.request("HEAD", f"/v1/volumes/{vid}").status == 200
    assert b.request("HEAD", f"/v1/volumes/{vid}").status == 404
    _error(b.get(f"/v1/volumes/{vid}"), 404, "not_found")
    assert root.get(f"/v1/volumes/{vid}").status == 200
    job = server_job(phantom, ids_b, count=100)
    job["inputs"]["odf"] = vid
    _error(b.post_json("/v1/jobs", job), 422, "unknown_volume")
    # The same bytes uploaded by b: new to b (201), then b's too.
    r = b.upload(private)
    assert r.status == 201, str(r)
    assert b.request("HEAD", f"/v1/volumes/{vid}").status == 200

    log = d.log(400)
    assert re.search(rf"job={job_a} started owner=nobody", log), log
    assert re.search(rf"job={job_b} done owner=uid:{OTHER}", log), log


@needs_root
def test_admin_group_sees_every_job(daemon_factory, phantom):
    """admin_group = users: a peer whose group is it sees and cancels other
    users' jobs; a group that does not exist stops the daemon at start."""
    import grp
    group = grp.getgrnam("users")
    d = daemon_factory(tcp=False, sets=["admin_group=users"])
    _open_socket(d)
    a = d.unix.as_user(NOBODY)
    ids = upload_phantom(a, phantom)
    job = submit(a, server_job(phantom, ids, count=LONG_SEEDS, rng_seed=3))
    admin = Endpoint(unix_socket=d.sock)
    admin.uid = OTHER
    admin_gid = group.gr_gid
    # curl as uid OTHER with the admin group as its primary group.
    r = _as(admin, admin_gid, "GET", f"/v1/jobs/{job}")
    assert r.status == 200, str(r)
    assert job in [j["id"] for j in _as(admin, admin_gid, "GET", "/v1/jobs").json()["jobs"]]
    r = _as(admin, admin_gid, "DELETE", f"/v1/jobs/{job}")
    assert r.status == 202 and r.json()["status"] == "cancelled", str(r)
    # The same uid without the group is an ordinary user.
    _error(d.unix.as_user(OTHER).get(f"/v1/jobs/{job}"), 404, "not_found")
    wait_job(a, job)

    tmp = short_tmpdir()
    code, err = _serve(d.argv[0], tmp, "--set", "admin_group=no-such-group-xyz")
    assert code != 0 and "admin_group" in err and "no-such-group-xyz" in err, err


def _supplementary_member():
    """(user, uid, primary gid, group name) of a user listed as a member of a
    group that is not their primary one, or None."""
    import grp
    import pwd
    for g in grp.getgrall():
        for name in g.gr_mem:
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                continue
            if pw.pw_gid != g.gr_gid and pw.pw_uid != 0:
                return name, pw.pw_uid, pw.pw_gid, g.gr_name
    return None


@needs_root
def test_admin_group_by_supplementary_membership(daemon_factory, phantom):
    """A user whose admin_group membership is only in the group database
    (a supplementary group, not the process's group) is an admin too."""
    found = _supplementary_member()
    if not found:
        pytest.skip("no user of this system is a supplementary member of a group")
    user, uid, gid, group = found
    d = daemon_factory(tcp=False, sets=[f"admin_group={group}"])
    _open_socket(d)
    a = d.unix.as_user(NOBODY)
    job = submit(a, server_job(phantom, upload_phantom(a, phantom), count=100))
    admin = Endpoint(unix_socket=d.sock)
    admin.uid = uid
    r = _as(admin, gid, "GET", f"/v1/jobs/{job}")
    assert r.status == 200, f"{user} (uid {uid}, in {group}): {r}"
    wait_job(a, job)


def _as(endpoint, gid, method, path):
    """A request by curl run as endpoint.uid with primary group gid."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tractd-curl-") as tmp:
        os.chown(tmp, endpoint.uid, gid)
        out = Path(tmp) / "body"
        args = ["curl", "-sS", "-o", str(out), "-w", "%{http_code}", "--unix-socket",
                endpoint.unix_socket, *(["-X", method] if method != "GET" else []),
                endpoint.url(path)]
        p = subprocess.run(args, capture_output=True, timeout=60, user=endpoint.uid, group=gid,
                           extra_groups=[])
        assert p.returncode == 0, p.stderr
        from .support import Response
        return Response(int(p.stdout), {}, out.read_bytes() if out.exists() else b"",
                        f"{method} {path} as {endpoint.uid}:{gid}")


# --------------------------------------------------------------------------- limits

def test_queue_limit_per_user(daemon_factory, phantom):
    """max_queued_jobs_per_user = 2: behind a running job, root's third
    queued job is refused with 429 queue_full naming the limit, while
    another user (the TCP token "tests") still queues."""
    d = daemon_factory(sets=["max_queued_jobs_per_user=2"])
    ids = upload_phantom(d.unix, phantom)
    ids_tcp = upload_phantom(d.tcp, phantom)
    running = submit(d.unix, server_job(phantom, ids, count=LONG_SEEDS, rng_seed=4))
    wait_running(d.unix, running)
    queued = [submit(d.unix, server_job(phantom, ids, count=100, rng_seed=5 + i))
              for i in range(2)]
    r = d.unix.post_json("/v1/jobs", server_job(phantom, ids, count=100, rng_seed=9))
    err = _error(r, 429, "queue_full")
    assert "max_queued_jobs_per_user" in err["message"] and "root" in err["message"], err
    other = submit(d.tcp, server_job(phantom, ids_tcp, count=100, rng_seed=10))
    for job in (running, *queued, other):
        assert d.unix.request("DELETE", f"/v1/jobs/{job}").status in (202, 204)


def test_fair_scheduling_between_users(daemon_factory, phantom):
    """Root queues three jobs behind its own running one, then the token user
    "tests" queues two: once the running job ends, the jobs start in turns,
    the user whose last job started longest ago first, each user's in the
    order queued: tests, root, tests, root, root. (One user's long queue does
    not starve another's jobs.)"""
    d = daemon_factory()
    ids = upload_phantom(d.unix, phantom)
    ids_tcp = upload_phantom(d.tcp, phantom)
    blocker = submit(d.unix, server_job(phantom, ids, count=LONG_SEEDS, rng_seed=11))
    wait_running(d.unix, blocker)
    mine = [submit(d.unix, server_job(phantom, ids, count=100, rng_seed=12 + i))
            for i in range(3)]
    theirs = [submit(d.tcp, server_job(phantom, ids_tcp, count=100, rng_seed=20 + i))
              for i in range(2)]
    assert d.unix.request("DELETE", f"/v1/jobs/{blocker}").status == 202
    for job in (*mine, *theirs):
        assert wait_job(d.unix, job)["status"] == "done"
    started = re.findall(r"job=(j-[0-9a-f]{16}) started owner=(\S+)", d.log(1000))
    order = [job for job, _ in started]
    want = [blocker, theirs[0], mine[0], theirs[1], mine[1], mine[2]]
    assert order == want, (order, want, started)
    owners = dict(started)
    assert owners[theirs[0]] == "tests" and owners[mine[0]] == "root", started


def test_seeds_per_job_limit(daemon_factory, phantom):
    """max_seeds_per_job = 1000: seeds.count 1001 and 1001 explicit points
    are refused at once (422 limit_exceeded naming the field and the key);
    1000 runs; per_voxel seeding whose total exceeds it fails the job with
    seeds.count; seeds.select's default count is lowered to it."""
    d = daemon_factory(tcp=False, sets=["max_seeds_per_job=1000"])
    ids = upload_phantom(d.unix, phantom)
    err = _error(d.unix.post_json("/v1/jobs", server_job(phantom, ids, count=1001)), 422,
                 "limit_exceeded")
    assert err["field"] == "seeds.count" and "max_seeds_per_job" in err["message"], err
    job = server_job(phantom, ids)
    job["seeds"] = {"points": [[10, 10, 10]] * 1001}
    err = _error(d.unix.post_json("/v1/jobs", job), 422, "limit_exceeded")
    assert err["field"] == "seeds.points", err
    assert wait_job(d.unix, submit(d.unix, server_job(phantom, ids, count=1000)))["status"] \
        == "done"
    doc = wait_job(d.unix, submit(d.unix, server_job(phantom, ids, count=1000,
                                                     per_voxel=True)))
    assert doc["status"] == "failed", doc
    assert doc["error"]["field"] == "seeds.count", doc
    assert "max_seeds_per_job" in doc["error"]["message"], doc
    # seeds.select without seeds.count: tckgen's 1000 seeds per streamline
    # (2000 here) is a bound, which the limit lowers rather than refuses.
    job = server_job(phantom, ids)
    job["seeds"] = {"roi": ids["roi"], "select": 2}
    doc = wait_job(d.unix, submit(d.unix, job))
    assert doc["status"] == "done", doc
    assert doc["result"]["select"] == doc["result"]["selected"] == 2, doc
    assert doc["progress"]["seeds_total"] == 1000, doc
