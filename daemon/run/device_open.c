/* SPDX-License-Identifier: MIT */
/*
 * device_open: the devices opened beside the input loading (see
 * device_open.h).
 */
#include "run/device_open.h"

#include <string.h>

#include "base/timing.h"

static void open_now(struct device_open *d)
{
	double t0 = timing_now();

	d->r = gpu_open_devices(&d->opts, d->choices, d->n_choices, d->gpus, &d->opened, &d->err);
	d->seconds = timing_now() - t0;
}

static void *opener(void *arg)
{
	open_now(arg);
	return NULL;
}

void device_open_start(struct device_open *d, const struct gpu_options *opts,
		       const struct gpu_device_choice *choices, size_t n)
{
	memset(d, 0, sizeof(*d));
	d->opts = *opts;
	memcpy(d->choices, choices, n * sizeof(choices[0]));
	d->n_choices = n;
	d->started = pthread_create(&d->thread, NULL, opener, d) == 0;
}

static void join(struct device_open *d)
{
	if (d->started)
		pthread_join(d->thread, NULL);
	d->started = false;
}

int device_open_finish(struct device_open *d, struct gpu_ctx **gpus, size_t *opened,
		       double *seconds, struct errbuf *err)
{
	if (d->started)
		join(d);
	else
		open_now(d);
	memcpy(gpus, d->gpus, d->opened * sizeof(gpus[0]));
	*opened = d->opened;
	*seconds = d->seconds;
	d->handed_over = true;
	if (d->r < 0 && err)
		*err = d->err;
	return d->r;
}

void device_open_cancel(struct device_open *d)
{
	join(d);
	if (d->handed_over)
		return;
	for (size_t i = 0; i < d->opened; i++)
		gpu_close(d->gpus[i]);
	d->opened = 0;
	d->handed_over = true;
}
