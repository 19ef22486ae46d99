/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Names kernel addresses with the kernel's own symbol lookup: userspace
 * writes addresses into kernel_addresses, runs name_kernel_addresses once
 * (BPF_PROG_TEST_RUN, never attached) with how many there are, and reads
 * one name per address from kernel_names. Included at the end of
 * sampler.bpf.c: one object, whose loading parses the kernel's BTF once
 * (aya parses it for every object loaded). The program is loaded apart
 * from the sampling ones: a kernel without bpf_snprintf (before 5.13) or
 * bpf_loop (5.17) still samples, and names from kallsyms.
 *
 * Why not /proc/kallsyms: the kernel formats its 120k+ lines for every
 * reader (~45 ms of CPU here) and parsing them takes ~15 ms more, for the
 * few hundred addresses a recording holds; %ps of bpf_snprintf is the
 * kernel's binary search of its own table, a microsecond per address.
 * Module functions come as "name [module]".
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STOKE_KERNEL_NAMES_BATCH);
	__type(key, __u32);
	__type(value, __u64);
} kernel_addresses SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STOKE_KERNEL_NAMES_BATCH);
	__type(key, __u32);
	__type(value, char[STOKE_KERNEL_NAME_LEN]);
} kernel_names SEC(".maps");

static const char symbol_format[] = "%ps";

static long name_one(__u32 index, void *context)
{
	__u64 *address = bpf_map_lookup_elem(&kernel_addresses, &index);
	char *name = bpf_map_lookup_elem(&kernel_names, &index);

	if (!address || !name)
		return 1;
	bpf_snprintf(name, STOKE_KERNEL_NAME_LEN, symbol_format, address, sizeof(*address));
	return 0;
}

/* The first argument is how many addresses were written. */
SEC("raw_tracepoint")
int name_kernel_addresses(__u64 *args)
{
	__u64 count = args[0];

	if (count > STOKE_KERNEL_NAMES_BATCH)
		count = STOKE_KERNEL_NAMES_BATCH;
	bpf_loop(count, name_one, NULL, 0);
	return 0;
}
