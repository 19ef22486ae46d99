/* The code a process runs from a file it named to break profile formats:
 * built as a stripped shared library whose spinning function has no
 * symbol, so that its frames carry the file's name. */
static volatile unsigned long sink;

static void spin(unsigned long iterations)
{
	volatile unsigned long acc = sink;
	for (unsigned long i = 0; i < iterations; i++)
		acc = acc * 6364136223846793005UL + 1;
	sink = acc;
}

void (*spinner(void))(unsigned long)
{
	return spin;
}
