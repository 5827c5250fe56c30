/*
 * fuse_floor: the latency floor of a FUSE mount, for benches/fuse-floor.sh.
 *
 *   fuse_floor xattr PATH N   read a missing extended attribute of PATH N
 *                             times: one GETXATTR round trip each (the
 *                             kernel caches no extended attribute)
 *   fuse_floor stat PATH N    stat a missing PATH N times (a round trip
 *                             each unless the kernel keeps the name as
 *                             missing)
 *   fuse_floor create DIR N   create N empty files in DIR (O_CREAT|O_EXCL,
 *                             then close), as the peer harness's dirscale
 *   fuse_floor walk DIR       nftw(FTW_PHYS) over DIR, one lstat per entry
 *
 * Prints one line of JSON: the operation, the count and microseconds per
 * operation.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static long walked;

static int count(const char *p, const struct stat *s, int f, struct FTW *w)
{
	(void)p; (void)s; (void)f; (void)w;
	walked++;
	return 0;
}

static void report(const char *op, long n, double secs)
{
	printf("{\"op\":\"%s\",\"n\":%ld,\"us_per_op\":%.3f}\n", op, n,
	       n ? secs * 1e6 / n : 0.0);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "xattr") == 0) {
		long n = atol(argv[3]);
		char v[64];
		double t0 = now();
		for (long i = 0; i < n; i++)
			if (getxattr(argv[2], "user.fuse_floor", v, sizeof v) >= 0 ||
			    errno != ENODATA) {
				fprintf(stderr, "getxattr %s: %s\n", argv[2],
					strerror(errno));
				return 1;
			}
		report("getxattr-missing", n, now() - t0);
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "stat") == 0) {
		long n = atol(argv[3]);
		struct stat st;
		double t0 = now();
		for (long i = 0; i < n; i++)
			if (stat(argv[2], &st) == 0) {
				fprintf(stderr, "%s exists\n", argv[2]);
				return 1;
			}
		report("stat-missing", n, now() - t0);
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "create") == 0) {
		long n = atol(argv[3]);
		char name[4096];
		if (mkdir(argv[2], 0755) != 0 && errno != EEXIST) {
			perror("mkdir");
			return 1;
		}
		double t0 = now();
		for (long i = 0; i < n; i++) {
			snprintf(name, sizeof name, "%s/f%08ld", argv[2], i);
			int fd = open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
			if (fd < 0) {
				fprintf(stderr, "open %s: %s\n", name, strerror(errno));
				return 1;
			}
			close(fd);
		}
		report("create", n, now() - t0);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "walk") == 0) {
		double t0 = now();
		if (nftw(argv[2], count, 64, FTW_PHYS) != 0) {
			perror("nftw");
			return 1;
		}
		report("walk", walked, now() - t0);
		return 0;
	}
	fprintf(stderr, "usage: fuse_floor xattr PATH N | stat PATH N | create DIR N | walk DIR\n");
	return 2;
}
