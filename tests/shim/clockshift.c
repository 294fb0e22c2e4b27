/*
 * clockshift: an LD_PRELOAD shim that shifts a process's wall clock.
 *
 * The offset, in whole milliseconds (optionally signed, e.g. "-2500"), is read from the
 * file named by the environment variable CLOCKSHIFT_FILE, and re-read at most every
 * 100 ms, so a test can move the clock of a running server by rewriting the file (write a
 * temporary file and rename it over, so a reader never sees a half-written one). A
 * missing, empty or malformed file keeps the last offset read (0 until one is read).
 *
 * Shifted: clock_gettime(CLOCK_REALTIME / CLOCK_REALTIME_COARSE), gettimeofday(), time().
 * Every other clock (MONOTONIC, BOOTTIME, CPU clocks, ...) passes through untouched.
 *
 * Deliberately minimal, because it runs inside the allocator and before main():
 *  - the real clocks are read with raw syscalls, never through dlsym(RTLD_NEXT) (which
 *    may allocate, and recurses if the allocator itself reads a clock);
 *  - the file is read with open/read/close syscalls into a stack buffer: no malloc, no
 *    stdio, no locks; errno is preserved;
 *  - shared state is two 64-bit integers updated with atomics, so any thread may call in.
 *
 * Build: cc -shared -fPIC -O2 -o clockshift.so clockshift.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_SEC 1000000000LL
#define NS_PER_MS 1000000LL
#define REFRESH_NS (100 * NS_PER_MS)
#define MAX_OFFSET_DIGITS 12 /* up to ~31 years in ms: no overflow in ns */

/* The file path, copied at load time: redis-server later overwrites its original
 * environment block with the process title, so the getenv() pointer must not be kept. */
static char offset_path[4096];
/* Current offset in nanoseconds. */
static long long offset_ns;
/* Real CLOCK_REALTIME (ns) of the last read of the file; 0 = never read. */
static long long checked_at_ns;

static int read_offset_ms(long long *out)
{
    char buf[64];
    int saved_errno = errno;
    long fd = syscall(SYS_openat, AT_FDCWD, offset_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved_errno;
        return 0;
    }
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    errno = saved_errno;
    if (n <= 0)
        return 0;
    buf[n] = '\0';

    const char *p = buf;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    int negative = 0;
    if (*p == '-' || *p == '+') {
        negative = (*p == '-');
        p++;
    }
    long long ms = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > MAX_OFFSET_DIGITS)
            return 0;
        ms = ms * 10 + (*p - '0');
        p++;
    }
    if (digits == 0)
        return 0;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p != '\0')
        return 0;
    *out = negative ? -ms : ms;
    return 1;
}

static void reload(void)
{
    long long ms;
    if (read_offset_ms(&ms))
        __atomic_store_n(&offset_ns, ms * NS_PER_MS, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void clockshift_init(void)
{
    const char *path = getenv("CLOCKSHIFT_FILE");
    if (path == NULL)
        return;
    size_t i = 0;
    for (; path[i] != '\0' && i + 1 < sizeof offset_path; i++)
        offset_path[i] = path[i];
    if (path[i] != '\0') {
        offset_path[0] = '\0'; /* too long: no shift rather than a truncated path */
        return;
    }
    offset_path[i] = '\0';
    reload();
}

/* The offset to apply at real wall-clock time `now_ns`, re-reading the file when due. */
static long long current_offset(long long now_ns)
{
    if (offset_path[0] == '\0')
        return 0;
    long long last = __atomic_load_n(&checked_at_ns, __ATOMIC_RELAXED);
    if (last == 0 || now_ns - last >= REFRESH_NS || now_ns < last) {
        /* One thread re-reads; the others keep using the current offset meanwhile. */
        if (__atomic_compare_exchange_n(&checked_at_ns, &last, now_ns, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            reload();
    }
    return __atomic_load_n(&offset_ns, __ATOMIC_ACQUIRE);
}

static void shift(struct timespec *ts)
{
    long long now = (long long)ts->tv_sec * NS_PER_SEC + ts->tv_nsec;
    long long shifted = now + current_offset(now);
    long long sec = shifted / NS_PER_SEC;
    long long nsec = shifted % NS_PER_SEC;
    if (nsec < 0) {
        nsec += NS_PER_SEC;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)nsec;
}

static int real_clock_gettime(clockid_t id, struct timespec *ts)
{
    /* syscall() returns -1 and sets errno on failure, like clock_gettime. */
    return (int)syscall(SYS_clock_gettime, id, ts);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (real_clock_gettime(id, ts) != 0)
        return -1;
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)
        shift(ts);
    return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    struct timespec ts;
    if (real_clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    if (tz != NULL)
        return (int)syscall(SYS_gettimeofday, NULL, tz);
    return 0;
}

time_t time(time_t *out)
{
    struct timespec ts;
    if (real_clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    shift(&ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
