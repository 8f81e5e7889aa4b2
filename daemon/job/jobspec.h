/* SPDX-License-Identifier: MIT */
/*
 * jobspec: the only reader of job JSON. Turns a request into a validated
 * struct jobspec with every default filled in, or into an error naming the
 * offending field and the reason. Knows nothing about GPUs, files' contents or
 * HTTP. Does not log.
 *
 * Job document (proto/job.schema.json is the normative description):
 * {
 *   "inputs":   exactly one of
 *               {"odf": PATH, "stop_map": PATH}
 *               {"sh": PATH, "sh_basis": BASIS, "sh_frame": "voxel" | "world",
 *                "stop_map": PATH}       (sh_basis: tournier07 by default for a .mif)
 *               {"dwi": PATH, "bvals": PATH, "bvecs": PATH,
 *                "bvecs_convention": "voxel" | "fsl", "mask": PATH,
 *                "stop_map": PATH}       (mask and stop_map optional; bvals and
 *                                         bvecs too for a .mif with a dw_scheme)
 *   "model":    (dwi inputs only) for prob: "csd" or {"name": "csd", "sh_order": 8,
 *                "lambda": 1, "tau": 0.1, "response": "auto" | {"evals": [l1, l2, l3],
 *                "s0": S0}, "roi_radius": 10, "response_fa": 0.7};
 *               for boot: "opdt" | "csa" or {"name": "opdt", "sh_order": 4,
 *                "sh_lambda": 0.006, "min_signal": 1}
 *   "direction_getter": "prob" | "boot" | "ptt" (boot needs a dwi input),
 *   "seeds":    {"roi": PATH, "count": 2000, "per_voxel": false, "rng_seed": 0,
 *                "select": null, "shard": null | "K/N"}
 *            or {"points": [[x,y,z], ...], "space": "voxel" | "ras", "select": null,
 *                "shard": null | "K/N", "first_index": 0}
 *            or {"points_file": PATH (.npy, N x 3), and points' other members},
 *            or {"interface": {"wm": PATH, "gm": PATH} | {"five_tt": PATH}, "count": 10000,
 *                "rng_seed": 0, "select": null, "shard": null | "K/N"},
 *   "tracking": {"sphere": "repulsion724" | {"vertices": [[x,y,z], ...]},
 *                "step_size": 0.5 | "step_mm": 1 (one of them), "max_angle": 60,
 *                "fa_threshold": 0.1,
 *                "relative_peak_threshold": 0.25, "min_separation_angle": 45,
 *                "pmf_threshold": 0.05, "max_steps": 500,
 *                "min_length": 0, "max_length": null, "max_attempts": 5 (boot only),
 *                "odf_storage": "auto" | "float32" | "float16" | "sh" (prob; ptt: not sh),
 *                "probe_length": 2, "probe_quality": 9, "probe_count": 1, "probe_radius": 0,
 *                "rejection_samples": 10, "rejection_tries": 100 (ptt only),
 *                "return_all": true, "max_cross": null, "angular_weight": 0,
 *                "pft": null | {"back_mm": 2, "front_mm": 1, "particles": 15,
 *                 "max_trials": 20, "min_wm_pve_before_stopping": 0} (prob with
 *                 stopping act or cmc only)},
 *   "stopping": {"criterion": "threshold"} (default: stop_map and fa_threshold)
 *            or {"criterion": "act", "include": PATH, "exclude": PATH}
 *            or {"criterion": "act", "five_tt": PATH}  (MRtrix3's 5TT image)
 *            or {"criterion": "cmc", "wm": PATH, "gm": PATH, "csf": PATH},
 *   "regions":  {"include": [REGION, ...], "exclude": [REGION, ...]} (tckgen
 *               -include/-exclude), REGION = {"center": [x, y, z], "radius": r}
 *               in RAS+ mm, or PATH: a mask on the tracking grid; at most
 *               JOBSPEC_MAX_REGIONS in each list, JOBSPEC_MAX_REGION_MASKS masks,
 *   "output":   {"format": "trk" | "tck" | "trx", "path": PATH, "save_seeds": false,
 *                "save_seed_index": false, "save_direction_getter": false,
 *                "positions": "float32" | "float16" (trx only),
 *                "compression": "store" | "deflate" (trx only),
 *                "compress": null | true | {"tolerance_mm": 0.01, "max_segment_mm": 10}}
 * }
 * Unknown keys anywhere are errors. Relative paths are resolved against
 * base_dir (the job file's directory for the CLI).
 * On failure *ret is zeroed (jobspec_free is always safe); I/O errors while
 * reading a job file are returned as -errno.
 */
#ifndef TRACTD_JOBSPEC_H
#define TRACTD_JOBSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "formats/output.h"
#include "job/shard.h"
#include "models/shbasis.h"

enum jobspec_seed_kind {
	JOBSPEC_SEEDS_ROI,        /* random seeds in seeds.roi */
	JOBSPEC_SEEDS_POINTS,     /* explicit seeds.points */
	JOBSPEC_SEEDS_INTERFACE,  /* random seeds on the WM/GM interface (seeds.interface) */
};

enum jobspec_input_kind {
	JOBSPEC_INPUT_ODF,        /* an ODF sampled on tracking.sphere */
	JOBSPEC_INPUT_SH,         /* SH coefficients, sampled on the sphere here */
	JOBSPEC_INPUT_DWI,        /* raw DWI: DTI and CSD are fitted here */
};

enum jobspec_sh_frame {
	JOBSPEC_SH_FRAME_VOXEL,   /* directions along the voxel axes (DIPY) */
	JOBSPEC_SH_FRAME_WORLD,   /* directions in RAS+ scanner space (MRtrix3) */
};

/* Why inputs.sh_basis is needed, for jobspec and for inputs.c (which sees an
 * upload's format). */
#define JOBSPEC_SH_BASIS_REQUIRED \
	"is required with inputs.sh: \"tournier07\" for MRtrix3 (dwi2fod; the default " \
	"only for a .mif FOD), \"descoteaux07_legacy\" for DIPY's default, " \
	"\"descoteaux07\" for DIPY with legacy=False"

/* How inputs.bvecs' vectors are read. */
enum jobspec_bvecs_convention {
	JOBSPEC_BVECS_VOXEL,      /* along the voxel axes, as DIPY reads them (default) */
	JOBSPEC_BVECS_FSL,        /* FSL's: x flipped where the affine's determinant is > 0 */
};

enum jobspec_direction_getter {
	JOBSPEC_DG_PROB,          /* samples the ODF within the cone */
	JOBSPEC_DG_BOOT,          /* closest peak of a residual-bootstrap ODF of the DWI */
	JOBSPEC_DG_PTT,           /* parallel transport: curves sampled by their ODF support */
};

enum jobspec_model_name {
	JOBSPEC_MODEL_CSD,        /* prob's model */
	JOBSPEC_MODEL_OPDT,       /* boot's models */
	JOBSPEC_MODEL_CSA,
};

/* Why a streamline stops (stopping.criterion). */
enum jobspec_stopping {
	JOBSPEC_STOP_THRESHOLD,   /* stop map <= fa_threshold (DIPY ThresholdStoppingCriterion) */
	JOBSPEC_STOP_ACT,         /* include/exclude maps (DIPY ActStoppingCriterion) */
	JOBSPEC_STOP_CMC,         /* wm/gm/csf partial volumes (DIPY CmcStoppingCriterion) */
};

/* How the GPU holds what prob samples (tracking.odf_storage). */
enum jobspec_odf_storage {
	JOBSPEC_ODF_AUTO,         /* the first of float32, float16, sh that fits the budget */
	JOBSPEC_ODF_FLOAT32,      /* the ODF on the sphere's vertices */
	JOBSPEC_ODF_FLOAT16,      /* the same in half precision: half the memory */
	JOBSPEC_ODF_SH,           /* SH coefficients, sampled on the sphere at each step */
};

#define JOBSPEC_BOOT_MAX_SH_ORDER 12

/* model: CSD parameters with defaults as DIPY's ConstrainedSphericalDeconvModel
 * and auto_response_ssst; OPDT/CSA parameters with GPUStreamlines' defaults. */
struct jobspec_model {
	enum jobspec_model_name name; /* csd for prob, opdt for boot by default */
	int sh_order;               /* even; csd 2..16, default 8; opdt/csa 2..12, default 4 */
	double lambda;              /* (0, 1e6], default 1 */
	double tau;                 /* [0, 1], default 0.1 */
	int roi_radius;             /* voxels, 1..128, default 10 */
	double response_fa;         /* (0, 1), default 0.7 */
	bool response_given;        /* model.response is an object */
	double response_evals[3];   /* mm^2/s, > 0 */
	double response_s0;         /* > 0 */
	double sh_lambda;           /* opdt/csa regularisation, [0, 10], default 0.006 */
	double min_signal;          /* opdt/csa signal floor, > 0, default 1 */
};

/* A region of regions.include or regions.exclude: a sphere in RAS+ mm
 * (tckgen's x,y,z,r), or a mask image. */
struct jobspec_region {
	double center[3];
	double radius;              /* mm, > 0; a sphere's */
	int mask;                   /* the mask's index in region_mask_path, or -1: a sphere */
};

/* Regions per list: the track kernels keep a bit per include region. */
#define JOBSPEC_MAX_REGIONS 16
/* Mask images among a job's regions (each an input file slot). */
#define JOBSPEC_MAX_REGION_MASKS 4

/* The files a job reads, by slot: jobspec_input_files' order, then the
 * seeds' (jobspec_seed_files), then the regions' masks. */
enum jobspec_file_slot {
	JOBSPEC_SLOT_ODF,
	JOBSPEC_SLOT_SH,
	JOBSPEC_SLOT_DWI,
	JOBSPEC_SLOT_BVALS,
	JOBSPEC_SLOT_BVECS,
	JOBSPEC_SLOT_MASK,
	JOBSPEC_SLOT_STOP_MAP,
	JOBSPEC_SLOT_STOP_INCLUDE,
	JOBSPEC_SLOT_STOP_EXCLUDE,
	JOBSPEC_SLOT_STOP_WM,
	JOBSPEC_SLOT_STOP_GM,
	JOBSPEC_SLOT_STOP_CSF,
	JOBSPEC_SLOT_STOP_5TT,
	JOBSPEC_SLOT_SEED_ROI,
	JOBSPEC_SLOT_SEED_INTERFACE_WM,
	JOBSPEC_SLOT_SEED_INTERFACE_GM,
	JOBSPEC_SLOT_SEED_INTERFACE_5TT,
	JOBSPEC_SLOT_SEED_POINTS,
	JOBSPEC_SLOT_REGION_MASK,   /* the first of JOBSPEC_MAX_REGION_MASKS */
	JOBSPEC_SLOTS = JOBSPEC_SLOT_REGION_MASK + JOBSPEC_MAX_REGION_MASKS
};

/* Inputs opened before the job runs (a server job's, by its owner: see
 * infile.h): fd[slot] is open when held has bit slot. Readers take them
 * rather than the paths, which then only name the files in messages. */
struct jobspec_opened {
	int fd[JOBSPEC_SLOTS];
	unsigned held;
};

struct jobspec {
	enum jobspec_input_kind input_kind;
	struct jobspec_opened opened;   /* closed by jobspec_free */
	char *odf_path;             /* inputs.odf, resolved */
	char *sh_path;              /* inputs.sh */
	enum sh_basis sh_basis;     /* inputs.sh_basis (required with a NIfTI sh; a .mif's
				     * default is tournier07, see sh_basis_given) */
	enum jobspec_sh_frame sh_frame; /* inputs.sh_frame; default world for tournier07
					 * (MRtrix3), voxel for descoteaux07 (DIPY) */
	char *dwi_path;             /* inputs.dwi */
	char *bvals_path;           /* inputs.bvals (FSL text) */
	char *bvecs_path;           /* inputs.bvecs (FSL text); bvals and bvecs may be
				     * absent for a .mif or an upload (inputs.c checks) */
	char *mask_path;            /* inputs.mask: where to fit (optional) */
	char *stop_map_path;        /* inputs.stop_map; optional with dwi (FA is used) */
	struct jobspec_model model;
	enum jobspec_direction_getter direction_getter; /* default prob */

	enum jobspec_seed_kind seed_kind;
	char *seed_roi_path;        /* seeds.roi (ROI kind) */
	char *seed_wm_path;         /* seeds.interface.wm, gm: partial volumes (INTERFACE */
	char *seed_gm_path;         /* kind), or */
	char *seed_5tt_path;        /* seeds.interface.five_tt: a 5TT image */
	uint64_t seed_count;        /* seeds.count, default 10000, 1..JOBSPEC_MAX_SEEDS; with
				     * select and neither count nor per_voxel: 1000 x select
				     * (tckgen's default), at most JOBSPEC_MAX_SEEDS */
	uint64_t seed_select;       /* seeds.select: write the first this many streamlines
				     * in seed order, then stop (tckgen -select);
				     * 1..JOBSPEC_MAX_SEEDS, 0 when not given: all */
	bool seed_count_from_select; /* seed_count is select's default: a bound, which
				      * a server's seed limit lowers rather than refuses */
	bool seed_per_voxel;        /* seeds.per_voxel, default false */
	bool sh_basis_given;        /* the job named inputs.sh_basis (inputs.c refuses a
				     * NIfTI sh without one: an upload's format is known there) */
	bool bvecs_convention_given; /* the job chose inputs.bvecs_convention (else a
				      * warning where it matters) */
	bool seed_points_ras;       /* seeds.space == "ras" (default "voxel") */
	bool return_all;                /* tracking.return_all, default true; false keeps
					 * only streamlines whose both ends are valid */
	bool pft;                       /* tracking.pft given: particle filtering retries
					 * a half that would end invalidly */
	uint64_t rng_seed;          /* seeds.rng_seed, default 0, 0..2^53 */
	double *seed_points;        /* seeds.points, 3*n_seed_points (POINTS kind) */
	uint64_t n_seed_points;
	char *seed_points_path;     /* seeds.points_file: the points as a .npy file (POINTS
				     * kind; seed_points is then read at load, formats/npy.h) */
	uint64_t seed_first_index;  /* seeds.first_index: the global index of the first
				     * point, which keys its draws as a shard's first seed's
				     * (seeds_number_from); default 0, not with a shard */
	struct shard shard;         /* seeds.shard "K/N" (K from 0; not with select);
				     * count 0 when not given: the whole job */
	uint64_t fingerprint;       /* of the document less seeds.shard, output.path and
				     * the input files' names: the same for every shard
				     * of one job, by the CLI or the daemon (their
				     * outputs record it for tractd merge) */

	char *sphere_name;          /* tracking.sphere as a name (default "repulsion724"), or NULL */
	double *sphere_vertices;    /* tracking.sphere.vertices, 3*sphere_nv, or NULL */
	int sphere_nv;
	enum jobspec_bvecs_convention bvecs_convention; /* inputs.bvecs_convention (here, in
							  * the padding before a double) */

	double step_size;               /* voxels, (0, 5], default 0.5 */
	double step_mm;                 /* tracking.step_mm: the step in mm instead, (0, 10];
					 * 0 when not given (step_size applies). The engine
					 * converts it on the grid (engine_step_voxels) */
	double max_angle;               /* degrees, (0, 90], default 60 */
	double fa_threshold;            /* stop where stop_map <= this; [0, 1e6], default 0.1 */
	double relative_peak_threshold; /* [0, 1], default 0.25 */
	double min_separation_angle;    /* degrees, [1, 90], default 45 */
	double pmf_threshold;           /* [0, 1), default 0.05 */
	double min_length;              /* mm, >= 0, default 0 */
	double max_length;              /* mm, > 0, default INFINITY (JSON null) */
	int max_attempts;               /* boot: bootstrap samples tried per step while
					 * none has a peak, [1, 100], default 5 */
	enum jobspec_odf_storage odf_storage; /* prob: default auto; sh needs an sh or
					       * dwi input */
	double probe_length;            /* ptt: voxels, (0, 10], default 2 */
	int probe_quality;              /* ptt: points along the probe, [2, 64], default 9 */
	int probe_count;                /* ptt: parallel probe lines, [1, 16], default 1 */
	double probe_radius;            /* ptt: voxels, [0, 5], default 0 */
	int rejection_samples;          /* ptt: candidates estimating the support's maximum,
					 * [1, 1000], default 10 */
	int rejection_tries;            /* ptt: candidates tried per step, [1, 10000], default 100 */
	double pft_back_mm;             /* tracking.pft.back_mm, [0, 10], default 2 */
	double pft_front_mm;            /* tracking.pft.front_mm, [0, 10], default 1 */
	double pft_min_wm_pve;          /* tracking.pft.min_wm_pve_before_stopping, [0, 1],
					 * default 0 (off): a valid end is passed while the
					 * half's white matter (1 - include - exclude) has
					 * stayed below it (DIPY's) */
	int pft_particles;              /* tracking.pft.particles, [1, JOBSPEC_MAX_PFT_PARTICLES],
					 * default 15 */
	int pft_max_trials;             /* tracking.pft.max_trials, [1, JOBSPEC_MAX_PFT_TRIALS],
					 * default 20 */
	double angular_weight;          /* tracking.angular_weight, [0, 1], default 0 (off):
					 * sphere values times (1 - w) + w |cos| to the
					 * current direction before the PMF thresholds */
	char *stop_include_path;        /* stopping.include (act): > 0.5 ends validly */
	char *stop_exclude_path;        /* stopping.exclude (act): > 0.5 ends invalidly */
	char *stop_wm_path;             /* stopping.wm, gm, csf (cmc): partial volume maps */
	char *stop_gm_path;
	char *stop_csf_path;
	char *stop_5tt_path;            /* stopping.five_tt (act): MRtrix3's 5TT image, in
					 * place of include and exclude (inputs.c maps it) */
	enum jobspec_stopping stopping; /* stopping.criterion, default threshold */
	int max_cross;                  /* tracking.max_cross: initial directions tracked
					 * from each seed at most (DIPY's), [1, 10000];
					 * 0 when not given or null: all of them */
	/* regions (tckgen -include/-exclude): a streamline is kept only if it
	 * visits every include region and enters no exclude region. */
	struct jobspec_region include_regions[JOBSPEC_MAX_REGIONS];
	struct jobspec_region exclude_regions[JOBSPEC_MAX_REGIONS];
	int n_include_regions, n_exclude_regions;
	char *region_mask_path[JOBSPEC_MAX_REGION_MASKS];  /* resolved; slot
							      * JOBSPEC_SLOT_REGION_MASK + k */
	/* "regions.include[2]": each mask's field, as errbuf's */
	char region_mask_field[JOBSPEC_MAX_REGION_MASKS][sizeof(((struct errbuf *)0)->field)];
	int n_region_masks;

	int max_steps;                  /* tracking.max_steps: steps per direction, [1, 10000],
					 * default 500 (here, beside n_region_masks, for the
					 * struct's packing) */
	enum output_format output_format; /* output.format: "trk" (default), "tck", "trx" */
	bool save_seeds;            /* output.save_seeds: each streamline's seed (RAS+ mm)
				     * as TRK data_per_streamline "seeds" or TRX
				     * dps/seeds; tck: the CLI's seeds file */
	bool save_seed_index;       /* output.save_seed_index: each streamline's global
				     * seed index (TRK property, TRX dps); not tck */
	bool save_direction_getter; /* output.save_direction_getter: the getter's code
				     * (0 prob, 1 boot, 2 ptt) per streamline; not tck */
	bool compress;              /* output.compress: true or an object drops points as
				     * DIPY's compress_streamlines; null/absent/false: off */
	enum trx_positions output_positions;     /* output.positions (trx): float32 default */
	enum trx_compression output_compression; /* output.compression (trx): store default */
	double compress_tolerance_mm;   /* output.compress.tolerance_mm, (0, 10], default 0.01 */
	double compress_max_segment_mm; /* output.compress.max_segment_mm, (0, 1000], default 10 */
	char *output_path;          /* output.path, resolved; NULL when not given */
};

/* The members of inputs that name files, for code that handles every input
 * file alike (resolving volume ids, keying the volume cache). */
struct jobspec_input_file {
	const char *field;          /* "inputs.dwi" */
	size_t offset;              /* of its char * path in struct jobspec */
};
#define JOBSPEC_INPUT_FILES JOBSPEC_SLOT_SEED_ROI
extern const struct jobspec_input_file jobspec_input_files[JOBSPEC_INPUT_FILES];

/* The files of seeds, slots JOBSPEC_SLOT_SEED_ROI.. in order: they name
 * where to seed, not the inputs a cache shares. */
#define JOBSPEC_SEED_FILES (JOBSPEC_SLOT_REGION_MASK - JOBSPEC_INPUT_FILES)
extern const struct jobspec_input_file jobspec_seed_files[JOBSPEC_SEED_FILES];

/* The file row of a slot before the regions' masks: an input's or a seed's
 * (a mask's path and field are in region_mask_path and region_mask_field). */
static inline const struct jobspec_input_file *jobspec_file(enum jobspec_file_slot slot)
{
	return slot < JOBSPEC_INPUT_FILES ? &jobspec_input_files[slot] :
					    &jobspec_seed_files[slot - JOBSPEC_INPUT_FILES];
}

/* The path of f in js (NULL when not given), and the slot holding it. */
static inline const char *jobspec_input_path(const struct jobspec *js,
					     const struct jobspec_input_file *f)
{
	return *(char *const *)((const char *)js + f->offset);
}

static inline char **jobspec_input_slot(struct jobspec *js, const struct jobspec_input_file *f)
{
	return (char **)((char *)js + f->offset);
}

/* The descriptor held for slot, or -1 when the file is to be opened by its
 * path (the CLI). */
static inline int jobspec_opened_fd(const struct jobspec *js, enum jobspec_file_slot slot)
{
	return js->opened.held & (1u << slot) ? js->opened.fd[slot] : -1;
}

/* Gives fd to js for slot (which must not hold one yet). */
static inline void jobspec_hold_fd(struct jobspec *js, enum jobspec_file_slot slot, int fd)
{
	js->opened.fd[slot] = fd;
	js->opened.held |= 1u << slot;
}

#define JOBSPEC_MAX_STEP_VOXELS 5.0      /* tracking.step_size, and step_mm converted */
/* tracking.pft: particles and trials are bits of the particles' Philox
 * counters (shaders/pft.glsl), and bound the work of one retry. */
#define JOBSPEC_MAX_PFT_PARTICLES 64
#define JOBSPEC_MAX_PFT_TRIALS 50
#define JOBSPEC_MAX_SEEDS 100000000ull   /* 1e8: an explicit, documented limit */
#define JOBSPEC_MAX_POINTS 1000000ull    /* explicit seed points per job (fits the document limit) */
#define JOBSPEC_MAX_BYTES (64u << 20)    /* largest accepted job document */

/* Parses and validates json (len bytes, need not be NUL-terminated). Relative
 * paths are joined to base_dir (may be NULL = as given). On success fills *ret
 * (free with jobspec_free) and returns 0; on failure returns -EINVAL (or
 * -ENOMEM) with err->field like "tracking.max_angle" and err->message
 * like "must be in (0, 90] degrees, got 120". */
int jobspec_parse(const char *json, size_t len, const char *base_dir,
		  struct jobspec *ret, struct errbuf *err);

/* Sets seeds.shard to text ("K/N", as the document's; the CLI's --shard),
 * with the document's checks: -EINVAL naming "seeds.shard". */
int jobspec_set_shard(struct jobspec *js, const char *text, struct errbuf *err);

/* Reads the job document at path (at most JOBSPEC_MAX_BYTES; "-": standard
 * input) into *text (*len bytes) and the directory its relative paths are
 * resolved against into *base_dir: the file's, or NULL (the current one) for
 * standard input. Both are the caller's to free; NULL on failure. */
int jobspec_read(const char *path, char **text, size_t *len, char **base_dir,
		 struct errbuf *err);

/* Reads path with jobspec_read and parses it. */
int jobspec_load_file(const char *path, struct jobspec *ret, struct errbuf *err);

/* Frees owned strings/arrays, closes the opened inputs and zeroes *js;
 * accepts zeroed specs. */
void jobspec_free(struct jobspec *js);

#endif
