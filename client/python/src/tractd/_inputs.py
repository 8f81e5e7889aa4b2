"""The inputs of a job document turned into volume ids (proto/API.md,
"Volumes"), as tractctl's job_file_upload_inputs (client/tctl_job.c) does:
every member of "inputs" but sh_basis and sh_frame, seeds.roi,
seeds.points_file, the tissue maps of seeds.interface, the maps of "stopping"
(every member but criterion) and the mask images among "regions"' include and
exclude (every region but a sphere, an object). A value
may be a volume id (kept), a local path (relative ones against the job
file's directory), bytes, a numpy array or a nibabel image. Arrays and
images are serialised to NIfTI in memory, bvals/bvecs arrays to FSL text,
seed points (seeds.points_file) to a float64 .npy: nothing is written to
disk. Each volume is hashed (SHA-256, its id) and
uploaded only when HEAD says the daemon does not hold it for the caller.
numpy and nibabel are imported only when an array or image is given.
"""
import hashlib
import io
import os
import re

from ._errors import TractdError

VOLUME_ID = re.compile(r"sha256:[0-9a-f]{64}")
SETTINGS = ("sh_basis", "sh_frame")   # members of "inputs" that name no file
TEXT_INPUTS = ("bvals", "bvecs")
POINTS_FILE = "points_file"             # seeds.points_file: an (N, 3) .npy
HASH_CHUNK = 1 << 20


def is_volume_id(value):
    return isinstance(value, str) and VOLUME_ID.fullmatch(value) is not None


def input_fields(doc):
    """[(field name, container, key)] of the values that name volumes."""
    fields = []
    inputs = doc.get("inputs")
    if isinstance(inputs, dict):
        fields += [(f"inputs.{k}", inputs, k) for k in inputs if k not in SETTINGS]
    seeds = doc.get("seeds")
    if isinstance(seeds, dict):
        fields += [(f"seeds.{k}", seeds, k) for k in ("roi", POINTS_FILE) if k in seeds]
    interface = seeds.get("interface") if isinstance(seeds, dict) else None
    if isinstance(interface, dict):
        fields += [(f"seeds.interface.{k}", interface, k) for k in interface]
    stopping = doc.get("stopping")
    if isinstance(stopping, dict):
        fields += [(f"stopping.{k}", stopping, k) for k in stopping if k != "criterion"]
    regions = doc.get("regions")
    for name in ("include", "exclude") if isinstance(regions, dict) else ():
        listed = regions.get(name)
        if isinstance(listed, list):
            fields += [(f"regions.{name}[{i}]", listed, i) for i, region in enumerate(listed)
                       if not isinstance(region, dict)]
    return fields


def is_array(value):
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _is_image(value):
    return hasattr(value, "affine") and hasattr(value, "dataobj")


def image_affine(value, base_dir):
    """The affine of an input when it carries one (an image, or a NIfTI path
    when nibabel is there), else None: the grid arrays are placed on."""
    if _is_image(value):
        return value.affine
    if isinstance(value, (str, os.PathLike)) and not is_volume_id(value):
        try:
            import nibabel
        except ImportError:
            return None
        try:
            return nibabel.load(os.path.join(base_dir, os.fspath(value))).affine
        except Exception:  # not a NIfTI (bvals...) or unreadable: judged on upload
            return None
    return None


def _nifti_array(field, array):
    """numpy has no NIfTI type for bool and nibabel refuses int64 without a
    header dtype: those are stored as uint8 and int32 (when they fit)."""
    import numpy as np
    if array.dtype == np.bool_:
        return array.astype(np.uint8)
    if array.dtype in (np.int64, np.uint64):
        info = np.iinfo(np.int32)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise ValueError(f"{field}: integer values beyond int32 cannot be sent as NIfTI")
        return array.astype(np.int32)
    return array


def nifti_bytes(field, value, affine):
    """An array (on affine) or a nibabel image as the bytes of a .nii file."""
    import nibabel
    import numpy as np
    if _is_image(value):
        if isinstance(value, (nibabel.Nifti1Image, nibabel.Nifti2Image)):
            return value.to_bytes()
        value, affine = np.asanyarray(value.dataobj), value.affine
    if affine is None:
        raise ValueError(f"{field}: a numpy array needs an affine: pass affine=, or give "
                         "another input as a NIfTI file or nibabel image")
    array = _nifti_array(field, np.asarray(value))
    return nibabel.Nifti1Image(array, np.asarray(affine, dtype=np.float64)).to_bytes()


def text_bytes(field, value):
    """bvals (one row) or bvecs (3 rows) in FSL text, as read by the daemon."""
    import numpy as np
    array = np.asarray(value, dtype=np.float64)
    if field.endswith("bvecs") and array.ndim == 2 and array.shape[1] == 3 and array.shape[0] != 3:
        array = array.T
    if array.ndim == 1:
        array = array[np.newaxis, :]
    out = io.StringIO()
    np.savetxt(out, array, fmt="%.17g")
    return out.getvalue().encode("ascii")


def npy_bytes(field, value):
    """Seed points, an (N, 3) array, as the bytes of a float64 .npy file
    (np.save), the format of seeds.points_file: exact, and ~24 bytes a point
    where the job document's JSON takes ~60."""
    import numpy as np
    array = np.ascontiguousarray(value, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != 3 or len(array) == 0:
        raise ValueError(f"{field}: an (N, 3) array of points, got shape {array.shape}")
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


class Volume:
    """One input to send: bytes in memory or a local file, with its id."""

    def __init__(self, field, data=None, path=None):
        self.field, self.data, self.path = field, data, path
        h = hashlib.sha256()
        if data is not None:
            h.update(data)
            self.size = len(data)
        else:
            try:
                with open(path, "rb") as f:
                    self.size = os.fstat(f.fileno()).st_size
                    for block in iter(lambda: f.read(HASH_CHUNK), b""):
                        h.update(block)
            except OSError as e:
                raise ValueError(f"{field}: cannot read {path}: {e.strerror}") from e
        self.id = "sha256:" + h.hexdigest()


def volume_of(field, value, base_dir, affine):
    """The Volume of a job value, or None for a volume id (kept as is)."""
    if is_volume_id(value):
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Volume(field, data=bytes(value))
    if isinstance(value, (str, os.PathLike)):
        return Volume(field, path=os.path.join(base_dir, os.fspath(value)))
    if field.rsplit(".", 1)[-1] in TEXT_INPUTS and (is_array(value) or isinstance(value, (list, tuple))):
        return Volume(field, data=text_bytes(field, value))
    if field == f"seeds.{POINTS_FILE}" and (is_array(value) or isinstance(value, (list, tuple))):
        return Volume(field, data=npy_bytes(field, value))
    if is_array(value) or _is_image(value):
        return Volume(field, data=nifti_bytes(field, value, affine))
    raise TypeError(f"{field}: a path, volume id, bytes, numpy array or nibabel image, "
                    f"not {type(value).__name__}")


def ensure_uploaded(transport, volume, uploads=None):
    """Sends volume unless the daemon holds it for the caller (HEAD first).
    uploads, a list, gets the ids actually sent."""
    if transport.exists(f"/v1/volumes/{volume.id}"):
        return
    headers = {"Content-Length": str(volume.size), "Content-Type": "application/octet-stream"}
    if volume.data is not None:
        answer = transport.json_body("POST", "/v1/volumes", volume.data, headers)
    else:
        with open(volume.path, "rb") as f:
            answer = transport.json_body("POST", "/v1/volumes", f, headers)
    if not isinstance(answer, dict) or answer.get("id") != volume.id:
        got = answer.get("id") if isinstance(answer, dict) else answer
        raise TractdError(f"the upload became {got}, not {volume.id}: the file changed while "
                          "it was read", field=volume.field)
    if uploads is not None:
        uploads.append(volume.id)
