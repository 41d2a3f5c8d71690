/*
 * Stand-in for the Android NDK's <android/log.h>, for building gobind's
 * Android glue on a desktop JVM. Only what the glue uses: two priorities and
 * __android_log_print, implemented in liblog.c (built as the -llog the glue
 * links against).
 */
#ifndef MONOLOCK_STUB_ANDROID_LOG_H
#define MONOLOCK_STUB_ANDROID_LOG_H

typedef enum android_LogPriority {
	ANDROID_LOG_UNKNOWN = 0,
	ANDROID_LOG_DEFAULT,
	ANDROID_LOG_VERBOSE,
	ANDROID_LOG_DEBUG,
	ANDROID_LOG_INFO,
	ANDROID_LOG_WARN,
	ANDROID_LOG_ERROR,
	ANDROID_LOG_FATAL,
	ANDROID_LOG_SILENT,
} android_LogPriority;

int __android_log_print(int prio, const char *tag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
