"""proto/openapi.yaml against proto/API.md, proto/errors.def and the daemon:
the document is OpenAPI 3.1 with every route of API.md, every error code and
resolvable references; and the daemon's answers validate against its
schemas (a small JSON Schema checker here: the tests need no jsonschema)."""
import json
import re
from pathlib import Path

import pytest
import yaml

from .support import server_job, submit, wait_job

PROTO = Path(__file__).resolve().parents[2] / "proto"
METHODS = ("get", "head", "post", "put", "delete", "patch", "options")


@pytest.fixture(scope="module")
def spec():
    doc = yaml.safe_load((PROTO / "openapi.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


# --------------------------------------------------------------------------- a small validator

def _resolve(root, ref):
    assert ref.startswith("#/"), ref
    node = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _type_ok(value, t):
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "null": value is None,
    }[t]


def check(value, schema, root, where="$"):
    """Raises AssertionError when value does not validate against schema (the
    keywords the document uses: $ref to #/..., allOf/oneOf/anyOf, type,
    const, enum, properties, required, additionalProperties, items, minimum,
    exclusiveMinimum, maximum, minLength, pattern). References to other
    files (job.schema.json) are not followed."""
    if "$ref" in schema:
        if not schema["$ref"].startswith("#/"):
            return
        check(value, _resolve(root, schema["$ref"]), root, where)
    for sub in schema.get("allOf", []):
        check(value, sub, root, where)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            passed = []
            for sub in schema[key]:
                try:
                    check(value, sub, root, where)
                    passed.append(sub)
                except AssertionError:
                    pass
            assert passed, f"{where}: {value!r} matches none of {key}"
            assert key == "anyOf" or len(passed) == 1, f"{where}: several oneOf match {value!r}"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        assert any(_type_ok(value, t) for t in types), f"{where}: {value!r} is not {types}"
    if "const" in schema:
        assert value == schema["const"], f"{where}: {value!r} != {schema['const']!r}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            assert name in value, f"{where}: missing {name!r} in {sorted(value)}"
        for name, v in value.items():
            if name in props:
                check(v, props[name], root, f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                raise AssertionError(f"{where}: unexpected member {name!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                check(v, schema["additionalProperties"], root, f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            check(v, schema["items"], root, f"{where}[{i}]")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            assert value >= schema["minimum"], f"{where}: {value} < {schema['minimum']}"
        if "exclusiveMinimum" in schema:
            assert value > schema["exclusiveMinimum"], f"{where}: {value}"
        if "maximum" in schema:
            assert value <= schema["maximum"], f"{where}: {value} > {schema['maximum']}"
    if isinstance(value, str):
        if "minLength" in schema:
            assert len(value) >= schema["minLength"], f"{where}: {value!r} too short"
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), f"{where}: {value!r} !~ {schema['pattern']}"


def _schema(spec, path, method, status, media="application/json"):
    """The schema of an operation's answer, following response $refs."""
    resp = spec["paths"][path][method]["responses"][str(status)]
    if "$ref" in resp:
        resp = _resolve(spec, resp["$ref"])
    return resp["content"][media]["schema"]


def conforms(spec, r, path, method):
    """r (a Response) is documented for (path, method) and its JSON body
    validates against the documented schema."""
    responses = spec["paths"][path][method]["responses"]
    assert str(r.status) in responses, (
        f"{method.upper()} {path}: status {r.status} is not documented ({sorted(responses)})")
    check(r.json(), _schema(spec, path, method, r.status), spec, f"{method.upper()} {path}")


# --------------------------------------------------------------------------- the document

def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_document_structure(spec):
    """OpenAPI 3.1 with info, paths and components; every operation has an
    operationId and responses; every $ref resolves (internal ones in the
    document, external ones to a file in proto/)."""
    assert str(spec["openapi"]).startswith("3.1."), spec["openapi"]
    assert spec["info"]["title"] and spec["info"]["version"]
    op_ids = []
    for path, item in spec["paths"].items():
        assert path.startswith("/"), path
        for method in METHODS:
            if method in item:
                op = item[method]
                assert op.get("operationId"), (path, method)
                assert op.get("responses"), (path, method)
                op_ids.append(op["operationId"])
    assert len(op_ids) == len(set(op_ids)), op_ids
    for ref in _refs(spec):
        if ref.startswith("#/"):
            _resolve(spec, ref)
        else:
            target = PROTO / ref.split("#")[0]
            assert target.is_file(), f"$ref {ref}: no {target}"
            json.loads(target.read_text())


def test_every_api_md_route_is_documented(spec):
    """Each `METHOD /path` of proto/API.md is an operation of openapi.yaml, and
    openapi.yaml has no operation that API.md lacks."""
    text = (PROTO / "API.md").read_text()
    routes = set(re.findall(r"`(GET|HEAD|POST|PUT|DELETE|PATCH) (/[^`\s?]*)", text))
    assert len(routes) >= 10, routes
    documented = {(m.upper(), p) for p, item in spec["paths"].items() for m in METHODS
                  if m in item}
    assert routes == documented, (f"only in API.md: {sorted(routes - documented)}; "
                                  f"only in openapi.yaml: {sorted(documented - routes)}")


def test_error_codes_match_errors_def(spec):
    """The ErrorCode enum is exactly the codes of proto/errors.def, and each
    code's status is answered by some operation (or, for 404 and 405, by
    every route as the description says)."""
    codes = dict(re.findall(r'^X\(\w+, "(\w+)", (\d+)\)', (PROTO / "errors.def").read_text(),
                            re.M))
    assert codes, "no codes in errors.def"
    assert set(spec["components"]["schemas"]["ErrorCode"]["enum"]) == set(codes)
    statuses = {s for item in spec["paths"].values() for m in METHODS if m in item
                for s in item[m]["responses"]}
    missing = {c: s for c, s in codes.items() if s not in statuses and s not in ("404", "405")}
    assert not missing, f"error statuses no operation documents: {missing}"


# --------------------------------------------------------------------------- the daemon's answers

def test_answers_match_the_schemas(spec, daemon, phantom):
    """Answers of a live daemon validate against the documented schemas:
    health, device, upload (201 and 200), volume GET, job submission (202),
    the job while queued/running and done, the list, and error bodies (400,
    404, 405, 422)."""
    api = daemon.api
    conforms(spec, api.get("/healthz"), "/healthz", "get")
    conforms(spec, api.get("/v1/device"), "/v1/device", "get")
    ids = {}
    for key, name in (("odf", "odf.nii.gz"), ("stop_map", "fa.nii.gz"),
                      ("roi", "seed_roi.nii.gz")):
        r = api.upload(phantom.path(name))
        conforms(spec, r, "/v1/volumes", "post")
        ids[key] = r.json()["id"]
    r = api.upload(phantom.path("fa.nii.gz"))
    assert r.status == 200
    conforms(spec, r, "/v1/volumes", "post")
    conforms(spec, api.get(f"/v1/volumes/{ids['odf']}"), "/v1/volumes/{id}", "get")
    conforms(spec, api.get("/v1/volumes/sha256:" + "0" * 64), "/v1/volumes/{id}", "get")

    job = server_job(phantom, ids, count=200, rng_seed=0)
    check(job, spec["components"]["schemas"]["ServerJob"], spec, "job")
    r = api.post_json("/v1/jobs", job)
    conforms(spec, r, "/v1/jobs", "post")
    job_id = r.json()["id"]
    conforms(spec, api.get(f"/v1/jobs/{job_id}"), "/v1/jobs/{id}", "get")
    wait_job(api, job_id)
    conforms(spec, api.get(f"/v1/jobs/{job_id}"), "/v1/jobs/{id}", "get")
    conforms(spec, api.get("/v1/jobs"), "/v1/jobs", "get")

    conforms(spec, api.post_json("/v1/jobs", "{"), "/v1/jobs", "post")
    bad = dict(job, tracking=dict(job["tracking"], max_angle=120))
    conforms(spec, api.post_json("/v1/jobs", bad), "/v1/jobs", "post")
    unknown = server_job(phantom, dict(ids, odf="sha256:" + "0" * 64), count=10)
    conforms(spec, api.post_json("/v1/jobs", unknown), "/v1/jobs", "post")
    conforms(spec, api.get("/v1/jobs/j-0000000000000000"), "/v1/jobs/{id}", "get")
    r = api.request("PUT", "/v1/jobs")
    assert r.status == 405
    check(r.json(), spec["components"]["schemas"]["Error"], spec, "405")


def test_failed_and_cancelled_jobs_match_the_schema(spec, daemon, phantom, tmp_path):
    """A failed job (stop map on another grid) and a cancelled queued job
    validate against the Job schema, and so does the DELETE answer."""
    import nibabel as nib
    import numpy as np
    api = daemon.api
    ids = {key: api.upload(phantom.path(name)).json()["id"]
           for key, name in (("odf", "odf.nii.gz"), ("stop_map", "fa.nii.gz"),
                             ("roi", "seed_roi.nii.gz"))}
    fa = tmp_path / "fa_other_grid.nii.gz"
    nib.save(nib.Nifti1Image(np.ascontiguousarray(phantom.fa.astype(np.float32)[:-1]),
                             phantom.affine), str(fa))
    failing = submit(api, server_job(phantom, dict(ids, stop_map=api.upload(fa).json()["id"]),
                                     count=10))
    assert wait_job(api, failing)["status"] == "failed"
    conforms(spec, api.get(f"/v1/jobs/{failing}"), "/v1/jobs/{id}", "get")
    # Queued behind a job of 3000 seeds, then cancelled.
    first = submit(api, server_job(phantom, ids, count=3000, rng_seed=1))
    queued = submit(api, server_job(phantom, ids, count=10, rng_seed=2))
    r = api.request("DELETE", f"/v1/jobs/{queued}")
    conforms(spec, r, "/v1/jobs/{id}", "delete")
    conforms(spec, api.get(f"/v1/jobs/{queued}"), "/v1/jobs/{id}", "get")
    wait_job(api, first)
