/*
 * kvwear-fs: play a kvwear file plan (the fs layout's file_ops) in a directory of a mounted file
 * system, as kvwear's Python file player does on the host (harness/devices/fs_player.py).
 *
 *   kvwear-fs DIR PLAN      play PLAN in DIR (the store's directory), print the counts as JSON
 *
 * Built statically by scripts/build-guest.sh into the kvwear guest's initramfs as /bin/kvwear-fs;
 * the guest's /init (emulator/guest_init.sh) makes the file system, mounts it, runs this tool when
 * the job holds /job/fs.plan, and unmounts. Why our own tool: fio cannot unlink a file, and the
 * guest has no Python.
 *
 * PLAN (text, written by harness/devices/guest_files.py; version 1):
 *   first line:  kvwear-fs-plan 1 WRITE_BYTES FSYNC FSTRIM_INTERVAL_S ROWS
 *                (FSYNC 0 or 1; FSTRIM_INTERVAL_S 0: never trim; ROWS: the lines that follow)
 *   each row:    T_S OP LENGTH_BYTES NAME      (OP: w write, r read, u unlink; NAME without '/')
 *
 * Rows are played in order as fast as possible (T_S only drives fstrim):
 *   w: open(O_WRONLY|O_CREAT|O_TRUNC), write() LENGTH_BYTES from one buffer of pseudo-random
 *      bytes in pieces of WRITE_BYTES (a short write continues where it stopped), fsync() when
 *      FSYNC is 1, close();
 *   r: read the whole file in pieces of WRITE_BYTES;
 *   u: stat the file's size, unlink it.
 * Before a row whose T_S has reached the next multiple of FSTRIM_INTERVAL_S, the tool trims the
 * file system's free space (the FITRIM ioctl, what fstrim(8) issues) and counts the bytes the
 * kernel says it trimmed; the next trim is then due at the first multiple after that row's T_S.
 * At the end it counts the regular files left in DIR and their bytes.
 *
 * Output, on stdout, one JSON object with the counts (file bytes written and read, write() calls,
 * files created, unlinked and their bytes, fsyncs, fstrims and their bytes, files and bytes left).
 * On the first error the tool prints one line naming the plan row (1-based), its op and file to
 * stderr and exits 1 without a report: a run is complete or it is not. It never touches anything
 * but PLAN and the files it names inside DIR.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PLAN_VERSION 1
#define MAX_NAME 255

struct tally {
	uint64_t file_write_bytes, file_read_bytes, write_calls, files_created, files_unlinked;
	uint64_t unlinked_bytes, fsyncs, fstrims, fstrim_bytes, end_files, end_file_bytes;
};

static const char *plan_path = "";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "kvwear-fs: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* One row's failure: the row, its op and file, and the system's reason. A full file system gets
 * the reason a store sized to its device can still fill it. */
static void row_error(uint64_t row, char op, const char *name, uint64_t length, const char *what, int err)
		__attribute__((noreturn));
static void row_error(uint64_t row, char op, const char *name, uint64_t length, const char *what, int err)
{
	die("%s: row %" PRIu64 " (%c %s, %" PRIu64 " bytes): %s: %s%s", plan_path, row, op, name, length, what,
	    strerror(err),
	    err == ENOSPC ? " - the file system is full: its own metadata and journal need room beside the "
			    "live objects (a larger device, or fewer live bytes)" : "");
}

/* The bytes every write() writes from: pseudo-random (splitmix64), so no layer below can shortcut
 * zeros or repeat a short pattern. */
static unsigned char *random_buffer(size_t n)
{
	unsigned char *buf = malloc(n ? n : 1);
	uint64_t s = 0x6b76;
	if (!buf)
		die("cannot allocate a %zu-byte write buffer", n);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		z ^= z >> 31;
		memcpy(buf + i, &z, n - i < 8 ? n - i : 8);
	}
	return buf;
}

static uint64_t fitrim(int dirfd)
{
	struct fstrim_range range = {.start = 0, .len = UINT64_MAX, .minlen = 0};
	if (ioctl(dirfd, FITRIM, &range) != 0)
		die("FITRIM (fstrim) on the store's file system failed: %s", strerror(errno));
	return range.len;    /* the kernel writes back the bytes it trimmed */
}

static void play_write(int dirfd, const char *name, uint64_t length, const unsigned char *buf, uint64_t piece,
		       int do_fsync, uint64_t row, struct tally *t)
{
	struct stat st;
	int existed = fstatat(dirfd, name, &st, 0) == 0;
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		row_error(row, 'w', name, length, "open", errno);
	uint64_t left = length, done = 0;
	while (left) {
		/* a short write continues where it stopped, within the same piece of the buffer */
		size_t n = (size_t)(left < piece - done % piece ? left : piece - done % piece);
		ssize_t w = write(fd, buf + done % piece, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			row_error(row, 'w', name, length, "write", errno);
		}
		left -= (uint64_t)w;
		done += (uint64_t)w;
		t->file_write_bytes += (uint64_t)w;
		t->write_calls++;
	}
	if (do_fsync) {
		if (fsync(fd) != 0)
			row_error(row, 'w', name, length, "fsync", errno);
		t->fsyncs++;
	}
	if (close(fd) != 0)
		row_error(row, 'w', name, length, "close", errno);
	t->files_created += !existed;
}

static void play_read(int dirfd, const char *name, unsigned char *scratch, uint64_t piece, uint64_t row,
		      struct tally *t)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		row_error(row, 'r', name, 0, "open", errno);
	for (;;) {
		ssize_t r = read(fd, scratch, (size_t)piece);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			row_error(row, 'r', name, 0, "read", errno);
		}
		if (r == 0)
			break;
		t->file_read_bytes += (uint64_t)r;
	}
	close(fd);
}

static void play_unlink(int dirfd, const char *name, uint64_t row, struct tally *t)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, 0) != 0)
		row_error(row, 'u', name, 0, "stat", errno);
	if (unlinkat(dirfd, name, 0) != 0)
		row_error(row, 'u', name, 0, "unlink", errno);
	t->unlinked_bytes += (uint64_t)st.st_size;
	t->files_unlinked++;
}

/* The regular files left in the store's directory and their bytes. */
static void count_left(const char *dir, struct tally *t)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d)
		die("%s: cannot list the store's directory: %s", dir, strerror(errno));
	while ((e = readdir(d)) != NULL) {
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
			t->end_files++;
			t->end_file_bytes += (uint64_t)st.st_size;
		}
	}
	closedir(d);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: kvwear-fs DIR PLAN\n");
		return 2;
	}
	const char *dir = argv[1];
	plan_path = argv[2];
	FILE *plan = fopen(plan_path, "r");
	if (!plan)
		die("%s: %s", plan_path, strerror(errno));
	int version, do_fsync;
	uint64_t piece, rows;
	double interval;
	if (fscanf(plan, "kvwear-fs-plan %d %" SCNu64 " %d %lf %" SCNu64 " ", &version, &piece, &do_fsync, &interval,
		   &rows) != 5)
		die("%s: not a kvwear-fs plan (bad first line)", plan_path);
	if (version != PLAN_VERSION)
		die("%s: plan version %d, this tool plays version %d", plan_path, version, PLAN_VERSION);
	if (piece == 0 || (do_fsync != 0 && do_fsync != 1) || !(interval >= 0))
		die("%s: bad settings (write bytes %" PRIu64 ", fsync %d, fstrim interval %g)", plan_path, piece,
		    do_fsync, interval);
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		die("%s: %s", dir, strerror(errno));
	unsigned char *buf = random_buffer((size_t)piece);
	unsigned char *scratch = malloc((size_t)piece);
	if (!scratch)
		die("cannot allocate a %" PRIu64 "-byte read buffer", piece);
	struct tally t = {0};
	double next_trim = interval;     /* 0: never */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t row = 1; row <= rows; row++) {
		double t_s;
		char op;
		uint64_t length;
		char name[MAX_NAME + 1];
		if (fscanf(plan, "%lf %c %" SCNu64 " %255s ", &t_s, &op, &length, name) != 4)
			die("%s: row %" PRIu64 " of %" PRIu64 ": expected 'T_S OP LENGTH NAME'", plan_path, row, rows);
		if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
			die("%s: row %" PRIu64 ": file name %s is not a plain name", plan_path, row, name);
		if (interval > 0 && t_s >= next_trim) {
			t.fstrim_bytes += fitrim(dirfd);
			t.fstrims++;
			next_trim = ((double)(int64_t)(t_s / interval) + 1) * interval;
		}
		switch (op) {
		case 'w':
			play_write(dirfd, name, length, buf, piece, do_fsync, row, &t);
			break;
		case 'r':
			play_read(dirfd, name, scratch, piece, row, &t);
			break;
		case 'u':
			play_unlink(dirfd, name, row, &t);
			break;
		default:
			die("%s: row %" PRIu64 ": unknown op %c", plan_path, row, op);
		}
	}
	if (fgetc(plan) != EOF)
		die("%s: more lines than the %" PRIu64 " rows its first line announces", plan_path, rows);
	fclose(plan);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	count_left(dir, &t);
	close(dirfd);
	printf("{\"tool\": \"kvwear-fs\", \"plan_version\": %d, \"rows\": %" PRIu64 ", \"file_write_bytes\": %" PRIu64
	       ", \"file_read_bytes\": %" PRIu64 ", \"write_calls\": %" PRIu64 ", \"files_created\": %" PRIu64
	       ", \"files_unlinked\": %" PRIu64 ", \"unlinked_bytes\": %" PRIu64 ", \"fsyncs\": %" PRIu64
	       ", \"fstrims\": %" PRIu64 ", \"fstrim_bytes\": %" PRIu64 ", \"end_files\": %" PRIu64
	       ", \"end_file_bytes\": %" PRIu64 ", \"elapsed_s\": %.6f}\n",
	       PLAN_VERSION, rows, t.file_write_bytes, t.file_read_bytes, t.write_calls, t.files_created,
	       t.files_unlinked, t.unlinked_bytes, t.fsyncs, t.fstrims, t.fstrim_bytes, t.end_files,
	       t.end_file_bytes, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(buf);
	free(scratch);
	return 0;
}
