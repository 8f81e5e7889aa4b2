/* SPDX-License-Identifier: MIT */
/*
 * device_open: a run's GPU contexts opened on a thread of their own while
 * the run reads its inputs (the Vulkan instance and devices, the pipeline
 * cache: a tenth to a fifth of a second, which `tractd run` used to spend
 * after loading). The caller still hears of a device failure only after its
 * inputs read well, so bad data is reported first, as before.
 *
 * Owns the thread and, until device_open_finish hands them over, the
 * contexts; device_open_cancel closes them when the inputs failed. One
 * caller thread; logs nothing.
 */
#ifndef TRACTD_DEVICE_OPEN_H
#define TRACTD_DEVICE_OPEN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/errbuf.h"
#include "engine/gpu.h"

struct device_open {
	struct gpu_options opts;
	struct gpu_device_choice choices[GPU_MAX_DEVICES];
	size_t n_choices;
	struct gpu_ctx *gpus[GPU_MAX_DEVICES];
	size_t opened;
	int r;                      /* gpu_open_devices's */
	struct errbuf err;
	double seconds;             /* what opening took */
	pthread_t thread;
	bool started;               /* the thread runs or ran; joined by finish or cancel */
	bool handed_over;           /* finish gave the contexts to the caller */
};

/* Starts opening the devices of choices[0..n) (none: the best one) with
 * opts (copied; its strings must outlive the opening). Without a thread
 * (pthread_create failed) finish opens them itself. */
void device_open_start(struct device_open *d, const struct gpu_options *opts,
		       const struct gpu_device_choice *choices, size_t n);

/* Waits for the opening and hands the contexts over: gpus[0..*opened),
 * the caller's to close. Returns gpu_open_devices's result (err set, none
 * open on failure); *seconds is what the opening took. */
int device_open_finish(struct device_open *d, struct gpu_ctx **gpus, size_t *opened,
		       double *seconds, struct errbuf *err);

/* Waits for an opening not finished and closes what it opened. Accepts a
 * zeroed struct and one already finished. */
void device_open_cancel(struct device_open *d);

#endif
