/*
 * ql-launch - the qledge per-attempt launcher (contract: README.md here).
 *
 *   ql-launch --receipt-dir DIR --run-id UUID --attempt-id UUID
 *             --sequence N --token-fd FD [--deny DIR]... [--isolation MODE]
 *             [--keep-background] [--sh-fallback] -- command [args...]
 *
 * Own session; TERM/INT/HUP/QUIT forwarded to the process group; the command
 * confined by Landlock away from the --deny directories; what it left running
 * ended when it exits; exits with the command's status (128+N if killed by N,
 * 127/126 if it could not run) after publishing a no-overwrite receipt;
 * 125 = launcher failure, no receipt.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
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
#define MAX_DENY 8            /* --deny directories, at most */

struct options {
    const char *receipt_dir;
    const char *run_id;
    const char *attempt_id;
    const char *sequence_text;
    const char *token_fd_text;
    const char *isolation;    /* "required" (default with --deny) or "auto" */
    const char *cwd;          /* the command's working directory (absolute) */
    const char *deny[MAX_DENY];
    int ndeny;
    int keep_background;
    uint64_t sequence;
    int token_fd;
    char **command;           /* NULL-terminated, points into argv */
};

/* The launcher never touches the heap itself. Its static buffers are the few
 * small ones a waiting launcher holds: they share their pages with libc's own
 * (written) data. Larger buffers are locals of the code that needs them after
 * the wait (the receipt, the /proc scan) or in the child before exec (the
 * --deny walk): a static one would push libc's data onto a page of its own,
 * and what is written before the wait stays dirty for the task's whole life. */
static char token[TOKEN_READ_CAP + 1];
static char temp_name[UUID_LEN + 32];
static char final_name[UUID_LEN + 8];

static const char usage_text[] =
    "usage: ql-launch --receipt-dir DIR --run-id UUID --attempt-id UUID\n"
    "                 --sequence N --token-fd FD [--deny DIR]... [--isolation MODE]\n"
    "                 [--keep-background] [--sh-fallback] [--cwd DIR] -- command [args...]\n"
    "       ql-launch --version\n";

static int sh_fallback;   /* --sh-fallback: an exec failure is /bin/sh's to judge */

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
        { "--isolation", offsetof(struct options, isolation) },
        { "--cwd", offsetof(struct options, cwd) },
    };
    uint64_t fd;
    int i = 1, d;

    memset(o, 0, sizeof(*o));
    while (i < argc && strcmp(argv[i], "--") != 0) {
        size_t k, n = sizeof(known) / sizeof(known[0]);
        if (strcmp(argv[i], "--keep-background") == 0) {
            if (o->keep_background)
                return bad_usage("option given twice");
            o->keep_background = 1;
            i++;
            continue;
        }
        if (strcmp(argv[i], "--sh-fallback") == 0) {
            if (sh_fallback)
                return bad_usage("option given twice");
            sh_fallback = 1;
            i++;
            continue;
        }
        if (strcmp(argv[i], "--deny") == 0) {   /* the one repeatable option */
            if (i + 1 >= argc)
                return bad_usage("option needs a value");
            if (o->ndeny == MAX_DENY)
                return bad_usage("more than 8 --deny directories");
            o->deny[o->ndeny++] = argv[i + 1];
            i += 2;
            continue;
        }
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
    for (d = 0; d < o->ndeny; d++)
        if (o->deny[d][0] != '/')
            return bad_usage("--deny needs an absolute directory");
    if (o->cwd != NULL && o->cwd[0] != '/')
        return bad_usage("--cwd needs an absolute directory");
    if (o->isolation != NULL && o->ndeny == 0)
        return bad_usage("--isolation needs --deny");
    if (o->isolation != NULL && strcmp(o->isolation, "required") != 0 &&
        strcmp(o->isolation, "auto") != 0)
        return bad_usage("--isolation must be 'required' or 'auto'");
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

/* "<attempt>.json" and ".<attempt>.<pid>.tmp" (the id is a checked UUID), by
 * hand: printf's frames would be the deepest the stack goes before the wait,
 * and every page the waiting launcher's stack has touched stays resident. */
static void name_receipt(const char *attempt_id, pid_t pid)
{
    char digits[12];
    size_t n = 0, i = 0;
    unsigned long v = (unsigned long)pid;
    memcpy(final_name, attempt_id, UUID_LEN);
    memcpy(final_name + UUID_LEN, ".json", sizeof(".json"));
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    temp_name[i++] = '.';
    memcpy(temp_name + i, attempt_id, UUID_LEN);
    i += UUID_LEN;
    temp_name[i++] = '.';
    while (n > 0)
        temp_name[i++] = digits[--n];
    memcpy(temp_name + i, ".tmp", sizeof(".tmp"));
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

/* ---- step 5b: confinement (Landlock) -----------------------------------
 *
 * The command may open nothing beneath a --deny directory (the database and
 * the admin token, the receipts, the other attempts' logs). Landlock only
 * grants, so the ruleset grants full access to every hierarchy that is not
 * on the way to a denied directory: for each ancestor of one, all its
 * entries except denied directories and other such ancestors, and READ_DIR
 * on the ancestors themselves (so `ls /` works; the names in a denied
 * directory can be listed, their contents not). Symbolic links get no rule:
 * what they point to is checked where it lives. An entry created at an
 * ancestor's level after the walk is out of reach of this attempt. The
 * child builds the ruleset and enforces it just before exec: the walk's
 * buffers (the resolved --deny paths, the directory entries) and realpath's
 * stack are then written in the child's copy of the memory, which exec
 * discards, never in the launcher's, which would keep them dirty for the
 * task's whole life. A failure there is still the launcher's: the child says
 * so over a pipe and exits, nothing has run.
 */

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_ABI1 ((1ULL << 13) - 1)   /* EXECUTE .. MAKE_SYM */
#define LL_FS_REFER (1ULL << 13)        /* ABI 2 */
#define LL_FS_TRUNCATE (1ULL << 14)     /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ULL << 15)    /* ABI 5 */
#define LL_FS_FILE (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | \
                    LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

/* Only handled_access_fs: the kernel zero-fills the newer fields (net, scopes),
 * so networking, signals and sockets stay as they were. */
struct ll_ruleset_attr {
    uint64_t handled_access_fs;
};

struct ll_path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* The walk's buffers, on the child's stack (child_ruleset): exec drops them. */
struct walk {
    char denied[MAX_DENY][PATH_MAX];
    int ndenied;
    char ancestor[PATH_MAX];
    char entry_path[PATH_MAX];
    char dents[4096] __attribute__((aligned(8)));
};

static const char *isolation_what;   /* the step that failed, for the diagnostic */

static uint64_t handled_fs(long abi)
{
    uint64_t m = LL_FS_ABI1;
    if (abi >= 2)
        m |= LL_FS_REFER;
    if (abi >= 3)
        m |= LL_FS_TRUNCATE;
    if (abi >= 5)
        m |= LL_FS_IOCTL_DEV;
    return m;
}

/* 2 when a == b, 1 when directory a is a proper ancestor of b, else 0. */
static int relation(const char *a, const char *b)
{
    size_t n = strlen(a);
    if (strcmp(a, "/") == 0)
        return strcmp(b, "/") == 0 ? 2 : 1;
    if (strncmp(a, b, n) != 0)
        return 0;
    return b[n] == '\0' ? 2 : b[n] == '/' ? 1 : 0;
}

/* Denied itself, or on the way to a denied directory: no rule of its own. */
static int on_denied_path(const struct walk *w, const char *path)
{
    int i;
    for (i = 0; i < w->ndenied; i++)
        if (relation(path, w->denied[i]) != 0)
            return 1;
    return 0;
}

/* Canonical, existing directories, none beneath another; "/" is refused. */
static int resolve_denied(struct walk *w, const struct options *o)
{
    struct stat st;
    int i, j, k;
    for (i = 0; i < o->ndeny; i++) {
        if (realpath(o->deny[i], w->denied[w->ndenied]) == NULL) {
            report("--deny", errno);
            return -1;
        }
        if (stat(w->denied[w->ndenied], &st) < 0) {
            report("--deny", errno);
            return -1;
        }
        if (!S_ISDIR(st.st_mode))
            return bad_usage("--deny needs a directory");
        if (strcmp(w->denied[w->ndenied], "/") == 0)
            return bad_usage("--deny / would deny everything");
        w->ndenied++;
    }
    for (i = 0; i < w->ndenied; i++) {   /* drop one beneath (or equal to) another */
        for (j = 0; j < w->ndenied; j++) {
            int r = j == i ? 0 : relation(w->denied[j], w->denied[i]);
            if (r == 1 || (r == 2 && j < i))
                break;
        }
        if (j < w->ndenied) {
            for (k = i; k + 1 < w->ndenied; k++)
                memcpy(w->denied[k], w->denied[k + 1], sizeof(w->denied[k]));
            w->ndenied--;
            i--;
        }
    }
    return 0;
}

static int add_rule(int ruleset, int fd, uint64_t access)
{
    struct ll_path_beneath rule;
    rule.allowed_access = access;
    rule.parent_fd = fd;
    return (int)syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0);
}

/* READ_DIR on `dir`; full access to each of its entries not on a denied path. */
static int walk_failed(int fd, const char *what)
{
    int err = errno;
    if (fd >= 0)
        close(fd);
    isolation_what = what;
    errno = err;
    return -1;
}

static int allow_entries(struct walk *w, int ruleset, const char *dir, uint64_t handled)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    long n;
    if (fd < 0)
        return walk_failed(-1, "open an ancestor of a --deny directory");
    if (add_rule(ruleset, fd, LL_FS_READ_DIR) < 0)
        return walk_failed(fd, "landlock_add_rule");
    while ((n = syscall(SYS_getdents64, fd, w->dents, sizeof(w->dents))) > 0) {
        long off = 0;
        while (off < n) {
            struct linux_dirent64 *e = (struct linux_dirent64 *)(w->dents + off);
            struct stat st;
            int efd, r, is_dir;
            off += e->d_reclen;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            r = snprintf(w->entry_path, sizeof(w->entry_path), "%s/%s",
                         strcmp(dir, "/") == 0 ? "" : dir, e->d_name);
            /* A path too long to compose cannot lead to a denied one. */
            if (r > 0 && (size_t)r < sizeof(w->entry_path) && on_denied_path(w, w->entry_path))
                continue;
            if (e->d_type == DT_LNK)
                continue;
            efd = openat(fd, e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (efd < 0)
                continue;   /* gone meanwhile: nothing to grant */
            is_dir = e->d_type == DT_DIR;
            if (e->d_type == DT_UNKNOWN) {   /* a filesystem without d_type: ask */
                if (fstat(efd, &st) < 0 || S_ISLNK(st.st_mode)) {
                    close(efd);
                    continue;
                }
                is_dir = S_ISDIR(st.st_mode);
            }
            if (add_rule(ruleset, efd, is_dir ? handled : handled & LL_FS_FILE) < 0 && is_dir) {
                /* A directory left out would be denied with everything in it. */
                walk_failed(efd, "landlock_add_rule");
                return walk_failed(fd, "landlock_add_rule");
            }
            close(efd);
        }
    }
    if (n < 0)
        return walk_failed(fd, "read an ancestor of a --deny directory");
    close(fd);
    return 0;
}

/* The ruleset fd (>= 0); -1 for bad --deny arguments (reported); -2 when
 * Landlock is unavailable or failed (errno set, isolation_what names the step). */
static int build_ruleset(struct walk *w, const struct options *o)
{
    struct ll_ruleset_attr attr;
    long abi;
    int ruleset, i, j;

    w->ndenied = 0;
    if (resolve_denied(w, o) < 0)
        return -1;
    isolation_what = "landlock_create_ruleset";
    abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
    if (abi < 0)
        return -2;
    memset(&attr, 0, sizeof(attr));
    attr.handled_access_fs = handled_fs(abi);
    ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
    if (ruleset < 0)
        return -2;
    for (i = 0; i < w->ndenied; i++) {
        size_t k, len = strlen(w->denied[i]);
        for (k = 0; k < len; k++) {
            if (w->denied[i][k] != '/')
                continue;
            memcpy(w->ancestor, w->denied[i], k ? k : 1);
            w->ancestor[k ? k : 1] = '\0';
            for (j = 0; j < i && relation(w->ancestor, w->denied[j]) != 1; j++)
                ;
            if (j < i)
                continue;   /* walked already, on the way to an earlier one */
            if (allow_entries(w, ruleset, w->ancestor, attr.handled_access_fs) < 0) {
                walk_failed(ruleset, isolation_what);
                return -2;
            }
        }
    }
    return ruleset;
}

#ifndef PR_CAPBSET_READ
#define PR_CAPBSET_READ 23
#endif
#ifndef PR_CAPBSET_DROP
#define PR_CAPBSET_DROP 24
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#endif
#ifndef PR_CAP_AMBIENT_CLEAR_ALL
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#define QL_CAPABILITY_VERSION_3 0x20080522
struct ql_cap_header { uint32_t version; int pid; };
struct ql_cap_data { uint32_t effective, permitted, inheritable; };

/* A launcher started by root (a control plane run as root: scripts/run-local on a
 * root shell) would hand the command every capability, and CAP_SYS_PTRACE lets a
 * Landlock-confined process read /proc/<pid>/environ and maps of processes outside
 * its domain. So a confined command keeps no capability: the bounding set emptied
 * (needs CAP_SETPCAP, which only a privileged launcher has; EPERM otherwise, and
 * then there is nothing to drop), no ambient ones, and permitted, effective and
 * inheritable cleared. With no_new_privs set first, the exec cannot give any back
 * (root's exec gets at most its permitted set, file capabilities and set-uid bits
 * do nothing). The uid stays: a uid-0 command still owns root's files. */
static int drop_capabilities(void)
{
    struct ql_cap_header hdr = { QL_CAPABILITY_VERSION_3, 0 };
    struct ql_cap_data data[2];
    int cap, held;
    for (cap = 0; cap < 64; cap++) {
        held = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (held < 0)
            break;   /* EINVAL: past the kernel's last capability */
        if (held == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EPERM)
            return -1;
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -1;   /* EINVAL: a kernel before ambient capabilities (4.3) */
    memset(data, 0, sizeof(data));
    return (int)syscall(SYS_capset, &hdr, data);
}

/* In the child, with --deny: no new privileges (Landlock's precondition) and no
 * capabilities — also when Landlock is unavailable and `auto` runs the command
 * unconfined — then the ruleset, when there is one. */
static int confine_self(int ruleset)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    if (drop_capabilities() < 0)
        return -1;
    return ruleset < 0 ? 0 : (int)syscall(SYS_landlock_restrict_self, ruleset, 0);
}

/* With --sh-fallback, after execvp failed: the command is a task's plain command,
 * exec'd without the shell it was written for, so the shell judges the failure —
 * its own search, message, 126/127, a file without #! run as a script — exactly
 * as under `sh -c "<command>"`. */
static _Noreturn void exec_shell(char **command)
{
    size_t n = 0;
    int err;
    while (command[n] != NULL)
        n++;
    char *sh[n + 5];
    sh[0] = "/bin/sh";
    sh[1] = "-c";
    sh[2] = "\"$@\"";
    sh[3] = "/bin/sh";   /* $0: its messages say "/bin/sh: 1: ..." as they always did */
    memcpy(&sh[4], command, (n + 1) * sizeof(char *));
    execv(sh[0], sh);
    err = errno;
    fprintf(stderr, "ql-launch: exec /bin/sh: %s\n", strerror(err));
    _exit(err == ENOENT || err == ENOTDIR ? EXIT_NOTFOUND : EXIT_NOEXEC);
}

/* ---- step 6: the child ------------------------------------------------ */

/* Before Linux 5.9: what /proc lists, read by hand: opendir's malloc would be
 * the launcher's only one, 8 KiB of code every waiting launcher maps. Not
 * inlined: its buffer stays off the stack of the usual path (close_range). */
static __attribute__((noinline)) void close_listed_fds(void)
{
    char dents[1024] __attribute__((aligned(8)));
    uint64_t fd;
    long n;
    int dir;
    if ((dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return;   /* no /proc: nothing more we can do without guessing */
    while ((n = syscall(SYS_getdents64, dir, dents, sizeof(dents))) > 0) {
        long off = 0;
        while (off < n) {
            struct linux_dirent64 *e = (struct linux_dirent64 *)(dents + off);
            off += e->d_reclen;
            if (parse_decimal(e->d_name, INT32_MAX, &fd) && fd > 2 && (int)fd != dir)
                close((int)fd);
        }
    }
    close(dir);
}

static void close_inherited_fds(void)
{
    if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
        close_listed_fds();
}

static int isolation_required(const struct options *o)
{
    return o->isolation == NULL || strcmp(o->isolation, "required") == 0;
}

/* In the child: nothing runs and the launcher exits 125 (the diagnostic is out). */
static _Noreturn void setup_failed(int err_fd, int err)
{
    while (write(err_fd, &err, sizeof(err)) < 0 && errno == EINTR)
        ;
    _exit(EXIT_LAUNCHER);
}

/* In the child, with --deny: the ruleset, or -1 for none (Landlock unavailable
 * under `auto`, said on stderr); a failure the launcher's, through err_fd. */
static int child_ruleset(const struct options *o, int err_fd)
{
    struct walk w;
    int ruleset, err;
    ruleset = build_ruleset(&w, o);
    if (ruleset == -1)
        setup_failed(err_fd, EINVAL);   /* bad --deny arguments, reported */
    if (ruleset == -2) {
        err = errno;
        fprintf(stderr, "ql-launch: task isolation %s: %s: %s\n",
                isolation_required(o) ? "required" : "unavailable, running unconfined",
                isolation_what, strerror(err));
        if (isolation_required(o))
            setup_failed(err_fd, err);
        ruleset = -1;
    }
    return ruleset;
}

/* With --deny: confine first; if that fails and isolation is required (then
 * ruleset >= 0), nothing runs and the launcher hears of it through err_fd.
 * ruleset < 0 with --deny: Landlock unavailable under `auto`. Not inlined:
 * the child's locals stay out of main's frame, which is on the stack for the
 * launcher's whole wait. */
static __attribute__((noinline)) _Noreturn void exec_command(const struct options *o,
                                                             int err_fd)
{
    char **command = o->command;
    sigset_t empty;
    struct sigaction dfl;
    int sig, err, ruleset = -1;

    /* Signals are still blocked: one forwarded meanwhile waits for the reset. */
    if (o->ndeny > 0)
        ruleset = child_ruleset(o, err_fd);
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);   /* KILL/STOP/reserved: EINVAL */
    sigemptyset(&empty);
    if (sigprocmask(SIG_SETMASK, &empty, NULL) < 0) {
        report("child sigprocmask", errno);
        _exit(EXIT_NOEXEC);
    }
    /* Before the confinement: the directory is the task's own (scripts), and a
     * missing one is the command's failure (a receipt says 127), not ours. */
    if (o->cwd != NULL && chdir(o->cwd) < 0) {
        err = errno;
        report("chdir --cwd", err);
        _exit(EXIT_NOTFOUND);
    }
    if (o->ndeny > 0 && confine_self(ruleset) < 0) {
        err = errno;
        if (isolation_required(o) && ruleset >= 0) {
            report("task isolation required: landlock_restrict_self", err);
            setup_failed(err_fd, err);
        }
        report("task isolation failed, running unconfined", err);
    }
    close_inherited_fds();   /* the ruleset and err_fd too: EOF for the launcher */
    execvp(command[0], command);
    err = errno;
    if (sh_fallback)
        exec_shell(command);
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

/* ---- step 8: what the command left running -----------------------------
 *
 * Every process of the task descends from the launcher: it created their
 * session and group, and orphans are re-parented to it (subreaper). When the
 * command has ended, the rest get TERM (and CONT, so a stopped one can act on
 * it), LEFTOVER_GRACE_MS to exit, then KILL, and are reaped here. A process
 * is signalled only when it is provably the task's: an unreaped child of
 * ours (its pid cannot be reused), or a member of our session or group seen
 * through a pidfd opened first (their id is our own pid, which no other
 * session or group can take while we live). One that left both is reached
 * once its parent is gone and it is re-parented to us.
 */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#define LEFTOVER_GRACE_MS 2000
#define LEFTOVER_KILL_WAIT_MS 5000
#define LEFTOVER_TICK_MS 50
#define SCAN_MAX 4096

struct proc_facts {
    pid_t pid, ppid, pgrp, sid;
    char state;
};

static int subreaper;   /* PR_SET_CHILD_SUBREAPER took effect */

/* The next space-separated decimal field of /proc/<pid>/stat (no sign there). */
static char *next_int(char *p, pid_t *out)
{
    long v = 0;
    while (*p == ' ')
        p++;
    if (*p < '0' || *p > '9')
        return NULL;
    for (; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (*p - '0');
    *out = (pid_t)v;
    return p;
}

static int read_facts(int proc_fd, pid_t pid, struct proc_facts *f)
{
    char path[32], stat_text[1024];
    ssize_t n;
    int fd;
    char *p;
    snprintf(path, sizeof(path), "%ld/stat", (long)pid);
    fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, stat_text, sizeof(stat_text) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    stat_text[n] = '\0';
    /* "pid (comm) S ppid pgrp session ...": comm may hold ')' and spaces. */
    p = strrchr(stat_text, ')');
    if (p == NULL)
        return -1;
    /* no sscanf: it would pull musl's whole scanf into a launcher that waits */
    if (p[1] != ' ' || p[2] == '\0' || p[3] != ' ')
        return -1;
    f->pid = pid;
    f->state = p[2];
    p += 3;
    if ((p = next_int(p, &f->ppid)) == NULL || (p = next_int(p, &f->pgrp)) == NULL ||
        next_int(p, &f->sid) == NULL)
        return -1;
    return 0;
}

/* Call fn for every process but ourselves and zombies; -1 without /proc. */
static int each_process(pid_t self, void (*fn)(int, const struct proc_facts *, void *),
                        void *arg)
{
    char dents[4096] __attribute__((aligned(8)));
    int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    long n;
    if (proc_fd < 0)
        return -1;
    while ((n = syscall(SYS_getdents64, proc_fd, dents, sizeof(dents))) > 0) {
        long off = 0;
        while (off < n) {
            struct linux_dirent64 *e = (struct linux_dirent64 *)(dents + off);
            struct proc_facts f;
            uint64_t pid;
            off += e->d_reclen;
            if (!parse_decimal(e->d_name, INT32_MAX, &pid) || (pid_t)pid == self)
                continue;
            if (read_facts(proc_fd, (pid_t)pid, &f) == 0 && f.state != 'Z')
                fn(proc_fd, &f, arg);
        }
    }
    close(proc_fd);
    return 0;
}

struct signal_pass {
    pid_t self;
    int sig;
    unsigned found;
};

static void signal_one(int proc_fd, const struct proc_facts *f, void *arg)
{
    struct signal_pass *s = arg;
    struct proc_facts again;
    int pidfd;
    if (f->ppid == s->self) {   /* our child: its pid is ours until we reap it */
        s->found++;
        if (s->sig != 0 && kill(f->pid, s->sig) < 0 && errno != ESRCH)
            report("signal a leftover process", errno);
        return;
    }
    if (f->pgrp != s->self && f->sid != s->self)
        return;
    s->found++;
    if (s->sig == 0)
        return;
    pidfd = (int)syscall(SYS_pidfd_open, f->pid, 0);
    if (pidfd < 0) {
        /* No pidfds (ENOSYS before Linux 5.3; EPERM from a seccomp profile, which
         * the control plane falls back for too): the plain (racy) kill. */
        if (errno != ESRCH)
            (void)kill(f->pid, s->sig);
        return;
    }
    /* The pidfd pins one process; re-read who holds the pid now. */
    if (read_facts(proc_fd, f->pid, &again) == 0 &&
        (again.pgrp == s->self || again.sid == s->self) &&
        syscall(SYS_pidfd_send_signal, pidfd, s->sig, NULL, 0) < 0 && errno != ESRCH)
        report("signal a leftover process", errno);
    close(pidfd);
}

/* Signal (sig 0: only count) our children and our session's and group's members. */
static unsigned signal_leftovers(pid_t self, int sig)
{
    struct signal_pass s = { self, sig, 0 };
    if (each_process(self, signal_one, &s) < 0 && sig != 0 && kill(-self, sig) < 0 &&
        errno != ESRCH)   /* no /proc: the group is what we can reach */
        report("signal the task's process group", errno);
    return s.found;
}

struct count_pass {
    pid_t self;
    int n;
    pid_t pid[SCAN_MAX], ppid[SCAN_MAX];
    unsigned char mark[SCAN_MAX];
};

static void note_one(int proc_fd, const struct proc_facts *f, void *arg)
{
    struct count_pass *c = arg;
    (void)proc_fd;
    if (c->n == SCAN_MAX)
        return;
    c->pid[c->n] = f->pid;
    c->ppid[c->n] = f->ppid;
    c->mark[c->n] = f->ppid == c->self || f->pgrp == c->self || f->sid == c->self;
    c->n++;
}

/* The task's processes alive now: its session, its group, our children, and
 * every descendant of those (a daemon's children live in its new session). */
static unsigned count_leftovers(pid_t self)
{
    struct count_pass c;
    unsigned found = 0;
    int i, j, changed = 1;
    c.self = self;
    c.n = 0;
    if (each_process(self, note_one, &c) < 0)
        return 0;
    while (changed) {
        changed = 0;
        for (i = 0; i < c.n; i++) {
            if (c.mark[i])
                continue;
            for (j = 0; j < c.n && !(c.mark[j] && c.pid[j] == c.ppid[i]); j++)
                ;
            if (j < c.n)
                c.mark[i] = changed = 1;
        }
    }
    for (i = 0; i < c.n; i++)
        found += c.mark[i];
    return found;
}

/* Reap what exited; 1 when nothing of the task is left. */
static int all_gone(pid_t self)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
        ;
    if (pid == 0 || errno != ECHILD)
        return 0;   /* children left (or EINTR: look again) */
    /* Without a subreaper, orphans went to init: look for the rest by id. */
    return subreaper || signal_leftovers(self, 0) == 0;
}

static int64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait up to budget_ms for the leftovers to go, reaping them; newly
 * re-parented ones get `sig` too. 1 when none is left. */
static int wait_leftovers(pid_t self, const sigset_t *set, int sig, int budget_ms)
{
    int64_t deadline = monotonic_ms() + budget_ms;
    struct timespec tick = { 0, LEFTOVER_TICK_MS * 1000000L };
    siginfo_t si;
    while (!all_gone(self)) {
        if (monotonic_ms() >= deadline)
            return 0;
        /* SIGCHLD: reap at the top; TERM & co. from outside: everything is
         * being ended already. A timeout: signal whoever was re-parented. */
        if (sigtimedwait(set, &si, &tick) < 0 && errno == EAGAIN)
            signal_leftovers(self, sig);
    }
    return 1;
}

/* End what the command left running; how many processes that was. */
static unsigned end_leftovers(const sigset_t *set)
{
    pid_t self = getpid();
    unsigned n;
    if (all_gone(self))
        return 0;
    n = count_leftovers(self);
    signal_leftovers(self, SIGTERM);
    signal_leftovers(self, SIGCONT);
    if (wait_leftovers(self, set, SIGTERM, LEFTOVER_GRACE_MS))
        return n;
    signal_leftovers(self, SIGKILL);
    if (!wait_leftovers(self, set, SIGKILL, LEFTOVER_KILL_WAIT_MS))
        fputs("ql-launch: processes of the task are still running after KILL\n", stderr);
    return n;
}

/* ---- step 9: the receipt ---------------------------------------------- */

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

/* The log's length once the task is done (the command exited, what it left
 * running was ended; with --keep-background its daemons may still append,
 * which only makes the log longer): stdout is the attempt's log, a regular
 * file. Recorded so that a log cut short by a power loss (nothing
 * fsyncs it) is reported as truncated instead of passing for complete. Not a
 * regular file (a pipe, a terminal): no field. Appends to `receipt` at n. */
static int append_log_bytes(char *receipt, int n)
{
    struct stat st;

    if (fstat(STDOUT_FILENO, &st) < 0 || !S_ISREG(st.st_mode))
        return n;
    return n + snprintf(receipt + n, RECEIPT_MAX - (size_t)n,
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
static int publish(int dir_fd, const char *receipt, size_t len)
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

/* Processes the launcher had to end (step 8); no field when there were none. */
static int append_leftovers(char *receipt, int n, unsigned leftovers)
{
    if (leftovers == 0 || n < 0 || (size_t)n >= RECEIPT_MAX)
        return n;
    return n + snprintf(receipt + n, RECEIPT_MAX - (size_t)n,
                        ",\"leftoverProcesses\":%u", leftovers);
}

/* The fixed fields, then the optional ones, then the closing brace. */
static int format_receipt(char *receipt, const struct options *o, int64_t started,
                          int64_t finished, int exit_code, unsigned leftovers, size_t *len)
{
    int n = snprintf(receipt, RECEIPT_MAX,
                     "{\"schemaVersion\":1,\"runId\":\"%s\",\"attemptId\":\"%s\","
                     "\"callbackSequence\":%" PRIu64 ",\"token\":\"%s\","
                     "\"startedAtMs\":%" PRId64 ",\"finishedAtMs\":%" PRId64 ","
                     "\"exitCode\":%d",
                     o->run_id, o->attempt_id, o->sequence, token, started,
                     finished, exit_code);
    if (n < 0 || (size_t)n >= RECEIPT_MAX)
        return -1;
    n = append_leftovers(receipt, append_log_bytes(receipt, n), leftovers);
    if (n < 0 || (size_t)n + 1 >= RECEIPT_MAX)
        return -1;
    receipt[n++] = '}';
    receipt[n] = '\0';
    *len = (size_t)n;
    return 0;
}

/* Step 9. Not inlined: its buffer is not in main's frame, which is on the
 * stack during the wait and would push the wait's calls onto another page. */
static __attribute__((noinline)) void write_receipt(const struct options *o, int dir_fd,
                                                    int64_t started, int64_t finished,
                                                    int exit_code, unsigned leftovers)
{
    char receipt[RECEIPT_MAX];
    size_t len;
    if (format_receipt(receipt, o, started, finished, exit_code, leftovers, &len) < 0)
        report("format receipt", EOVERFLOW);
    else
        publish(dir_fd, receipt, len);
}

/* ---- main's helpers: isolation set-up, start, the end ------------------- */

/* Step 5b: with --deny, the pipe over which the child reports a failure to
 * confine (the ruleset itself is the child's, exec_command). */
static int prepare_isolation(const struct options *o, int err_pipe[2])
{
    err_pipe[0] = err_pipe[1] = -1;
    if (o->ndeny == 0)
        return 0;
    if (pipe2(err_pipe, O_CLOEXEC) < 0) {
        report("pipe", errno);
        return -1;
    }
    return 0;
}

/* Step 6: fork; the child confines itself and execs. Waits for the child's
 * word on the confinement (EOF: done, exec under way). -1: nothing runs. */
static pid_t start_command(const struct options *o, int err_pipe[2])
{
    int err = 0, st;
    ssize_t n;
    pid_t child = fork();
    if (child < 0) {
        report("fork", errno);
        return -1;
    }
    if (child == 0)
        exec_command(o, err_pipe[1]);
    if (err_pipe[0] < 0)
        return child;
    close(err_pipe[1]);
    while ((n = read(err_pipe[0], &err, sizeof(err))) < 0 && errno == EINTR)
        ;
    close(err_pipe[0]);
    if (n != (ssize_t)sizeof(err))
        return child;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR)
        ;   /* the child said why on stderr */
    return -1;
}

/* ---- main: the steps, in order ---------------------------------------- */

int main(int argc, char **argv)
{
    struct options o;
    sigset_t set;
    int dir_fd, exit_code, err_pipe[2];
    int64_t started, finished;
    unsigned leftovers = 0;
    pid_t child;

    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("ql-launch %s\n", QL_VERSION);
        return 0;
    }
    if (argc < 2) {
        fputs(usage_text, stderr);
        return EXIT_LAUNCHER;
    }
    /* The token will be in our memory: no /proc/<pid>/mem, environ or fd for
     * other processes of this uid (the task's); exec resets it for the child. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 && errno != EINVAL) {
        report("prctl(PR_SET_DUMPABLE)", errno);
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
    name_receipt(o.attempt_id, getpid());
    /* 3. own session and process group; 4. orphans in it get reaped by us */
    if (become_session_leader() < 0)
        return EXIT_LAUNCHER;
    subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
    if (!subreaper && errno != EINVAL) {
        report("prctl(PR_SET_CHILD_SUBREAPER)", errno);
        return EXIT_LAUNCHER;   /* EINVAL = unsupported (qemu-user): go on */
    }
    /* 5. signals stay blocked in the launcher; it takes them synchronously;
     * 5b. the pipe for the child's word on the confinement */
    if (block_signals(&set) < 0 || prepare_isolation(&o, err_pipe) < 0)
        return EXIT_LAUNCHER;
    /* 6. clock, fork, exec */
    started = now_ms();
    if (started < 0) {
        report("clock_gettime", errno);
        return EXIT_LAUNCHER;
    }
    child = start_command(&o, err_pipe);
    if (child < 0)
        return EXIT_LAUNCHER;
    /* 7. wait for the direct child, forwarding signals to the group */
    exit_code = wait_for_child(child, &set);
    finished = now_ms();
    if (finished < started)   /* wall clock stepped back: keep the invariant */
        finished = started;
    /* 8. end what it left running (unless the task keeps its daemons) */
    if (!o.keep_background)
        leftovers = end_leftovers(&set);
    /* 9. publish the receipt (the log's length is taken now, after step 8);
     * whatever happens, exit with the child's code */
    umask(077);
    sync_log();
    write_receipt(&o, dir_fd, started, finished, exit_code, leftovers);
    memset(token, 0, sizeof(token));
    return exit_code;
}
