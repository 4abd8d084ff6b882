/* `ssh` / `ssh-agent` on the simulator's PATH: the REAL OpenSSH programs, recorded.
 * Append the call to calls.jsonl in record.record_call's format (one write(), O_APPEND, under the
 * same flock), mark the environment (BREVSIM_STATE, so the reaper finds the process and whatever
 * it daemonises: a ControlPersist master, an agent), then execve the real program in place: the
 * process that talks to the instance IS OpenSSH. `ssh` also sets BREVSIM_CALL and asks to send
 * it (-o SendEnv=BREVSIM_CALL: the instance's sshd adds the session's stdin byte count to this
 * call record) and, without -F, passes -F $HOME/.ssh/config (or none): OpenSSH reads the passwd
 * home's config, not $HOME's; on a real machine they are the same directory, the one
 * `brev refresh` writes its Include into.
 * Baked (native.py): mode ("ssh" | "ssh-agent"), calls.jsonl path, marker value, real program. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "baked.h"

extern char **environ;

typedef struct {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? b->cap * 2 : 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { perror("brevsim ssh wrapper"); exit(255); }
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void put_u(buf *b, unsigned cp) {
    char tmp[16];
    snprintf(tmp, sizeof tmp, "\\u%04x", cp & 0xFFFF);
    put(b, tmp, 6);
}

/* One UTF-8 sequence at s (valid per Python's decoder: no overlongs, no surrogates, <= U+10FFFF);
 * returns its length and code point, or 0 when s does not start one. */
static int utf8(const unsigned char *s, unsigned *cp) {
    unsigned c = s[0];
    int n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; *cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3; *cp = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4; *cp = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    for (int i = 1; i < n; i++) {
        unsigned d = s[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
        *cp = (*cp << 6) | (d & 0x3F);
    }
    return n;
}

/* A JSON string as Python's json.dumps writes the str Python decodes from these argv bytes
 * (UTF-8 with surrogateescape; ensure_ascii: everything outside ' '..'~' escaped, lowercase). */
static void put_json(buf *b, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    put(b, "\"", 1);
    while (*s) {
        unsigned c = *s;
        if (c >= 0x20 && c < 0x7F) {
            if (c == '"') put(b, "\\\"", 2);
            else if (c == '\\') put(b, "\\\\", 2);
            else put(b, (const char *)s, 1);
            s++;
        } else if (c < 0x80) {
            const char *esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                            : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (esc) put(b, esc, 2);
            else put_u(b, c);
            s++;
        } else {
            unsigned cp;
            int n = utf8(s, &cp);
            if (n == 0) { put_u(b, 0xDC00 + c); s++; continue; }  /* surrogateescape */
            if (cp > 0xFFFF) {
                cp -= 0x10000;
                put_u(b, 0xD800 + (cp >> 10));
                put_u(b, 0xDC00 + (cp & 0x3FF));
            } else put_u(b, cp);
            s += n;
        }
    }
    put(b, "\"", 1);
}

static char *record(const char *calls, const char *program, int argc, char **argv, char *id, size_t idsz) {
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    snprintf(id, idsz, "%d-%lld", (int)getpid(), (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec);
    buf b = {0};
    puts_(&b, "{\"id\":\"");
    puts_(&b, id);
    puts_(&b, "\",\"program\":\"");
    puts_(&b, program);
    puts_(&b, "\",\"argv\":[");
    for (int i = 1; i < argc; i++) {
        if (i > 1) put(&b, ",", 1);
        put_json(&b, argv[i]);
    }
    /* ts as Python's repr of time.time(): microseconds, trailing zeros dropped (at least one) */
    char frac[8];
    snprintf(frac, sizeof frac, "%06ld", real.tv_nsec / 1000);
    for (int i = 5; i > 0 && frac[i] == '0'; i--) frac[i] = '\0';
    char ts[96];
    snprintf(ts, sizeof ts, "],\"where\":\"local\",\"instance\":null,\"ts\":%lld.%s}\n",
             (long long)real.tv_sec, frac);
    puts_(&b, ts);
    int fd = open(calls, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || write(fd, b.p, b.len) != (ssize_t)b.len) {
        fprintf(stderr, "%s: brevsim cannot record the call in %s: %s\n", program, calls, strerror(errno));
        exit(255);
    }
    close(fd);
    free(b.p);
    return id;
}

/* environ without NAME=..., plus the given NAME=value entries. */
static char **marked_env(char **extra, int nextra) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + nextra + 1, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        for (int j = 0; j < nextra; j++) {
            size_t klen = strchr(extra[j], '=') - extra[j] + 1;
            if (strncmp(environ[i], extra[j], klen) == 0) drop = 1;
        }
        if (!drop) env[k++] = environ[i];
    }
    for (int j = 0; j < nextra; j++) env[k++] = extra[j];
    env[k] = NULL;
    return env;
}

static char *concat(const char *a, const char *b) {
    char *s = malloc(strlen(a) + strlen(b) + 1);
    strcpy(s, a);
    strcat(s, b);
    return s;
}

int main(int argc, char **argv) {
    const char *bk[4];
    baked_args(argc > 0 ? argv[0] : "ssh", bk, 4);
    const char *mode = bk[0], *calls = bk[1], *marker = bk[2], *real = bk[3];
    int ssh = strcmp(mode, "ssh") == 0;
    char id[64];
    record(calls, ssh ? "ssh" : "ssh-agent", argc, argv, id, sizeof id);
    char *extra[2] = {concat("BREVSIM_STATE=", marker), concat("BREVSIM_CALL=", id)};
    char **env = marked_env(extra, ssh ? 2 : 1);
    char **args = calloc(argc + 6, sizeof *args);
    int k = 0;
    args[k++] = ssh ? "ssh" : "ssh-agent";
    if (ssh) {
        args[k++] = "-o";
        args[k++] = "SendEnv=BREVSIM_CALL";  /* accumulates; never overrides the caller's options */
        int has_f = 0;
        for (int i = 1; i < argc; i++)
            if (strncmp(argv[i], "-F", 2) == 0) has_f = 1;
        const char *home = getenv("HOME");
        if (!has_f && home && *home) {
            /* OpenSSH reads ~/.ssh/config from the passwd home, not $HOME: keep them the same */
            size_t hl = strlen(home);
            while (hl > 1 && home[hl - 1] == '/') hl--;
            char *cfg = malloc(hl + 16);
            memcpy(cfg, home, hl);
            strcpy(cfg + hl, hl == 1 && home[0] == '/' ? ".ssh/config" : "/.ssh/config");
            struct stat st;
            args[k++] = "-F";
            args[k++] = stat(cfg, &st) == 0 && S_ISREG(st.st_mode) ? cfg : "none";
        }
    }
    for (int i = 1; i < argc; i++) args[k++] = argv[i];
    args[k] = NULL;
    execve(real, args, env);
    fprintf(stderr, "%s: cannot run %s: %s\n", args[0], real, strerror(errno));
    return 255;
}
