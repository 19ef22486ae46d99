/* A fixed amount of CPU work on several threads, timed by itself: the
 * workload of the overhead part of `cargo xtask bench`.
 *
 *   fixed_work UNITS [THREADS]      every thread does UNITS work units, then
 *                                   prints "elapsed_s=S" (start to last join)
 *   fixed_work -s SECONDS [THREADS] every thread works until SECONDS pass:
 *                                   the load that keeps the CPUs busy
 *
 * THREADS defaults to 2, thread i pinned to CPU i (modulo the CPU count), so
 * that each thread has a CPU of its own and a profiler's cost shows as the
 * time it takes from the thread it interrupts.
 *
 * A work unit is a batch of records that is encoded, checksummed, sorted
 * (a recursive merge sort) and scored, about 30 µs of pure user
 * CPU with stacks 7 to 14 frames deep (about 8 on average): a realistic
 * depth for a profiler to unwind. Built with frame pointers; GCC still sets
 * up none in leaf functions that use no stack, which hides their caller,
 * as in real code built the same way. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#define RECORDS 256
#define RECORD_BYTES 48

struct batch {
	unsigned long keys[RECORDS];
	unsigned long scratch[RECORDS];
	unsigned char encoded[RECORD_BYTES];
	double weights[16];
	unsigned long random;
	unsigned long digest;
};

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long mix64(unsigned long x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdUL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53UL;
	return x ^ (x >> 33);
}

__attribute__((noinline)) unsigned long checksum_buffer(const unsigned char *bytes, int length)
{
	unsigned long hash = 0xcbf29ce484222325UL;
	for (int i = 0; i < length; i++)
		hash = (hash ^ bytes[i]) * 0x100000001b3UL;
	return mix64(hash);
}

__attribute__((noinline)) int encode_record(struct batch *batch, unsigned long key)
{
	for (int i = 0; i < RECORD_BYTES; i++)
		batch->encoded[i] = (unsigned char)(key >> ((i % 8) * 8)) ^ (unsigned char)i;
	return RECORD_BYTES;
}

__attribute__((noinline)) void merge_runs(unsigned long *keys, unsigned long *scratch, int low,
					  int middle, int high)
{
	int left = low, right = middle, out = low;
	while (left < middle && right < high)
		scratch[out++] = keys[left] <= keys[right] ? keys[left++] : keys[right++];
	while (left < middle)
		scratch[out++] = keys[left++];
	while (right < high)
		scratch[out++] = keys[right++];
	memcpy(keys + low, scratch + low, (size_t)(high - low) * sizeof(*keys));
}

__attribute__((noinline)) void sort_records(unsigned long *keys, unsigned long *scratch, int low,
					    int high)
{
	if (high - low < 2)
		return;
	int middle = low + (high - low) / 2;
	sort_records(keys, scratch, low, middle);
	sort_records(keys, scratch, middle, high);
	merge_runs(keys, scratch, low, middle, high);
}

__attribute__((noinline)) double dot_product(const double *weights, unsigned long key)
{
	double sum = 0;
	for (int i = 0; i < 16; i++)
		sum += weights[i] * (double)((key >> (i * 4)) & 0xf);
	return sum;
}

__attribute__((noinline)) double score_records(struct batch *batch)
{
	double total = 0;
	for (int i = 0; i < RECORDS; i++)
		total += dot_product(batch->weights, batch->keys[i]);
	return total;
}

__attribute__((noinline)) void ingest_records(struct batch *batch)
{
	for (int i = 0; i < RECORDS; i++) {
		unsigned long key = next_random(&batch->random);
		int length = encode_record(batch, key);
		batch->keys[i] = key ^ checksum_buffer(batch->encoded, length);
	}
}

__attribute__((noinline)) void process_batch(struct batch *batch)
{
	unsigned long digest = batch->digest;
	ingest_records(batch);
	sort_records(batch->keys, batch->scratch, 0, RECORDS);
	digest ^= (unsigned long)score_records(batch);
	batch->digest = mix64(digest ^ batch->keys[RECORDS / 2]);
}

/* Two layers of request plumbing above the work, as a server has. */
__attribute__((noinline)) void handle_request(struct batch *batch)
{
	process_batch(batch);
	sink += batch->digest & 1;
}

__attribute__((noinline)) void serve_requests(struct batch *batch, unsigned long count)
{
	for (unsigned long i = 0; i < count; i++)
		handle_request(batch);
}

struct worker {
	pthread_t thread;
	int cpu;
	unsigned long units;   /* fixed-work mode: how many units */
	double end;            /* timed mode: when to stop */
	pthread_barrier_t *start;
};

__attribute__((noinline)) void run_units(struct worker *worker, struct batch *batch)
{
	if (worker->units) {
		serve_requests(batch, worker->units);
		return;
	}
	while (now_monotonic() < worker->end)
		serve_requests(batch, 20);
}

static void *worker_main(void *arg)
{
	struct worker *worker = arg;
	struct batch batch = { .random = 0x9e3779b97f4a7c15UL + (unsigned long)worker->cpu };
	cpu_set_t cpus;

	for (int i = 0; i < 16; i++)
		batch.weights[i] = 0.5 + i * 0.25;
	CPU_ZERO(&cpus);
	CPU_SET(worker->cpu, &cpus);
	/* Pinning may be refused (a cpuset); the work is the same without it. */
	pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	pthread_barrier_wait(worker->start);
	run_units(worker, &batch);
	sink += batch.digest;
	return NULL;
}

int main(int argc, char **argv)
{
	int timed = argc > 1 && strcmp(argv[1], "-s") == 0;
	int first = timed ? 2 : 1;
	if (argc <= first) {
		fprintf(stderr, "usage: fixed_work UNITS [THREADS] | fixed_work -s SECONDS [THREADS]\n");
		return 2;
	}
	double amount = arg_number(argc, argv, first, 1);
	int threads = (int)arg_number(argc, argv, first + 1, 2);
	long cpu_count = sysconf(_SC_NPROCESSORS_ONLN);
	struct worker workers[64];
	pthread_barrier_t start;

	if (threads > 64)
		threads = 64;
	/* The main thread joins the barrier too, so the clock starts only
	 * once every worker exists and is pinned. */
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	double end = now_monotonic() + amount;
	for (int i = 0; i < threads; i++) {
		workers[i] = (struct worker){
			.cpu = (int)(i % (cpu_count > 0 ? cpu_count : 1)),
			.units = timed ? 0 : (unsigned long)amount,
			.end = end,
			.start = &start,
		};
		pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
	}
	pthread_barrier_wait(&start);
	double started = now_monotonic();
	say_ready();
	for (int i = 0; i < threads; i++)
		pthread_join(workers[i].thread, NULL);
	printf("elapsed_s=%.6f\n", now_monotonic() - started);
	return 0;
}
