/*
 * kvwear-dw: replay a kvwear plan on an NVMe namespace with NVMe passthrough, putting each
 * write's placement handle in the command's directive fields (Flexible Data Placement).
 *
 *   kvwear-dw [-m MAX_IO_BYTES] DEVICE PLAN     replay PLAN on DEVICE (a namespace's block device, /dev/nvme0n1)
 *   kvwear-dw -n [-b LBA_BYTES] [-m ...] PLAN   dry run: check PLAN and count, issue nothing
 *
 * Built statically by scripts/build-guest.sh into the kvwear guest's initramfs as /bin/kvwear-dw;
 * the guest's /init (emulator/guest_init.sh) runs it when the job holds /job/dw.plan. Why our own
 * tool: Debian 12's fio 3.33 cannot set the directive fields (fio's FDP support came in 3.34 and
 * needs io_uring_cmd), and nvme-cli issues one command per process.
 *
 * PLAN (little-endian, written by harness.devices.directive_plan; version 1):
 *   header, 32 bytes: magic "KVWDPLAN", u32 version = 1, u32 record bytes = 32, u64 records,
 *                     u32 flags (bit 0: timed: record i starts t_s[i] - t_s[0] seconds after the
 *                     first), u32 reserved = 0
 *   record, 32 bytes: f64 t_s, u64 offset_bytes, u64 length_bytes, u16 placement handle,
 *                     u8 op (0 write, 1 read, 2 trim), u8 flags (bit 0: the write carries the
 *                     handle as a data placement directive), u32 reserved = 0
 *
 * A write with the directive flag is an NVMe Write (opcode 01h) with Directive Type = 2 (data
 * placement) in CDW12 bits 23:20 and the placement identifier in Directive Specific, CDW13 bits
 * 31:16. With one reclaim group the placement identifier is the placement handle itself (the
 * reclaim group field of the identifier is zero bits wide). Without the flag a write is plain.
 * A read is Read (02h) into a scratch buffer; a trim is Dataset Management (09h) with the
 * Deallocate attribute, one range per command. Commands are synchronous (queue depth 1, as the
 * qemu backend's fio runs) and at most MAX_IO_BYTES long (default: the queue's max_hw_sectors_kb
 * and max_segments pages, capped at 1 MiB): a longer plan row becomes several commands, counted in
 * *_cmds.
 *
 * Output, on stdout, one JSON object: bytes and commands issued per op and, per placement handle,
 * write bytes and commands (every handle from 0 to the largest the plan names). Every byte counted
 * is a byte of a command the device completed with status 0. On the first error the tool prints
 * one line naming the plan and record (1-based) to stderr and exits 1 without a report: a run is
 * complete or it is not. The tool never writes outside the namespace (each row is checked against
 * its size before any I/O) and never reads or writes anything but DEVICE and PLAN.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <linux/fs.h>
#include <linux/nvme_ioctl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PLAN_VERSION 1
#define HEADER_BYTES 32
#define RECORD_BYTES 32
#define MAX_HANDLES 65536
#define OP_WRITE 0
#define OP_READ 1
#define OP_TRIM 2
#define NVME_CMD_WRITE 0x01
#define NVME_CMD_READ 0x02
#define NVME_CMD_DSM 0x09
#define DTYPE_DATA_PLACEMENT 2u
#define DSM_ATTR_DEALLOCATE (1u << 2)
#define DEFAULT_MAX_IO (1u << 20)
#define TRIM_CHUNK_LBAS 0x400000u   /* 2 GiB of 512-byte blocks per Deallocate range */

struct record {
	double t_s;
	uint64_t offset;
	uint64_t length;
	uint16_t handle;
	uint8_t op;
	uint8_t flags;
};

static const char *plan_path = "";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "kvwear-dw: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static unsigned char *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0)
		die("%s: %s", path, strerror(errno));
	unsigned char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		die("%s: out of memory for %lld bytes", path, (long long)st.st_size);
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n <= 0)
			die("%s: read failed after %zu bytes: %s", path, got, n ? strerror(errno) : "end of file");
		got += (size_t)n;
	}
	close(fd);
	*len = got;
	return buf;
}

/* Parse and check the whole plan before any I/O: a bad row fails the run before it starts. */
static struct record *parse_plan(const unsigned char *buf, size_t len, uint64_t *count, int *timed,
				 uint32_t lba_bytes, uint64_t ns_bytes)
{
	if (len < HEADER_BYTES || memcmp(buf, "KVWDPLAN", 8) != 0)
		die("%s: not a kvwear-dw plan (no KVWDPLAN header)", plan_path);
	uint32_t version = le32(buf + 8), rec_bytes = le32(buf + 12);
	if (version != PLAN_VERSION)
		die("%s: plan version %u, this kvwear-dw reads version %d (rebuild the guest)", plan_path,
		    version, PLAN_VERSION);
	if (rec_bytes != RECORD_BYTES)
		die("%s: header: record bytes %u, expected %d", plan_path, rec_bytes, RECORD_BYTES);
	uint64_t n = le64(buf + 16);
	if (n > (len - HEADER_BYTES) / RECORD_BYTES || len != HEADER_BYTES + n * RECORD_BYTES)
		die("%s: header says %" PRIu64 " records, the file holds %zu bytes of records", plan_path, n,
		    len - HEADER_BYTES);
	*timed = (int)(le32(buf + 24) & 1u);
	struct record *recs = calloc(n ? n : 1, sizeof(*recs));
	if (!recs)
		die("%s: out of memory for %" PRIu64 " records", plan_path, n);
	for (uint64_t i = 0; i < n; i++) {
		const unsigned char *p = buf + HEADER_BYTES + i * RECORD_BYTES;
		struct record *r = &recs[i];
		memcpy(&r->t_s, p, 8);   /* x86-64 and the plan are both little-endian */
		r->offset = le64(p + 8);
		r->length = le64(p + 16);
		r->handle = (uint16_t)(p[24] | p[25] << 8);
		r->op = p[26];
		r->flags = p[27];
		if (r->op > OP_TRIM)
			die("%s: record %" PRIu64 ": op %u (0 write, 1 read, 2 trim)", plan_path, i + 1, r->op);
		if (r->flags & ~1u)
			die("%s: record %" PRIu64 ": unknown flags 0x%x", plan_path, i + 1, r->flags);
		if (r->length == 0 || r->offset % lba_bytes || r->length % lba_bytes)
			die("%s: record %" PRIu64 ": offset %" PRIu64 " length %" PRIu64
			    " not a positive multiple of the %u-byte logical block", plan_path, i + 1, r->offset,
			    r->length, lba_bytes);
		if (ns_bytes && (r->offset > ns_bytes || r->length > ns_bytes - r->offset))
			die("%s: record %" PRIu64 ": bytes %" PRIu64 "..%" PRIu64
			    " beyond the namespace's %" PRIu64 " bytes", plan_path, i + 1, r->offset,
			    r->offset + r->length, ns_bytes);
		if ((r->flags & 1u) && r->op != OP_WRITE)
			die("%s: record %" PRIu64 ": a placement directive on a non-write", plan_path, i + 1);
	}
	*count = n;
	return recs;
}

static unsigned queue_limit(const char *base, const char *name)
{
	char path[256];
	snprintf(path, sizeof(path), "/sys/class/block/%s/queue/%s", base, name);
	FILE *f = fopen(path, "r");
	unsigned v = 0;
	if (f) {
		if (fscanf(f, "%u", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/* The longest command the kernel maps: max_hw_sectors_kb, and max_segments pages, since a
 * passthrough buffer is mapped page by page (its pages are not contiguous) and the driver refuses
 * (EINVAL) a command with more segments than the queue takes, where the block layer would have
 * split a normal I/O. The guest's Linux 6.1 NVMe queue takes 127 segments (508 KiB of 4 KiB
 * pages), so a controller with a larger MDTS (FEMU's 10: 4 MiB) failed at 1 MiB without this cap. */
static uint32_t queue_max_io(const char *dev)
{
	const char *base = strrchr(dev, '/');
	base = base ? base + 1 : dev;
	uint64_t max = DEFAULT_MAX_IO;
	unsigned kb = queue_limit(base, "max_hw_sectors_kb");
	if (kb && (uint64_t)kb * 1024u < max)
		max = (uint64_t)kb * 1024u;
	unsigned segs = queue_limit(base, "max_segments");
	long page = sysconf(_SC_PAGESIZE);
	unsigned seg_bytes = queue_limit(base, "max_segment_size");
	uint64_t per_seg = page > 0 ? (uint64_t)page : 4096u;
	if (seg_bytes && seg_bytes < per_seg)
		per_seg = seg_bytes;
	if (segs && (uint64_t)segs * per_seg < max)
		max = (uint64_t)segs * per_seg;
	return (uint32_t)max;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void submit(int fd, struct nvme_passthru_cmd *cmd, uint64_t rec)
{
	int rc = ioctl(fd, NVME_IOCTL_IO_CMD, cmd);
	if (rc < 0)
		die("%s: record %" PRIu64 ": opcode 0x%02x ioctl failed: %s", plan_path, rec, cmd->opcode,
		    strerror(errno));
	if (rc > 0)
		die("%s: record %" PRIu64 ": opcode 0x%02x NVMe status 0x%x (cdw12 0x%x cdw13 0x%x)", plan_path,
		    rec, cmd->opcode, (unsigned)rc, cmd->cdw12, cmd->cdw13);
}

int main(int argc, char **argv)
{
	int dry = 0, opt;
	uint32_t lba_bytes = 512, max_io = 0;
	while ((opt = getopt(argc, argv, "nb:m:")) != -1) {
		switch (opt) {
		case 'n': dry = 1; break;
		case 'b': lba_bytes = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'm': max_io = (uint32_t)strtoul(optarg, NULL, 10); break;
		default: die("usage: kvwear-dw [-m MAX_IO_BYTES] DEVICE PLAN | kvwear-dw -n [-b LBA_BYTES] PLAN");
		}
	}
	if (argc - optind != (dry ? 1 : 2))
		die("usage: kvwear-dw [-m MAX_IO_BYTES] DEVICE PLAN | kvwear-dw -n [-b LBA_BYTES] PLAN");
	const char *dev = dry ? "" : argv[optind];
	plan_path = argv[argc - 1];

	int fd = -1;
	uint32_t nsid = 0;
	uint64_t ns_bytes = 0;
	if (!dry) {
		fd = open(dev, O_RDWR);
		if (fd < 0)
			die("%s: %s", dev, strerror(errno));
		int id = ioctl(fd, NVME_IOCTL_ID);
		if (id <= 0)
			die("%s: not an NVMe namespace (NVME_IOCTL_ID: %s)", dev, strerror(errno));
		nsid = (uint32_t)id;
		int ssz = 0;
		/* the block device answers BLKSSZGET/BLKGETSIZE64 (the char device /dev/ngXnY does not) */
		if (ioctl(fd, BLKSSZGET, &ssz) != 0 || ioctl(fd, BLKGETSIZE64, &ns_bytes) != 0)
			die("%s: cannot read the logical block size and namespace size (give /dev/nvmeXnY): %s", dev,
			    strerror(errno));
		lba_bytes = (uint32_t)ssz;
		if (!max_io)
			max_io = queue_max_io(dev);
	}
	if (!max_io)
		max_io = DEFAULT_MAX_IO;
	if (lba_bytes == 0 || (lba_bytes & (lba_bytes - 1)) || max_io < lba_bytes || max_io % lba_bytes)
		die("logical block %u bytes / max I/O %u bytes: need a power of two and a multiple of it",
		    lba_bytes, max_io);

	size_t len;
	unsigned char *raw = read_file(plan_path, &len);
	uint64_t n;
	int timed;
	struct record *recs = parse_plan(raw, len, &n, &timed, lba_bytes, ns_bytes);
	free(raw);

	uint64_t *hbytes = calloc(MAX_HANDLES, sizeof(uint64_t)), *hcmds = calloc(MAX_HANDLES, sizeof(uint64_t));
	void *buf = NULL;
	if (!hbytes || !hcmds || posix_memalign(&buf, 4096, max_io) != 0)
		die("out of memory for a %u-byte I/O buffer", max_io);
	/* non-zero, incompressible-looking data (xorshift), as fio writes by default */
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (uint32_t i = 0; i < max_io / 8; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		((uint64_t *)buf)[i] = x;
	}
	uint64_t bytes[3] = {0, 0, 0}, cmds[3] = {0, 0, 0}, directive_writes = 0;
	int max_handle = 0;
	uint32_t range[4];
	double t0 = now_s();
	for (uint64_t i = 0; i < n; i++) {
		const struct record *r = &recs[i];
		if (timed) {
			double wait = t0 + (r->t_s - recs[0].t_s) - now_s();
			if (wait > 0) {
				struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
				nanosleep(&ts, NULL);
			}
		}
		uint64_t off = r->offset, left = r->length;
		while (left) {
			uint64_t chunk_max = r->op == OP_TRIM ? (uint64_t)TRIM_CHUNK_LBAS * lba_bytes : max_io;
			uint64_t chunk = left < chunk_max ? left : chunk_max;
			uint64_t slba = off / lba_bytes;
			uint32_t nlb = (uint32_t)(chunk / lba_bytes);
			struct nvme_passthru_cmd cmd;
			memset(&cmd, 0, sizeof(cmd));
			cmd.nsid = nsid;
			if (r->op == OP_TRIM) {
				range[0] = 0;                        /* context attributes */
				range[1] = nlb;                      /* length in logical blocks (not 0's based) */
				range[2] = (uint32_t)slba;
				range[3] = (uint32_t)(slba >> 32);
				cmd.opcode = NVME_CMD_DSM;
				cmd.addr = (uint64_t)(uintptr_t)range;
				cmd.data_len = sizeof(range);
				cmd.cdw10 = 0;                       /* one range (0's based) */
				cmd.cdw11 = DSM_ATTR_DEALLOCATE;
			} else {
				cmd.opcode = r->op == OP_WRITE ? NVME_CMD_WRITE : NVME_CMD_READ;
				cmd.addr = (uint64_t)(uintptr_t)buf;
				cmd.data_len = (uint32_t)chunk;
				cmd.cdw10 = (uint32_t)slba;
				cmd.cdw11 = (uint32_t)(slba >> 32);
				cmd.cdw12 = nlb - 1;                 /* 0's based block count, bits 15:00 */
				if (r->flags & 1u) {
					cmd.cdw12 |= DTYPE_DATA_PLACEMENT << 20;
					cmd.cdw13 = (uint32_t)r->handle << 16;
				}
			}
			if (!dry)
				submit(fd, &cmd, i + 1);
			bytes[r->op] += chunk;
			cmds[r->op] += 1;
			if (r->op == OP_WRITE) {
				hbytes[r->handle] += chunk;
				hcmds[r->handle] += 1;
				directive_writes += (r->flags & 1u) ? 1 : 0;
			}
			off += chunk;
			left -= chunk;
		}
		if (r->op == OP_WRITE && r->handle > max_handle)
			max_handle = r->handle;
	}
	double elapsed = now_s() - t0;
	if (fd >= 0 && close(fd) != 0)
		die("%s: close: %s", dev, strerror(errno));

	printf("{\"tool\": \"kvwear-dw\", \"plan_version\": %d, \"dry_run\": %s, \"device\": \"%s\", "
	       "\"nsid\": %u, \"lba_bytes\": %u, \"max_io_bytes\": %u, \"records\": %" PRIu64 ", \"timed\": %s,\n",
	       PLAN_VERSION, dry ? "true" : "false", dev, nsid, lba_bytes, max_io, n, timed ? "true" : "false");
	printf(" \"write_bytes\": %" PRIu64 ", \"write_cmds\": %" PRIu64 ", \"read_bytes\": %" PRIu64
	       ", \"read_cmds\": %" PRIu64 ", \"trim_bytes\": %" PRIu64 ", \"trim_cmds\": %" PRIu64
	       ", \"directive_writes\": %" PRIu64 ", \"elapsed_s\": %.6f,\n",
	       bytes[OP_WRITE], cmds[OP_WRITE], bytes[OP_READ], cmds[OP_READ], bytes[OP_TRIM], cmds[OP_TRIM],
	       directive_writes, elapsed);
	printf(" \"write_bytes_by_handle\": [");
	for (int h = 0; h <= max_handle; h++)
		printf("%s%" PRIu64, h ? ", " : "", hbytes[h]);
	printf("], \"write_cmds_by_handle\": [");
	for (int h = 0; h <= max_handle; h++)
		printf("%s%" PRIu64, h ? ", " : "", hcmds[h]);
	printf("]}\n");
	if (fflush(stdout) != 0 || ferror(stdout))
		die("writing the report failed: %s", strerror(errno));
	return 0;
}
