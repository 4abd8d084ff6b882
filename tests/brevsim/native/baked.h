/* Arguments baked into a copy of the executable (native.py patches them in; see native.py):
 * the region starts with a 32-byte marker, then NUL-terminated strings, then an empty string.
 * volatile: the compiler must read the bytes at run time, not fold the initializer. */
#ifndef BREVSIM_BAKED_H
#define BREVSIM_BAKED_H

#include <stdio.h>
#include <stdlib.h>

#define BAKED_SIZE 4096
#define BAKED_OFFSET 32

volatile char baked[BAKED_SIZE] = "@@BREVSIM-BAKED-ARGS@@";

static char baked_copy[BAKED_SIZE];

/* Fills out[0..n) with the baked strings; exits 127 when fewer were baked (an unpatched copy). */
static void baked_args(const char *self, const char **out, int n) {
    for (int i = 0; i < BAKED_SIZE; i++) baked_copy[i] = baked[i];
    baked_copy[BAKED_SIZE - 1] = '\0';
    int pos = BAKED_OFFSET;
    for (int i = 0; i < n; i++) {
        if (pos >= BAKED_SIZE || baked_copy[pos] == '\0') {
            fprintf(stderr, "%s: brevsim: this executable has no baked arguments (copy it with native.install)\n", self);
            exit(127);
        }
        out[i] = baked_copy + pos;
        while (pos < BAKED_SIZE && baked_copy[pos] != '\0') pos++;
        pos++;
    }
}

#endif
