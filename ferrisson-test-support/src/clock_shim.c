/*
 * Preloaded into a test's redis-server (LD_PRELOAD): its wall clock runs
 * ahead of the machine's by the ms written in the file the environment
 * variable FERRISSON_CLOCK_OFFSET_FILE names (none, empty or unreadable:
 * no offset), read at every call, so that a test steps the server's clock
 * as NTP or an operator would. The monotonic clocks are left alone.
 *
 * Only system calls and getenv here: no allocation, so nothing recurses
 * while the allocator starts up (what makes libfaketime fail in Redis).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms(void) {
    const char *path = getenv("FERRISSON_CLOCK_OFFSET_FILE");
    if (path == NULL) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    return strtoll(buf, NULL, 10);
}

static int realtime(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && realtime(id)) {
        long long ns = (long long)ts->tv_nsec + (offset_ms() % 1000) * 1000000LL;
        long long secs = (long long)ts->tv_sec + offset_ms() / 1000;
        while (ns >= 1000000000LL) { ns -= 1000000000LL; secs += 1; }
        while (ns < 0) { ns += 1000000000LL; secs -= 1; }
        ts->tv_sec = (time_t)secs;
        ts->tv_nsec = (long)ns;
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
