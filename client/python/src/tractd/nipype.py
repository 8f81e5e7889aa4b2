"""A nipype interface that runs a tractd job: `tractd.nipype.Track`, so that a
QSIRecon-style workflow adds tractography on the daemon as one node
(`pip install 'client/python[nipype]'`).

Track builds the job document (proto/job.schema.json) from its inputs,
submits it through tractd.Client (each input file uploaded by content hash,
only when the daemon lacks it), waits and streams the tractogram to out_file
in the node's directory. Every input but the daemon's address and token
enters nipype's hash, so a changed input reruns the node and an unchanged one
is cached. A failed job raises tractd.JobFailed naming the field at fault,
which fails the node.

    from nipype import Node, Workflow
    from tractd.nipype import Track

    track = Node(Track(direction_getter="prob", seed_count=100000, step_size=0.5,
                       output_format="trx"), name="tractd")
    wf.connect(fod_node, "out_file", track, "odf")
    wf.connect(fa_node, "out_file", track, "stop_map")
    wf.connect(wm_node, "out_file", track, "seed_roi")
"""
import os

from nipype.interfaces.base import (BaseInterfaceInputSpec, File, SimpleInterface, TraitedSpec,
                                    isdefined, traits)

from ._client import Client

# The job's inputs section: this interface's input of the same name.
VOLUME_INPUTS = ("odf", "sh", "dwi", "bvals", "bvecs", "mask", "stop_map")
# The tracking section's fields with an input of their own (others: `tracking`).
TRACKING_INPUTS = ("step_size", "step_mm", "max_angle", "fa_threshold", "pmf_threshold",
                   "min_length", "max_length", "max_steps", "sphere")


class TrackInputSpec(BaseInterfaceInputSpec):
    job_file = File(exists=True, desc="a `tractd run` job file the other inputs amend "
                                      "(its relative paths against its own directory)")
    odf = File(exists=True, desc="inputs.odf: the fibre ODF on the sphere's vertices (NIfTI)")
    sh = File(exists=True, desc="inputs.sh: SH coefficients (NIfTI; with sh_basis)")
    sh_basis = traits.Enum("descoteaux07", "tournier07", "descoteaux07_legacy", "tournier07_legacy",
                           desc="inputs.sh_basis")
    sh_frame = traits.Enum("world", "voxel", desc="inputs.sh_frame: the axes of the SH directions")
    dwi = File(exists=True, desc="inputs.dwi: raw DWI series (NIfTI; with bvals, bvecs)")
    bvals = File(exists=True, desc="inputs.bvals (FSL text)")
    bvecs = File(exists=True, desc="inputs.bvecs (FSL text)")
    mask = File(exists=True, desc="inputs.mask: where a DWI job fits its model")
    stop_map = File(exists=True, desc="inputs.stop_map: tracking stops where it is <= fa_threshold")
    model = traits.Dict(desc="the job's model section (DWI jobs), e.g. {'name': 'csd'}")
    direction_getter = traits.Enum("prob", "ptt", "boot", desc="direction_getter")
    seed_roi = File(exists=True, desc="seeds.roi: seeds are drawn in its non-zero voxels")
    seed_count = traits.Range(low=1, desc="seeds.count")
    seeds_per_voxel = traits.Bool(desc="seeds.per_voxel: seed_count in every ROI voxel")
    rng_seed = traits.Range(low=0, desc="seeds.rng_seed: equal seeds give equal results")
    step_size = traits.Float(desc="tracking.step_size, in voxels")
    step_mm = traits.Float(desc="tracking.step_mm: the step in mm (instead of step_size)")
    max_angle = traits.Float(desc="tracking.max_angle, degrees")
    fa_threshold = traits.Float(desc="tracking.fa_threshold")
    pmf_threshold = traits.Float(desc="tracking.pmf_threshold")
    min_length = traits.Float(desc="tracking.min_length, mm")
    max_length = traits.Float(desc="tracking.max_length, mm")
    max_steps = traits.Range(low=1, desc="tracking.max_steps, each way from the seed")
    sphere = traits.Str(desc="tracking.sphere: a sphere name (e.g. repulsion724)")
    tracking = traits.Dict(desc="further tracking fields (probe_length, odf_storage, ...)")
    output_format = traits.Enum("trk", "tck", "trx", usedefault=True, desc="output.format")
    save_seeds = traits.Bool(desc="output.save_seeds: each streamline's seed, in the tractogram")
    out_file = File(desc="the tractogram's file name (default tractogram.<output_format>, in "
                         "the node's directory)")
    address = traits.Str(nohash=True, desc="the daemon: unix:///path or http://host:port "
                                           "(default: the socket tractctl finds)")
    # nipype writes a node's inputs into its report and result files: a token
    # given here lands on disk beside the outputs, token_file or $TRACTD_TOKEN
    # do not.
    token = traits.Str(nohash=True, desc="bearer token over TCP (else token_file, $TRACTD_TOKEN); "
                                         "written into the node's report: prefer token_file")
    token_file = File(exists=True, nohash=True, desc="a file whose first line is the token")


class TrackOutputSpec(TraitedSpec):
    out_file = File(exists=True, desc="the tractogram")
    job_id = traits.Str(desc="the daemon's job id")
    streamlines = traits.Int(desc="streamlines in the tractogram")


class Track(SimpleInterface):
    """Tractography on a tractd daemon: the job the inputs describe, run
    through tractd.Client; out_file is the tractogram."""

    input_spec = TrackInputSpec
    output_spec = TrackOutputSpec

    def _given(self, name):
        value = getattr(self.inputs, name)
        return value if isdefined(value) else None

    def job(self):
        """The job document the inputs describe (paths as given)."""
        job = {}
        if self._given("job_file"):
            job = Client._load(self.inputs.job_file, None)[0]
        for section in ("inputs", "seeds", "tracking", "output"):
            job[section] = dict(job.get(section) or {})
        for name in VOLUME_INPUTS + ("sh_basis", "sh_frame"):
            if self._given(name) is not None:
                job["inputs"][name] = self._given(name)
        for name, field in (("seed_roi", "roi"), ("seed_count", "count"),
                            ("seeds_per_voxel", "per_voxel"), ("rng_seed", "rng_seed")):
            if self._given(name) is not None:
                job["seeds"][field] = self._given(name)
        for name in TRACKING_INPUTS:
            if self._given(name) is not None:
                job["tracking"][name] = self._given(name)
        job["tracking"].update(self._given("tracking") or {})
        for name in ("direction_getter", "model"):
            if self._given(name) is not None:
                job[name] = self._given(name)
        job["output"].pop("path", None)
        job["output"]["format"] = self.inputs.output_format
        if self._given("save_seeds") is not None:
            job["output"]["save_seeds"] = self.inputs.save_seeds
        return {k: v for k, v in job.items() if v != {}}

    def _run_interface(self, runtime):
        client = Client(self._given("address"), token=self._given("token"),
                        token_file=self._given("token_file"))
        base_dir = (os.path.dirname(os.path.abspath(self.inputs.job_file))
                    if self._given("job_file") else runtime.cwd)
        handle = client.submit(self.job(), base_dir=base_dir)
        handle.wait(progress=False)
        out = os.path.abspath(os.path.join(
            runtime.cwd, self._given("out_file") or f"tractogram.{self.inputs.output_format}"))
        handle.save(out)
        self._results.update(out_file=out, job_id=handle.id,
                             streamlines=int(handle.info["result"]["streamlines"]))
        return runtime
