/* SPDX-License-Identifier: MIT */
/*
 * inputs: what a tracking job reads, on the host: the ODF or the SH
 * coefficients behind it, or for a boot job the DWI (b0s first, one shell)
 * and its model's matrices; the stop map, the stopping criterion's maps,
 * the regions' masks, the sphere and the seeds, all validated against one
 * grid. A dwi job's inputs are fitted (fit.h).
 *
 * Owns the loaded volumes, the sphere and the fit, from inputs_load() to
 * inputs_free(); a cache may share them between jobs. Never touches the GPU,
 * so bad input fails before a device is opened; resident.h uploads them and
 * the engine reads them through the accessors below. Does not log; failures
 * go to the caller through errbuf, with the input field named.
 */
#ifndef TRACTD_INPUTS_H
#define TRACTD_INPUTS_H

#include <stdbool.h>

#include "models/boot.h"
#include "base/errbuf.h"
#include "models/fit.h"
#include "job/jobspec.h"
#include "job/odf_stream.h"
#include "job/seeds.h"
#include "models/sphere.h"
#include "formats/volume.h"

struct inputs;

/* Whether the job's images (NIfTI or MRtrix3, formats/image.h) fit limit bytes of host memory, from their
 * headers alone (image_probe: each value as stored and as float32, and
 * for the DWI the fit's SH coefficients, FA, MD and a boot job's copy, as
 * floats; summed over the inputs); 0 means no limit. -EFBIG with err
 * naming the input that crossed the limit (the API's limit_exceeded), or
 * volume_probe's error for an unreadable header.
 * Called before anything is allocated by the headers' sizes: at submit, and
 * again when the job starts (a file under a data root may have changed). */
int inputs_check_host_memory(const struct jobspec *job, uint64_t limit, struct errbuf *err);

/* Reads and validates the job's volumes (the regions' masks among them) and
 * sphere. dwi inputs are fitted
 * (fit.h) with fit's threads and progress (fit may be NULL); SH coefficients
 * are kept as they are, to be sampled on the sphere when uploaded. On
 * failure returns a negative errno with err naming the input field
 * (-EINVAL, -ENOENT, -EIO, -ENOMEM, -ECANCELED). */
int inputs_load(const struct jobspec *job, const struct fit_options *fit, struct inputs **ret,
		struct errbuf *err);

/* inputs_load, except that an uncompressed ODF input (inputs.odf, a .nii in
 * the host's byte order) of a prob job on a sphere with an even vertex
 * count stays on disk, its header read, to be read while it is uploaded
 * (inputs_odf_stream): what `tractd run` does. The host copy of other
 * inputs, and of any a cache keeps for later jobs, is read here. */
int inputs_load_streamed(const struct jobspec *job, const struct fit_options *fit,
			 struct inputs **ret, struct errbuf *err);

/* The stream of an ODF inputs_load_streamed left on disk, or NULL when the
 * ODF is on the host. Its upload (resident_new_all) must run before the
 * engine asks inputs_symmetric. */
struct odf_stream *inputs_odf_stream(struct inputs *in);

/* Host memory that in's images and matrices hold (what keeping them warm
 * costs; the sphere's few vertices are not counted). */
uint64_t inputs_host_bytes(const struct inputs *in);

/* The fit alone of a dwi job (what inputs_load does for it before
 * sampling the ODF on the sphere): loads and validates inputs.dwi, the
 * tables and the mask, and fits them. Errors as inputs_load; free
 * *ret with fit_result_free. */
int inputs_fit_dwi(const struct jobspec *job, const struct fit_options *fit,
		   struct fit_result *ret, struct errbuf *err);

/* The ODF the tracker samples, on the sphere's vertices, clipped at zero,
 * into *ret (free with volume_free): sampled from SH coefficients with
 * fit's threads, or copied. -EINVAL for boot jobs, -ENOMEM. */
int inputs_odf(const struct inputs *in, const struct fit_options *fit, struct volume *ret,
	       struct errbuf *err);
/* The DTI and CSD fit of a dwi job; NULL for other inputs. */
const struct fit_result *inputs_fit(const struct inputs *in);

/* One sentence for the log on where a dwi job's gradient directions came
 * from (inputs.bvecs, or a .mif's dw_scheme) and which bvecs_convention
 * read them, into buf[len]; *warn when the job did not choose one and the
 * DWI's affine has a positive determinant, where the two conventions
 * differ by the sign of x. false (buf untouched) for other inputs. */
bool inputs_describe_gradients(const struct inputs *in, char *buf, size_t len, bool *warn);

/* Accepts NULL. */
void inputs_free(struct inputs *in);

/* The job's seed generator on the inputs' grid (seeds.roi or seeds.points);
 * errors as inputs_load. Free with seeds_free(). */
int inputs_seeds_load(const struct jobspec *job, const struct inputs *in, struct seeds **ret,
		      struct errbuf *err);

/* The regions' mask images (regions.include/exclude, tckgen's image form),
 * read and checked 3D on the grid by inputs_load (errors naming the region,
 * "regions.include[2]"), as one word per voxel: bit i where include region
 * i is a mask non-zero there, bit 16 + j for exclude region j. *ret (free())
 * is NULL when no region is a mask; -ENOMEM. in must be job's inputs (or
 * a cached copy of inputs with the same masks). */
int inputs_region_masks(const struct jobspec *job, const struct inputs *in, uint32_t **ret,
			struct errbuf *err);

/* ---- read access, for the upload (resident.h) and the engine ------------ */

/* The volume that sets the grid (dims, affine), and the input field that
 * gave it, for messages. */
const struct volume *inputs_grid(const struct inputs *in);
const char *inputs_grid_field(const struct inputs *in);
const struct sphere *inputs_sphere(const struct inputs *in);
/* Whether directions compare by |cos| (even-order SH, or an antipodally
 * symmetric ODF). */
bool inputs_symmetric(const struct inputs *in);
/* Whether the ODF's values at each antipodal pair are equal to the bit
 * (fit_prepare_odf's mirrored). */
bool inputs_mirrored(const struct inputs *in);
/* The stop map, on the grid. */
const struct volume *inputs_stop(const struct inputs *in);
/* stopping act's or cmc's maps on the grid (cmc's from its partial volumes
 * as DIPY's from_pve), include and exclude interleaved (2 channels); NULL
 * for the threshold criterion. */
const struct volume *inputs_tissue(const struct inputs *in);

/* The SH coefficients behind a prob job's ODF, or NULL for an ODF input. */
const struct volume *inputs_sh(const struct inputs *in);
/* The matrix that samples inputs_sh()'s coefficients on the sphere's
 * vertices, in their basis and frame (fit_sh_sampling_matrix): free() it;
 * NULL when out of memory. */
float *inputs_sh_sampling_matrix(const struct inputs *in);
/* The ODF on the sphere's vertices, clipped at zero, without copying an
 * ODF input: *ret is the input itself, or scratch, sampled from SH
 * coefficients with fit's threads (fit may be NULL). Free scratch with
 * volume_free either way. Not for boot jobs; errors as inputs_odf. */
int inputs_odf_view(const struct inputs *in, const struct fit_options *fit,
		    struct volume *scratch, const struct volume **ret, struct errbuf *err);

/* Whether the job uses the boot getter, whose inputs are the DWI and the
 * matrices below instead of an ODF. */
bool inputs_boot(const struct inputs *in);
/* boot: the b0 volumes first (inputs_n_b0() of them), then one shell's. */
const struct volume *inputs_dwi(const struct inputs *in);
int inputs_n_b0(const struct inputs *in);
const struct boot_matrices *inputs_boot_matrices(const struct inputs *in);
enum boot_model inputs_boot_model(const struct inputs *in);

#endif
