/*
 * ql-launch - the qledge per-attempt launcher (contract: README.md here).
 *
 *   ql-launch --receipt-dir DIR --run-id UUID --attempt-id UUID
 *             --sequence N --token-fd FD -- command [args...]
 *
 * Own session; TERM/INT/HUP/QUIT forwarded to the process group; exits with
 * the command's status (128+N if killed by N, 127/126 if it could not run)
 * after publishing a no-overwrite receipt; 125 = launcher failure, no receipt.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* 32-bit targets (armv7): receipt times come from a time_t and must not wrap
 * in 2038; fstat/lseek on a log past 2 GiB need a 64-bit off_t. musl >= 1.2
 * has both; a glibc build gets them from the Makefile's -D_TIME_BITS=64
 * -D_FILE_OFFSET_BITS=64. Checked here, at compile time, by the very toolchain
 * that builds the binary. */
_Static_assert(sizeof(time_t) == 8, "time_t must be 64-bit (receipt times after 2038)");
_Static_assert(sizeof(off_t) == 8, "off_t must be 64-bit (files over 2 GiB)");

#ifndef QL_VERSION
#define QL_VERSION "0.0.0-dev"
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define EXIT_LAUNCHER 125     /* launcher failure, nothing spawned, no receipt */
#define EXIT_NOEXEC 126       /* command found but not executable */
#define EXIT_NOTFOUND 127     /* command not found */
#define TOKEN_READ_CAP 256    /* bytes read from --token-fd, at most */
#define TOKEN_MIN 16
#define TOKEN_MAX 128
#define RECEIPT_MAX 4096
#define UUID_LEN 36

struct options {
    const char *receipt_dir;
    const char *run_id;
    const char *attempt_id;
    const char *sequence_text;
    const char *token_fd_text;
    uint64_t sequence;
    int token_fd;
    char **command;           /* NULL-terminated, points into argv */
};

/* Static buffers: the launcher never touches the heap itself. */
static char token[TOKEN_READ_CAP + 1];
static char receipt[RECEIPT_MAX];
static char temp_name[UUID_LEN + 32];
static char final_name[UUID_LEN + 8];

static const char usage_text[] =
    "usage: ql-launch --receipt-dir DIR --run-id UUID --attempt-id UUID\n"
    "                 --sequence N --token-fd FD -- command [args...]\n"
    "       ql-launch --version\n";

/* One diagnostic line: "ql-launch: <what>: <strerror(err)>". */
static void report(const char *what, int err)
{
    fprintf(stderr, "ql-launch: %s: %s\n", what, strerror(err));
}

/* One diagnostic line for an invalid invocation; never echoes values. */
static int bad_usage(const char *what)
{
    fprintf(stderr, "ql-launch: usage: %s\n", what);
    return -1;
}

/* ---- step 1: arguments ------------------------------------------------ */

static int is_canonical_uuid(const char *s)
{
    size_t i;
    for (i = 0; i < UUID_LEN; i++) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return 0;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return 0;
        }
    }
    return s[UUID_LEN] == '\0';
}

/* Decimal without sign, leading zeros or overflow; 1 <= value <= max. */
static int parse_decimal(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (*s < '1' || *s > '9')
        return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        if (v > (max - (uint64_t)(*s - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 1;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct { const char *name; size_t off; } known[] = {
        { "--receipt-dir", offsetof(struct options, receipt_dir) },
        { "--run-id", offsetof(struct options, run_id) },
        { "--attempt-id", offsetof(struct options, attempt_id) },
        { "--sequence", offsetof(struct options, sequence_text) },
        { "--token-fd", offsetof(struct options, token_fd_text) },
    };
    uint64_t fd;
    int i = 1;

    memset(o, 0, sizeof(*o));
    while (i < argc && strcmp(argv[i], "--") != 0) {
        size_t k, n = sizeof(known) / sizeof(known[0]);
        for (k = 0; k < n && strcmp(argv[i], known[k].name) != 0; k++)
            ;
        if (k == n)
            return bad_usage("unknown option");
        const char **slot = (const char **)((char *)o + known[k].off);
        if (*slot != NULL)
            return bad_usage("option given twice");
        if (i + 1 >= argc)
            return bad_usage("option needs a value");
        *slot = argv[i + 1];
        i += 2;
    }
    if (i >= argc)
        return bad_usage("missing '--' before the command");
    o->command = &argv[i + 1];
    if (o->command[0] == NULL || o->command[0][0] == '\0')
        return bad_usage("missing command after '--'");
    if (!o->receipt_dir || !o->run_id || !o->attempt_id || !o->sequence_text ||
        !o->token_fd_text)
        return bad_usage("missing a required option");
    if (o->receipt_dir[0] == '\0')
        return bad_usage("--receipt-dir is empty");
    if (!is_canonical_uuid(o->run_id))
        return bad_usage("--run-id is not a canonical lower-case UUID");
    if (!is_canonical_uuid(o->attempt_id))
        return bad_usage("--attempt-id is not a canonical lower-case UUID");
    if (!parse_decimal(o->sequence_text, INT64_MAX, &o->sequence))
        return bad_usage("--sequence is not an integer in 1..2^63-1");
    if (!parse_decimal(o->token_fd_text, INT32_MAX, &fd) || fd < 3)
        return bad_usage("--token-fd is not a descriptor number >= 3");
    o->token_fd = (int)fd;
    return 0;
}

/* ---- step 2: token ---------------------------------------------------- */

static int is_token_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Read the token from fd until EOF, close fd, validate. Never prints it. */
static int read_token(int fd)
{
    size_t len = 0, i;
    for (;;) {
        ssize_t n = read(fd, token + len, sizeof(token) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            report("read --token-fd", errno);
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > TOKEN_READ_CAP) {
            close(fd);
            return bad_usage("token longer than 256 bytes");
        }
    }
    if (close(fd) < 0 && errno != EINTR) {
        report("close --token-fd", errno);
        return -1;
    }
    if (len > 0 && token[len - 1] == '\n')   /* tolerate one trailing newline */
        len--;
    token[len] = '\0';
    if (len < TOKEN_MIN || len > TOKEN_MAX)
        return bad_usage("token must be 16..128 characters");
    for (i = 0; i < len; i++)
        if (!is_token_char(token[i]))
            return bad_usage("token must match [A-Za-z0-9_-]");
    return 0;
}

/* ---- steps 3-5: session, signals, clock ------------------------------- */

static int become_session_leader(void)
{
    if (setsid() >= 0)
        return 0;
    if (errno == EPERM && getsid(0) == getpid())
        return 0;   /* caller already made us a session leader */
    report("setsid", errno);
    return -1;
}

/* Block the signals we take synchronously, then make sure none is SIG_IGN
 * (an inherited SIG_IGN for SIGCHLD would make the kernel auto-reap). */
static int block_signals(sigset_t *set)
{
    static const int handled[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD };
    size_t i, n = sizeof(handled) / sizeof(handled[0]);
    sigemptyset(set);
    for (i = 0; i < n; i++)
        sigaddset(set, handled[i]);
    if (sigprocmask(SIG_BLOCK, set, NULL) < 0) {
        report("sigprocmask", errno);
        return -1;
    }
    for (i = 0; i < n; i++)
        if (signal(handled[i], SIG_DFL) == SIG_ERR) {
            report("signal", errno);
            return -1;
        }
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
        return -1;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- step 6: the child ------------------------------------------------ */

static void close_inherited_fds(void)
{
    DIR *d;
    struct dirent *e;
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
        return;
    if ((d = opendir("/proc/self/fd")) == NULL)
        return;   /* no /proc: nothing more we can do without guessing */
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (fd > 2 && fd != dirfd(d))
            close(fd);
    }
    closedir(d);
}

static _Noreturn void exec_command(char **command)
{
    sigset_t empty;
    struct sigaction dfl;
    int sig, err;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);   /* KILL/STOP/reserved: EINVAL */
    sigemptyset(&empty);
    if (sigprocmask(SIG_SETMASK, &empty, NULL) < 0) {
        report("child sigprocmask", errno);
        _exit(EXIT_NOEXEC);
    }
    close_inherited_fds();
    execvp(command[0], command);
    err = errno;
    fprintf(stderr, "ql-launch: exec %s: %s\n", command[0], strerror(err));
    _exit(err == ENOENT || err == ENOTDIR ? EXIT_NOTFOUND : EXIT_NOEXEC);
}

/* ---- step 7: wait, forward, reap -------------------------------------- */

static int exit_code_of(int status)
{
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* Reap every zombie we hold; report whether the direct child was among them. */
static int reap(pid_t child, int *status)
{
    int found = 0, st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) != 0) {
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            if (errno != ECHILD)
                report("waitpid", errno);
            break;
        }
        if (pid == child) {
            *status = st;
            found = 1;
        }
    }
    return found;
}

static int wait_for_child(pid_t child, const sigset_t *set)
{
    int status = 0;
    siginfo_t si;
    pid_t self = getpid();

    for (;;) {
        int sig = sigwaitinfo(set, &si);
        if (sig < 0) {
            if (errno == EINTR)
                continue;
            report("sigwaitinfo", errno);   /* cannot happen; degrade to a plain wait */
            while (waitpid(child, &status, 0) < 0 && errno == EINTR)
                ;
            return exit_code_of(status);
        }
        if (sig == SIGCHLD) {
            if (reap(child, &status))
                return exit_code_of(status);
            continue;
        }
        /* The echo of our own group-wide kill() comes back to us: drop it. */
        if (si.si_code == SI_USER && si.si_pid == self)
            continue;
        if (kill(-getpgrp(), sig) < 0 && errno != ESRCH)
            report("forward signal", errno);
    }
}

/* ---- step 8: the receipt ---------------------------------------------- */

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* fsync, treating "not supported here" (EINVAL) as success. */
static int sync_fd(int fd)
{
    return (fsync(fd) < 0 && errno != EINVAL) ? -1 : 0;
}

static int links_unsupported(int err)
{
    return err == EPERM || err == EOPNOTSUPP || err == EMLINK ||
           err == ENOSYS || err == EXDEV;
}

/* The log's length when the command exited: stdout is the attempt's log, a
 * regular file. Recorded so that a log cut short by a power loss (nothing
 * fsyncs it) is reported as truncated instead of passing for complete. Not a
 * regular file (a pipe, a terminal): no field. Appends to `receipt` at n. */
static int append_log_bytes(int n)
{
    struct stat st;

    if (fstat(STDOUT_FILENO, &st) < 0 || !S_ISREG(st.st_mode))
        return n;
    return n + snprintf(receipt + n, sizeof(receipt) - (size_t)n,
                        ",\"logBytes\":%" PRId64, (int64_t)st.st_size);
}

/* Test and bench builds only (never the shipped binary, see README.md):
 * -DQL_TEST_NO_DIR_FSYNC skips the directory fsync of the receipt (a
 * negative control of the power-cut drills); -DQL_BENCH_FSYNC_LOG fsyncs the
 * log before the receipt is written (the alternative scripts/bench disk
 * measures). */
static int sync_receipt_dir(int dir_fd)
{
#ifdef QL_TEST_NO_DIR_FSYNC
    (void)dir_fd;
    return 0;
#else
    return sync_fd(dir_fd);
#endif
}

static void sync_log(void)
{
#ifdef QL_BENCH_FSYNC_LOG
    if (fsync(STDOUT_FILENO) < 0 && errno != EINVAL)
        report("fsync log", errno);
#endif
}

/* Publish `receipt` (len bytes) as dir_fd/final_name; never overwrite it. */
static int publish(int dir_fd, size_t len)
{
    const char *what;
    int fd, err;

    fd = openat(dir_fd, temp_name,
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        report("create receipt temp file", errno);
        return -1;
    }
    what = write_all(fd, receipt, len) < 0 ? "write receipt"
           : sync_fd(fd) < 0                ? "fsync receipt" : NULL;
    if (what != NULL) {
        err = errno;
        close(fd);
        unlinkat(dir_fd, temp_name, 0);
        report(what, err);
        return -1;
    }
    if (close(fd) < 0 && errno != EINTR) {
        err = errno;
        unlinkat(dir_fd, temp_name, 0);
        report("close receipt", err);
        return -1;
    }
    if (linkat(dir_fd, temp_name, dir_fd, final_name, 0) == 0) {
        if (unlinkat(dir_fd, temp_name, 0) < 0)
            report("unlink receipt temp file", errno);
    } else if (!links_unsupported(errno) ||
               syscall(SYS_renameat2, dir_fd, temp_name, dir_fd, final_name,
                       RENAME_NOREPLACE) < 0) {
        err = errno;
        unlinkat(dir_fd, temp_name, 0);
        report(err == EEXIST ? "receipt already exists, not overwritten"
                             : "publish receipt", err);
        return -1;
    }
    if (sync_receipt_dir(dir_fd) < 0) {
        report("fsync receipt directory", errno);
        return -1;   /* the receipt is visible, only its durability is in doubt */
    }
    return 0;
}

static int format_receipt(const struct options *o, int64_t started,
                          int64_t finished, int exit_code, size_t *len)
{
    int n = snprintf(receipt, sizeof(receipt),
                     "{\"schemaVersion\":1,\"runId\":\"%s\",\"attemptId\":\"%s\","
                     "\"callbackSequence\":%" PRIu64 ",\"token\":\"%s\","
                     "\"startedAtMs\":%" PRId64 ",\"finishedAtMs\":%" PRId64 ","
                     "\"exitCode\":%d",
                     o->run_id, o->attempt_id, o->sequence, token, started,
                     finished, exit_code);
    if (n < 0 || (size_t)n >= sizeof(receipt))
        return -1;
    n = append_log_bytes(n);
    if (n < 0 || (size_t)n + 1 >= sizeof(receipt))
        return -1;
    receipt[n++] = '}';
    receipt[n] = '\0';
    *len = (size_t)n;
    return 0;
}

/* ---- main: the steps, in order ---------------------------------------- */

int main(int argc, char **argv)
{
    struct options o;
    sigset_t set;
    int dir_fd, exit_code;
    int64_t started, finished;
    size_t len;
    pid_t child;

    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("ql-launch %s\n", QL_VERSION);
        return 0;
    }
    if (argc < 2) {
        fputs(usage_text, stderr);
        return EXIT_LAUNCHER;
    }
    /* 1. arguments, 2. token (then its fd is closed) */
    if (parse_args(argc, argv, &o) < 0 || read_token(o.token_fd) < 0)
        return EXIT_LAUNCHER;
    /* Hold nothing the caller leaked (a listening socket would keep the port
     * busy for the task's whole life and block a restarted control plane). */
    close_inherited_fds();
    /* The receipt directory must exist before anything is spawned. */
    dir_fd = open(o.receipt_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir_fd < 0) {
        report("open --receipt-dir", errno);
        return EXIT_LAUNCHER;
    }
    snprintf(final_name, sizeof(final_name), "%s.json", o.attempt_id);
    snprintf(temp_name, sizeof(temp_name), ".%s.%ld.tmp", o.attempt_id,
             (long)getpid());
    /* 3. own session and process group; 4. orphans in it get reaped by us */
    if (become_session_leader() < 0)
        return EXIT_LAUNCHER;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 && errno != EINVAL) {
        report("prctl(PR_SET_CHILD_SUBREAPER)", errno);
        return EXIT_LAUNCHER;   /* EINVAL = unsupported (qemu-user): go on */
    }
    /* 5. signals stay blocked in the launcher; it takes them synchronously */
    if (block_signals(&set) < 0)
        return EXIT_LAUNCHER;
    /* 6. clock, fork, exec */
    started = now_ms();
    if (started < 0) {
        report("clock_gettime", errno);
        return EXIT_LAUNCHER;
    }
    child = fork();
    if (child < 0) {
        report("fork", errno);
        return EXIT_LAUNCHER;
    }
    if (child == 0)
        exec_command(o.command);
    /* 7. wait for the direct child, forwarding signals to the group */
    exit_code = wait_for_child(child, &set);
    finished = now_ms();
    if (finished < started)   /* wall clock stepped back: keep the invariant */
        finished = started;
    /* 8. publish the receipt; whatever happens, exit with the child's code */
    umask(077);
    sync_log();
    if (format_receipt(&o, started, finished, exit_code, &len) < 0)
        report("format receipt", EOVERFLOW);
    else
        publish(dir_fd, len);
    memset(token, 0, sizeof(token));
    return exit_code;
}
