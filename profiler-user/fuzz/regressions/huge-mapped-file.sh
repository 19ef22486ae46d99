#!/bin/sh
# Reproducer: stoke reads a mapped file whole before compiling its unwind
# table (unwind/debug_file.rs, read_and_compile: std::fs::read), whatever
# its size. Any process can map a page of a sparse file of any size with
# PROT_EXEC; stoke then holds all of it in memory. Measured on 2026-11-23:
# a 2 GiB file took stoke to 2.1 GB RSS and 13.8 s.
# Usage: huge-mapped-file.sh path/to/stoke [SIZE]
set -eu
stoke=$1
size=${2:-2G}
file=$(mktemp /tmp/stoke-huge-XXXXXX)
trap 'rm -f "$file"' EXIT
truncate -s "$size" "$file"
# An ELF header, so that nothing refuses the file before reading it.
head -c 64 /usr/bin/true | dd of="$file" conv=notrunc 2>/dev/null
/usr/bin/time -f "stoke: max RSS %M kB, %e s" "$stoke" tables "$file"
