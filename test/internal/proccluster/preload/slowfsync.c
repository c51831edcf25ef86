/*
 * slowfsync: an LD_PRELOAD library that makes fsync and fdatasync take
 * longer, for the safety suite's slow-pg-fsync fault (proccluster's
 * SlowPGSync). The delay, in microseconds, is read from the file
 * ORDO_FAULT_FSYNC_DELAY_FILE names, at most every 100 ms; no file, or
 * 0, means no delay. PostgreSQL forks its backends from the postmaster,
 * so they all carry it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long delay_us(void)
{
	static long long checked_ms = -1000;
	static long cached;
	const char *path = getenv("ORDO_FAULT_FSYNC_DELAY_FILE");
	struct timespec now;
	long long ms;

	if (path == NULL)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long long) now.tv_sec * 1000 + now.tv_nsec / 1000000;
	if (ms - checked_ms >= 100) {
		FILE *f = fopen(path, "r");
		long v = 0;

		checked_ms = ms;
		if (f != NULL) {
			if (fscanf(f, "%ld", &v) != 1)
				v = 0;
			fclose(f);
		}
		cached = v;
	}
	return cached;
}

static void slow(void)
{
	long us = delay_us();

	if (us > 0)
		usleep((useconds_t) us);
}

int fsync(int fd)
{
	static int (*real)(int);

	if (real == NULL)
		real = (int (*)(int)) dlsym(RTLD_NEXT, "fsync");
	slow();
	return real(fd);
}

int fdatasync(int fd)
{
	static int (*real)(int);

	if (real == NULL)
		real = (int (*)(int)) dlsym(RTLD_NEXT, "fdatasync");
	slow();
	return real(fd);
}
