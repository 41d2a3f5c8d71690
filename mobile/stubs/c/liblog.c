/*
 * Stand-in for Android's liblog: __android_log_print writes to stderr.
 * Linked statically into libgojni.so so that nothing extra has to be found
 * at run time.
 */
#include <stdarg.h>
#include <stdio.h>

#include "android/log.h"

int __android_log_print(int prio, const char *tag, const char *fmt, ...) {
	static const char letters[] = "??VDIWEFS";
	char letter = (prio >= 0 && prio < (int)sizeof letters - 1) ? letters[prio] : '?';
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%c/%s: ", letter, tag);
	int n = vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return n;
}
