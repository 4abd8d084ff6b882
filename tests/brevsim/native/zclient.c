/* An instance program (`docker`, `nvidia-smi`) as a tiny client of the simulator's zygote
 * (zygote.py): the Python program runs in a process forked from a server that imported it once,
 * so a call costs a fork, not an interpreter start and ~50 ms of imports.
 *
 * It sends the program name, its baked arguments, argv, the environment, umask, ignored and
 * blocked signals, and passes fds 0/1/2 plus its working directory with SCM_RIGHTS; then it
 * forwards the signals it receives (one byte each) and exits as the worker did: same exit code,
 * or the same signal re-raised. An unreachable zygote is a loud failure (exit 127), never a
 * fallback. Baked (native.py): the zygote's abstract socket name, program, state dir, instance id. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "baked.h"

extern char **environ;

static const int FORWARDED[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM};
#define NFWD (int)(sizeof FORWARDED / sizeof FORWARDED[0])

static int sock = -1;
static const char *prog = "docker";
static const char *state = "";

static void die(const char *what) {
    fprintf(stderr, "%s: brevsim: the simulator's program server for %s %s: %s\n", prog, state, what,
            strerror(errno));
    exit(127);
}

typedef struct {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *s) {
    size_t n = strlen(s) + 1;  /* with its NUL: the separator */
    if (b->len + n > b->cap) {
        while (b->len + n > b->cap) b->cap = b->cap ? b->cap * 2 : 16384;
        b->p = realloc(b->p, b->cap);
        if (!b->p) die("request");
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void put_int(buf *b, long v) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%ld", v);
    put(b, tmp);
}

static void on_signal(int sig) {
    int saved = errno;
    unsigned char byte = (unsigned char)sig;
    (void)send(sock, &byte, 1, MSG_NOSIGNAL);
    errno = saved;
}

int main(int argc, char **argv) {
    const char *bk[4];
    baked_args(argc > 0 ? argv[0] : "docker", bk, 4);
    const char *addr = bk[0];
    prog = bk[1];
    state = bk[2];

    /* what the program would have inherited: ignored and blocked signals (bash's background
     * jobs ignore SIGINT/SIGQUIT, nohup SIGHUP) */
    sigset_t fwd, orig;
    sigemptyset(&fwd);
    for (int i = 0; i < NFWD; i++) sigaddset(&fwd, FORWARDED[i]);
    sigprocmask(SIG_BLOCK, &fwd, &orig);
    char ignored[1024] = "", blocked[1024] = "";
    for (int s = 1; s < NSIG; s++) {
        struct sigaction sa;
        if (s == SIGKILL || s == SIGSTOP || sigaction(s, NULL, &sa) != 0) continue;
        char tmp[8];
        snprintf(tmp, sizeof tmp, "%d,", s);
        if (sa.sa_handler == SIG_IGN) strcat(ignored, tmp);
        if (sigismember(&orig, s) == 1) strcat(blocked, tmp);
    }

    /* Which of fds 0/1/2 the caller left open, before this client opens anything: a closed
     * stdin (`exec 0<&-`) must stay closed for the program, not become our socket. */
    int fds[4], nfds = 0, mask = 0;
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) != -1) { fds[nfds++] = fd; mask |= 1 << fd; }
    }

    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) die("socket");
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    size_t alen = strlen(addr);
    if (alen + 1 > sizeof sun.sun_path) { errno = ENAMETOOLONG; die("address"); }
    memcpy(sun.sun_path + 1, addr, alen);  /* abstract namespace: a leading NUL, no terminator */
    if (connect(sock, (struct sockaddr *)&sun, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + alen)) != 0)
        die("is not reachable");

    int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cwd >= 0) { fds[nfds++] = cwd; mask |= 1 << 3; }

    mode_t um = umask(022);
    umask(um);
    buf b = {0};
    put(&b, "BZ1");
    put(&b, prog);
    put_int(&b, mask);
    put_int(&b, (long)um);
    put(&b, ignored);
    put(&b, blocked);
    put_int(&b, 2);
    put(&b, state);
    put(&b, bk[3]);
    put_int(&b, argc);
    for (int i = 0; i < argc; i++) put(&b, argv[i]);
    for (char **e = environ; *e; e++) put(&b, *e);

    uint32_t len = (uint32_t)b.len;
    struct iovec iov = {.iov_base = &len, .iov_len = sizeof len};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 4)];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    if (sendmsg(sock, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof len) die("did not take the call");
    for (size_t off = 0; off < b.len;) {
        ssize_t w = send(sock, b.p + off, b.len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("did not take the call");
        off += (size_t)w;
    }
    if (cwd >= 0) close(cwd);
    free(b.p);

    for (int i = 0; i < NFWD; i++) {
        struct sigaction sa;
        sigaction(FORWARDED[i], NULL, &sa);
        if (sa.sa_handler == SIG_IGN) continue;  /* the worker ignores it too */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(FORWARDED[i], &sa, NULL);
    }
    sigprocmask(SIG_SETMASK, &orig, NULL);

    /* the reply ("exit N" / "signal N"), then EOF once the handler process has gone */
    char reply[64];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(sock, reply + got, sizeof reply - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("lost the call");
        if (r == 0) break;
        got += (size_t)r;
        if (got >= sizeof reply - 1) break;
    }
    reply[got] = '\0';
    int code;
    if (sscanf(reply, "exit %d", &code) == 1) return code;
    if (sscanf(reply, "signal %d", &code) == 1) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);  /* the worker's death, not a core of this client */
        signal(code, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, code);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(code);
        return 128 + code;
    }
    errno = EPIPE;
    die("ended the call without an exit status");
}
